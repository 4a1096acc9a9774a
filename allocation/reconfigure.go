package allocation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// ValidateReconfigure refuses a config the allocation cannot take now (see
// scheduler.Pool.Reconfigure).
func (s *State) ValidateReconfigure(in protocol.AllocatorInput) error {
	if (in.Region != "" && in.Region != s.Config.Region) || (in.Allocation != "" && in.Allocation != s.Config.Allocation) {
		return fmt.Errorf("allocation %s cannot take the config of allocation %s/%s", s.Name(), in.Region, in.Allocation)
	}
	if in.StopGracePeriod < 0 || in.ReclaimInterval < 0 {
		return fmt.Errorf("allocation %s cannot take the new config: stop_grace_period and reclaim_interval must not be negative", s.Name())
	}
	if _, err := s.Pool.CheckReconfigure(in.Nodes, in.Policy); err != nil {
		return fmt.Errorf("allocation %s cannot take the new config: %w", s.Name(), err)
	}
	return nil
}

// Reconfigure applies a changed config: the pool's nodes and policy, the stop
// grace period, reclaim interval, node timeout and queue cap. Nodes it adds
// are fenced until their agents confirm that no stray worker runs there;
// waiting jobs that can no longer fit are refused.
func (s *State) Reconfigure(in protocol.AllocatorInput) (protocol.ReconfigureReply, []Command, error) {
	summary := s.configChanges(in)
	if summary == "" {
		return protocol.ReconfigureReply{}, nil, nil
	}
	nodesBefore, orderingBefore := s.Pool.Nodes(), s.Pool.Policy().Ordering
	unfit, err := s.Pool.Reconfigure(in.Nodes, in.Policy)
	if err != nil {
		// The validator ran the same check just before; nothing changed.
		return protocol.ReconfigureReply{}, nil, err
	}
	if s.Pool.Policy().Ordering != orderingBefore {
		// Switching fair share on or off starts every account afresh: a job
		// a recovery missed is no longer charged from before that.
		s.ChargedFrom = time.Time{}
	}
	var cmds commands
	cmds.add(s.fenceAddedNodes(nodesBefore)...)
	s.dropRemovedDrains()
	s.Config.Nodes, s.Config.Policy = s.Pool.Nodes(), s.Pool.Policy()
	s.Config.StopGracePeriod, s.Config.ReclaimInterval, s.Config.NodeTimeout = in.StopGracePeriod, in.ReclaimInterval, in.NodeTimeout
	s.Config.MaxWaiting, s.Config.WaitingLimits = in.MaxWaiting, in.WaitingLimits
	s.Config.PreemptionNotice, s.Config.ClassPreemptionNotice, s.Config.NoticeSignal = in.PreemptionNotice, in.ClassPreemptionNotice, in.NoticeSignal
	reply := protocol.ReconfigureReply{Changed: true, Summary: summary}
	for _, u := range unfit {
		reply.Refused = append(reply.Refused, u.Job)
		cmds.add(refuse(u.Job, u.Attempt, fmt.Sprintf("allocation %s was reconfigured and can no longer run this job: %s", s.Name(), u.Reason)))
	}
	note := "reconfigured: " + summary
	if len(unfit) > 0 {
		note += fmt.Sprintf("; refused %d waiting job(s) that no longer fit", len(unfit))
	}
	cmds.add(Note{Text: note}, Schedule{})
	return reply, cmds, nil
}

// fenceAddedNodes fences every node a reconfigure added (it was not in
// nodesBefore) before anything is granted there. A node can come back after
// it was removed while fenced (its strays were never confirmed stopped), or
// move in from another allocation whose jobs may still run there (a
// node_selector relabel): granting it at once could double-book its GPUs.
func (s *State) fenceAddedNodes(nodesBefore []scheduler.Node) []Command {
	before := map[string]bool{}
	for _, n := range nodesBefore {
		before[n.Name] = true
	}
	var added []string
	for _, n := range s.Pool.Nodes() {
		if !before[n.Name] {
			added = append(added, n.Name)
		}
	}
	if len(added) == 0 {
		return nil
	}
	var cmds commands
	for _, node := range added {
		cmds.add(s.fence(node, FenceAdded, "added to the allocation: waiting for its agent to confirm that no stray worker runs there"))
	}
	return cmds
}

