package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// outcome is what one pass decided for one waiting request: the rule that applied to it (see
// decide), which View and Explain turn into its reason.
type outcome uint8

const (
	outNoFit         outcome = iota // cannot fit, not even by preempting
	outGranted                      // fits on free capacity: started
	outNominated                    // fits on free + releasing capacity: that capacity is reserved for it
	outPreempting                   // preempts victims; their capacity is reserved for it
	outStrictBlocked                // strict-fifo: a better request ahead could not start
	outPrevAttempt                  // an older attempt of the same job still holds capacity
	outReserving                    // cannot fit, but as the long-waiting first of its class it reserves nodes
	outCapped                       // its workspace's limit in its class leaves it no room (see Limit)
	outBorrowCapped                 // its allocation's cohort share and borrowing limit leave it no room
)

// tookCapacity reports whether the request took capacity in the pass: it started, holds free
// and releasing capacity, or preempts for it.
func (o outcome) tookCapacity() bool {
	return o == outGranted || o == outNominated || o == outPreempting
}

// nodeCandidate is a node a worker could be placed on, with its sort keys (see
// cmpNodeCandidate). It has four fields, no more, so that the compiler keeps one in registers
// in the placement loops.
type nodeCandidate struct {
	n         int32
	elsewhere int8 // 0: capacity nominated to this request is on the node, 1: not
	// gpuFit is, for a grant (free capacity only), the GPUs left over; for a request that will
	// wait (releasing capacity counted), the GPUs taken from releasing capacity. Candidates
	// compared are always of one kind.
	gpuFit   int
	spareCPU int // CPU cores left over (a grant only)
}

// nomination is capacity nominated to a preemptor: one unreleased worker of a job preempted for it, or
// the free capacity such a worker left when it stopped (a hold), on a node that is not lost. It
// stays nominated until the preemptor is granted or withdrawn (see the package doc).
type nomination struct {
	victim  *runJob
	worker  int // the victim's worker
	node    int32
	demand  resources // the worker's demand
	hidden  resources // how much of it is hidden now (taken out of the pass's releasing capacity)
	held    resources // how much of it the nominee itself holds in this pass
	free    bool      // a hold: the victim has stopped, the capacity is free
	holdIdx int       // a hold: its index in Pool.holds
	taken   bool      // its nominee took it over from the preemptor
	class   Class
	by      string // the nominee: the preemptor, or a strictly better request that took it over
	seq     int64
}

// failureCache remembers what failed in this pass: the shapes that can neither start nor hold
// capacity, and the (shape, class) pairs that cannot preempt. Identical requests further down a
// long queue fail the same way, so the pass skips them. An entry is valid when it equals epoch,
// so starting a pass clears the cache in O(1).
type failureCache struct {
	epoch         uint32
	cannotFit     []uint32 // per shape
	cannotPreempt []uint32 // per shape and class, at shapeClass
}

func shapeClass(shape int32, c Class) int { return 3*int(shape) + int(c) }

func (fc *failureCache) fitFailed(shape int32) bool { return fc.cannotFit[shape] == fc.epoch }
func (fc *failureCache) markFitFailed(shape int32)  { fc.cannotFit[shape] = fc.epoch }
func (fc *failureCache) preemptFailed(shape int32, c Class) bool {
	return fc.cannotPreempt[shapeClass(shape, c)] == fc.epoch
}
func (fc *failureCache) markPreemptFailed(shape int32, c Class) {
	fc.cannotPreempt[shapeClass(shape, c)] = fc.epoch
}

// newPass sizes the cache for nShapes shapes and forgets every failure.
func (fc *failureCache) newPass(nShapes int) {
	if len(fc.cannotFit) < nShapes {
		fc.cannotFit = append(fc.cannotFit, make([]uint32, nShapes-len(fc.cannotFit))...)
		fc.cannotPreempt = append(fc.cannotPreempt, make([]uint32, 3*nShapes-len(fc.cannotPreempt))...)
	}
	fc.epoch++
	if fc.epoch == 0 {
		clear(fc.cannotFit)
		clear(fc.cannotPreempt)
		fc.epoch = 1
	}
}

// grantOne is pickOne on free capacity for a request with no capacity nominated to it and no
// allowed nodes, in the same order (cmpNodeCandidate): every candidate is elsewhere and takes
// nothing from releasing capacity, so the order is the fewest free GPUs that fit, then the fewest
// free CPU cores, then config order, and only the first bucket with a fit (exactly that many free
// GPUs) is looked at. (A request held to some nodes takes pickOne, over those nodes alone.)
func (sc *scratch) grantOne(sh *shape) bool {
	buckets := sc.freeBuckets[sh.fam]
	best := nodeCandidate{n: -1}
	for g := sh.need.gpu; g < len(buckets) && best.n < 0; g++ {
		for _, sl := range buckets[g] {
			if sl.cpu < sh.need.cpu || sl.ram < sh.need.ram {
				continue
			}
			if c := (nodeCandidate{n: sl.n, elsewhere: 1, gpuFit: g - sh.need.gpu, spareCPU: sl.cpu - sh.need.cpu}); best.n < 0 || cmpNodeCandidate(c, best) < 0 {
				best = c
			}
		}
	}
	if best.n < 0 {
		return false
	}
	sc.pick = append(sc.pick[:0], best.n)
	return true
}

// cmpNodeCandidate is the one order in which every placement path (pickNodes, pickSome, pickOne,
// pickOwn, grantOne) chooses nodes, pinned by TestEveryPlacementPathOrdersNodesAlike: first the
// nodes where capacity is nominated to the request itself, then best fit: fewest GPUs left over
// (for a request that will wait: fewest GPUs taken from releasing capacity), fewest CPU cores
// left over, config order. For a request that will wait the left-over keys are 0: its choice
// must not change when others take capacity elsewhere, or a second pass would hold other nodes
// than the first.
func cmpNodeCandidate(a, b nodeCandidate) int {
	switch {
	case a.elsewhere != b.elsewhere:
		return int(a.elsewhere) - int(b.elsewhere)
	case a.gpuFit != b.gpuFit:
		return a.gpuFit - b.gpuFit
	case a.spareCPU != b.spareCPU:
		return a.spareCPU - b.spareCPU
	}
	return int(a.n - b.n)
}

