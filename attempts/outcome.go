// Package attempts holds the rules of one running attempt of a job: what a
// preemption, a cancellation, the time limit, a notice's deadline, an idle or
// scheduled shutdown and a worker's exit do to it, which commands (give the
// workers a notice, report a release, watch a worker again, end the attempt)
// they call for, and whether another attempt follows the one that ended.
//
// Nothing here talks to Temporal. The job workflow (package workflows) is the
// shell around it, as the allocator workflow is around package allocation: it
// turns signals, timers and watches into events, calls Running.On and executes
// the returned commands in order. Because the rules are plain functions of the
// state and the event, they are tested with tables (running_test.go).
package attempts

import (
	"github.com/trainq/trainq/scheduler"
)

// Kind is how an attempt ended.
type Kind int

const (
	Completed Kind = iota
	Failed
	Preempted
	Cancelled
	// NodeLost: a node's agent did not answer; the job reruns on other nodes
	// without spending max_retry (see MaxNodeLossReruns).
	NodeLost
	// TimeLimit: the job ran for its stop_timer, or a notebook's shutdown
	// rule stopped it; it ends Stopped.
	TimeLimit
	// NodeDrained: an operator drained a node of the attempt; the job reruns
	// on other nodes without spending max_retry.
	NodeDrained
	// Yielded: the attempt gave its capacity back for a reason that is not
	// the job's (its loan was due, it was moved to make room for a gang, the
	// allocator gave up an attempt a reset job no longer knew it held); the
	// job reruns without spending max_retry.
	Yielded
)

// MaxNodeLossReruns is how many times a job reruns after losing a node
// before it ends Failed: a lost node is not the job's fault (Slurm requeues
// on node failure, Kubernetes' pod failure policy ignores disruptions), but
// a job that keeps losing nodes may be what breaks them.
const MaxNodeLossReruns = 3

// Outcome is how an attempt ends, and why.
type Outcome struct {
	Kind      Kind
	Message   string
	ExitCode  *int
	Preemptor *scheduler.Preemptor
	// Final means a rerun cannot help (the allocation refused the job, or
	// health_params say delete).
	Final bool
	// Stuck marks a failed attempt that was stopped for writing no logs.
	Stuck bool
}

// Record is what the job has spent of its reruns before the attempt that
// ended: restarts against max_retry, and earlier node losses.
type Record struct {
	Restarts, MaxRetry, NodeLosses int
}

// Reruns says whether another attempt follows one that ended with out: the
// one place that decides it, for the state while the attempt stops and for
// what comes after. A lost node reruns the job without spending max_retry up
// to MaxNodeLossReruns times (NodeLosses counts the earlier ones); a drained
// node and a yielded loan always; a completion, a cancellation and a time
// limit never; anything else while max_retry allows.
func Reruns(out Outcome, r Record) bool {
	switch out.Kind {
	case Completed, Cancelled, TimeLimit:
		return false
	case NodeDrained, Yielded:
		return true
	case NodeLost:
		return r.NodeLosses < MaxNodeLossReruns
	}
	return !out.Final && r.Restarts < r.MaxRetry
}
