package allocation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The builders the rule tables share: a state of n 8-GPU nodes (requests
// are fixture.Request's, of 2-GPU workers unless they say otherwise), steps that bring the state where a case starts, and a
// compact rendering of the commands a rule returns.

// t0 is when the cases happen, and when their requests were submitted.
var t0 = fixture.Start

func nodes(n int) []scheduler.Node {
	out := make([]scheduler.Node, n)
	for i := range out {
		out[i] = scheduler.Node{Name: fmt.Sprintf("n%d", i+1), Family: "a100", GPUs: 8, CPU: 16, RAMGB: 128}
	}
	return out
}

func input(n int) protocol.AllocatorInput {
	return protocol.AllocatorInput{Region: "T", Allocation: "a", Nodes: nodes(n),
		StopGracePeriod: 5 * time.Second, ReclaimInterval: 30 * time.Second}
}

func newState(t *testing.T, n int) *State {
	t.Helper()
	s, err := New(input(n))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// step brings a state one message closer to where a case starts.
type step func(t *testing.T, s *State)

// given applies steps in order.
func given(t *testing.T, s *State, steps ...step) {
	t.Helper()
	for _, st := range steps {
		st(t, s)
	}
}

// queued: the request is queued (no pass).
func queued(r protocol.CapacityRequest) step {
	return func(t *testing.T, s *State) { s.Request(r, t0) }
}

// granted: the request is queued and a pass grants what fits.
func granted(r protocol.CapacityRequest) step {
	return func(t *testing.T, s *State) {
		t.Helper()
		s.Request(r, t0)
		s.Pass(t0)
		if h, ok := s.Pool.Running(r.Job); !ok || h.Attempt != r.Attempt {
			t.Fatalf("setup: %s attempt %d was not granted", r.Job, r.Attempt)
		}
	}
}

// withdrawn: the job withdraws the attempt.
//
//nolint:unparam // the call names the attempt withdrawn, as the signal does; the tests all use attempt 1 today
func withdrawn(job string, attempt int) step {
	return func(t *testing.T, s *State) { s.Withdraw(protocol.WithdrawSignal{Job: job, Attempt: attempt}) }
}

// stopping: the job begins to stop its attempt (its workers still run).
//
//nolint:unparam // the call names the attempt stopping, as the signal does; the tests all use attempt 1 today
func stopping(job string, attempt int) step {
	return func(t *testing.T, s *State) {
		s.Release(protocol.ReleaseSignal{Job: job, Attempt: attempt, Stopping: true})
	}
}

// passed: a scheduling pass ran.
func passed(t *testing.T, s *State) { s.Pass(t0) }

// recovered: a recovery rebuilt the state from holds.
func recovered(holds ...protocol.JobHold) step {
	return func(t *testing.T, s *State) {
		t.Helper()
		if _, _, err := s.Recovered("e2", t0, Registered{Holds: holds, Listed: len(holds)}); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeUp: a fence's answer brought the node back.
func nodeUp(node string) step { return func(t *testing.T, s *State) { s.NodeBack(node, 0) } }

// configured: a reconfigure to in.
func configured(in protocol.AllocatorInput) step {
	return func(t *testing.T, s *State) {
		t.Helper()
		if _, _, err := s.Reconfigure(in); err != nil {
			t.Fatal(err)
		}
	}
}

// holding is a job's register answer: it holds one 2-GPU worker on node
// (GPUs 0 and 1).
//
//nolint:unparam // a builder's call names where the hold is; the tests all use node n1 today
func holding(job string, attempt int, node string) protocol.JobHold {
	h := protocol.JobHold{Job: job, Phase: protocol.HoldHolding, Request: fixture.Request{Job: job, Attempt: attempt, Class: scheduler.Medium, Workers: 1}.Capacity(), StartedAt: t0}
	h.Request.Seq = 1
	h.Placement = []scheduler.WorkerPlacement{{Worker: 0, Node: node, GPUs: []int{0, 1}}}
	return h
}

// waitingHold is a job's register answer: it waits for its request.
func waitingHold(r protocol.CapacityRequest) protocol.JobHold {
	return protocol.JobHold{Job: r.Job, Phase: protocol.HoldWaiting, Request: r}
}

func worker(job string, attempt, w int) cluster.WorkerID {
	return cluster.WorkerID{Job: job, Attempt: attempt, Worker: w}
}

// rendered writes commands compactly for the tables ("grant j#1",
// "fence n1", "schedule"); notes, warnings and counts are left out.
func rendered(cmds []Command) []string {
	out := []string{}
	for _, c := range cmds {
		switch c := c.(type) {
		case Signal:
			out = append(out, fmt.Sprintf("%s %s#%d", c.Name, c.Job, signalAttempt(c)))
		case FenceNode:
			out = append(out, "fence "+c.Node)
		case Reclaim:
			out = append(out, "reclaim "+c.Job)
		case CheckReset:
			out = append(out, fmt.Sprintf("check-reset %s#%d", c.Request.Job, c.Request.Attempt))
		case CheckForgotten:
			out = append(out, fmt.Sprintf("check-forgotten %s#%d", c.Request.Job, c.Request.Attempt))
		case Requeue:
			out = append(out, fmt.Sprintf("requeue %s#%d", c.Request.Job, c.Request.Attempt))
		case Schedule:
			out = append(out, "schedule")
		}
	}
	return out
}

func signalAttempt(c Signal) int {
	switch a := c.Arg.(type) {
	case protocol.GrantSignal:
		return a.Attempt
	case protocol.PreemptSignal:
		return a.Attempt
	case protocol.RefuseSignal:
		return a.Attempt
	}
	return -1
}

// notes are the notes among cmds.
func notes(cmds []Command) string {
	var out []string
	for _, c := range cmds {
		if n, ok := c.(Note); ok {
			out = append(out, n.Text)
		}
	}
	return strings.Join(out, "\n")
}