// pickNodes is the gang placement: each worker needs the whole demand on one node, all on
// distinct nodes that are not lost and that it may use (Pool.placeable), in cmpNodeCandidate
// order. Result in sc.pick, sorted.
func (sc *scratch) pickNodes(p *Pool, sh *shape, withRel bool) bool {
	if sh.workers == 1 {
		if !withRel && len(sc.walkerNoms) == 0 && sh.allowed == nil {
			return sc.grantOne(sh)
		}
		return sc.pickOne(p, sh, withRel)
	}
	sc.nodeCands = sc.nodeCands[:0]
	for _, n := range p.placeable(sh) {
		if c, ok := sc.candOf(n, sh, withRel); ok {
			sc.nodeCands = append(sc.nodeCands, c)
		}
	}
	if len(sc.nodeCands) < sh.workers {
		return false
	}
	slices.SortFunc(sc.nodeCands, cmpNodeCandidate)
	chosen := p.topo.gang(sc.nodeCands, sh.workers, sh.level, sh.required, withRel, &sc.domainCounts, &sc.gangPick)
	if chosen == nil {
		return false // (no domain of its required level holds it)
	}
	sc.pick = sc.pick[:0]
	for _, c := range chosen {
		sc.pick = append(sc.pick, c.n)
	}
	slices.Sort(sc.pick)
	return true
}

// pickSome is pickNodes on free capacity for an elastic gang that does not fit whole (rule b'):
// as many workers as fit, fewer than sh.workers and at least sh.minWorkers, on the nodes
// pickNodes would choose first.
func (sc *scratch) pickSome(p *Pool, sh *shape) bool {
	sc.nodeCands = sc.nodeCands[:0]
	for _, n := range p.placeable(sh) {
		if c, ok := sc.candOf(n, sh, false); ok {
			sc.nodeCands = append(sc.nodeCands, c)
		}
	}
	k := min(len(sc.nodeCands), sh.workers-1, sc.capWorkers)
	if k < sh.minWorkers {
		return false
	}
	slices.SortFunc(sc.nodeCands, cmpNodeCandidate)
	chosen := p.topo.gang(sc.nodeCands, k, sh.level, sh.required, false, &sc.domainCounts, &sc.gangPick)
	for chosen == nil && k > sh.minWorkers { // a required level: as many as one domain holds
		k--
		chosen = p.topo.gang(sc.nodeCands, k, sh.level, sh.required, false, &sc.domainCounts, &sc.gangPick)
	}
	if chosen == nil {
		return false
	}
	sc.pick = sc.pick[:0]
	for _, c := range chosen {
		sc.pick = append(sc.pick, c.n)
	}
	slices.Sort(sc.pick)
	return true
}

// candOf is node n as a candidate for one worker of sh, if the worker fits there.
func (sc *scratch) candOf(n int32, sh *shape, withRel bool) (nodeCandidate, bool) {
	have := sc.free[n]
	if withRel {
		have = have.add(sc.rel[n])
	}
	if !sh.need.lessEqual(have) {
		return nodeCandidate{}, false
	}
	elsewhere := int8(1)
	if sc.walkerOwns[n] == sc.walkerStamp {
		elsewhere = 0
	}
	if withRel {
		return nodeCandidate{n: n, elsewhere: elsewhere, gpuFit: max(0, sh.need.gpu-sc.free[n].gpu)}, true
	}
	return nodeCandidate{n: n, elsewhere: elsewhere, gpuFit: have.gpu - sh.need.gpu, spareCPU: have.cpu - sh.need.cpu}, true
}

// pickOne is pickNodes for one worker: the best candidate in cmpNodeCandidate order, without sorting
// (this loop is the hot path of a pass that grants many requests).
func (sc *scratch) pickOne(p *Pool, sh *shape, withRel bool) bool {
	// A node with capacity nominated to the request beats every other: look at those first.
	if own := sc.pickOwn(p, sh, withRel); own >= 0 {
		sc.pick = append(sc.pick[:0], own)
		return true
	}
	best := nodeCandidate{n: -1}
	for _, n := range p.placeable(sh) {
		c, ok := sc.candOf(n, sh, withRel)
		if !ok || best.n >= 0 && cmpNodeCandidate(c, best) >= 0 {
			continue
		}
		best = c
		if c == (nodeCandidate{n: n}) {
			break // nothing later can be better
		}
	}
	if best.n < 0 {
		return false
	}
	sc.pick = append(sc.pick[:0], best.n)
	return true
}

// pickOwn is the best node for one worker among those with capacity nominated to the request
// that it may use, or -1. (A victim's capacity on a node outside the request's allowed nodes is
// nominated to it all the same, until it starts: it is never placed there.)
func (sc *scratch) pickOwn(p *Pool, sh *shape, withRel bool) int32 {
	best := int32(-1)
	var bc nodeCandidate
	for _, k := range sc.walkerNoms {
		n := sc.nominations[k].node
		if p.nodes[n].fam != sh.fam || p.nodes[n].lost || !sh.may(n) {
			continue
		}
		if c, ok := sc.candOf(n, sh, withRel); ok && (best < 0 || cmpNodeCandidate(c, bc) < 0) {
			best, bc = n, c
		}
	}
	return best
}

// pickUsesOwnVictims reports whether the pick includes capacity of a job preempted for the
// request (not one it took over from another request).
func (sc *scratch) pickUsesOwnVictims() bool {
	for _, n := range sc.pick {
		if sc.walkerOwns[n] != sc.walkerStamp {
			continue
		}
		for _, k := range sc.walkerNoms {
			if x := &sc.nominations[k]; x.node == n && !x.taken {
				return true
			}
		}
	}
	return false
}

