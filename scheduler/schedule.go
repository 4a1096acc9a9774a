package scheduler

import (
	"fmt"
	"slices"
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
	outReserving                  // cannot fit, but as the long-waiting first of its class it reserves nodes
)

// cand is a node a worker could be placed on, with its sort keys (see cmpCand).
type cand struct {
	n  int32
	k0 int8 // 0: capacity nominated to this request is there, 1: not
	k1 int  // GPUs left over
	k2 int  // GPUs taken from releasing capacity
	k3 int  // CPU cores left over
}

// nom is capacity nominated to a preemptor: one unreleased worker of a job preempted for it, or
// the free capacity such a worker left when it stopped (a hold), on a node that is not lost. It
// stays nominated until the preemptor is granted or withdrawn (see the package doc).
type nom struct {
	v          *runJob
	w          int // the victim's worker
	n          int32
	g, c, r    int  // the worker's demand
	hg, hc, hr int  // how much of it is hidden now (taken out of the pass's releasing capacity)
	ug, uc, ur int  // how much of it the nominee itself holds in this pass
	free       bool // a hold: the victim has stopped, the capacity is free
	hold       int  // a hold: its index in Pool.holds
	taken      bool // its nominee took it over from the preemptor
	class      Class
	by         string // the nominee: the preemptor, or a strictly better request that took it over
	seq        int64
}

// scratch is per-pass working state. The pass never mutates the Pool: it works on these copies,
// so the same code serves Schedule (which applies the plan) and View/Explain (which only read it).
type scratch struct {
	aG, aC, aR    []int // free capacity not yet granted or reserved in this pass
	rG, rC, rR    []int // visible releasing capacity not yet reserved in this pass
	exG, exC, exR []int // capacity of tentative victims (preemption search)
	cntA, cntAR   [][]int32
	// Nodes that answer, by family and free GPUs in this pass (doubly linked lists through
	// bNext/bPrev): a grant looks only at the nodes with the fewest free GPUs that fit it.
	bHead         [][]int32
	bNext, bPrev  []int32
	abFail, cFail []uint32 // failure caches per shape (and shape*3+class), valid when == epoch
	epoch         uint32
	cands         []cand
	pick          []int32
	relTake       []int32 // per picked node: GPUs taken from releasing capacity
	relUsed       []bool  // per picked node: anything taken from releasing capacity
	victims       map[*runJob]bool
	vbuf          []vcand

	noms     []nom              // in preemption order; hidden but from their nominee
	byJob    map[string][]int32 // nominee -> its nominations
	byNode   map[int32][]int32  // node -> its nominations
	own      []uint32           // per node: == ownStamp if the walker has a nomination there
	ownStamp uint32
	ownNoms  []int32 // the walker's nominations
	hasOwn   []bool  // per waiting request: capacity is nominated to it
	// relVisible: the family had releasing capacity nominated to nobody when the pass began (a
	// request without nominations sees no more than that; without any, holding free + releasing
	// capacity is the grant it already failed).
	relVisible []bool
	nextSeq    int64  // preemption sequence of the next victim chosen in this pass
	resv       []bool // per node: reserved in this pass by the first request of a class

	// victim search
	vcands []vcand
	costs  []nodeCost
	vflat  []vcand
	vseen  map[vref]bool
}

