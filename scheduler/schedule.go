package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Outcome of one waiting request in a pass.
const (
	outNoFit         uint8 = iota // cannot fit, not even by preempting
	outGranted                    // fits on free capacity: started
	outNominated                  // fits on free + releasing capacity: that capacity is reserved for it
	outPreempting                 // preempts victims; their capacity is reserved for it
	outStrictBlocked              // strict-fifo: a better request ahead could not start
	outPrevAttempt                // an older attempt of the same job still holds capacity
)

type cand struct {
	n          int32
	k1, k2, k3 int
}

// scratch is per-pass working state. The pass never mutates the Pool: it works on these copies,
// so the same code serves Schedule (which applies the plan) and View/Explain (which only read it).
type scratch struct {
	aG, aC, aR    []int // free capacity not yet granted or reserved in this pass
	rG, rC, rR    []int // releasing capacity not yet reserved in this pass
	exG, exC, exR []int // capacity of tentative victims (preemption search)
	cntA, cntAR   [][]int32
	abFail, cFail []uint32 // failure caches per shape (and shape*3+class), valid when == epoch
	epoch         uint32
	cands         []cand
	pick          []int32
	relTake       []int32 // per picked node: GPUs taken from releasing capacity
	relUsed       []bool  // per picked node: anything taken from releasing capacity
	order         []*runJob
	orderBuilt    bool
	victims       map[*runJob]bool
	vbuf          []*runJob
}

func newScratch() *scratch { return &scratch{victims: map[*runJob]bool{}} }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (sc *scratch) bumpEpoch() {
	sc.epoch++
	if sc.epoch == 0 {
		clear(sc.abFail)
		clear(sc.cFail)
		sc.epoch = 1
	}
}

func (sc *scratch) reset(p *Pool) {
	n := len(p.nodes)
	for _, s := range []*[]int{&sc.aG, &sc.aC, &sc.aR, &sc.rG, &sc.rC, &sc.rR, &sc.exG, &sc.exC, &sc.exR} {
		*s = grow(*s, n)
	}
	clear(sc.exG)
	clear(sc.exC)
	clear(sc.exR)
	if len(sc.cntA) != len(p.fams) {
		sc.cntA = make([][]int32, len(p.fams))
		sc.cntAR = make([][]int32, len(p.fams))
	}
	for f := range p.fams {
		sc.cntA[f] = grow(sc.cntA[f], p.fams[f].maxGPU+1)
		sc.cntAR[f] = grow(sc.cntAR[f], p.fams[f].maxGPU+1)
		clear(sc.cntA[f])
		clear(sc.cntAR[f])
	}
	for i := range p.nodes {
		nd := &p.nodes[i]
		if nd.lost { // a lost node's capacity serves no one: the pass sees none, free or releasing
			sc.aG[i], sc.aC[i], sc.aR[i] = 0, 0, 0
			sc.rG[i], sc.rC[i], sc.rR[i] = 0, 0, 0
			continue
		}
		sc.aG[i], sc.aC[i], sc.aR[i] = nd.freeGPU, nd.freeCPU, nd.freeRAM
		sc.rG[i], sc.rC[i], sc.rR[i] = nd.relGPU, nd.relCPU, nd.relRAM
		sc.cntA[nd.fam][nd.freeGPU]++
		sc.cntAR[nd.fam][nd.freeGPU+nd.relGPU]++
	}
	for f := range p.fams { // histogram -> "at least g"
		a, ar := sc.cntA[f], sc.cntAR[f]
		for g := len(a) - 2; g >= 0; g-- {
			a[g] += a[g+1]
			ar[g] += ar[g+1]
		}
	}
	if len(sc.abFail) < len(p.shapes) {
		sc.abFail = append(sc.abFail, make([]uint32, len(p.shapes)-len(sc.abFail))...)
		sc.cFail = append(sc.cFail, make([]uint32, 3*len(p.shapes)-len(sc.cFail))...)
	}
	sc.bumpEpoch()
	sc.orderBuilt = false
	clear(sc.victims)
}

func adjustCnt(c []int32, old, new int) {
	for g := new + 1; g <= old; g++ {
		c[g]--
	}
	for g := old + 1; g <= new; g++ {
		c[g]++
	}
}

