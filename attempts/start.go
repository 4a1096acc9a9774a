package attempts

import (
	"fmt"
	"time"
)

// StartEnd is how one worker's start ended.
type StartEnd int

const (
	// Started: the worker runs.
	Started StartEnd = iota
	// StartNodeSilent: no agent of the worker's node took the start in time.
	StartNodeSilent
	// StartGPUsBusy: the granted GPUs are used by a live worker the
	// allocation did not know of; nothing was started.
	StartGPUsBusy
	// StartFailed: the start failed otherwise.
	StartFailed
)

// StartResult is one worker's start.
type StartResult struct {
	Worker int
	Node   string
	End    StartEnd
	Error  string
}

// Starts says whether an attempt whose workers' starts ended as results is
// started; if not, how it ends, and which nodes are lost (their agent is
// silent, or their GPUs are busy) or busy, for the release to name so that
// the allocator fences them. A lost node outweighs any other failure: the
// job reruns on other nodes without spending max_retry, as after a node
// loss, whereas a start that failed otherwise fails the attempt (the first
// such failure is the one reported).
func Starts(results []StartResult, nodeTimeout time.Duration) (out Outcome, started bool, lost, busy []string) {
	var failure *Outcome
	for _, r := range results {
		var o Outcome
		switch r.End {
		case Started:
			continue
		case StartNodeSilent:
			o = NodeLostAfter(r.Node, nodeTimeout)
			lost = append(lost, r.Node)
		case StartGPUsBusy:
			o = Outcome{Kind: NodeLost, Message: fmt.Sprintf("worker %d could not start: %s; the node is fenced until its agent says who uses them", r.Worker, r.Error)}
			lost, busy = append(lost, r.Node), append(busy, r.Node)
		default:
			o = Outcome{Kind: Failed, Message: fmt.Sprintf("worker %d could not start on %s: %s", r.Worker, r.Node, r.Error)}
		}
		if failure == nil || (o.Kind == NodeLost && failure.Kind != NodeLost) {
			failure = &o
		}
	}
	if failure != nil {
		return *failure, false, lost, busy
	}
	return Outcome{}, true, nil, nil
}
