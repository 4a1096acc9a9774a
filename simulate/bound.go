package simulate

import (
	"slices"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// StarvationBound checks, for a policy with backfill and starvation_after, the bound the
// scheduler's package doc states (Starvation): a request that starves as the first of its class
// starts at the latest when the jobs it may not preempt on the nodes it reserves then have ended
// (by their true runtimes: a loan is counted at its true end, not its limit, which only widens
// the bound), and a job there already stopping for a request of its own or a higher class has
// been followed by that request's run, plus its victims' stop (the stop delay, after any notice)
// and a minute for the pass that notices; a starving request of a higher class that starts on
// those nodes first adds its run. One that reserves nothing when it starves has no bound in the
// doc (it preempts, holds capacity being freed for it, or finds the nodes it needs reserved by a
// starving request of a higher class): it is counted apart. A request that stops being first
// before it starts restarts its clock, and its bound with it.
type StarvationBound struct {
	// Starved counts the times a request starved as first of its class (a request that lost
	// first place and starved again counts again). Of those, Held started within their bound,
	// Broken after it (the worst by WorstExcess), Unchecked reserved nothing when they starved
	// (no bound to judge), and Displaced stopped being first before they started (its clock
	// restarted).
	Starved     int     `json:"starved"`
	Held        int     `json:"held"`
	Broken      int     `json:"broken"`
	WorstExcess Seconds `json:"worst_excess,omitempty"`
	Unchecked   int     `json:"unchecked,omitempty"`
	Displaced   int     `json:"displaced,omitempty"`
}

// starvationMark is the bound of a starving head.
type starvationMark struct {
	class scheduler.Class
	by    time.Duration
	nodes []string // reserved when it starved
}

// boundSlack is the pass that notices the capacity free, beyond the stop delay.
const boundSlack = time.Minute

// boundChecked reports whether the policy has the bound to check.
func (s *sim) boundChecked() bool {
	sp := s.pol.Scheduler
	return sp.Backfill && sp.StarvationAfter > 0
}

// starvedSince reports whether a request first of its class since then starves now.
func (s *sim) starvedSince(since time.Time) bool {
	return Epoch.Add(s.now).Sub(since) >= s.pol.Scheduler.StarvationAfter
}

// starvingBefore notes, before a pass, the heads that starve in it (they were first of their
// class for starvation_after by now): one the pass starts has starved and is judged at its start
// (boundAtStart), although it is first no more after the pass.
func (s *sim) starvingBefore() {
	s.passStarving = s.passStarving[:0]
	if !s.boundChecked() {
		return
	}
	for _, c := range []scheduler.Class{scheduler.High, scheduler.Medium} {
		if job, since, _, ok := s.pool.Head(c); ok && s.starvedSince(since) {
			s.passStarving = append(s.passStarving, s.idx[job])
		}
	}
}

// checkStarving, after a pass (and its starts), marks the bound of each class's head when it
// has just starved, and forgets, as displaced, the marks of requests no longer first of their
// class.
func (s *sim) checkStarving() {
	if !s.boundChecked() {
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
				s.bound.Displaced++
			}
		}
		if !ok || !s.starvedSince(since) {
			continue
		}
		i := s.idx[job]
		if _, marked := s.marks[i]; marked {
			continue
		}
		s.bound.Starved++
		by := time.Duration(-1) // (no bound: see StarvationBound)
		if len(reserved) > 0 {
			by = s.now + s.blockersLeft(i, c, reserved) + s.victimStop() + boundSlack
		}
		s.marks[i] = starvationMark{class: c, by: by, nodes: reserved}
	}
}

// blockersLeft is how long what starving request i, of class c, waits for on nodes has left:
// the running jobs there it may not preempt (its own or a higher class, notebooks, preempted more
// than MaxPreemptions times, and with LossWithinWait those its wait may not cover: lossCovered)
// until they end, and a job there stopping for a request of its own or a higher class (whose
// capacity it may not take over) until that request has run too.
func (s *sim) blockersLeft(i int32, c scheduler.Class, nodes []string) time.Duration {
	var left time.Duration
	for k := range s.jobs {
		st := &s.jobs[k]
		if !overlaps(st.nodes, nodes) {
			continue
		}
		switch st.phase {
		case phRunning:
			if s.class(int32(k)) >= c || s.w.Jobs[k].Kind == scheduler.KindNotebook || s.atMaxPreemptions(int32(k)) || !s.lossCovered(i, int32(k)) {
				left = max(left, st.startedAt+st.remaining-s.now)
			}
		case phNotice, phStopping:
			if by := st.preemptedBy; s.class(by) >= c && s.jobs[by].phase == phWaiting {
				left = max(left, s.victimStop()+s.jobs[by].remaining)
			}
		}
	}
	return left
}

