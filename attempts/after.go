package attempts

import (
	"fmt"

	"github.com/trainq/trainq/protocol"
)

// Restart is why a job reruns, as its restarts are counted.
type Restart int

const (
	RestartFailed Restart = iota
	RestartPreempted
	RestartStuck
	RestartNodeLost
	RestartNodeDrained
)

// Ending is how a job that does not rerun ends its workflow.
type Ending int

const (
	// EndsCleanly: the workflow returns the job's status without an error.
	EndsCleanly Ending = iota
	// EndsCancelled: the workflow ends as cancelled.
	EndsCancelled
	// EndsFailed, EndsPreempted: the workflow fails with that error type.
	EndsFailed
	EndsPreempted
)

// Next is what follows an attempt: another attempt, or the job's end.
type Next struct {
	Rerun bool
	// Why is the rerun's reason; SpendsRetry says it counts against
	// max_retry, NodeLoss that it counts as one more node loss.
	Why         Restart
	SpendsRetry bool
	NodeLoss    bool
	// State and Ending are the job's end (Rerun false); Message, when not
	// empty, is the job's message then.
	State   protocol.JobState
	Ending  Ending
	Message string
}

// After says what follows an attempt that ended with out, for a job whose
// record before it was r: the one place that turns an outcome into the
// job's next step (the job workflow carries it out).
func After(out Outcome, r Record) Next {
	rerun := Reruns(out, r)
	switch out.Kind {
	case Completed:
		return Next{State: protocol.StateCompleted}
	case Cancelled:
		return Next{State: protocol.StateStopped, Ending: EndsCancelled}
	case TimeLimit:
		return Next{State: protocol.StateStopped}
	case NodeDrained:
		return Next{Rerun: true, Why: RestartNodeDrained}
	case Yielded:
		return Next{Rerun: true, Why: RestartPreempted}
	case NodeLost:
		if rerun {
			return Next{Rerun: true, Why: RestartNodeLost, NodeLoss: true}
		}
		return Next{NodeLoss: true, State: protocol.StateFailed, Ending: EndsFailed,
			Message: fmt.Sprintf("%s; the job lost a node %d times, more than the %d reruns allowed for node losses", out.Message, r.NodeLosses+1, MaxNodeLossReruns)}
	}
	if !rerun {
		next := Next{State: protocol.StateFailed, Ending: EndsFailed}
		if out.Kind == Preempted {
			next.State, next.Ending = protocol.StatePreempted, EndsPreempted
		}
		if !out.Final {
			next.Message = fmt.Sprintf("%s; no retries left (max_retry %d)", out.Message, r.MaxRetry)
		}
		return next
	}
	next := Next{Rerun: true, SpendsRetry: true, Why: RestartFailed}
	switch {
	case out.Kind == Preempted:
		next.Why = RestartPreempted
	case out.Stuck:
		next.Why = RestartStuck
	}
	return next
}
