package scheduler

import (
	"cmp"
	"slices"
	"time"
)

// resv is a reservation with a known start (Policy.Backfill) in a pass: its owner, its nodes,
// when the owner is expected to fit on all of them, and what the pass hides on each from the
// requests that do not end by then.
type resv struct {
	job   string
	class Class
	start time.Time
	nodes []int32
	// Per node (as nodes): what a request that does not end by start may still take there (the
	// capacity the node will have at start beyond the owner's demand), and what is hidden of its
	// free and releasing capacity so that no such request takes more.
	spare     []resources
	hidFree   []resources
	hidRel    []resources
	active    bool
	unhidden  bool // the walker sees it all (it ends by start, or it is the owner)
	ownerWalk bool // the owner is the walker
	lent      bool // the walker sees it all because it ends by start: what it takes there is a loan
	// suspended: the walker starves, and rv, of a lower class, holds nothing from it; rv holds
	// again after its walk unless the walker took or reserved capacity on its nodes.
	suspended bool
}

// resvEnd is a job's worker on a node, with when the pass expects it to end.
type resvEnd struct {
	at  time.Time // zero: never (no RunLimit)
	amt resources
}

// jobEnd is when rj is expected to end: when its attempt has run for its RunLimit; if it has
// run longer (it overran), now for an enforced limit or a loan (a reservation's owner takes it
// back: see Loans), or one more RunLimit from now for an estimate (Request.RunEstimated: nobody
// stops it, and "at once" is what it already failed to do); never (zero) without a RunLimit.
//
// A job that reported its progress (Pool.Progressed) is expected to end when its progress says,
// or by its limit (not an estimate) if that is sooner; never before now.
func jobEnd(rj *runJob, now time.Time) time.Time {
	end := limitEnd(rj, now)
	if pe, ok := progressEnd(rj); ok && (end.IsZero() || rj.r.RunEstimated || pe.Before(end)) {
		end = maxTime(now, pe)
	}
	return end
}

// limitEnd is jobEnd by the RunLimit alone.
func limitEnd(rj *runJob, now time.Time) time.Time {
	if rj.r.RunLimit <= 0 {
		return time.Time{}
	}
	end := rj.startedAt.Add(rj.r.RunLimit)
	if !end.After(now) && rj.r.RunEstimated && !rj.onLoan {
		return now.Add(rj.r.RunLimit)
	}
	return maxTime(now, end)
}

// outranItsEstimate reports whether rj has run past a RunLimit that is only an estimate
// (Request.RunEstimated), not on loan, with no progress report to say when it ends: for the
// start of a reservation whose owner is not starving it ends at an unknown time. "One more
// estimate from now" is what the simulator's replays found to move a start later again and
// again while the nodes stayed reserved, keeping their capacity from other jobs for a start
// that never came. A starving owner's reservation binds every class whatever its start, so
// there the provisional start only lets loans use the nodes meanwhile.
func outranItsEstimate(rj *runJob, now time.Time) bool {
	if !rj.r.RunEstimated || rj.onLoan || !overran(rj, now) {
		return false
	}
	_, reported := progressEnd(rj)
	return !reported
}

// overrunTakeable reports whether the owner of a reservation, of class c, may take rj back once
// rj has overrun on its nodes (overrunVictim): rj is of a strictly lower class, not a notebook,
// and not at MaxPreemptions. Such a job ends when the owner preempts it, so its outrun estimate
// leaves the start known.
func (p *Pool) overrunTakeable(rj *runJob, c Class) bool {
	if rj.r.Kind == KindNotebook || rj.r.Class >= c {
		return false
	}
	m := p.policy.maxPreemptions()
	return m < 0 || rj.preemptions < m
}

// overran reports whether rj has run for its RunLimit or longer.
func overran(rj *runJob, now time.Time) bool {
	return rj.r.RunLimit > 0 && !rj.releasing && now.Sub(rj.startedAt) >= rj.r.RunLimit
}