func newScratch() *scratch {
	return &scratch{victims: map[*runJob]bool{}, byJob: map[string][]int32{}, byNode: map[int32][]int32{}, vseen: map[vref]bool{}}
}

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
	sc.bNext, sc.bPrev = grow(sc.bNext, n), grow(sc.bPrev, n)
	if len(sc.bHead) != len(p.fams) {
		sc.bHead = make([][]int32, len(p.fams))
	}
	for f := range p.fams {
		sc.bHead[f] = grow(sc.bHead[f], p.fams[f].maxGPU+1)
		for g := range sc.bHead[f] {
			sc.bHead[f][g] = -1
		}
		for _, i := range p.fams[f].live {
			sc.link(int32(f), i, sc.aG[i])
		}
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
	clear(sc.victims)
	sc.own = grow(sc.own, n)
	sc.resv = grow(sc.resv, n)
	clear(sc.resv)

	// Nominations: every unreleased worker of a preempted job, and the free capacity held for the
	// nominee of a stopped one, on a node that answers. Only their nominee sees them.
	sc.noms = sc.noms[:0]
	clear(sc.byJob)
	clear(sc.byNode)
	for _, v := range p.victims {
		d := &v.r.Demand
		for w, n := range v.nodes {
			if v.released[w] || p.nodes[n].lost {
				continue
			}
			nb := v.nominee[w]
			sc.hide(p, sc.addNom(nom{v: v, w: w, n: n, g: d.GPUs, c: d.CPU, r: d.RAMGB, class: nb.Class, by: nb.Job, seq: v.preemptSeq,
				taken: nb.Job != v.preemptedBy.Job}))
		}
	}
	for i, h := range p.holds {
		if !p.nodes[h.n].lost {
			sc.hide(p, sc.addNom(nom{n: h.n, g: h.g, c: h.c, r: h.r, free: true, hold: i, class: h.class, by: h.by, seq: h.seq, taken: h.taken}))
		}
	}
	sc.relVisible = grow(sc.relVisible, len(p.fams))
	clear(sc.relVisible)
	for i := range p.nodes {
		if sc.rG[i] > 0 || sc.rC[i] > 0 || sc.rR[i] > 0 {
			sc.relVisible[p.nodes[i].fam] = true
		}
	}
	sc.hasOwn = grow(sc.hasOwn, len(p.waiting))
	clear(sc.hasOwn)
	for _, x := range sc.noms {
		if w := p.waitIdx[x.by]; w != nil {
			sc.hasOwn[p.waitPos(&w.r)] = true
		}
	}
	sc.nextSeq = p.preemptSeq + 1
}

func (sc *scratch) addNom(x nom) int32 {
	i := int32(len(sc.noms))
	sc.noms = append(sc.noms, x)
	sc.byJob[x.by] = append(sc.byJob[x.by], i)
	sc.byNode[x.n] = append(sc.byNode[x.n], i)
	return i
}

// hide takes nomination i's capacity out of the visible releasing capacity: what its preemptor
// does not hold itself in this pass, as much of it as is left (a strictly better request may
// have taken some of it over).
func (sc *scratch) hide(p *Pool, i int32) {
	x := &sc.noms[i]
	n := x.n
	if x.free {
		x.hg, x.hc, x.hr = min(x.g-x.ug, sc.aG[n]), min(x.c-x.uc, sc.aC[n]), min(x.r-x.ur, sc.aR[n])
		sc.aC[n] -= x.hc
		sc.aR[n] -= x.hr
		sc.setGPU(p, n, sc.aG[n]-x.hg, sc.rG[n])
		return
	}
	x.hg, x.hc, x.hr = min(x.g-x.ug, sc.rG[n]), min(x.c-x.uc, sc.rC[n]), min(x.r-x.ur, sc.rR[n])
	sc.rC[n] -= x.hc
	sc.rR[n] -= x.hr
	sc.setGPU(p, n, sc.aG[n], sc.rG[n]-x.hg)
}

// unhide gives nomination i's hidden capacity back to the visible releasing capacity.
func (sc *scratch) unhide(p *Pool, i int32) {
	x := &sc.noms[i]
	n := x.n
	if x.free {
		sc.aC[n] += x.hc
		sc.aR[n] += x.hr
		sc.setGPU(p, n, sc.aG[n]+x.hg, sc.rG[n])
	} else {
		sc.rC[n] += x.hc
		sc.rR[n] += x.hr
		sc.setGPU(p, n, sc.aG[n], sc.rG[n]+x.hg)
	}
	x.hg, x.hc, x.hr = 0, 0, 0
	x.ug, x.uc, x.ur = 0, 0, 0
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
	if a != sc.aG[n] && !p.nodes[n].lost {
		sc.unlink(f, n, sc.aG[n])
		sc.link(f, n, a)
	}
	sc.aG[n], sc.rG[n] = a, r
}