// configChanges describes how in differs from the config in effect; "" if
// it does not.
func (s *State) configChanges(in protocol.AllocatorInput) string {
	var parts []string
	old := map[string]scheduler.Node{}
	for _, n := range s.Pool.Nodes() {
		old[n.Name] = n
	}
	var added, changed []string
	for _, n := range in.Nodes {
		o, ok := old[n.Name]
		switch {
		case !ok:
			added = append(added, n.Name)
		case !o.Equal(n):
			changed = append(changed, n.Name)
		}
		delete(old, n.Name)
	}
	var removed []string
	for _, n := range s.Pool.Nodes() {
		if _, ok := old[n.Name]; ok {
			removed = append(removed, n.Name)
		}
	}
	for _, c := range []struct {
		what  string
		nodes []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(c.nodes) > 0 {
			parts = append(parts, fmt.Sprintf("%s node(s) %s", c.what, strings.Join(c.nodes, ", ")))
		}
	}
	if len(parts) == 0 && !slices.EqualFunc(s.Pool.Nodes(), in.Nodes, scheduler.Node.Equal) {
		parts = append(parts, "reordered the nodes")
	}
	classNotices := s.classNoticeChanges(in)
	noticesListed := s.Config.PreemptionNotice != in.PreemptionNotice || len(classNotices) > 0
	for _, c := range s.policyChanges(in.Policy) {
		// The policy's notice is the longest of the notices listed below.
		if !noticesListed || !strings.HasPrefix(c, "preemption_notice ") {
			parts = append(parts, c)
		}
	}
	if s.Config.StopGracePeriod != in.StopGracePeriod {
		parts = append(parts, fmt.Sprintf("stop_grace_period %s -> %s", s.Config.StopGracePeriod, in.StopGracePeriod))
	}
	if s.Config.MaxWaiting != in.MaxWaiting {
		parts = append(parts, fmt.Sprintf("max_waiting %d -> %d", s.Config.MaxWaiting, in.MaxWaiting))
	}
	if !slices.Equal(s.Config.WaitingLimits, in.WaitingLimits) {
		parts = append(parts, fmt.Sprintf("waiting limits %s -> %s", waitingLimitsText(s.Config.WaitingLimits), waitingLimitsText(in.WaitingLimits)))
	}
	if s.Config.NodeTimeout != in.NodeTimeout {
		parts = append(parts, fmt.Sprintf("node_timeout %s -> %s", s.Config.NodeTimeout, in.NodeTimeout))
	}
	if s.Config.PreemptionNotice != in.PreemptionNotice {
		parts = append(parts, fmt.Sprintf("preemption_notice %s -> %s", s.Config.PreemptionNotice, in.PreemptionNotice))
	}
	parts = append(parts, classNotices...)
	if s.Config.NoticeSignal != in.NoticeSignal {
		parts = append(parts, fmt.Sprintf("notice_signal %q -> %q", s.Config.NoticeSignal, in.NoticeSignal))
	}
	if s.Config.ReclaimInterval != in.ReclaimInterval {
		parts = append(parts, fmt.Sprintf("reclaim_interval %s -> %s", s.Config.ReclaimInterval, in.ReclaimInterval))
	}
	return strings.Join(parts, "; ")
}

// policyChanges lists the policy settings that next changes.
func (s *State) policyChanges(next scheduler.Policy) []string {
	return s.Pool.Policy().Changes(next)
}

// classNoticeChanges lists the classes whose own preemption_notice in
// changes, in class order.
func (s *State) classNoticeChanges(in protocol.AllocatorInput) []string {
	var parts []string
	for _, class := range []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High} {
		name := class.String()
		was, wasSet := s.Config.ClassPreemptionNotice[name]
		now, nowSet := in.ClassPreemptionNotice[name]
		if was != now || wasSet != nowSet {
			parts = append(parts, fmt.Sprintf("preemption_notice of %s %s -> %s", name, noticeText(was, wasSet), noticeText(now, nowSet)))
		}
	}
	return parts
}

// noticeText shows a class's preemption_notice: its own, or the allocation's.
func noticeText(d time.Duration, set bool) string {
	if !set {
		return "the allocation's"
	}
	return d.String()
}

// waitingLimitsText lists waiting limits as "high.max_waiting 10, team-b:
// high.max_waiting 50", or "none".
func waitingLimitsText(ls protocol.WaitingLimits) string {
	if len(ls) == 0 {
		return "none"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s.max_waiting %d", l.Class, l.MaxWaiting)
		if l.Workspace != "" {
			parts[i] = l.Workspace + ": " + parts[i]
		}
	}
	return strings.Join(parts, ", ")
}

// RefuseOverCap ends the waiting jobs that their workspace's cap, lowered by
// a reconfigure, could never let start, each with the reason, and returns
// their names.
func (s *State) RefuseOverCap() ([]string, []Command) {
	jobs, cmds := s.refuseOverCap("was reconfigured and can no longer run this job")
	if len(jobs) == 0 {
		return nil, nil
	}
	cmds.add(Note{Text: fmt.Sprintf("refused %d waiting job(s) over a lowered workspace cap", len(jobs))}, Schedule{})
	return jobs, cmds
}

// refuseOverCap drops the waiting requests that their workspace's cap could
// never let start (scheduler.Pool.DropOverCap), when RefusesOverCap, and
// refuses each: "allocation <name> <why>: <the cap's reason>".
func (s *State) refuseOverCap(why string) (jobs []string, cmds commands) {
	if !s.RefusesOverCap {
		return nil, nil
	}
	for _, u := range s.Pool.DropOverCap() {
		jobs = append(jobs, u.Job)
		cmds.add(refuse(u.Job, u.Attempt, fmt.Sprintf("allocation %s %s: %s", s.Name(), why, u.Reason)))
	}
	return jobs, cmds
}
