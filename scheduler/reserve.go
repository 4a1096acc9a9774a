package scheduler

import (
	"cmp"
	"slices"
	"sort"
	"time"
)

// resvCand is a node a long-waiting request could reserve, with what it would still lack there
// once the free and releasing capacity it may use and every job it may preempt are counted.
type resvCand struct {
	n    int32
	lack resources // never negative
	prev bool      // reserved for it by the last pass
}

// byLack orders reservation candidates by what the request still lacks there, then the nodes it
// reserved in the last pass, then config order.
func byLack(a, b resvCand) int {
	return cmp.Or(a.lack.compare(b.lack), byPrev(a, b), cmp.Compare(a.n, b.n))
}

// byPrevFirst orders first the nodes a starving request keeps (head.pinned; the nodes it
// reserved in the last pass until it keeps some): its bound is for those, and a node where it
// lacks less now need not free sooner.
func byPrevFirst(a, b resvCand) int {
	return cmp.Or(byPrev(a, b), a.lack.compare(b.lack), cmp.Compare(a.n, b.n))
}

func byPrev(a, b resvCand) int {
	switch {
	case a.prev == b.prev:
		return 0
	case a.prev:
		return -1
	}
	return 1
}

// maybeReserve is rule (e): a medium or low request that can neither start, wait for releasing
// capacity nor preempt, and has been the first waiting request of its class for
// Policy.ReserveAfter, reserves
// the nodes where it will fit soonest: those where it lacks the fewest GPUs, then CPU, then RAM
// once it counts the free and releasing capacity in its sight and the jobs it may preempt; then
// the nodes it reserved in the last pass; then config order. A starving request takes the nodes
// it reserved when it starved first (head.pinned), then the rest in that order. On each it holds the free and
// releasing capacity up to its demand, and no later request of the pass may preempt there. It
// returns outReserving, or outNoFit when it does not reserve.
func (p *Pool) maybeReserve(now time.Time, sc *scratch, pl *plan, w *waitReq, sh *shape, first bool) outcome {
	ra := p.policy.ReserveAfter
	if ra <= 0 || !first || p.strict() {
		return outNoFit // (cheap checks first: most requests of a long queue come here)
	}
	hd := &p.heads[w.r.Class]
	if (w.r.Class == High && !p.policy.Backfill) || hd.job != w.r.Job || now.Sub(hd.since) < ra {
		return outNoFit
	}
	prev := hd.nodes
	if sc.starving && len(hd.pinned) > 0 {
		prev = hd.pinned
	}
	var cands []resvCand
	for _, n := range p.placeable(sh) { // only nodes it may use
		nd := &p.nodes[n]
		if sc.reserved[n] || !sh.need.lessEqual(capacityOf(&nd.Node)) {
			continue
		}
		l := sc.lack(n, sh)
		if w.r.Class > Low {
			for _, nj := range nd.jobs {
				if p.preemptible(nj.rj, w.r.Class, now, sc) {
					l = l.sub(demandOf(&nj.rj.r.Demand))
				}
			}
		}
		cands = append(cands, resvCand{n: n, lack: l.nonNegative(), prev: slices.Contains(prev, n)})
	}
	if len(cands) < sh.workers {
		return outNoFit
	}
	if sc.starving {
		slices.SortFunc(cands, byPrevFirst)
	} else {
		slices.SortFunc(cands, byLack)
	}
	nodes := make([]int32, sh.workers)
	for k := range nodes {
		nodes[k] = cands[k].n
	}
	if sh.required {
		// The first k of the domain of its required level whose k-th comes earliest.
		order := make([]nodeCandidate, len(cands))
		for i, c := range cands {
			order[i].n = c.n
		}
		chosen := p.topo.inOneDomain(order, sh.workers, sh.level, true, &sc.domainCounts, &sc.gangPick)
		if chosen == nil {
			return outNoFit
		}
		for k, c := range chosen {
			nodes[k] = c.n
		}
	}
	slices.Sort(nodes)
	if p.policy.Backfill {
		starving := Class(-1)
		if sc.starving {
			starving = w.r.Class
		}
		start, spare, ok := p.resvStart(now, sc, pl, w.r.Job, w.r.Class, sh, nodes, starving)
		if !ok && sc.starving {
			spare, ok = sc.spareInSight(sh, nodes), true // (its start unknown: it binds all, lends nothing)
		}
		if ok {
			sc.resvs = append(sc.resvs, resv{job: w.r.Job, class: w.r.Class, start: start, nodes: nodes, spare: spare})
			sc.applyResv(p, &sc.resvs[len(sc.resvs)-1])
			pl.reserves = append(pl.reserves, planReserve{w: w, nodes: nodes})
			return outReserving
		}
		if w.r.Class == High {
			return outNoFit // a high request reserves only with a known start
		}
	}
	for _, n := range nodes {
		sc.reserved[n] = true
		fromFree := sc.free[n].atMost(sh.need)
		fromRel := sc.rel[n].atMost(sh.need.sub(fromFree))
		sc.setCapacity(p, n, sc.free[n].sub(fromFree), sc.rel[n].sub(fromRel))
	}
	pl.reserves = append(pl.reserves, planReserve{w: w, nodes: nodes})
	return outReserving
}

