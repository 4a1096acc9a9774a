package scheduler

import "time"

// scratch is per-pass working state. The pass never mutates the Pool: it works on these copies,
// so the same code serves Schedule (which applies the plan) and View/Explain (which only read it).
// Its parts are embedded, not pointed to, so that the hot path reads a field at a fixed offset
// with no pointer to follow; each part says what it is for.
type scratch struct {
	passCapacity
	passNominations
	walkerState
	placementBuffers
	victimSearch

	failed       failureCache
	grantBuf     []planGrant // plan.grants of the last pass, for the next
	grantNodeBuf []int32     // plan.grantNodes of the last pass, for the next
	reserved     []bool      // per node: reserved in this pass by the first request of a class
	// Policy.Backfill: the reservations with a known start that bind the pass.
	resvs []resv
	// caps counts the pass against Policy.Limits.
	caps capPass
	// shares is the pass's count against the cohort's shares; reclaiming says the walker, of
	// walkerAllocation, starts within its share and takes back what others borrowed there.
	shares           sharePass
	reclaiming       bool
	walkerAllocation string
}

// passCapacity is the pass's copy of every node's capacity, with the per-family summaries that
// let a request that cannot fit skip the node walk. It is kept from pass to pass (see
// capacity_sync.go): setCapacity is its one writer.
type passCapacity struct {
	free   []resources // per node: free capacity not yet granted or reserved in this pass
	rel    []resources // per node: visible releasing capacity not yet reserved in this pass
	victim []resources // per node: capacity of tentative victims (preemption search)
	// Per family and GPU count g: how many nodes have at least g free GPUs, and at least g free
	// plus releasing GPUs. A request that fails these counts needs no node walk.
	freeAtLeast, freeOrRelAtLeast [][]int32
	// Nodes that answer, by family and free GPUs in this pass: a grant looks only at the nodes
	// with the fewest free GPUs that fit it, in one sequential scan of their bucket.
	freeBuckets [][][]freeSlot
	slotOf      []int32 // per node: its index in its bucket, -1 for a lost node (in none)
	// relNodes counts, per family, the nodes with releasing capacity in sight (hasRel).
	relNodes []int32
	hasRel   []bool
	// synced: the copies above are the pool's, but for the nodes in changed (written by the
	// last pass, or changed by an event since), so that the next pass restores only those: a
	// pass costs nothing for the nodes nobody touched. False until the first pass, which copies
	// every node.
	synced      bool
	changed     []int32
	changedMark []bool
}

// passNominations is the capacity nominated to preemptors in this pass (see nomination).
type passNominations struct {
	nominations    []nomination       // in preemption order; hidden but from their nominee
	byJob          map[string][]int32 // nominee -> its nominations
	byNode         map[int32][]int32  // node -> its nominations
	hasNominations []bool             // per waiting request: capacity is nominated to it
	// relVisible: the family had releasing capacity nominated to nobody when the pass began (a
	// request without nominations sees no more than that; without any, holding free + releasing
	// capacity is the grant it already failed).
	relVisible []bool
	nextSeq    int64 // preemption sequence of the next victim chosen in this pass
}

// walkerState is what the pass knows of its walker (see the package doc's Terms), the waiting
// request it is deciding for right now (see decide): it sees the capacity nominated to it,
// which is hidden from every other one. walkerStamp is bumped for each walker; walkerOwns[n]
// == walkerStamp says the walker has a nomination on node n.
type walkerState struct {
	walkerOwns  []uint32 // per node: the stamp of the last walker with a nomination there
	walkerStamp uint32
	walkerNoms  []int32 // the walker's nominations
	// Policy.Backfill: the nodes of the walker's own reservation (which it gave up for its
	// walk), and whether the walker sees more than the others (so that its failures are not
	// cached).
	ownerNodes  []int32
	loansListed bool // candidates listed the due loans of the node it looks at (dueLoans)
	walkerExtra bool
	// moving: the victims the walker nominates are moved out of a domain (Preemption.Move).
	moving bool
	// defragDone: a gang of the class moved jobs in this pass (one per class does); defragFailed
	// marks, per shape, the classes whose gang of that shape found no moves (a bit per class; all
	// three for a shape that requires no level); noSpare marks the families with no free GPU
	// left to land a mover on (free capacity only shrinks in a pass).
	defragDone   [3]bool
	movingFor    [3]bool // a job moved for a gang of the class is still stopping (movesInFlight)
	defragFailed []uint8
	noSpare      []bool
	moverBuf     []moverCand // clearNode's scratch
	// starving: the walker has been the first waiting request of its class for
	// Policy.StarvationAfter, so MaxLossGPUHours and MinRuntimeBeforePreemption protect no victim
	// from it (and its failures are not cached).
	starving bool
	// waitedGPUSec is the walker's GPUs × the seconds since it was submitted: with
	// Policy.LossWithinWait, the most work a waiver of MaxLossGPUHours lets it throw away.
	waitedGPUSec int64
	// capWorkers is how many workers the walker's cap leaves room for (all of them without
	// one), and capUsed what its workspace held when it was capped (for the reason).
	capWorkers int
	capUsed    int
}

