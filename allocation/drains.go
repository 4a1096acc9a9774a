package allocation

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// A drained node is one an operator takes out of service (Slurm's drain,
// kubectl drain): nothing new is granted there, and the jobs running there
// are told to leave (a notice with reason node_drain, then a stop at its
// deadline) and rerun elsewhere without spending max_retry. A drain
// outlasts fences: the node grants again only when it is undrained and no
// fence holds it. Drains travel through continue-as-new and through a
// recovery, which tells the jobs it adopts on a drained node to leave (the
// drain's own signal may have been lost with the run that sent it), as does
// the adoption of a job a recovery missed (see State.TellsAdoptedToLeave).

// FenceDrained is the cause a drained node shows in the views (it is kept
// apart from the fences, see State.Drains).
const FenceDrained FenceCause = "drained"

// ValidateDrain refuses a drain of a node the allocation does not have.
func (s *State) ValidateDrain(r protocol.DrainRequest) error {
	for _, n := range s.Pool.Nodes() {
		if n.Name == r.Node {
			return nil
		}
	}
	names := make([]string, 0, len(s.Pool.Nodes()))
	for _, n := range s.Pool.Nodes() {
		names = append(names, n.Name)
	}
	return fmt.Errorf("allocation %s has no node %q; its nodes are %s", s.Name(), r.Node, strings.Join(names, ", "))
}

// Drain takes a node out of service, or (r.Undrain) puts it back. Draining
// a drained node again changes nothing but its reason; its jobs were told.
// A job told to leave is releasing from then on, as a
// preemption's victim is: the capacity it holds on other nodes comes free
// at its notice's deadline at the latest, so a pass waits for it rather than
// preempting another job.
func (s *State) Drain(r protocol.DrainRequest) (protocol.DrainReply, []Command) {
	if r.Undrain {
		return s.undrain(r.Node)
	}
	why := r.Reason
	if why == "" {
		why = "drained by an operator"
	}
	reply := protocol.DrainReply{Node: r.Node, Drained: true}
	if _, already := s.Drains[r.Node]; already {
		s.Drains[r.Node] = why
		s.Pool.SetNodeNote(r.Node, drainNote(why))
		return reply, nil
	}
	if s.Drains == nil {
		s.Drains = map[string]string{}
	}
	s.Drains[r.Node] = why
	s.Pool.MarkNodeLost(r.Node) // a fenced node is out already
	s.Pool.SetNodeNote(r.Node, drainNote(why))
	reply.Changed = true
	var cmds commands
	reply.Jobs = s.tellToLeave(&cmds, r.Node)
	cmds.note("node %s drained (%s): %d job(s) told to leave", r.Node, why, len(reply.Jobs))
	cmds.add(Schedule{})
	return reply, cmds
}

// tellToLeave tells the running jobs placed on a drained node that are not
// releasing yet to leave, and returns them. A job told is releasing from
// then on, as a preemption's victim is: a pass must not preempt another job
// for capacity it is about to free, and it is not told twice.
func (s *State) tellToLeave(cmds *commands, node string) []string {
	why := s.Drains[node]
	var told []string
	for _, job := range s.Pool.RunningJobs() {
		info, _ := s.Pool.Running(job)
		if info.Releasing || !placedOn(info, node) {
			continue
		}
		told = append(told, job)
		s.Pool.BeginRelease(job)
		cmds.add(Signal{Job: job, Name: protocol.SignalPreempt, IfGone: GoneReclaim, Arg: protocol.PreemptSignal{
			Epoch: s.Epoch, Attempt: info.Attempt, Drain: node, Notice: s.Config.NoticeFor(info.Class, info.Kind),
			Reason: fmt.Sprintf("node %s is drained (%s)", node, why)}})
	}
	return told
}

// tellAdoptedToLeave tells the jobs a recovery or an adoption took in on a
// drained node to leave (with State.TellsAdoptedToLeave).
func (s *State) tellAdoptedToLeave(cmds *commands) {
	if !s.TellsAdoptedToLeave {
		return
	}
	for _, n := range s.Pool.Nodes() {
		if _, drained := s.Drains[n.Name]; drained {
			if told := s.tellToLeave(cmds, n.Name); len(told) > 0 {
				cmds.note("node %s is drained: %d adopted job(s) told to leave", n.Name, len(told))
			}
		}
	}
}

func (s *State) undrain(node string) (protocol.DrainReply, []Command) {
	reply := protocol.DrainReply{Node: node}
	if _, drained := s.Drains[node]; !drained {
		return reply, nil
	}
	delete(s.Drains, node)
	s.Pool.SetNodeNote(node, "")
	reply.Changed = true
	var cmds commands
	if _, fenced := s.Fences[node]; fenced {
		cmds.note("node %s undrained; it stays fenced: %s", node, s.Fences[node].Why)
		return reply, cmds
	}
	s.Pool.MarkNodeUp(node)
	cmds.note("node %s undrained", node)
	cmds.add(Schedule{})
	return reply, cmds
}

// placedOn says whether a running job has a worker on node it has not
// released.
func placedOn(info scheduler.RunningInfo, node string) bool {
	for _, p := range info.Placement {
		if p.Node == node && !slices.Contains(info.Released, p.Worker) {
			return true
		}
	}
	return false
}

// drainedOnly says whether node is out of scheduling only because it is
// drained (no fence holds it).
func (s *State) drainedOnly(node string) bool {
	_, drained := s.Drains[node]
	_, fenced := s.Fences[node]
	return drained && !fenced
}

// Drained lists the drained nodes in config order, as the views show them.
func (s *State) Drained() []protocol.FencedNode {
	var out []protocol.FencedNode
	for _, n := range s.Pool.Nodes() {
		if why, ok := s.Drains[n.Name]; ok {
			out = append(out, protocol.FencedNode{Node: n.Name, Reason: "drained: " + why, Cause: string(FenceDrained)})
		}
	}
	return out
}

// dropRemovedDrains forgets the drains of nodes a reconfigure removed.
func (s *State) dropRemovedDrains() {
	have := map[string]bool{}
	for _, n := range s.Pool.Nodes() {
		have[n.Name] = true
	}
	// Deleting in map order leaves the same map whatever the order.
	//workflowcheck:ignore
	for node := range s.Drains {
		if !have[node] {
			delete(s.Drains, node)
		}
	}
}

// drainNote is how the reasons a job waits name a drained node.
func drainNote(why string) string { return "drained (" + why + ")" }

// noteDrains gives a pool built afresh (restored, rebuilt by a recovery) the
// notes of the drained nodes.
func (s *State) noteDrains() {
	for _, n := range s.Pool.Nodes() {
		if why, ok := s.Drains[n.Name]; ok {
			s.Pool.SetNodeNote(n.Name, drainNote(why))
		}
	}
}
