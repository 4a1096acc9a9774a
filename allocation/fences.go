package allocation

import (
	"fmt"
	"slices"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// FenceCause is why a node is fenced: what the allocator decides by (the
// reason beside it is for people).
type FenceCause string

const (
	// FenceRecovering: every node after a recovery, until its agent says
	// what runs there; it turns into FenceLost if the agent does not answer.
	FenceRecovering FenceCause = "recovering"
	// FenceLost: the node's agent did not answer, so its workers may run on.
	FenceLost FenceCause = "lost"
	// FenceAdded: a reconfigure added the node.
	FenceAdded FenceCause = "added"
)

// RecoveringReason is a node's reason while a recovery fences it.
const RecoveringReason = "waiting for its agent to report which workers run there (recovery)"

// Fence is why one node is fenced.
type Fence struct {
	Cause FenceCause
	Why   string
}

// carriedFence reads a fenced node from the carried state; one written
// before causes were kept is told by its reason.
func carriedFence(f protocol.FencedNode) Fence {
	cause := FenceCause(f.Cause)
	if cause == "" {
		cause = FenceLost
		if f.Reason == RecoveringReason {
			cause = FenceRecovering
		}
	}
	return Fence{Cause: cause, Why: f.Reason}
}

// fence takes node out of scheduling until its agent has stopped every
// worker the pool does not hold (the workflow runs the FenceNode activity).
func (s *State) fence(node string, cause FenceCause, why string) Command {
	s.Pool.MarkNodeLost(node)
	s.Fences[node] = Fence{Cause: cause, Why: why}
	return FenceNode{Node: node}
}

// NodeLost fences a node whose agent did not answer. A node already fenced
// as lost stays as it is; one fenced by a recovery turns lost.
func (s *State) NodeLost(node, why string) []Command {
	if slices.Contains(s.Pool.LostNodes(), node) && !s.drainedOnly(node) && s.Fences[node].Cause != FenceRecovering {
		return nil
	}
	s.Counters.NodesLost++
	var cmds commands
	cmds.note("node %s lost: %s", node, why)
	cmds.warn("node lost; fencing it until its agent answers", "node", node, "reason", why)
	cmds.add(s.fence(node, FenceLost, "lost: "+why))
	return cmds
}

// WorkersOn lists the workers the pool holds on node (not yet released): a
// fence keeps these and stops every other.
func (s *State) WorkersOn(node string) []cluster.WorkerID {
	var keep []cluster.WorkerID
	for _, job := range s.Pool.RunningJobs() {
		r, _ := s.Pool.Running(job)
		for _, p := range r.Placement {
			if p.Node == node && !slices.Contains(r.Released, p.Worker) {
				keep = append(keep, cluster.WorkerID{Job: job, Attempt: r.Attempt, Worker: p.Worker})
			}
		}
	}
	return keep
}

// FenceAnswerStale says whether an agent's answer to a fence that kept keep
// proves nothing: a kept worker is no longer held (its job gave it up while
// the fence waited: a second watch lost, a reclaim), yet it may still run,
// so the node must be fenced again with what is held now. This is checked
// against the pool, not a counter, so that every way a kept worker can stop
// being held counts.
func (s *State) FenceAnswerStale(node string, keep []cluster.WorkerID) ([]Command, bool) {
	if stillHeld(keep, s.WorkersOn(node)) {
		return nil, false
	}
	var cmds commands
	cmds.note("node %s: its agent answered a fence that kept workers no longer held; fencing it again", node)
	return cmds, true
}

// stillHeld says whether every worker in kept is among held.
func stillHeld(kept, held []cluster.WorkerID) bool {
	for _, w := range kept {
		if !slices.Contains(held, w) {
			return false
		}
	}
	return true
}

// NodeBack brings a fenced node back: its agent stopped stopped stray
// workers and confirmed the rest.
func (s *State) NodeBack(node string, stopped int) []Command {
	delete(s.Fences, node)
	var cmds commands
	if why, drained := s.Drains[node]; drained {
		cmds.note("node %s is back: its agent stopped %d stray worker(s); it stays drained (%s)", node, stopped, why)
		return cmds
	}
	s.Pool.MarkNodeUp(node)
	cmds.note("node %s is back: its agent stopped %d stray worker(s)", node, stopped)
	cmds.add(Schedule{})
	return cmds
}

// FenceTimedOut takes a fence whose node's agent did not pick it up in
// node_timeout: a node fenced by a recovery now counts as lost. It says
// whether anything changed.
func (s *State) FenceTimedOut(node string) ([]Command, bool) {
	if s.Fences[node].Cause != FenceRecovering {
		return nil, false
	}
	s.Counters.NodesLost++
	s.Fences[node] = Fence{Cause: FenceLost, Why: fmt.Sprintf("lost: its agent did not answer for %s", s.NodeTimeout())}
	var cmds commands
	cmds.note("node %s lost: its agent did not answer for %s", node, s.NodeTimeout())
	return cmds, true
}

// Fenced lists the fenced nodes in config order, with why.
func (s *State) Fenced() []protocol.FencedNode {
	var out []protocol.FencedNode
	for _, node := range s.Pool.LostNodes() {
		if s.drainedOnly(node) {
			continue
		}
		f := s.FenceOf(node)
		out = append(out, protocol.FencedNode{Node: node, Reason: f.Why, Cause: string(f.Cause)})
	}
	return out
}

// FenceOf is why node is fenced; a node marked lost without a recorded
// reason counts as lost.
func (s *State) FenceOf(node string) Fence {
	if f, ok := s.Fences[node]; ok && f.Why != "" {
		return f
	}
	return Fence{Cause: FenceLost, Why: "lost: its agent did not answer"}
}