// setGPU sets node n's in-pass free and releasing GPUs, keeping the per-family summaries.
func (sc *scratch) setGPU(p *Pool, n int32, a, r int) {
	f := p.nodes[n].fam
	adjustCnt(sc.cntA[f], sc.aG[n], a)
	adjustCnt(sc.cntAR[f], sc.aG[n]+sc.rG[n], a+r)
	sc.aG[n], sc.rG[n] = a, r
}

func cmpCand(a, b cand) int {
	switch {
	case a.k1 != b.k1:
		return a.k1 - b.k1
	case a.k2 != b.k2:
		return a.k2 - b.k2
	case a.k3 != b.k3:
		return a.k3 - b.k3
	}
	return int(a.n - b.n)
}

// pickNodes is the best-fit gang placement: each worker needs the whole demand on one node, all
// on distinct nodes that are not lost. Among feasible nodes it prefers the least capacity left
// over (GPUs, then capacity taken from releasing, then CPU, then config order). Result in
// sc.pick, sorted.
func (sc *scratch) pickNodes(p *Pool, sh *shape, withRel bool) bool {
	sc.cands = sc.cands[:0]
	for _, n := range p.fams[sh.fam].live {
		g, c, r := sc.aG[n], sc.aC[n], sc.aR[n]
		k2 := 0
		if withRel {
			g, c, r = g+sc.rG[n], c+sc.rC[n], r+sc.rR[n]
			k2 = max(0, sh.gpu-sc.aG[n])
		}
		if g < sh.gpu || c < sh.cpu || r < sh.ram {
			continue
		}
		sc.cands = append(sc.cands, cand{n: n, k1: g - sh.gpu, k2: k2, k3: c - sh.cpu})
	}
	if len(sc.cands) < sh.workers {
		return false
	}
	if sh.workers == 1 {
		best := 0
		for i := 1; i < len(sc.cands); i++ {
			if cmpCand(sc.cands[i], sc.cands[best]) < 0 {
				best = i
			}
		}
		sc.cands[0] = sc.cands[best]
	} else {
		slices.SortFunc(sc.cands, cmpCand)
	}
	sc.pick = sc.pick[:0]
	for _, c := range sc.cands[:sh.workers] {
		sc.pick = append(sc.pick, c.n)
	}
	slices.Sort(sc.pick)
	return true
}

// reserve takes the demand on every picked node, from free capacity first, then from releasing.
func (sc *scratch) reserve(p *Pool, sh *shape) {
	sc.relTake, sc.relUsed = sc.relTake[:0], sc.relUsed[:0]
	for _, n := range sc.pick {
		tg, tc, tr := min(sc.aG[n], sh.gpu), min(sc.aC[n], sh.cpu), min(sc.aR[n], sh.ram)
		sc.relTake = append(sc.relTake, int32(sh.gpu-tg))
		sc.relUsed = append(sc.relUsed, tg < sh.gpu || tc < sh.cpu || tr < sh.ram)
		sc.aC[n], sc.rC[n] = sc.aC[n]-tc, sc.rC[n]-(sh.cpu-tc)
		sc.aR[n], sc.rR[n] = sc.aR[n]-tr, sc.rR[n]-(sh.ram-tr)
		sc.setGPU(p, n, sc.aG[n]-tg, sc.rG[n]-(sh.gpu-tg))
	}
}

func (sc *scratch) fitsEx(n int32, sh *shape) bool {
	return sc.aG[n]+sc.rG[n]+sc.exG[n] >= sh.gpu &&
		sc.aC[n]+sc.rC[n]+sc.exC[n] >= sh.cpu &&
		sc.aR[n]+sc.rR[n]+sc.exR[n] >= sh.ram
}

// addEx adds (sign=+1) or removes (-1) a tentative victim's capacity and returns the change in the
// number of nodes that can hold one worker of sh. Workers on lost nodes add nothing: that capacity
// serves no one even once they stop.
func (sc *scratch) addEx(p *Pool, rj *runJob, sh *shape, sign int) int {
	d, delta := &rj.r.Demand, 0
	for w, n := range rj.nodes {
		if rj.released[w] || p.nodes[n].lost {
			continue
		}
		before := sc.fitsEx(n, sh)
		sc.exG[n] += sign * d.GPUs
		sc.exC[n] += sign * d.CPU
		sc.exR[n] += sign * d.RAMGB
		after := sc.fitsEx(n, sh)
		if after && !before {
			delta++
		} else if before && !after {
			delta--
		}
	}
	return delta
}