// resvStart is when a worker of sh, of request owner, is expected to fit on each of nodes, from
// the capacity in its sight now (free and releasing, nominated to nobody else; and what is
// nominated to it, as when a loan yields to it), the jobs granted earlier in the pass pl (nil:
// none) as if they ran already and the running jobs there ending by
// their RunLimits (jobEnd); ok is false if that is never or unknown (a job it needs gone has no
// RunLimit, or has outrun an estimate and may not be taken back by the owner, of class class).
// For a starving owner (starving: its class; else -1), a job it may preempt whatever the loss
// and run-time limits say (starvingVictim) counts as gone now. spare is, per node, what the
// node will have at that start beyond the worker's demand.
func (p *Pool) resvStart(now time.Time, sc *scratch, pl *plan, owner string, class Class, sh *shape, nodes []int32, starving Class) (start time.Time, spare []resources, ok bool) {
	need := sh.need
	start = now
	haves := make([]resources, len(nodes))
	ends := make([][]resvEnd, len(nodes))
	for k, n := range nodes {
		have := sc.free[n].add(sc.rel[n]).add(sc.nominatedTo(owner, n))
		var es []resvEnd
		for _, nj := range p.nodes[n].jobs {
			rj := nj.rj
			if rj.releasing || rj.released[nj.w] || sc.victims[rj] {
				continue // (its capacity is releasing: in sight, or nominated to another)
			}
			end := jobEnd(rj, now)
			if starving < 0 && outranItsEstimate(rj, now) && !p.overrunTakeable(rj, class) {
				end = time.Time{} // (no promise rests on an estimate that has proved wrong)
			}
			if starving >= 0 && p.starvingVictim(rj, starving) {
				end = now
			}
			es = append(es, resvEnd{at: end, amt: demandOf(&rj.r.Demand)})
		}
		if pl != nil {
			es = pl.grantEnds(now, n, es)
		}
		slices.SortStableFunc(es, func(a, b resvEnd) int {
			switch {
			case a.at.IsZero() || b.at.IsZero():
				return cmp.Compare(boolInt(a.at.IsZero()), boolInt(b.at.IsZero()))
			}
			return a.at.Compare(b.at)
		})
		t, cur := now, have
		for _, e := range es {
			if need.lessEqual(cur) {
				break
			}
			if e.at.IsZero() {
				return time.Time{}, nil, false
			}
			t = e.at
			cur = cur.add(e.amt)
		}
		if !need.lessEqual(cur) {
			return time.Time{}, nil, false
		}
		start = maxTime(start, t)
		haves[k], ends[k] = have, es
	}
	spare = make([]resources, len(nodes))
	for k := range nodes {
		s := haves[k]
		for _, e := range ends[k] {
			if e.at.IsZero() || e.at.After(start) {
				break
			}
			s = s.add(e.amt)
		}
		spare[k] = s.sub(need)
	}
	return start, spare, true
}

// spareInSight is, per node, what is in sight there beyond a worker of sh: the spare of a
// reservation whose start is unknown (no request ends by it).
func (sc *scratch) spareInSight(sh *shape, nodes []int32) []resources {
	spare := make([]resources, len(nodes))
	for k, n := range nodes {
		spare[k] = sc.free[n].add(sc.rel[n]).sub(sh.need).nonNegative()
	}
	return spare
}

// grantEnds appends to es the workers granted on node n earlier in the pass, with when their
// RunLimits end them: the next pass counts them as running jobs, and must find the same start.
func (pl *plan) grantEnds(now time.Time, n int32, es []resvEnd) []resvEnd {
	for _, g := range pl.grants {
		if !slices.Contains(pl.grantNodes[g.nodesFrom:g.nodesTo], n) {
			continue
		}
		var end time.Time
		if rl := g.w.r.RunLimit; rl > 0 {
			end = now.Add(rl)
		}
		es = append(es, resvEnd{at: end, amt: demandOf(&g.w.r.Demand)})
	}
	return es
}