// link puts node n into family f's list of nodes with g free GPUs.
func (sc *scratch) link(f, n int32, g int) {
	h := &sc.bHead[f][g]
	sc.bPrev[n], sc.bNext[n] = -1, *h
	if *h >= 0 {
		sc.bPrev[*h] = n
	}
	*h = n
}

func (sc *scratch) unlink(f, n int32, g int) {
	if sc.bPrev[n] >= 0 {
		sc.bNext[sc.bPrev[n]] = sc.bNext[n]
	} else {
		sc.bHead[f][g] = sc.bNext[n]
	}
	if sc.bNext[n] >= 0 {
		sc.bPrev[sc.bNext[n]] = sc.bPrev[n]
	}
}

// grantOne is pickOne on free capacity for a request with no capacity nominated to it: the node
// with the fewest free GPUs that fits it, then the fewest free CPU cores, then config order.
// Only the nodes with exactly that many free GPUs are looked at.
func (sc *scratch) grantOne(p *Pool, sh *shape) bool {
	heads := sc.bHead[sh.fam]
	best := int32(-1)
	bk3 := 0
	for g := sh.gpu; g < len(heads) && best < 0; g++ {
		for n := heads[g]; n >= 0; n = sc.bNext[n] {
			if sc.aC[n] < sh.cpu || sc.aR[n] < sh.ram {
				continue
			}
			if k3 := sc.aC[n] - sh.cpu; best < 0 || k3 < bk3 || k3 == bk3 && n < best {
				best, bk3 = n, k3
			}
		}
	}
	if best < 0 {
		return false
	}
	sc.pick = append(sc.pick[:0], best)
	return true
}

// cmpCand orders candidate nodes: first the nodes where capacity is nominated to the request
// itself, then best fit: fewest GPUs left over, fewest taken from releasing capacity, fewest CPU
// cores left over, config order. For a request that will wait (releasing capacity counted) the
// left-over keys are 0: its choice must not change when others take capacity elsewhere, or a
// second pass would hold other nodes than the first.
func cmpCand(a, b cand) int {
	switch {
	case a.k0 != b.k0:
		return int(a.k0) - int(b.k0)
	case a.k1 != b.k1:
		return a.k1 - b.k1
	case a.k2 != b.k2:
		return a.k2 - b.k2
	case a.k3 != b.k3:
		return a.k3 - b.k3
	}
	return int(a.n - b.n)
}

// pickNodes is the gang placement: each worker needs the whole demand on one node, all on
// distinct nodes that are not lost, in cmpCand order. Result in sc.pick, sorted.
func (sc *scratch) pickNodes(p *Pool, sh *shape, withRel bool) bool {
	if sh.workers == 1 {
		if !withRel && len(sc.ownNoms) == 0 {
			return sc.grantOne(p, sh)
		}
		return sc.pickOne(p, sh, withRel)
	}
	sc.cands = sc.cands[:0]
	for _, n := range p.fams[sh.fam].live {
		if c, ok := sc.candOf(n, sh, withRel); ok {
			sc.cands = append(sc.cands, c)
		}
	}
	if len(sc.cands) < sh.workers {
		return false
	}
	slices.SortFunc(sc.cands, cmpCand)
	sc.pick = sc.pick[:0]
	for _, c := range sc.cands[:sh.workers] {
		sc.pick = append(sc.pick, c.n)
	}
	slices.Sort(sc.pick)
	return true
}

// candOf is node n as a candidate for one worker of sh, if the worker fits there.
func (sc *scratch) candOf(n int32, sh *shape, withRel bool) (cand, bool) {
	g, c, r := sc.aG[n], sc.aC[n], sc.aR[n]
	k2 := 0
	if withRel {
		g, c, r = g+sc.rG[n], c+sc.rC[n], r+sc.rR[n]
		k2 = max(0, sh.gpu-sc.aG[n])
	}
	if g < sh.gpu || c < sh.cpu || r < sh.ram {
		return cand{}, false
	}
	k0 := int8(1)
	if sc.own[n] == sc.ownStamp {
		k0 = 0
	}
	if withRel {
		return cand{n: n, k0: k0, k2: k2}, true
	}
	return cand{n: n, k0: k0, k1: g - sh.gpu, k3: c - sh.cpu}, true
}