// placementBuffers hold the walker's placement: the candidate nodes, and the nodes picked with
// what is taken on each from releasing capacity.
type placementBuffers struct {
	nodeCands []nodeCandidate
	// domainCounts counts a gang's candidates per topology domain, and gangPick holds the
	// chosen ones (topology.gang).
	domainCounts []int32
	gangPick     []nodeCandidate
	pick         []int32
	relTake      []int32 // per picked node: GPUs taken from releasing capacity
	relUsed      []bool  // per picked node: anything taken from releasing capacity
}

// victimSearch is the working state of rule (d)'s search for victims (see chooseVictims).
type victimSearch struct {
	victims         map[*runJob]bool // the jobs preempted in this pass
	victimBuf       []victimCand
	oldest          [][3]time.Time // per family and class: see oldestStart
	oldestKnown     bool
	nodeVictimCands []victimCand
	takeoverCands   []victimCand
	protectedCands  []victimCand
	listRuns        []int       // a node's victim list, one class: where each run of one GPU count starts
	listHeads       []int       // per run merged: its head
	headKeys        []victimKey // per run merged: its head's key
	costs           []nodeCost
	perNodeVictims  []victimCand
	seenVictims     map[victimRef]bool
	fitNodes        []int32 // the nodes costNodes found fit a worker without victims
	// scope, for a gang of a required topology level, is the one domain of that level the
	// victims are chosen in (scopeLevel -1: every node); domainTally is scratch per domain.
	scopeLevel  int8
	scopeDomain int32
	domainTally []domainCost
}

