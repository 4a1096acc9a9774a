package attempts

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/protocol"
)

// TestAfter: what follows an attempt, given how it ended and what the job
// had spent before it.
func TestAfter(t *testing.T) {
	failed := Outcome{Kind: Failed, Message: "worker 0 exited with code 1"}
	preempted := Outcome{Kind: Preempted, Message: "preempted by urgent"}
	lost := Outcome{Kind: NodeLost, Message: "node n1 lost"}
	for _, tc := range []struct {
		name string
		out  Outcome
		rec  Record
		want Next
	}{
		{"completed", Outcome{Kind: Completed}, Record{}, Next{State: protocol.StateCompleted}},
		{"cancelled", Outcome{Kind: Cancelled}, Record{MaxRetry: 3}, Next{State: protocol.StateStopped, Ending: EndsCancelled}},
		{"time limit", Outcome{Kind: TimeLimit}, Record{MaxRetry: 3}, Next{State: protocol.StateStopped}},
		{"a drain reruns without spending max_retry", Outcome{Kind: NodeDrained}, Record{Restarts: 1, MaxRetry: 1},
			Next{Rerun: true, Why: RestartNodeDrained}},
		{"a loan yielded reruns without spending max_retry", Outcome{Kind: Yielded}, Record{Restarts: 1, MaxRetry: 1},
			Next{Rerun: true, Why: RestartPreempted}},
		{"a lost node reruns without spending max_retry, counted as a loss", lost, Record{Restarts: 1, MaxRetry: 1, NodeLosses: 2},
			Next{Rerun: true, Why: RestartNodeLost, NodeLoss: true}},
		{"the fourth node loss ends the job", lost, Record{MaxRetry: 5, NodeLosses: 3},
			Next{NodeLoss: true, State: protocol.StateFailed, Ending: EndsFailed,
				Message: "node n1 lost; the job lost a node 4 times, more than the 3 reruns allowed for node losses"}},
		{"a failure reruns while max_retry allows", failed, Record{Restarts: 1, MaxRetry: 2},
			Next{Rerun: true, SpendsRetry: true, Why: RestartFailed}},
		{"a stuck attempt reruns as stuck", Outcome{Kind: Failed, Stuck: true}, Record{MaxRetry: 1},
			Next{Rerun: true, SpendsRetry: true, Why: RestartStuck}},
		{"a preemption reruns while max_retry allows", preempted, Record{MaxRetry: 1},
			Next{Rerun: true, SpendsRetry: true, Why: RestartPreempted}},
		{"a preemption with no retries left ends the job preempted", preempted, Record{Restarts: 1, MaxRetry: 1},
			Next{State: protocol.StatePreempted, Ending: EndsPreempted, Message: "preempted by urgent; no retries left (max_retry 1)"}},
		{"a failure with no retries left ends the job failed", failed, Record{Restarts: 2, MaxRetry: 2},
			Next{State: protocol.StateFailed, Ending: EndsFailed, Message: "worker 0 exited with code 1; no retries left (max_retry 2)"}},
		{"a final failure ends the job with its own message", Outcome{Kind: Failed, Message: "refused", Final: true}, Record{MaxRetry: 3},
			Next{State: protocol.StateFailed, Ending: EndsFailed}},
	} {
		assert.Equal(t, tc.want, After(tc.out, tc.rec), tc.name)
	}
}