// pickFree reports whether every picked node holds a worker of sh on free capacity alone.
func (sc *scratch) pickFree(sh *shape) bool {
	for _, n := range sc.pick {
		if !sh.need.lessEqual(sc.free[n]) {
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
		var fromRel resources
		if !grant {
			fromRel = sh.need.sub(sc.free[n]).nonNegative()
		}
		fromFree := sh.need.sub(fromRel)
		sc.relTake = append(sc.relTake, int32(fromRel.gpu))
		sc.relUsed = append(sc.relUsed, fromRel.positive())
		if sc.walkerOwns[n] == sc.walkerStamp { // what it holds of its own nominations stays out of the re-hiding
			rel, free := fromRel, fromFree
			for _, k := range sc.walkerNoms {
				if x := &sc.nominations[k]; x.node == n {
					u := &rel
					if x.free {
						u = &free
					}
					a := u.atMost(x.demand.sub(x.held))
					x.held = x.held.add(a)
					*u = u.sub(a)
				}
			}
		}
		sc.setCapacity(p, n, sc.free[n].sub(fromFree), sc.rel[n].sub(fromRel))
	}
}

type planGrant struct {
	w                  *waitReq
	nodesFrom, nodesTo int       // its nodes: plan.grantNodes[nodesFrom:nodesTo]
	holds              []holdUse // what it used of the free capacity held for it
	onLoan             bool      // it took capacity of a reservation it ends before (Grant.OnLoan)
	borrowed           bool      // it starts beyond its allocation's cohort share (Grant.Borrowed)
}

type holdUse struct {
	holdIdx int // index in Pool.holds
	used    resources
}

// grant records that w starts on the picked nodes (already taken).
func (sc *scratch) grant(pl *plan, w *waitReq) {
	g := planGrant{w: w, nodesFrom: len(pl.grantNodes)}
	pl.grantNodes = append(pl.grantNodes, sc.pick...)
	g.nodesTo = len(pl.grantNodes)
	for _, k := range sc.walkerNoms {
		if x := &sc.nominations[k]; x.free && x.held.positive() {
			g.holds = append(g.holds, holdUse{holdIdx: x.holdIdx, used: x.held})
		}
	}
	pl.grants = append(pl.grants, g)
}

type planPreempt struct {
	victim *runJob
	by     *waitReq
	loan   bool // the victim yields a loan that ran past its RunLimit (Preemption.Loan)
	// reclaim: the victim borrowed beyond its cohort share, and the preemptor takes its own
	// share back (Preemption.Reclaim).
	reclaim bool
	move    bool // the victim moves out of a domain for a gang (Preemption.Move)
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
	kind    outcome
	blocker int32
	nodes   []int32
	relTake []int32
	relUsed []bool
	victims []*runJob
	capUsed int  // outCapped: what its workspace held in its class
	drains  bool // outReserving with Backfill: its start is unknown, so its nodes drain for it
	// For a request held to some nodes that cannot start, hold or preempt: how many nodes of its
	// family that answer have room for a worker in its sight (free or releasing), and how many of
	// those it may use.
	room, roomAllowed int
	// domainRoom, for a gang of a required topology level that does not fit: the most nodes of
	// one domain of that level with room for a worker (among its allowed nodes).
	domainRoom int
}

// consumer is a waiting request that took capacity in the pass, and the nodes it took it on.
type consumer struct {
	i     int32
	nodes []int32
}

type plan struct {
	grants     []planGrant
	grantNodes []int32 // the granted requests' nodes, one after the other
	preempts   []planPreempt
	takeovers  []planTakeover
	reserves   []planReserve
	// cut says the pass stopped at its limit (see ScheduleAtMost): the
	// requests from there on were not looked at. The first of them was of class cutClass, and
	// the first of its class if cutAtHead.
	cut       bool
	cutClass  Class
	cutAtHead bool
	outs      []planOut    // explain mode only: one per waiting request the span explains (see span.slot)
	explained span         // explain mode only: which requests outs explains
	consumers [][]consumer // explain mode only: per family, the waiting requests before the span's end that took capacity
}

// out is the outcome of waiting request i, which the plan explains.
func (pl *plan) out(i int) *planOut {
	k, _ := pl.explained.slot(i)
	return &pl.outs[k]
}

// span is the waiting requests a plan explains: the range [from, to) in launch order, or, when
// only is set, just the requests at its indices (ascending, within [from, to)), for a page of
// the queue restricted by a filter (see ViewPageWhere).
type span struct {
	from, to int
	only     []int
}

// size is how many requests the span explains.
func (s span) size() int {
	if s.only != nil {
		return len(s.only)
	}
	return max(s.to-s.from, 0)
}

// slot says whether the span explains waiting request i and, if so, where its outcome is kept
// in plan.outs.
func (s span) slot(i int) (int, bool) {
	if i < s.from || i >= s.to {
		return 0, false
	}
	if s.only == nil {
		return i - s.from, true
	}
	return slices.BinarySearch(s.only, i)
}

// plan runs the scheduling rules over the waiting requests in launch order without changing the
// pool. It records the outcome of the requests in explain (none: an empty span); the requests
// after it are planned too, for what they reserve, but not explained. With maxDecisions >= 0 it
// stops before the first request it reaches once it has planned that many grants and
// preemptions (see ScheduleAtMost); explaining plans never stop.
func (p *Pool) plan(now time.Time, sc *scratch, explain span, maxDecisions int) *plan {
	sc.reset(p)
	sc.startCaps(p)
	sc.startShares(p)
	p.startResvs(now, sc)
	// The grant buffers are the last pass's, emptied (see Schedule).
	pl := &plan{explained: explain, grants: sc.grantBuf[:0], grantNodes: sc.grantNodeBuf[:0]}
	explaining := explain.size() > 0 // (tested first in the loop: Schedule never explains)
	if explaining {
		pl.outs = make([]planOut, explain.size())
		pl.consumers = make([][]consumer, len(p.fams))
	}
	blocker := -1
	prevClass := Class(-1)
	strict := p.strict()
	// The first request of a class may do more than its shape did before it (reserve, or
	// preempt as a starving request), so the failure caches do not skip it.
	headsDoMore := (p.policy.ReserveAfter > 0 && !strict) || p.policy.StarvationAfter > 0
	for i, key := range p.waitKeys {
		if maxDecisions >= 0 && len(pl.grants)+len(pl.preempts) >= maxDecisions {
			pl.cut, pl.cutClass, pl.cutAtHead = true, key.class, key.class != prevClass
			break
		}
		first := key.class != prevClass
		prevClass = key.class
		if blocker >= 0 {
			if !explaining || i >= explain.to {
				break
			}
			if k, ok := explain.slot(i); ok {
				pl.outs[k] = planOut{kind: outStrictBlocked, blocker: int32(blocker)}
			}
			continue
		}
		var kind outcome
		var victims []*runJob
		if sc.knownToFail(i, key) && !sc.mayDefragment(p, now, p.waiting[i], key) && (!first || !headsDoMore) && (len(sc.resvs) == 0 || !sc.mayBackfill(p, now, p.waiting[i])) {
			kind = sc.failFast(p, i) // the fast path of a long queue: a shape that already failed in this pass
		} else {
			kind, victims = p.decide(now, sc, pl, i, key, first)
		}
		if explaining {
			p.recordOutcome(sc, pl, explain, i, kind, victims)
		}
		if kind != outGranted && kind != outCapped && kind != outBorrowCapped && strict {
			blocker = i
		}
	}
	return pl
}

// knownToFail reports whether waiting request i, which sees no capacity of its own, has a shape
// that already could neither start nor hold capacity in this pass, nor preempt at its class.
func (sc *scratch) knownToFail(i int, key waitKey) bool {
	return !sc.hasNominations[i] && !key.prev && !sc.shares.on && sc.failed.fitFailed(key.shape) &&
		(key.class == Low || sc.failed.preemptFailed(key.shape, key.class))
}

// walkedNodes is where the walker took capacity (kind) or reserved in its walk.
func walkedNodes(sc *scratch, pl *plan, kind outcome) []int32 {
	switch {
	case kind.tookCapacity():
		return sc.pick
	case kind == outReserving:
		return pl.reserves[len(pl.reserves)-1].nodes
	}
	return nil
}

// recordOutcome keeps, in explain mode, which requests before the span's end took capacity, and
// the outcome of the requests the span explains. The requests a filtered span skips count as
// consumers as those before it do, so a request is explained the same whatever the page.
func (p *Pool) recordOutcome(sc *scratch, pl *plan, explain span, i int, kind outcome, victims []*runJob) {
	k, explained := explain.slot(i)
	if !explained && i < explain.to && kind != outNoFit && kind != outPrevAttempt && kind != outCapped && kind != outBorrowCapped {
		f := p.shapes[p.waiting[i].shape].fam
		nodes := slices.Clone(walkedNodes(sc, pl, kind))
		pl.consumers[f] = append(pl.consumers[f], consumer{int32(i), nodes})
	}
	if explained {
		pl.outs[k] = p.explainOutcome(sc, pl, i, kind, victims)
	}
}

// explainOutcome records what request i got in this pass, for View and Explain.
func (p *Pool) explainOutcome(sc *scratch, pl *plan, i int, kind outcome, victims []*runJob) planOut {
	o := planOut{kind: kind, victims: victims}
	switch kind {
	case outGranted, outNominated, outPreempting:
		o.nodes = slices.Clone(sc.pick)
		o.relTake = slices.Clone(sc.relTake)
		o.relUsed = slices.Clone(sc.relUsed)
	case outReserving:
		o.nodes = slices.Clone(pl.reserves[len(pl.reserves)-1].nodes)
		job := p.waiting[i].r.Job
		o.drains = p.policy.Backfill && !slices.ContainsFunc(sc.resvs, func(rv resv) bool { return rv.job == job })
	case outCapped, outBorrowCapped:
		o.capUsed = sc.capUsed
	}
	sh := &p.shapes[p.waiting[i].shape]
	if o.nodes != nil {
		pl.consumers[sh.fam] = append(pl.consumers[sh.fam], consumer{int32(i), o.nodes})
	}
	if kind == outNoFit && sh.allowed != nil {
		for _, n := range p.fams[sh.fam].live {
			if sh.need.lessEqual(sc.free[n].add(sc.rel[n])) {
				o.room++
				if sh.may(n) {
					o.roomAllowed++
				}
			}
		}
	}
	if kind == outNoFit && sh.required {
		counts := make([]int, p.topo.domains[sh.level])
		for _, n := range p.placeable(sh) {
			if sh.need.lessEqual(sc.free[n].add(sc.rel[n])) {
				if sh.allowed == nil {
					o.room++
				}
				d := p.topo.domain[sh.level][n]
				counts[d]++
				o.domainRoom = max(o.domainRoom, counts[d])
			}
		}
	}
	return o
}

// decide makes waiting request i the walker and applies the rules of the package doc to it
// (decideFor): (a) wait for its own victims; (b) grant on free capacity, (b') an elastic gang
// with fewer workers; (c) else hold free + releasing capacity and wait; (d) else preempt (or
// take over capacity nominated to a lower class); (e) else, if it has been the first of its
// class for Policy.ReserveAfter, reserve the nodes where it will fit soonest. Capacity
// nominated to other requests is out of its sight but for (d). A capped request gets none of
// these (outCapped).
func (p *Pool) decide(now time.Time, sc *scratch, pl *plan, i int, key waitKey, first bool) (outcome, []*runJob) {
	if key.prev {
		return outPrevAttempt, nil
	}
	// Its own nominations come back into sight; whatever it does not take is hidden again.
	sc.walkerStamp++
	if sc.walkerStamp == 0 {
		clear(sc.walkerOwns)
		sc.walkerStamp = 1
	}
	sc.walkerNoms = sc.walkerNoms[:0]
	w := p.waiting[i]
	sc.starving = first && p.starving(now, w)
	if p.policy.LossWithinWait {
		sc.waitedGPUSec = waitedGPUSec(w, &p.shapes[key.shape], now)
	}
	sc.walkerExtra = len(sc.resvs) > 0 && sc.resvWalk(p, now, w)
	if sc.hasNominations[i] {
		sc.walkerNoms = append(sc.walkerNoms, sc.byJob[p.waiting[i].r.Job]...)
	}
	for _, k := range sc.walkerNoms {
		sc.walkerOwns[sc.nominations[k].node] = sc.walkerStamp
		sc.unhide(p, k)
	}
	sh := &p.shapes[key.shape]
	var kind outcome
	var victims []*runJob
	workers, capped := sc.capRoom(p, w, sh)
	shareWorkers, shareCapped, within := sc.shareRoom(p, w, sh)
	sc.reclaiming, sc.walkerAllocation = within, w.r.Allocation
	switch {
	case capped:
		kind, sc.capUsed = outCapped, sc.caps.used[w.ws][w.r.Class]
	case shareCapped:
		kind, sc.capUsed = outBorrowCapped, sc.shares.used[p.cohort.idx[w.r.Allocation]]-sc.ownNominatedGPUs()
	default:
		own := 0
		if sc.caps.on || sc.shares.on {
			own = sc.ownNominatedGPUs()
		}
		sc.capWorkers = min(workers, shareWorkers)
		kind, victims = p.decideFor(now, sc, pl, w, key, first)
		if kind.tookCapacity() {
			sc.countCapUse(w, sh, own)
			if sc.countShareUse(p, w, sh, own) && kind == outGranted {
				pl.grants[len(pl.grants)-1].borrowed = true
			}
		}
		switch {
		case kind == outGranted && sc.walkerExtra && sc.borrows(sc.pick):
			pl.grants[len(pl.grants)-1].onLoan = true
		case (kind == outPreempting || kind == outNominated) && len(sc.ownerNodes) > 0:
			sc.keepOwnResv(pl, w)
		}
	}
	if len(sc.walkerNoms) > 0 { // (no defer: this runs for every waiting request)
		sc.rehide(p)
	}
	if sc.walkerExtra {
		if sc.starving {
			sc.resumeResvs(walkedNodes(sc, pl, kind))
		}
		sc.resvRehide(p)
		sc.walkerExtra = false
	}
	sc.starving, sc.reclaiming = false, false
	return kind, victims
}

// waitedGPUSec is what w has waited in GPU-seconds: the GPUs of its least size (sh) × the
// seconds since it was submitted (see Policy.LossWithinWait).
func waitedGPUSec(w *waitReq, sh *shape, now time.Time) int64 {
	workers := sh.workers
	if sh.minWorkers > 0 {
		workers = sh.minWorkers
	}
	return int64(sh.need.gpu*workers) * max(0, int64(now.Sub(w.r.SubmittedAt)/time.Second))
}

// starving reports whether w, the first waiting request of its class, has been so for
// Policy.StarvationAfter: the limits that protect victims from work loss then hold no more for
// it (see Starvation in the package doc). Low requests preempt nobody, so they never starve so.
func (p *Pool) starving(now time.Time, w *waitReq) bool {
	sa := p.policy.StarvationAfter
	if sa <= 0 || w.r.Class == Low {
		return false
	}
	hd := &p.heads[w.r.Class]
	return hd.job == w.r.Job && now.Sub(hd.since) >= sa
}

// failFast is the outcome of waiting request i, whose shape already failed in this pass and
// which has no capacity nominated to it: capped if its cap leaves it no room (decide would
// say so first), else no fit. A cap only takes room away, so the shape's failure holds for it.
func (sc *scratch) failFast(p *Pool, i int) outcome {
	w := p.waiting[i]
	if !sc.caps.on || p.capOf(w.ws, w.r.Class) < 0 {
		return outNoFit
	}
	if _, capped := sc.capRoom(p, w, &p.shapes[w.shape]); capped { // (no walker: nothing nominated is its own)
		sc.capUsed = sc.caps.used[w.ws][w.r.Class]
		return outCapped
	}
	return outNoFit
}

// decideFor applies rules (a) to (e) of the package doc to w, whose own nominations are in
// sight.
func (p *Pool) decideFor(now time.Time, sc *scratch, pl *plan, w *waitReq, key waitKey, first bool) (outcome, []*runJob) {
	sh := &p.shapes[key.shape]
	// The failure caches hold only for requests that see no capacity of their own, and whose
	// cap leaves room for the whole gang.
	whole := sc.capWorkers >= sh.workers
	cacheable := len(sc.walkerNoms) == 0 && !sc.walkerExtra && !sc.starving && !sc.shares.on // (what a walker may preempt depends on its allocation)
	if len(sc.walkerNoms) > 0 && whole {
		if kind, ok := sc.waitForOwnVictims(p, pl, w, sh); ok {
			return kind, nil
		}
	}
	if !whole {
		cacheable = false // (an elastic gang its cap holds below its size)
	}
	if !cacheable || !sc.failed.fitFailed(key.shape) {
		if kind, ok := sc.grantOrHold(p, pl, w, sh, cacheable); ok {
			return kind, nil
		}
		if cacheable {
			sc.failed.markFitFailed(key.shape)
		}
	}
	least := sh // what the gang preempts and reserves for: an elastic gang, its least size
	if sh.least >= 0 {
		least = &p.shapes[sh.least]
		if len(sc.walkerNoms) > 0 || !whole {
			if kind, ok := sc.waitForOwnVictims(p, pl, w, least); ok {
				return kind, nil
			}
		}
	}
	if key.class == Low && len(sc.ownerNodes) == 0 && !sc.reclaiming { // (an owner takes its loans back whatever its class, and an allocation its share)
		if whole {
			if kind, victims, ok := p.defragment(now, sc, pl, w, key); ok { // (low jobs move for a low gang)
				return kind, victims
			}
		}
		return p.reserveOrReclaim(now, sc, pl, w, key, least, first)
	}
	var victims []*runJob
	var takeovers []int32
	ok := false
	if whole {
		victims, takeovers, ok = p.preemptFor(now, sc, key.shape, key.class, cacheable)
	}
	if !ok && sh.least >= 0 {
		victims, takeovers, ok = p.preemptFor(now, sc, sh.least, key.class, cacheable)
		sh = least
	}
	if !ok && whole {
		if kind, victims, ok := p.defragment(now, sc, pl, w, key); ok {
			return kind, victims
		}
	}
	if !ok {
		return p.reserveOrReclaim(now, sc, pl, w, key, least, first)
	}
	return p.preemptAndTake(now, sc, pl, w, sh, victims, takeovers)
}

// preemptAndTake makes the victims and takeovers that make room for w's shape sh its own, and
// starts w if that room is free already, else holds it.
func (p *Pool) preemptAndTake(now time.Time, sc *scratch, pl *plan, w *waitReq, sh *shape, victims []*runJob, takeovers []int32) (outcome, []*runJob) {
	sc.takeOver(p, pl, w, takeovers)
	sc.nominateVictims(p, pl, w, victims, now)
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

// reserveOrReclaim is rule (e); then, with Backfill, if w reserved other nodes than it owned
// when the pass began, it does at once what its walk in the next pass would do as their owner:
// take back the loans due there and preempt the overrun jobs there (see Loans), so that a
// second pass at the same time decides nothing new.
func (p *Pool) reserveOrReclaim(now time.Time, sc *scratch, pl *plan, w *waitReq, key waitKey, least *shape, first bool) (outcome, []*runJob) {
	kind := p.maybeReserve(now, sc, pl, w, least, first)
	if kind != outReserving || !p.policy.Backfill || len(sc.resvs) == 0 {
		return kind, nil
	}
	rv := &sc.resvs[len(sc.resvs)-1]
	if rv.job != w.r.Job || !rv.active || slices.Equal(rv.nodes, sc.ownerNodes) {
		return kind, nil
	}
	sc.dropResv(p, rv)
	rv.ownerWalk = true
	prevOwned := slices.Clone(sc.ownerNodes)
	sc.ownerNodes = append(sc.ownerNodes[:0], rv.nodes...)
	victims, takeovers, ok := p.chooseVictims(now, sc, least, key.class)
	if !ok {
		sc.ownerNodes = append(sc.ownerNodes[:0], prevOwned...)
		rv.active, rv.ownerWalk = true, false
		for _, n := range rv.nodes {
			sc.reserved[n] = true
		}
		sc.hideResv(p, rv)
		return kind, nil
	}
	sc.walkerExtra = true // (decide gives back what the walk saw: resvRehide)
	return p.preemptAndTake(now, sc, pl, w, least, victims, takeovers)
}

// preemptFor is rule (d) for one shape: the victims (and the nominated capacity to take over)
// that make room for it at class c, unless the pass already knows there are none.
func (p *Pool) preemptFor(now time.Time, sc *scratch, shape int32, c Class, cacheable bool) ([]*runJob, []int32, bool) {
	if cacheable && sc.failed.preemptFailed(shape, c) {
		return nil, nil, false
	}
	victims, takeovers, ok := p.chooseVictims(now, sc, &p.shapes[shape], c)
	if !ok && cacheable {
		sc.failed.markPreemptFailed(shape, c)
	}
	return victims, takeovers, ok
}

// waitForOwnVictims is rule (a): a request with capacity nominated to it waits for that capacity
// rather than start elsewhere (the free capacity elsewhere serves the requests behind it), so
// that its victims were not preempted for nothing. ok is false if no placement uses its victims.
func (sc *scratch) waitForOwnVictims(p *Pool, pl *plan, w *waitReq, sh *shape) (kind outcome, ok bool) {
	if !sc.pickNodes(p, sh, true) || !sc.pickUsesOwnVictims() {
		return 0, false
	}
	if sc.pickFree(sh) {
		sc.take(p, sh, true)
		sc.grant(pl, w)
		return outGranted, true
	}
	sc.take(p, sh, false)
	return outNominated, true
}

// grantOrHold is rules (b) and (c): start on free capacity, else hold free + releasing capacity
// and wait. A request without nominations of its own (cacheable) sees releasing capacity only
// if some was nominated to nobody when the pass began.
func (sc *scratch) grantOrHold(p *Pool, pl *plan, w *waitReq, sh *shape, cacheable bool) (kind outcome, ok bool) {
	g := min(sh.need.gpu, len(sc.freeAtLeast[sh.fam])-1)
	whole := sc.capWorkers >= sh.workers
	if whole && int(sc.freeAtLeast[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, false) {
		sc.take(p, sh, true)
		sc.grant(pl, w)
		return outGranted, true
	}
	if sh.least >= 0 && int(sc.freeAtLeast[sh.fam][g]) >= sh.minWorkers && sc.pickSome(p, sh) {
		sc.take(p, sh, true)
		sc.grant(pl, w)
		return outGranted, true
	}
	if !whole {
		return 0, false
	}
	if (!cacheable || sc.relVisible[sh.fam]) && int(sc.freeOrRelAtLeast[sh.fam][g]) >= sh.workers && sc.pickNodes(p, sh, true) {
		sc.take(p, sh, false)
		return outNominated, true
	}
	// An elastic gang that cannot hold its whole size holds its least, as it would preempt for
	// it: else a later request takes what frees there, and the next pass preempts it.
	if least := sh.least; least >= 0 && (!cacheable || sc.relVisible[sh.fam]) && int(sc.freeOrRelAtLeast[sh.fam][g]) >= sh.minWorkers &&
		sc.pickNodes(p, &p.shapes[least], true) {
		sc.take(p, &p.shapes[least], false)
		return outNominated, true
	}
	return 0, false
}

// takeOver makes the nominated capacity w takes over (rule d) its own.
func (sc *scratch) takeOver(p *Pool, pl *plan, w *waitReq, takeovers []int32) {
	for _, k := range takeovers {
		x := &sc.nominations[k]
		sc.unhide(p, k)
		sc.byJob[x.by] = slices.DeleteFunc(sc.byJob[x.by], func(i int32) bool { return i == k })
		x.by, x.class, x.taken = w.r.Job, w.r.Class, true
		sc.byJob[x.by] = append(sc.byJob[x.by], k)
		sc.walkerNoms = append(sc.walkerNoms, k)
		sc.walkerOwns[x.node] = sc.walkerStamp
		pl.takeovers = append(pl.takeovers, planTakeover{v: x.victim, w: x.worker, hold: x.holdIdx, by: w})
	}
}

// nominateVictims makes the victims' capacity releasing and nominated to w.
func (sc *scratch) nominateVictims(p *Pool, pl *plan, w *waitReq, victims []*runJob, now time.Time) {
	for _, v := range victims {
		sc.victims[v] = true
		reclaim := sc.reclaimable(v)
		d := demandOf(&v.r.Demand)
		for wk, n := range v.nodes {
			if v.released[wk] || p.nodes[n].lost {
				continue
			}
			k := sc.addNom(nomination{victim: v, worker: wk, node: n, demand: d, class: w.r.Class, by: w.r.Job, seq: sc.nextSeq})
			sc.walkerNoms = append(sc.walkerNoms, k)
			sc.walkerOwns[n] = sc.walkerStamp
			sc.setCapacity(p, n, sc.free[n], sc.rel[n].add(d))
		}
		sc.nextSeq++
		pl.preempts = append(pl.preempts, planPreempt{victim: v, by: w, loan: sc.loanDue(v, now), reclaim: reclaim, move: sc.moving})
	}
}

// rehide hides again what the walker does not hold of its own nominations: they stay its own
// until their workers stop, whatever it decided.
func (sc *scratch) rehide(p *Pool) {
	for _, k := range sc.walkerNoms {
		sc.hide(p, k)
	}
	sc.walkerNoms = sc.walkerNoms[:0]
}

// Schedule makes all decisions possible now. Grants are applied to the state (the job is running
// from now on); preempted victims become "releasing" (their capacity is not free until Release).
//
// A second call at the same time with no event in between decides nothing (with Policy.Backfill
// it may decide what a pass at the next instant would: see NextWake under Backfill in the
// package doc). A call when no event
// changed the pool since a pass that decided nothing, before NextWake, costs O(1).
func (p *Pool) Schedule(now time.Time) Decisions { return p.ScheduleAtMost(now, -1) }

// ScheduleAtMost is Schedule for a caller that can act on only so many decisions at once (the
// allocator, which sends each grant and preemption as a signal): once the pass has decided
// maxDecisions grants and preemptions it stops before the next waiting request, which it neither
// grants nor lets hold, preempt or reserve, nor any after it; Decisions.More says so. Each
// request adds one grant or all its victims, so a pass may pass maxDecisions by the victims of
// its last request. What the pass decided before it stopped is what a full pass decides for
// those requests, and the pool stays marked as changed, so that the next call walks the queue
// again from its head; calls at the same time, with no event between, end with what one full
// pass decides (maxDecisions 0 stops before the first waiting request). A negative maxDecisions
// has no limit.
func (p *Pool) ScheduleAtMost(now time.Time, maxDecisions int) Decisions {
	now = normTime(now)
	p.lastNow = now
	p.forget(now)
	if p.fairShareTick(now) {
		defer p.fs.settle()
	}
	if !p.dirty && (p.wake.IsZero() || now.Before(p.wake)) {
		return Decisions{}
	}
	if len(p.waiting) == 0 {
		p.heads = [3]head{}
		p.dirty, p.wake = false, time.Time{}
		return Decisions{}
	}
	pl := p.plan(now, p.sc, span{}, maxDecisions)
	d := Decisions{More: pl.cut}
	p.applyTakeovers(pl)
	d.Grants = p.applyGrants(now, pl)
	d.Preemptions = p.applyPreemptions(pl)
	p.updateHeads(now, pl)
	clear(pl.grants) // (their holds)
	p.sc.grantBuf, p.sc.grantNodeBuf = pl.grants[:0], pl.grantNodes[:0]
	p.dirty = len(d.Grants)+len(d.Preemptions) > 0 || d.More
	p.wake = p.nextWake(now)
	return d
}

// applyTakeovers hands the nominated capacity taken over in the pass to its new nominee. It runs
// first: the holds' indices are those of the pass.
func (p *Pool) applyTakeovers(pl *plan) {
	for _, t := range pl.takeovers {
		nb := &Preemptor{Job: t.by.r.Job, Class: t.by.r.Class, Kind: t.by.r.Kind}
		if t.v != nil {
			t.v.nominee[t.w] = nb
		} else {
			p.holds[t.hold].by, p.holds[t.hold].class, p.holds[t.hold].taken = nb.Job, nb.Class, true
		}
	}
}

// applyGrants starts the granted requests: they run from now on, on the lowest free GPU indices
// of their nodes, and leave the queue.
func (p *Pool) applyGrants(now time.Time, pl *plan) []Grant {
	if len(pl.grants) == 0 {
		return nil
	}
	p.lastGrant = now
	ar := p.newGrantArena(pl)
	grants := make([]Grant, len(pl.grants))
	for i, g := range pl.grants {
		rj := p.start(now, pl, g, &ar.jobs[i], ar)
		grants[i] = Grant{Job: rj.r.Job, Attempt: rj.r.Attempt, Placement: ar.placement(p, rj), OnLoan: rj.onLoan, Borrowed: rj.borrowed}
		p.forecast.started(now, rj.r.Job, rj.r.Attempt)
	}
	k := 0
	for i, w := range p.waiting {
		if p.waitIdx[w.r.Job] == w {
			p.waiting[k], p.waitKeys[k] = w, p.waitKeys[i]
			k++
		} else {
			p.countWaiting(w, -1)
		}
	}
	clear(p.waiting[k:])
	p.waiting, p.waitKeys = p.waiting[:k], p.waitKeys[:k]
	p.releaseMovers()
	return grants
}

// grantArena holds, in a few large allocations, what the grants of one pass need: a pass that
// starts thousands of jobs would otherwise spend most of its time allocating. (The jobs of one
// pass share their memory until the last of them is gone: a few hundred bytes per job.)
type grantArena struct {
	jobs       []runJob
	nodes      []int32  // per worker
	gpus       []uint64 // per worker
	released   []bool   // per worker
	placements []WorkerPlacement
	gpuIndices []int
}

func (p *Pool) newGrantArena(pl *plan) *grantArena {
	workers, gpus := len(pl.grantNodes), 0
	for _, g := range pl.grants {
		gpus += (g.nodesTo - g.nodesFrom) * g.w.r.Demand.GPUs
	}
	return &grantArena{jobs: make([]runJob, len(pl.grants)), nodes: make([]int32, workers), gpus: make([]uint64, workers), released: make([]bool, workers),
		placements: make([]WorkerPlacement, workers), gpuIndices: make([]int, gpus)}
}

// splitOff cuts the first n elements off s.
func splitOff[T any](s *[]T, n int) []T {
	out := (*s)[:n:n]
	*s = (*s)[n:]
	return out
}

// placement is Pool.placement for a job just started, from the arena.
func (ar *grantArena) placement(p *Pool, rj *runJob) []WorkerPlacement {
	out := splitOff(&ar.placements, len(rj.nodes))
	for w, n := range rj.nodes {
		idx := splitOff(&ar.gpuIndices, bits.OnesCount64(rj.gpus[w]))[:0]
		for m := rj.gpus[w]; m != 0; m &= m - 1 {
			idx = append(idx, bits.TrailingZeros64(m))
		}
		out[w] = WorkerPlacement{Worker: w, Node: p.nodes[n].Name, GPUs: idx}
	}
	return out
}

// start places one granted request on its nodes as rj (it stays in p.waiting until applyGrants
// compacts the queue).
func (p *Pool) start(now time.Time, pl *plan, g planGrant, rj *runJob, ar *grantArena) *runJob {
	w := g.w
	dm := &w.r.Demand
	need := demandOf(dm)
	nodes := splitOff(&ar.nodes, g.nodesTo-g.nodesFrom)
	copy(nodes, pl.grantNodes[g.nodesFrom:g.nodesTo])
	*rj = runJob{r: w.r, ws: w.ws, user: w.user, fam: p.shapes[w.shape].fam, startedAt: now, nodes: nodes,
		gpus: splitOff(&ar.gpus, len(nodes)), released: splitOff(&ar.released, len(nodes)), preemptions: w.r.Preemptions, onLoan: g.onLoan, borrowed: g.borrowed}
	rj.r.Workers, rj.r.MinWorkers = len(nodes), 0 // an elastic gang keeps the size it started with
	for i, n := range nodes {
		nd := &p.nodes[n]
		p.nodeChanged(n)
		m := lowestFree(nd.used, nd.GPUs, dm.GPUs)
		nd.used |= m
		nd.free = nd.free.sub(need)
		rj.gpus[i] = m
	}
	p.running[w.r.Job] = rj
	p.place(rj)
	delete(p.waitIdx, w.r.Job)
	// What it did not use of the capacity held for it stays out of sight until the next event.
	for _, u := range g.holds {
		h := &p.holds[u.holdIdx]
		h.amount = h.amount.sub(u.used)
	}
	for i := range p.holds {
		if p.holds[i].by == w.r.Job {
			p.holds[i].stale = true
		}
	}
	return rj
}

// applyPreemptions makes the victims releasing, nominated to their preemptor.
func (p *Pool) applyPreemptions(pl *plan) []Preemption {
	var out []Preemption
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
		v.moved = pp.move
		if pp.move {
			p.movedOut[v.r.Job] = movedOut{gang: by.r.Job, attempt: v.r.Attempt, level: p.shapes[by.shape].level, node: v.nodes[0]}
			p.reshape(v.r.Job) // (its next attempt may be waiting already, behind this one)
		}
		reason := fmt.Sprintf("preempted to make room for %s-priority %s %s, which needs %s; %s-priority jobs give way to higher classes, those that would lose the least work first",
			by.r.Class, by.r.Kind, by.r.Job, needText(by.r.Demand, by.r.Workers), v.r.Class)
		if pp.loan {
			reason = fmt.Sprintf("its time on loan is up: it started on capacity reserved for %s-priority %s %s because its run limit of %s would end it before that job's start, and it ran past it; it yields and reruns without spending a retry",
				by.r.Class, by.r.Kind, by.r.Job, v.r.RunLimit)
		}
		if pp.reclaim {
			reason = fmt.Sprintf("taken back: it borrowed beyond allocation %s's cohort share, and allocation %s's %s-priority %s %s, within its own share, needs %s; it yields and reruns without spending a retry",
				v.r.Allocation, by.r.Allocation, by.r.Class, by.r.Kind, by.r.Job, needText(by.r.Demand, by.r.Workers))
		}
		if pp.move {
			sh := &p.shapes[by.shape]
			reason = fmt.Sprintf("moved out of %s to make room for %s-priority %s %s, which needs %s in one %s: it reruns on free capacity elsewhere without spending a retry",
				p.domainText(sh.level, v.nodes[0]), by.r.Class, by.r.Kind, by.r.Job, needText(by.r.Demand, by.r.Workers), p.topo.levels[sh.level])
		}
		out = append(out, Preemption{Victim: v.r.Job, VictimAttempt: v.r.Attempt, Preemptor: *v.preemptedBy, Reason: reason, Loan: pp.loan || pp.reclaim, Reclaim: pp.reclaim, Move: pp.move})
	}
	return out
}