func newScratch() *scratch {
	return &scratch{
		passNominations: passNominations{byJob: map[string][]int32{}, byNode: map[int32][]int32{}},
		victimSearch:    victimSearch{victims: map[*runJob]bool{}, seenVictims: map[victimRef]bool{}, scopeLevel: -1},
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// reset starts a pass: the pool's capacity, the per-family summaries, and the nominations.
func (sc *scratch) reset(p *Pool) {
	sc.defragDone, sc.movingFor = [3]bool{}, p.movesInFlight()
	sc.defragFailed = grow(sc.defragFailed, len(p.shapes))
	for s := range p.shapes {
		sc.defragFailed[s] = 0
		if !p.shapes[s].required {
			sc.defragFailed[s] = 1<<Low | 1<<Medium | 1<<High
		}
	}
	sc.noSpare = grow(sc.noSpare, len(p.fams))
	clear(sc.noSpare)
	if sc.synced && len(sc.changedMark) == len(p.nodes) {
		sc.restoreChanged(p)
	} else {
		sc.resetCapacity(p)
		sc.resetFreeLists(p)
		sc.resetRelNodes(p)
		sc.changedMark = grow(sc.changedMark, len(p.nodes))
		clear(sc.changedMark)
		sc.changed, sc.synced = sc.changed[:0], true
	}
	sc.failed.newPass(len(p.shapes))
	clear(sc.victims)
	sc.oldestKnown = false
	sc.walkerOwns = grow(sc.walkerOwns, len(p.nodes))
	sc.reserved = grow(sc.reserved, len(p.nodes))
	clear(sc.reserved)
	sc.resetNominations(p)
	sc.nextSeq = p.preemptSeq + 1
}

// resetCapacity copies the nodes' free and releasing capacity (none on a lost node) and counts,
// per family, the nodes with at least g free (and free plus releasing) GPUs.
func (sc *scratch) resetCapacity(p *Pool) {
	n := len(p.nodes)
	sc.free, sc.rel, sc.victim = grow(sc.free, n), grow(sc.rel, n), grow(sc.victim, n)
	clear(sc.victim)
	if len(sc.freeAtLeast) != len(p.fams) {
		sc.freeAtLeast = make([][]int32, len(p.fams))
		sc.freeOrRelAtLeast = make([][]int32, len(p.fams))
	}
	for f := range p.fams {
		sc.freeAtLeast[f] = grow(sc.freeAtLeast[f], p.fams[f].maxGPU+1)
		sc.freeOrRelAtLeast[f] = grow(sc.freeOrRelAtLeast[f], p.fams[f].maxGPU+1)
		clear(sc.freeAtLeast[f])
		clear(sc.freeOrRelAtLeast[f])
	}
	for i := range p.nodes {
		nd := &p.nodes[i]
		if nd.lost { // a lost node's capacity serves no one: the pass sees none, free or releasing
			sc.free[i], sc.rel[i] = resources{}, resources{}
			continue
		}
		sc.free[i], sc.rel[i] = nd.free, nd.rel
		sc.freeAtLeast[nd.fam][nd.free.gpu]++
		sc.freeOrRelAtLeast[nd.fam][nd.free.gpu+nd.rel.gpu]++
	}
	for f := range p.fams { // histogram -> "at least g"
		a, ar := sc.freeAtLeast[f], sc.freeOrRelAtLeast[f]
		for g := len(a) - 2; g >= 0; g-- {
			a[g] += a[g+1]
			ar[g] += ar[g+1]
		}
	}
}

// newBuckets makes family f's buckets, each at the size the pass starts with (a restored pool's
// first pass would otherwise grow each one step by step; later passes reuse them).
func (sc *scratch) newBuckets(p *Pool, f int32) [][]freeSlot {
	sizes := make([]int, p.fams[f].maxGPU+1)
	for _, i := range p.fams[f].live {
		sizes[sc.free[i].gpu]++
	}
	b := make([][]freeSlot, len(sizes))
	for g, k := range sizes {
		b[g] = make([]freeSlot, 0, k)
	}
	return b
}

// freeSlot is a live node in its family's bucket for its free GPUs, with copies of its free CPU
// and RAM in this pass, so that a grant reads the bucket sequentially.
type freeSlot struct {
	n        int32
	cpu, ram int
}

// resetFreeLists puts every live node into its family's bucket for its free GPUs.
func (sc *scratch) resetFreeLists(p *Pool) {
	sc.slotOf = grow(sc.slotOf, len(p.nodes))
	for i := range sc.slotOf {
		sc.slotOf[i] = -1
	}
	if len(sc.freeBuckets) != len(p.fams) {
		sc.freeBuckets = make([][][]freeSlot, len(p.fams))
	}
	for f := range p.fams {
		if len(sc.freeBuckets[f]) != p.fams[f].maxGPU+1 {
			sc.freeBuckets[f] = sc.newBuckets(p, int32(f))
		}
		for g := range sc.freeBuckets[f] {
			sc.freeBuckets[f][g] = sc.freeBuckets[f][g][:0]
		}
		for _, i := range p.fams[f].live {
			sc.link(int32(f), i, sc.free[i].gpu)
		}
	}
}

// resetNominations hides every unreleased worker of a preempted job, and the free capacity held
// for the nominee of a stopped one, on a node that answers: only their nominee sees them.
func (sc *scratch) resetNominations(p *Pool) {
	sc.nominations = sc.nominations[:0]
	clear(sc.byJob)
	clear(sc.byNode)
	for _, v := range p.victims {
		d := demandOf(&v.r.Demand)
		for w, n := range v.nodes {
			if v.released[w] || p.nodes[n].lost {
				continue
			}
			nb := v.nominee[w]
			sc.hide(p, sc.addNom(nomination{victim: v, worker: w, node: n, demand: d, class: nb.Class, by: nb.Job, seq: v.preemptSeq,
				taken: nb.Job != v.preemptedBy.Job}))
		}
	}
	for i, h := range p.holds {
		if !p.nodes[h.node].lost {
			sc.hide(p, sc.addNom(nomination{node: h.node, demand: h.amount, free: true, holdIdx: i, class: h.class, by: h.by, seq: h.seq, taken: h.taken}))
		}
	}
	sc.relVisible = grow(sc.relVisible, len(p.fams))
	for f := range sc.relVisible {
		sc.relVisible[f] = sc.relNodes[f] > 0
	}
	sc.hasNominations = grow(sc.hasNominations, len(p.waiting))
	clear(sc.hasNominations)
	for _, x := range sc.nominations {
		if w := p.waitIdx[x.by]; w != nil {
			sc.hasNominations[p.waitPos(w)] = true
		}
	}
}

func (sc *scratch) addNom(x nomination) int32 {
	i := int32(len(sc.nominations))
	sc.nominations = append(sc.nominations, x)
	sc.byJob[x.by] = append(sc.byJob[x.by], i)
	sc.byNode[x.node] = append(sc.byNode[x.node], i)
	return i
}

// hide takes nomination i's capacity out of the visible releasing capacity: what its preemptor
// does not hold itself in this pass, as much of it as is left (a strictly better request may
// have taken some of it over).
func (sc *scratch) hide(p *Pool, i int32) {
	x := &sc.nominations[i]
	n := x.node
	if x.free {
		x.hidden = x.demand.sub(x.held).atMost(sc.free[n])
		sc.setCapacity(p, n, sc.free[n].sub(x.hidden), sc.rel[n])
		return
	}
	x.hidden = x.demand.sub(x.held).atMost(sc.rel[n])
	sc.setCapacity(p, n, sc.free[n], sc.rel[n].sub(x.hidden))
}

// unhide gives nomination i's hidden capacity back to the visible releasing capacity.
func (sc *scratch) unhide(p *Pool, i int32) {
	x := &sc.nominations[i]
	n := x.node
	if x.free {
		sc.setCapacity(p, n, sc.free[n].add(x.hidden), sc.rel[n])
	} else {
		sc.setCapacity(p, n, sc.free[n], sc.rel[n].add(x.hidden))
	}
	x.hidden, x.held = resources{}, resources{}
}

func adjustCnt(c []int32, from, to int) {
	for g := to + 1; g <= from; g++ {
		c[g]--
	}
	for g := from + 1; g <= to; g++ {
		c[g]++
	}
}

// setCapacity sets node n's in-pass free and releasing capacity, keeping the per-family
// summaries and the free-GPU buckets: every write to a node's copy goes through here.
func (sc *scratch) setCapacity(p *Pool, n int32, free, rel resources) {
	f := p.nodes[n].fam
	was := sc.free[n].gpu
	adjustCnt(sc.freeAtLeast[f], was, free.gpu)
	adjustCnt(sc.freeOrRelAtLeast[f], was+sc.rel[n].gpu, free.gpu+rel.gpu)
	sc.free[n], sc.rel[n] = free, rel
	switch {
	case p.nodes[n].lost: // in no bucket
	case free.gpu != was:
		sc.unlink(f, n, was)
		sc.link(f, n, free.gpu)
	default: // its free CPU or RAM may have changed
		sl := &sc.freeBuckets[f][free.gpu][sc.slotOf[n]]
		sl.cpu, sl.ram = free.cpu, free.ram
	}
	sc.noteRel(f, n)
	sc.markChanged(n)
}

// link puts node n, with its free CPU and RAM, into family f's bucket of nodes with g free GPUs.
func (sc *scratch) link(f, n int32, g int) {
	b := &sc.freeBuckets[f][g]
	sc.slotOf[n] = int32(len(*b))
	*b = append(*b, freeSlot{n: n, cpu: sc.free[n].cpu, ram: sc.free[n].ram})
}

// unlink takes node n out of family f's bucket for g free GPUs (the bucket's last node takes
// its place).
func (sc *scratch) unlink(f, n int32, g int) {
	b := sc.freeBuckets[f][g]
	i, last := sc.slotOf[n], len(b)-1
	b[i] = b[last]
	sc.slotOf[b[i].n] = i
	sc.freeBuckets[f][g] = b[:last]
}