// starvedHead reports whether h, the first waiting request of class c, starves at now.
func (p *Pool) starvedHead(now time.Time, h *head, c Class) bool {
	sa := p.policy.StarvationAfter
	return sa > 0 && c > Low && h.job != "" && now.Sub(h.since) >= sa
}

// firstOf is the index of the first waiting request of class c, or -1.
func (p *Pool) firstOf(c Class) int {
	i := sort.Search(len(p.waiting), func(i int) bool { return p.waiting[i].r.Class <= c })
	if i == len(p.waiting) || p.waiting[i].r.Class != c {
		return -1
	}
	return i
}

// updateHeads records, after a pass, the first waiting request of each class, since when it has
// been first, and the nodes it reserved in the pass.
func (p *Pool) updateHeads(now time.Time, pl *plan) {
	for c := Low; c <= High; c++ {
		i := p.firstOf(c)
		if i < 0 {
			p.heads[c] = head{}
			continue
		}
		job := p.waiting[i].r.Job
		if p.heads[c].job != job {
			p.heads[c] = head{job: job, since: now}
		} else if pl.cut && (c < pl.cutClass || c == pl.cutClass && pl.cutAtHead) {
			continue // the pass stopped before it: it keeps what it reserved (see ScheduleAtMost)
		}
		old := p.heads[c].nodes
		p.heads[c].nodes = nil
		for _, r := range pl.reserves {
			if r.w.r.Job == job {
				p.heads[c].nodes = r.nodes
			}
		}
		if len(old) > 0 && !slices.Equal(old, p.heads[c].nodes) {
			p.movedAt = now
		}
		switch h := &p.heads[c]; {
		case !p.starvedHead(now, h, c):
			h.pinned = nil // (StarvationAfter may have been raised or switched off)
		case h.pinned == nil:
			h.pinned = h.nodes
		}
	}
}

// nextWake is the earliest time after now at which a pass may decide something new without any
// event: the first request of a class reaches ReserveAfter, or a running job that a waiting
// request could preempt reaches MinRuntimeBeforePreemption. Zero if none.
func (p *Pool) nextWake(now time.Time) time.Time {
	var wake time.Time
	upd := func(t time.Time) {
		if t.After(now) && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	if t := p.backfillWake(now); !t.IsZero() {
		upd(t)
	}
	if p.policy.Backfill && (p.lastGrant.Equal(now) || p.movedAt.Equal(now)) && len(p.waiting) > 0 && p.waiting[0].r.Class > Low {
		// A job is never preempted at the instant it started (see Backfill), and the requests
		// walked before a head that moved its reservation saw its old nodes reserved: from the
		// next instant on they may preempt there, with no event to say so.
		upd(now.Add(time.Nanosecond))
	}
	if ra := p.policy.ReserveAfter; ra > 0 && !p.strict() {
		for c := range p.heads {
			if h := &p.heads[c]; h.job != "" && h.nodes == nil {
				upd(h.since.Add(ra))
			}
		}
	}
	if sa := p.policy.StarvationAfter; sa > 0 {
		for c := Medium; c <= High; c++ {
			if h := &p.heads[c]; h.job != "" {
				upd(h.since.Add(sa))
			}
		}
	}
	if p.fs.on && len(p.waiting) > 1 {
		upd(p.fs.next)
	}
	if t := p.defragmentWake(now); !t.IsZero() {
		upd(t)
	}
	if m := p.policy.MinRuntimeBeforePreemption; m > 0 && len(p.waiting) > 0 && p.waiting[0].r.Class > Low {
		top := p.waiting[0].r.Class
		// The earliest time is the same in any map order.
		//workflowcheck:ignore
		for _, rj := range p.running {
			if !rj.releasing && rj.r.Kind != KindNotebook && rj.r.Class < top {
				upd(rj.startedAt.Add(m))
			}
		}
	}
	return wake
}