// atMaxPreemptions reports whether a starving request may not preempt running job k for the
// times it was preempted: more than MaxPreemptions, or as many with StrictMaxPreemptions.
func (s *sim) atMaxPreemptions(k int32) bool {
	sp := s.pol.Scheduler
	maxP, n := sp.MaxPreemptionsInEffect(), s.jobs[k].preempted
	return maxP >= 0 && (n > maxP || n == maxP && sp.StrictMaxPreemptions)
}

// lossCovered reports whether, with Policy.LossWithinWait, starving request i may preempt
// running job k at every moment from now until k ends: k's work at stake (its GPUs × its run so
// far: an upper bound, whatever it saved) stays within max_loss_gpu_hours, or within what i has
// waited (its GPUs × its wait). Both grow linearly, so the ends of k's run decide. Without
// LossWithinWait, every loss is covered.
func (s *sim) lossCovered(i, k int32) bool {
	sp := s.pol.Scheduler
	limit := int64(sp.MaxLossGPUHoursInEffect()) * 3600
	if !sp.LossWithinWait || limit < 0 {
		return true
	}
	g, gk := int64(s.w.Jobs[i].GPUs()), int64(s.w.Jobs[k].GPUs())
	rest := int64((s.jobs[k].startedAt + s.jobs[k].remaining - s.now) / time.Second) // (its run left)
	waited := g * int64((s.now-s.w.Jobs[i].Arrival)/time.Second)
	lost := gk * int64((s.now-s.jobs[k].startedAt)/time.Second)
	switch {
	case lost+gk*rest <= limit:
		return true
	case gk <= g: // (i's wait grows at least as fast as k's loss)
		return lost <= waited
	}
	return lost+gk*rest <= waited+g*rest
}

// victimStop is how long a victim takes to be gone once preempted: the notice, then the stop.
func (s *sim) victimStop() time.Duration {
	return max(0, s.pol.Scheduler.PreemptionNotice) + s.opt.StopDelay
}

// boundAtStart judges the start of job i against its bound, if it starved as a head, and moves
// the bounds its start may push back, of the starving heads whose reserved nodes it starts on
// (unless they are late already):
//   - a starving head of a higher class may take a lower one's nodes first (a lower class's
//     reservation holds nothing from it): the lower one waits for its run;
//   - a job that starts there on loan (its time limit ends it by the start the reservation had
//     by the time limits of the jobs there, which may be later than their true ends) is never
//     taken back inside its limit: the head waits until it ends, or its limit passes and it
//     yields.
func (s *sim) boundAtStart(i int32, onLoan bool) {
	m, marked := s.marks[i]
	starving := marked || slices.Contains(s.passStarving, i)
	delete(s.marks, i)
	st := &s.jobs[i]
	c := s.class(i)
	var until time.Duration // how long the start may keep a head waiting
	switch {
	case onLoan:
		until = st.remaining
		if rl := s.runLimit(i); rl < until {
			until = rl + s.victimStop()
		}
	case starving:
		until = st.remaining
	}
	for k, o := range s.marks {
		if until > 0 && (onLoan || o.class < c) && o.by >= 0 && s.now <= o.by && overlaps(st.nodes, o.nodes) {
			o.by = max(o.by, s.now+until+s.victimStop()+boundSlack)
			s.marks[k] = o
		}
	}
	switch {
	case !starving:
		return
	case !marked: // it starved in the pass that starts it
		s.bound.Starved++
		s.bound.Held++
	case m.by < 0:
		s.bound.Unchecked++
	case s.now <= m.by:
		s.bound.Held++
	default:
		s.bound.Broken++
		s.bound.WorstExcess = max(s.bound.WorstExcess, Seconds(s.now-m.by))
	}
}