// pickOne is pickNodes for one worker: the best candidate in cmpCand order, without sorting
// (this loop is the hot path of a pass that grants many requests).
func (sc *scratch) pickOne(p *Pool, sh *shape, withRel bool) bool {
	// A node with capacity nominated to the request beats every other: look at those first.
	if own := sc.pickOwn(p, sh, withRel); own >= 0 {
		sc.pick = append(sc.pick[:0], own)
		return true
	}
	best := int32(-1)
	var bk0 int8
	var bk1, bk2, bk3 int
	aG, aC, aR, rG, rC, rR, own, stamp := sc.aG, sc.aC, sc.aR, sc.rG, sc.rC, sc.rR, sc.own, sc.ownStamp
	for _, n := range p.fams[sh.fam].live {
		g, c, r := aG[n], aC[n], aR[n]
		k2 := 0
		if withRel {
			g, c, r = g+rG[n], c+rC[n], r+rR[n]
			k2 = max(0, sh.gpu-aG[n])
		}
		if g < sh.gpu || c < sh.cpu || r < sh.ram {
			continue
		}
		k0 := int8(1)
		if own[n] == stamp {
			k0 = 0
		}
		k1, k3 := g-sh.gpu, c-sh.cpu
		if withRel {
			k1, k3 = 0, 0
		}
		if best >= 0 {
			switch {
			case k0 != bk0:
				if k0 > bk0 {
					continue
				}
			case k1 != bk1:
				if k1 > bk1 {
					continue
				}
			case k2 != bk2:
				if k2 > bk2 {
					continue
				}
			case k3 >= bk3:
				continue // a later node never wins a tie
			}
		}
		best, bk0, bk1, bk2, bk3 = n, k0, k1, k2, k3
		if k0 == 0 && k1 == 0 && k2 == 0 && k3 == 0 {
			break // nothing later can be better
		}
	}
	if best < 0 {
		return false
	}
	sc.pick = append(sc.pick[:0], best)
	return true
}

// pickOwn is the best node for one worker among those with capacity nominated to the request,
// or -1.
func (sc *scratch) pickOwn(p *Pool, sh *shape, withRel bool) int32 {
	best := int32(-1)
	var bc cand
	for _, k := range sc.ownNoms {
		n := sc.noms[k].n
		if p.nodes[n].fam != sh.fam || p.nodes[n].lost {
			continue
		}
		if c, ok := sc.candOf(n, sh, withRel); ok && (best < 0 || cmpCand(c, bc) < 0) {
			best, bc = n, c
		}
	}
	return best
}

// pickUsesOwnVictims reports whether the pick includes capacity of a job preempted for the
// request (not one it took over from another request).
func (sc *scratch) pickUsesOwnVictims() bool {
	for _, n := range sc.pick {
		if sc.own[n] != sc.ownStamp {
			continue
		}
		for _, k := range sc.ownNoms {
			if x := &sc.noms[k]; x.n == n && !x.taken {
				return true
			}
		}
	}
	return false
}

// pickFree reports whether every picked node holds a worker of sh on free capacity alone.
func (sc *scratch) pickFree(sh *shape) bool {
	for _, n := range sc.pick {
		if sc.aG[n] < sh.gpu || sc.aC[n] < sh.cpu || sc.aR[n] < sh.ram {
			return false
		}
	}
	return true
}