// nominatedTo is the capacity on node n nominated to request job in this pass.
func (sc *scratch) nominatedTo(job string, n int32) resources {
	var r resources
	for _, k := range sc.byJob[job] {
		if x := &sc.nominations[k]; x.node == n {
			r = r.add(x.hidden)
		}
	}
	return r
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// applyResv makes rv bind the rest of the pass: its nodes are reserved (nobody but its owner
// preempts there) and on each the capacity beyond rv.spare is hidden (releasing capacity
// first), so that a request that does not end by rv.start takes no more than the spare.
func (sc *scratch) applyResv(p *Pool, rv *resv) {
	rv.hidFree, rv.hidRel = make([]resources, len(rv.nodes)), make([]resources, len(rv.nodes))
	rv.active = true
	for _, n := range rv.nodes {
		sc.reserved[n] = true
	}
	sc.hideResv(p, rv)
}

// hideResv hides on each node of rv what its spare leaves to requests that do not end by its
// start: free plus releasing capacity beyond the spare, taken from releasing capacity first.
func (sc *scratch) hideResv(p *Pool, rv *resv) {
	for k, n := range rv.nodes {
		free, rel := sc.free[n], sc.rel[n]
		hidden := free.add(rel).sub(rv.spare[k]).nonNegative()
		rv.hidRel[k] = rel.atMost(hidden)
		rv.hidFree[k] = hidden.sub(rv.hidRel[k])
		sc.setCapacity(p, n, free.sub(rv.hidFree[k]), rel.sub(rv.hidRel[k]))
	}
	rv.unhidden = false
}

// unhideResv gives rv's hidden capacity back to the walker. The spare of a node on which
// something is hidden is what was in sight (nothing hidden: the spare is at least what there
// is, and stays so), so that rehiding after the walker keeps what the others may take.
func (sc *scratch) unhideResv(p *Pool, rv *resv) {
	for k, n := range rv.nodes {
		free, rel := sc.free[n], sc.rel[n]
		inSight, hidden, s := free.add(rel), rv.hidFree[k].add(rv.hidRel[k]), rv.spare[k]
		rv.spare[k] = resources{gpu: respare(s.gpu, inSight.gpu, hidden.gpu), cpu: respare(s.cpu, inSight.cpu, hidden.cpu), ram: respare(s.ram, inSight.ram, hidden.ram)}
		sc.setCapacity(p, n, free.add(rv.hidFree[k]), rel.add(rv.hidRel[k]))
		rv.hidFree[k], rv.hidRel[k] = resources{}, resources{}
	}
	rv.unhidden = true
}

// respare is one resource's spare after the walker (see unhideResv): what is in sight if
// some of it was hidden, else the larger of the spare and what is in sight.
func respare(spare, inSight, hidden int) int {
	if hidden > 0 {
		return inSight
	}
	return max(spare, inSight)
}

// startResvs is the start of a pass with Policy.Backfill: the reservations the last pass made
// for the first waiting request of each class (Pool.heads), when that request is still first
// and their start is known, bind the whole pass, from its first request on (see Backfill).
func (p *Pool) startResvs(now time.Time, sc *scratch) {
	sc.resvs = sc.resvs[:0]
	if !p.policy.Backfill || p.policy.ReserveAfter <= 0 || p.strict() {
		return
	}
	for c := High; c >= Low; c-- {
		h := &p.heads[c]
		if h.job == "" || len(h.nodes) == 0 {
			continue
		}
		w := p.waitIdx[h.job]
		if w == nil || w.r.Class != c {
			continue
		}
		sh := &p.shapes[w.shape]
		if sh.least >= 0 {
			sh = &p.shapes[sh.least]
		}
		if len(h.nodes) != sh.workers || slices.ContainsFunc(h.nodes, func(n int32) bool {
			return sc.reserved[n] || p.nodes[n].lost || !sh.may(n) || p.nodes[n].fam != sh.fam
		}) {
			continue
		}
		starving := Class(-1)
		if i := p.firstOf(c); i >= 0 && p.waiting[i] == w && p.starving(now, w) {
			starving = c
		}
		start, spare, ok := p.resvStart(now, sc, nil, h.job, c, sh, h.nodes, starving)
		if !ok && starving < 0 {
			continue // an unknown start binds nobody ahead of its owner: it drains as without backfill
		}
		if !ok {
			spare = sc.spareInSight(sh, h.nodes) // a starving owner's binds all, and lends nothing
		}
		sc.resvs = append(sc.resvs, resv{job: h.job, class: c, start: start, nodes: h.nodes, spare: spare})
		sc.applyResv(p, &sc.resvs[len(sc.resvs)-1])
	}
}

// endsBy reports whether a request with run limit rl, started now, ends by t.
func endsBy(now time.Time, rl time.Duration, t time.Time) bool {
	return rl > 0 && !now.Add(rl).After(t)
}

// mayBackfill reports whether w sees more than the others in this pass: it owns an active
// reservation, or it ends by the start of one.
func (sc *scratch) mayBackfill(p *Pool, now time.Time, w *waitReq) bool {
	for k := range sc.resvs {
		if rv := &sc.resvs[k]; rv.active && (rv.job == w.r.Job || p.mayBorrow(now, w, rv)) {
			return true
		}
	}
	return false
}

// resvWalk lets the walker w see the reservations it may use: all the capacity of those that
// start after it ends, and of its own (which it gives up: it is free to start, preempt or
// reserve anew). It reports whether it sees more than the others.
func (sc *scratch) resvWalk(p *Pool, now time.Time, w *waitReq) bool {
	extra := false
	sc.ownerNodes = sc.ownerNodes[:0]
	for k := range sc.resvs {
		rv := &sc.resvs[k]
		if !rv.active {
			continue
		}
		switch {
		case rv.job == w.r.Job:
			sc.dropResv(p, rv)
			rv.ownerWalk = true
			sc.ownerNodes = append(sc.ownerNodes, rv.nodes...)
			extra = true
		case sc.starving && rv.class < w.r.Class:
			// A starving walker takes no account of a lower class's reservation (resumeResvs).
			sc.dropResv(p, rv)
			rv.suspended, extra = true, true
		case p.mayBorrow(now, w, rv):
			sc.unhideResv(p, rv)
			rv.lent, extra = true, true
		}
	}
	return extra
}

// dropResv ends rv for the rest of the pass: its capacity is in sight again and its nodes are
// no longer reserved.
func (sc *scratch) dropResv(p *Pool, rv *resv) {
	sc.unhideResv(p, rv)
	rv.active = false
	for _, n := range rv.nodes {
		sc.reserved[n] = false
	}
}

// mayBorrow reports whether w may start on rv's capacity on loan: started now, its RunLimit ends
// it by rv's start, and it can be made to yield there if it runs longer: it is not a notebook
// (never preempted), and it is not at MaxPreemptions (a yield counts as a preemption, so that a
// job yields at most so often, then waits for capacity of its own).
func (p *Pool) mayBorrow(now time.Time, w *waitReq, rv *resv) bool {
	if !endsBy(now, w.r.RunLimit, rv.start) || w.r.Kind == KindNotebook {
		return false
	}
	m := p.policy.maxPreemptions()
	return m < 0 || w.r.Preemptions < m
}

// borrows reports whether the walker, granted on nodes, took capacity of a reservation lent to
// it (mayBorrow): it starts on loan.
func (sc *scratch) borrows(nodes []int32) bool {
	for k := range sc.resvs {
		if rv := &sc.resvs[k]; rv.lent && overlapsNodes(nodes, rv.nodes) {
			return true
		}
	}
	return false
}

// keepOwnResv keeps the walker's reservation for the next pass when it preempts or holds
// capacity on the nodes it reserved, so that what is free there stays hidden from the others
// until its victims (a yielding loan, say) have stopped, as it was while it waited.
func (sc *scratch) keepOwnResv(pl *plan, w *waitReq) {
	for k := range sc.resvs {
		rv := &sc.resvs[k]
		if rv.ownerWalk && rv.job == w.r.Job && !slices.ContainsFunc(sc.pick, func(n int32) bool { return !slices.Contains(rv.nodes, n) }) {
			pl.reserves = append(pl.reserves, planReserve{w: w, nodes: rv.nodes})
			return
		}
	}
}

// loanDue reports whether rj, running, is on loan past its RunLimit on a node the walker had
// reserved: the walker may take it back whatever rj's class (see Loans).
func (sc *scratch) loanDue(rj *runJob, now time.Time) bool {
	return rj.onLoan && sc.overrunVictim(rj, now)
}

// resumeResvs, after a starving walker's walk, makes the lower classes' reservations it walked
// past hold again for the rest of the pass, except those on whose nodes it took capacity (kind,
// on nodes) or reserved: they are gone for the pass (their owners may reserve anew in their own
// walks). Were they gone whatever it did, the requests after it would start on a starving
// request's nodes, which nothing else may (see Starvation).
func (sc *scratch) resumeResvs(nodes []int32) {
	for k := range sc.resvs {
		rv := &sc.resvs[k]
		if !rv.suspended {
			continue
		}
		rv.suspended = false
		if overlapsNodes(rv.nodes, nodes) || slices.ContainsFunc(rv.nodes, func(n int32) bool { return sc.reserved[n] }) {
			continue
		}
		rv.active = true
		for _, n := range rv.nodes {
			sc.reserved[n] = true
		}
	}
}

// overlapsNodes reports whether a and b share a node.
func overlapsNodes(a, b []int32) bool {
	return slices.ContainsFunc(a, func(n int32) bool { return slices.Contains(b, n) })
}

// resvRehide hides again, after the walker, what the reservations it saw whole keep from the
// others.
func (sc *scratch) resvRehide(p *Pool) {
	for k := range sc.resvs {
		if rv := &sc.resvs[k]; rv.active && rv.unhidden {
			sc.hideResv(p, rv)
			rv.lent = false
		}
	}
	sc.ownerNodes = sc.ownerNodes[:0]
}

// overrunVictim reports whether rj may be preempted by the walker although MaxLossGPUHours or
// MinRuntimeBeforePreemption would protect it: with Policy.Backfill, it ran past its RunLimit on
// a node the walker had reserved (see Backfill).
func (sc *scratch) overrunVictim(rj *runJob, now time.Time) bool {
	if len(sc.ownerNodes) == 0 || !overran(rj, now) {
		return false
	}
	for _, n := range rj.nodes {
		if slices.Contains(sc.ownerNodes, n) {
			return true
		}
	}
	return false
}

// backfillWake is the earliest time after now at which a job on a reserved node reaches its
// RunLimit (its reservation's owner may then preempt it, see overrunVictim), or zero.
func (p *Pool) backfillWake(now time.Time) time.Time {
	var wake time.Time
	if !p.policy.Backfill {
		return wake
	}
	for c := range p.heads {
		for _, n := range p.heads[c].nodes {
			for _, nj := range p.nodes[n].jobs {
				if rj := nj.rj; rj.r.RunLimit > 0 && !rj.releasing {
					if t := rj.startedAt.Add(rj.r.RunLimit); t.After(now) && (wake.IsZero() || t.Before(wake)) {
						wake = t
					}
				}
			}
		}
	}
	return wake
}

// starvingVictim reports whether a starving request of class c may preempt rj, running, at some
// moment from now on: of a strictly lower class, not a notebook, preempted at most
// MaxPreemptions times so far (see Starvation in the package doc).
func (p *Pool) starvingVictim(rj *runJob, c Class) bool {
	if rj.releasing || rj.r.Kind == KindNotebook || rj.r.Class >= c {
		return false
	}
	m := p.policy.maxPreemptions()
	return m < 0 || rj.preemptions < m || rj.preemptions == m && !p.policy.StrictMaxPreemptions
}