// victimOrder sorts preemption candidates: lowest class first, then most recently started first,
// then by job id.
func victimOrder(a, b *runJob) int {
	if a.r.Class != b.r.Class {
		return int(a.r.Class) - int(b.r.Class)
	}
	if c := b.startedAt.Compare(a.startedAt); c != 0 {
		return c
	}
	return strings.Compare(a.r.Job, b.r.Job)
}

// chooseVictims finds the running jobs to preempt so that sh fits on free + releasing + victims'
// capacity, or nil. Candidates are running (not releasing) jobs of a strictly lower class than
// class, not notebooks, running for at least MinRuntimeBeforePreemption, in victimOrder. They are
// added greedily until the request fits; then, in reverse order of addition, every victim whose
// removal still leaves the request fitting is dropped.
func (p *Pool) chooseVictims(now time.Time, sc *scratch, sh *shape, class Class) []*runJob {
	if !sc.orderBuilt {
		sc.order = sc.order[:0]
		for _, rj := range p.running {
			if !rj.releasing && rj.r.Kind != KindNotebook && rj.r.Class < High {
				sc.order = append(sc.order, rj)
			}
		}
		slices.SortFunc(sc.order, victimOrder)
		sc.orderBuilt = true
	}
	minRun := p.policy.MinRuntimeBeforePreemption
	cnt := 0
	for _, n := range p.fams[sh.fam].live {
		if sc.fitsEx(n, sh) {
			cnt++
		}
	}
	vs := sc.vbuf[:0]
	for _, rj := range sc.order {
		if rj.r.Class >= class {
			break
		}
		if rj.fam != sh.fam || sc.victims[rj] || (minRun > 0 && now.Sub(rj.startedAt) < minRun) {
			continue
		}
		cnt += sc.addEx(p, rj, sh, +1)
		vs = append(vs, rj)
		if cnt >= sh.workers {
			break
		}
	}
	var out []*runJob
	if cnt >= sh.workers {
		for i := len(vs) - 1; i >= 0; i-- { // minimisation pass
			if d := sc.addEx(p, vs[i], sh, -1); cnt+d >= sh.workers {
				cnt += d
				vs[i] = nil
			} else {
				sc.addEx(p, vs[i], sh, +1)
			}
		}
		for _, v := range vs {
			if v != nil {
				out = append(out, v)
			}
		}
	}
	for _, v := range vs {
		if v != nil {
			sc.addEx(p, v, sh, -1)
		}
	}
	sc.vbuf = vs[:0]
	return out
}

type planGrant struct {
	w     *waitReq
	nodes []int32
}

type planPreempt struct {
	victim *runJob
	by     *waitReq
}

type planOut struct {
	kind    uint8
	blocker int32
	nodes   []int32
	relTake []int32
	relUsed []bool
	victims []*runJob
}

type plan struct {
	grants    []planGrant
	preempts  []planPreempt
	outs      []planOut // explain mode only: one per waiting request
	consumers [][]int32 // explain mode only: per family, waiting indices that took capacity
}

// plan runs the scheduling rules over the waiting requests in launch order without changing the
// pool. With explain it records the outcome of every request.
func (p *Pool) plan(now time.Time, sc *scratch, explain bool) *plan {
	sc.reset(p)
	pl := &plan{}
	if explain {
		pl.outs = make([]planOut, len(p.waiting))
		pl.consumers = make([][]int32, len(p.fams))
	}
	blocker := -1
	for i, h := range p.hot {
		if blocker >= 0 {
			if !explain {
				break
			}
			pl.outs[i] = planOut{kind: outStrictBlocked, blocker: int32(blocker)}
			continue
		}
		kind, victims := p.decide(now, sc, pl, i, h)
		if explain {
			w := p.waiting[i]
			o := planOut{kind: kind, victims: victims}
			if kind == outGranted || kind == outNominated || kind == outPreempting {
				o.nodes = slices.Clone(sc.pick)
				o.relTake = slices.Clone(sc.relTake)
				o.relUsed = slices.Clone(sc.relUsed)
				f := p.shapes[w.shape].fam
				pl.consumers[f] = append(pl.consumers[f], int32(i))
			}
			pl.outs[i] = o
		}
		if kind != outGranted && p.strict() {
			blocker = i
		}
	}
	return pl
}