// take takes the demand on every picked node: free capacity first, releasing capacity for the
// rest (a grant takes free capacity only).
func (sc *scratch) take(p *Pool, sh *shape, grant bool) {
	sc.relTake, sc.relUsed = sc.relTake[:0], sc.relUsed[:0]
	for _, n := range sc.pick {
		var rg, rc, rr int
		if !grant {
			rg, rc, rr = max(0, sh.gpu-sc.aG[n]), max(0, sh.cpu-sc.aC[n]), max(0, sh.ram-sc.aR[n])
		}
		sc.relTake = append(sc.relTake, int32(rg))
		sc.relUsed = append(sc.relUsed, rg > 0 || rc > 0 || rr > 0)
		if sc.own[n] == sc.ownStamp { // what it holds of its own nominations stays out of the re-hiding
			rel := [3]int{rg, rc, rr}
			free := [3]int{sh.gpu - rg, sh.cpu - rc, sh.ram - rr}
			for _, k := range sc.ownNoms {
				if x := &sc.noms[k]; x.n == n {
					u := &rel
					if x.free {
						u = &free
					}
					a, b, c := min(u[0], x.g-x.ug), min(u[1], x.c-x.uc), min(u[2], x.r-x.ur)
					x.ug, x.uc, x.ur = x.ug+a, x.uc+b, x.ur+c
					u[0], u[1], u[2] = u[0]-a, u[1]-b, u[2]-c
				}
			}
		}
		sc.aC[n], sc.rC[n] = sc.aC[n]-(sh.cpu-rc), sc.rC[n]-rc
		sc.aR[n], sc.rR[n] = sc.aR[n]-(sh.ram-rr), sc.rR[n]-rr
		sc.setGPU(p, n, sc.aG[n]-(sh.gpu-rg), sc.rG[n]-rg)
	}
}

type planGrant struct {
	w     *waitReq
	nodes []int32
	holds []holdUse // what it used of the free capacity held for it
}

type holdUse struct {
	i       int // index in Pool.holds
	g, c, r int
}

// grant records that w starts on the picked nodes (already taken).
func (sc *scratch) grant(pl *plan, w *waitReq) {
	g := planGrant{w: w, nodes: slices.Clone(sc.pick)}
	for _, k := range sc.ownNoms {
		if x := &sc.noms[k]; x.free && (x.ug > 0 || x.uc > 0 || x.ur > 0) {
			g.holds = append(g.holds, holdUse{i: x.hold, g: x.ug, c: x.uc, r: x.ur})
		}
	}
	pl.grants = append(pl.grants, g)
}

type planPreempt struct {
	victim *runJob
	by     *waitReq
}

// planTakeover hands nominated capacity over to a strictly better request.
type planTakeover struct {
	v    *runJob // the stopping victim, or nil for a hold
	w    int     // the victim's worker
	hold int     // the hold's index in Pool.holds
	by   *waitReq
}

