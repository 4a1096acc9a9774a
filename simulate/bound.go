package simulate

import (
	"slices"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// StarvationBound checks, for a policy with backfill and starvation_after, the bound the
// scheduler's package doc states (Starvation): a request that starves as the first of its class
// starts at the latest when the jobs it may not preempt on the nodes it reserves then have ended
// (by their true runtimes: loans ending sooner by their limits are counted at their true end,
// which only widens the bound), plus its victims' stop (the stop delay, after any notice) and a
// minute for the pass that notices. A request that stops being first restarts its clock, and its
// bound with it.
type StarvationBound struct {
	Starved int `json:"starved"` // requests that starved as first of their class
	// Held started within their bound; Broken after it, the worst by WorstExcess; Unchecked
	// reserved no node when they starved (nothing to bound).
	Held        int     `json:"held"`
	Broken      int     `json:"broken"`
	WorstExcess Seconds `json:"worst_excess,omitempty"`
	Unchecked   int     `json:"unchecked,omitempty"`
}

// starvationMark is the bound of a starving head's attempt.
type starvationMark struct {
	attempt int
	class   scheduler.Class
	by      time.Duration
	nodes   []string // reserved when it starved
}

// boundSlack is the pass that notices the capacity free, beyond the stop delay.
const boundSlack = time.Minute

// checkStarving, after a pass, marks the bound of each class's head when it has just starved,
// and forgets the marks of requests no longer first of their class.
func (s *sim) checkStarving() {
	sp := s.pol.Scheduler
	if !sp.Backfill || sp.StarvationAfter <= 0 {
		return
	}
	if s.marks == nil {
		s.marks = map[int32]starvationMark{}
	}
	for _, c := range []scheduler.Class{scheduler.High, scheduler.Medium} {
		job, since, reserved, ok := s.pool.Head(c)
		for i, m := range s.marks {
			if m.class == c && (!ok || s.w.Jobs[i].ID != job) {
				delete(s.marks, i)
			}
		}
		if !ok || Epoch.Add(s.now).Sub(since) < sp.StarvationAfter {
			continue
		}
		i := s.idx[job]
		if m, marked := s.marks[i]; marked && m.attempt == s.jobs[i].attempt {
			continue
		}
		s.bound.Starved++
		if len(reserved) == 0 {
			s.bound.Unchecked++
			s.marks[i] = starvationMark{attempt: s.jobs[i].attempt, class: c, by: -1}
			continue
		}
		s.marks[i] = starvationMark{attempt: s.jobs[i].attempt, class: c, by: s.now + s.blockersLeft(c, reserved) + s.victimStop() + boundSlack, nodes: reserved}
	}
}

// blockersLeft is how long the running jobs on nodes that a starving request of class c may not
// preempt (its own or a higher class, notebooks, preempted more than MaxPreemptions times) have
// left to run.
func (s *sim) blockersLeft(c scheduler.Class, nodes []string) time.Duration {
	var left time.Duration
	maxP := s.pol.Scheduler.MaxPreemptionsInEffect()
	for k := range s.jobs {
		st := &s.jobs[k]
		if st.phase != phRunning || !overlaps(st.nodes, nodes) {
			continue
		}
		j := &s.w.Jobs[k]
		if s.class(int32(k)) >= c || j.Kind == scheduler.KindNotebook || maxP >= 0 && st.preempted > maxP {
			left = max(left, st.startedAt+st.remaining-s.now)
		}
	}
	return left
}

// victimStop is how long a victim takes to be gone once preempted: the notice, then the stop.
func (s *sim) victimStop() time.Duration {
	return max(0, s.pol.Scheduler.PreemptionNotice) + s.opt.StopDelay
}

// boundAtStart judges a start against the bound of job i's attempt, if it starved as a head. A
// starving head of a higher class may take a lower one's reserved nodes first (a lower class's
// reservation holds nothing from it): the lower one's bound then waits for its run too.
func (s *sim) boundAtStart(i int32) {
	m, ok := s.marks[i]
	if !ok {
		return
	}
	delete(s.marks, i)
	if m.attempt != s.jobs[i].attempt || m.by < 0 {
		return
	}
	st := &s.jobs[i]
	for k, o := range s.marks {
		if o.class < m.class && o.by >= 0 && slices.ContainsFunc(st.nodes, func(n string) bool { return slices.Contains(o.nodes, n) }) {
			o.by = max(o.by, s.now+st.remaining+s.victimStop()+boundSlack)
			s.marks[k] = o
		}
	}
	if s.now <= m.by {
		s.bound.Held++
		return
	}
	s.bound.Broken++
	s.bound.WorstExcess = max(s.bound.WorstExcess, Seconds(s.now-m.by))
}