// decide applies the rules to one request: (a) grant on free capacity not reserved for a better
// request; (b) else reserve free + releasing capacity and wait; (c) else preempt.
func (p *Pool) decide(now time.Time, sc *scratch, pl *plan, i int, h hotEntry) (uint8, []*runJob) {
	if h.prev {
		return outPrevAttempt, nil
	}
	sh := &p.shapes[h.shape]
	if sc.abFail[h.shape] != sc.epoch {
		g := min(sh.gpu, len(sc.cntA[sh.fam])-1)
		if int(sc.cntA[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, false) {
			sc.reserve(p, sh)
			pl.grants = append(pl.grants, planGrant{w: p.waiting[i], nodes: slices.Clone(sc.pick)})
			return outGranted, nil
		}
		if int(sc.cntAR[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, true) {
			sc.reserve(p, sh)
			return outNominated, nil
		}
		sc.abFail[h.shape] = sc.epoch
	}
	ck := 3*int(h.shape) + int(h.class)
	if h.class == Low || sc.cFail[ck] == sc.epoch {
		return outNoFit, nil
	}
	victims := p.chooseVictims(now, sc, sh, h.class)
	if victims == nil {
		sc.cFail[ck] = sc.epoch
		return outNoFit, nil
	}
	for _, v := range victims {
		sc.victims[v] = true
		d := &v.r.Demand
		for wk, n := range v.nodes {
			if !v.released[wk] && !p.nodes[n].lost {
				sc.rC[n] += d.CPU
				sc.rR[n] += d.RAMGB
				sc.setGPU(p, n, sc.aG[n], sc.rG[n]+d.GPUs)
			}
		}
		pl.preempts = append(pl.preempts, planPreempt{victim: v, by: p.waiting[i]})
	}
	sc.bumpEpoch() // capacity moved from running to releasing: cached failures are stale
	if !sc.pickNodes(p, sh, true) {
		panic("scheduler: preemption chose victims that do not make room") // unreachable
	}
	sc.reserve(p, sh)
	return outPreempting, victims
}

// Schedule makes all decisions possible now. Grants are applied to the state (the job is running
// from now on); preempted victims become "releasing" (their capacity is not free until Release).
func (p *Pool) Schedule(now time.Time) Decisions {
	now = normTime(now)
	p.lastNow = now
	pl := p.plan(now, p.sc, false)
	var d Decisions
	for _, g := range pl.grants {
		w := g.w
		dm := &w.r.Demand
		rj := &runJob{r: w.r, fam: p.shapes[w.shape].fam, startedAt: now, nodes: g.nodes,
			gpus: make([]uint64, len(g.nodes)), released: make([]bool, len(g.nodes))}
		for i, n := range g.nodes {
			nd := &p.nodes[n]
			m := lowestFree(nd.used, nd.GPUs, dm.GPUs)
			nd.used |= m
			nd.freeGPU -= dm.GPUs
			nd.freeCPU -= dm.CPU
			nd.freeRAM -= dm.RAMGB
			rj.gpus[i] = m
		}
		p.running[w.r.Job] = rj
		delete(p.waitIdx, w.r.Job)
		d.Grants = append(d.Grants, Grant{Job: w.r.Job, Attempt: w.r.Attempt, Placement: p.placement(rj.nodes, rj.gpus)})
	}
	if len(pl.grants) > 0 {
		k := 0
		for i, w := range p.waiting {
			if p.waitIdx[w.r.Job] == w {
				p.waiting[k], p.hot[k] = w, p.hot[i]
				k++
			}
		}
		clear(p.waiting[k:])
		p.waiting, p.hot = p.waiting[:k], p.hot[:k]
	}
	for _, pp := range pl.preempts {
		v, by := pp.victim, pp.by
		p.beginRelease(v)
		v.preemptedBy = &Preemptor{Job: by.r.Job, Class: by.r.Class, Kind: by.r.Kind}
		d.Preemptions = append(d.Preemptions, Preemption{
			Victim: v.r.Job, VictimAttempt: v.r.Attempt, Preemptor: *v.preemptedBy,
			Reason: fmt.Sprintf("preempted to make room for %s-priority %s %s, which needs %s; %s-priority jobs give way to higher classes, the most recently started first",
				by.r.Class, by.r.Kind, by.r.Job, needText(by.r.Demand, by.r.Workers), v.r.Class),
		})
	}
	return d
}