type planReserve struct {
	w     *waitReq
	nodes []int32
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
	takeovers []planTakeover
	reserves  []planReserve
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
	prevClass := Class(-1)
	reserving := p.policy.ReserveAfter > 0 && !p.strict()
	for i, h := range p.hot {
		first := h.class != prevClass
		prevClass = h.class
		if blocker >= 0 {
			if !explain {
				break
			}
			pl.outs[i] = planOut{kind: outStrictBlocked, blocker: int32(blocker)}
			continue
		}
		var kind uint8
		var victims []*runJob
		if !sc.hasOwn[i] && !h.prev && sc.abFail[h.shape] == sc.epoch && (h.class == Low || sc.cFail[3*int(h.shape)+int(h.class)] == sc.epoch) &&
			(!first || !reserving) {
			kind = outNoFit // the fast path of a long queue: a shape that already failed in this pass
		} else {
			kind, victims = p.decide(now, sc, pl, i, h, first)
		}
		if explain {
			w := p.waiting[i]
			o := planOut{kind: kind, victims: victims}
			switch kind {
			case outGranted, outNominated, outPreempting:
				o.nodes = slices.Clone(sc.pick)
				o.relTake = slices.Clone(sc.relTake)
				o.relUsed = slices.Clone(sc.relUsed)
			case outReserving:
				o.nodes = slices.Clone(pl.reserves[len(pl.reserves)-1].nodes)
			}
			if o.nodes != nil {
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

// decide applies the rules to one request: (a) grant on free capacity; (b) else hold free +
// releasing capacity and wait; (c) else preempt (or take over capacity nominated to a lower
// class); (d) else, if it has been the first of its class for Policy.ReserveAfter, reserve the
// nodes where it will fit soonest. Capacity nominated to other requests is out of its sight but
// for (c).
func (p *Pool) decide(now time.Time, sc *scratch, pl *plan, i int, h hotEntry, first bool) (uint8, []*runJob) {
	if h.prev {
		return outPrevAttempt, nil
	}
	// Its own nominations come back into sight; whatever it does not take is hidden again.
	sc.ownStamp++
	if sc.ownStamp == 0 {
		clear(sc.own)
		sc.ownStamp = 1
	}
	sc.ownNoms = sc.ownNoms[:0]
	if sc.hasOwn[i] {
		sc.ownNoms = append(sc.ownNoms, sc.byJob[p.waiting[i].r.Job]...)
	}
	for _, k := range sc.ownNoms {
		sc.own[sc.noms[k].n] = sc.ownStamp
		sc.unhide(p, k)
	}
	kind, victims := p.decideFor(now, sc, pl, i, h, first)
	if len(sc.ownNoms) > 0 { // (no defer: this runs for every waiting request)
		sc.rehide(p)
	}
	return kind, victims
}

func (p *Pool) decideFor(now time.Time, sc *scratch, pl *plan, i int, h hotEntry, first bool) (uint8, []*runJob) {
	w := p.waiting[i]
	sh := &p.shapes[h.shape]
	cache := len(sc.ownNoms) == 0 // the failure caches hold for requests that see no capacity of their own
	if !cache && sc.pickNodes(p, sh, true) && sc.pickUsesOwnVictims() {
		// A request with capacity nominated to it waits for that capacity rather than start
		// elsewhere: the free capacity elsewhere serves the requests behind it, so that its
		// victims were not preempted for nothing.
		if sc.pickFree(sh) {
			sc.take(p, sh, true)
			sc.grant(pl, w)
			return outGranted, nil
		}
		sc.take(p, sh, false)
		return outNominated, nil
	}
	if !cache || sc.abFail[h.shape] != sc.epoch {
		g := min(sh.gpu, len(sc.cntA[sh.fam])-1)
		if int(sc.cntA[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, false) {
			sc.take(p, sh, true)
			sc.grant(pl, w)
			return outGranted, nil
		}
		if (!cache || sc.relVisible[sh.fam]) && int(sc.cntAR[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, true) {
			sc.take(p, sh, false)
			return outNominated, nil
		}
		if cache {
			sc.abFail[h.shape] = sc.epoch
		}
	}
	ck := 3*int(h.shape) + int(h.class)
	if h.class == Low || (cache && sc.cFail[ck] == sc.epoch) {
		return p.maybeReserve(now, sc, pl, w, sh, first), nil
	}
	victims, takeovers, ok := p.chooseVictims(now, sc, sh, h.class)
	if !ok {
		if cache {
			sc.cFail[ck] = sc.epoch
		}
		return p.maybeReserve(now, sc, pl, w, sh, first), nil
	}
	// Nominated capacity it takes over becomes its own.
	for _, k := range takeovers {
		x := &sc.noms[k]
		sc.unhide(p, k)
		sc.byJob[x.by] = slices.DeleteFunc(sc.byJob[x.by], func(i int32) bool { return i == k })
		x.by, x.class, x.taken = w.r.Job, w.r.Class, true
		sc.byJob[x.by] = append(sc.byJob[x.by], k)
		sc.ownNoms = append(sc.ownNoms, k)
		sc.own[x.n] = sc.ownStamp
		pl.takeovers = append(pl.takeovers, planTakeover{v: x.v, w: x.w, hold: x.hold, by: w})
	}
	// The victims' capacity becomes releasing and nominated to the request.
	for _, v := range victims {
		sc.victims[v] = true
		d := &v.r.Demand
		for wk, n := range v.nodes {
			if v.released[wk] || p.nodes[n].lost {
				continue
			}
			k := sc.addNom(nom{v: v, w: wk, n: n, g: d.GPUs, c: d.CPU, r: d.RAMGB, class: w.r.Class, by: w.r.Job, seq: sc.nextSeq})
			sc.ownNoms = append(sc.ownNoms, k)
			sc.own[n] = sc.ownStamp
			sc.rC[n] += d.CPU
			sc.rR[n] += d.RAMGB
			sc.setGPU(p, n, sc.aG[n], sc.rG[n]+d.GPUs)
		}
		sc.nextSeq++
		pl.preempts = append(pl.preempts, planPreempt{victim: v, by: w})
	}
	if !sc.pickNodes(p, sh, true) {
		panic("scheduler: preemption chose victims that do not make room") // unreachable
	}
	if sc.pickFree(sh) { // it took over capacity that is free already: it starts
		sc.take(p, sh, true)
		sc.grant(pl, w)
		return outGranted, nil
	}
	sc.take(p, sh, false)
	if len(victims) == 0 {
		return outNominated, nil
	}
	return outPreempting, victims
}

// rehide hides again what the walker does not hold of its own nominations: they stay its own
// until their workers stop, whatever it decided.
func (sc *scratch) rehide(p *Pool) {
	for _, k := range sc.ownNoms {
		sc.hide(p, k)
	}
	sc.ownNoms = sc.ownNoms[:0]
}

// Schedule makes all decisions possible now. Grants are applied to the state (the job is running
// from now on); preempted victims become "releasing" (their capacity is not free until Release).
//
// A second call at the same time with no event in between decides nothing. A call when no event
// changed the pool since a pass that decided nothing, before NextWake, costs O(1).
func (p *Pool) Schedule(now time.Time) Decisions {
	now = normTime(now)
	p.lastNow = now
	p.forget(now)
	if !p.dirty && (p.wake.IsZero() || now.Before(p.wake)) {
		return Decisions{}
	}
	if len(p.waiting) == 0 {
		p.heads = [3]head{}
		p.dirty, p.wake = false, time.Time{}
		return Decisions{}
	}
	pl := p.plan(now, p.sc, false)
	var d Decisions
	// Takeovers first: the holds' indices are those of the pass.
	for _, t := range pl.takeovers {
		nb := &Preemptor{Job: t.by.r.Job, Class: t.by.r.Class, Kind: t.by.r.Kind}
		if t.v != nil {
			t.v.nominee[t.w] = nb
		} else {
			p.holds[t.hold].by, p.holds[t.hold].class, p.holds[t.hold].taken = nb.Job, nb.Class, true
		}
	}
	for _, g := range pl.grants {
		w := g.w
		dm := &w.r.Demand
		rj := &runJob{r: w.r, fam: p.shapes[w.shape].fam, startedAt: now, nodes: g.nodes,
			gpus: make([]uint64, len(g.nodes)), released: make([]bool, len(g.nodes)), preemptions: w.r.Preemptions}
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
		p.place(rj)
		delete(p.waitIdx, w.r.Job)
		// What it did not use of the capacity held for it stays out of sight until the next event.
		for _, u := range g.holds {
			h := &p.holds[u.i]
			h.g, h.c, h.r = h.g-u.g, h.c-u.c, h.r-u.r
		}
		for i := range p.holds {
			if p.holds[i].by == w.r.Job {
				p.holds[i].stale = true
			}
		}
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
		v.nominee = make([]*Preemptor, len(v.nodes))
		for i := range v.nominee {
			v.nominee[i] = v.preemptedBy
		}
		v.preemptions++
		p.preemptSeq++
		v.preemptSeq = p.preemptSeq
		p.victims = append(p.victims, v)
		d.Preemptions = append(d.Preemptions, Preemption{
			Victim: v.r.Job, VictimAttempt: v.r.Attempt, Preemptor: *v.preemptedBy,
			Reason: fmt.Sprintf("preempted to make room for %s-priority %s %s, which needs %s; %s-priority jobs give way to higher classes, those that would lose the least work first",
				by.r.Class, by.r.Kind, by.r.Job, needText(by.r.Demand, by.r.Workers), v.r.Class),
		})
	}
	p.updateHeads(now, pl)
	p.dirty = len(d.Grants)+len(d.Preemptions) > 0
	p.wake = p.nextWake(now)
	return d
}
