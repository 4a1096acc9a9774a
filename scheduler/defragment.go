package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// DefaultDefragmentAfter is Policy.DefragmentAfter when it is 0.
const DefaultDefragmentAfter = 15 * time.Minute

// DefaultMinRuntimeBeforeMove is Policy.MinRuntimeBeforeMove when it is 0: no job is moved more
// than once an hour.
const DefaultMinRuntimeBeforeMove = time.Hour

func (p Policy) minRuntimeBeforeMove() time.Duration {
	if p.MinRuntimeBeforeMove <= 0 {
		return DefaultMinRuntimeBeforeMove
	}
	return p.MinRuntimeBeforeMove
}

// maxMoves bounds the jobs one gang's defragmentation moves.
const maxMoves = 16

// movesInFlight reports, per class, whether a job moved for a gang of that class is still
// stopping.
func (p *Pool) movesInFlight() (in [3]bool) {
	for _, v := range p.victims {
		if v.moved {
			in[v.preemptedBy.Class] = true
		}
	}
	return in
}

// mayDefragment reports whether the waiting request w (of key) has waited long enough and may
// still look for moves in this pass. defragment asks it, and so does the queue's fast path, so
// that the failure caches never skip a gang that may look.
func (sc *scratch) mayDefragment(p *Pool, now time.Time, w *waitReq, key waitKey) bool {
	if !sc.mayLookForMoves(key) || sc.movingFor[key.class] {
		return false
	}
	after := p.policy.defragmentAfter()
	return after >= 0 && now.Sub(w.r.SubmittedAt) >= after
}

// mayLookForMoves reports whether a gang of key's class and shape may still look for moves in
// this pass: no gang of its class moved jobs, and none of its shape and class found none. (No
// other bound: a gang that could move must look in the first pass that lets it, or a second pass
// at the same instant could decide a move the first did not.)
func (sc *scratch) mayLookForMoves(key waitKey) bool {
	return !sc.defragDone[key.class] && (int(key.shape) >= len(sc.defragFailed) || sc.defragFailed[key.shape]&(1<<key.class) == 0)
}

// defragmentAfter is DefragmentAfter in effect: negative for never.
func (p Policy) defragmentAfter() time.Duration {
	if p.DefragmentAfter == 0 {
		return DefaultDefragmentAfter
	}
	return p.DefragmentAfter
}

// movable reports whether rj may be moved out of a domain for a walker of class cl: a running
// job of one worker (it can rerun whole on one node elsewhere), not a notebook, not of a higher
// class than the walker, that opted in (Request.NoMove unset), under MaxPreemptions, not chosen
// in this pass already, whose attempt has run for MinRuntimeBeforeMove, and that would lose no more
// work than MaxLossGPUHours allows a preemption to (none if it saves on its notice).
func (p *Pool) movable(rj *runJob, cl Class, now time.Time, sc *scratch) bool {
	if !movableKind(rj, cl) || sc.victims[rj] || (sc.shares.on && rj.r.Allocation != sc.walkerAllocation) {
		return false
	}
	if m := p.policy.maxPreemptions(); m >= 0 && rj.preemptions >= m {
		return false
	}
	if l := p.policy.maxLossGPUSec(); l >= 0 {
		if lostWork(rj, now) > l {
			return false
		}
	}
	return now.Sub(rj.startedAt) >= p.policy.minRuntimeBeforeMove()
}

// movableKind is what of movable does not change while rj runs: running, one worker, not a
// notebook, of class cl or below, not opted out. (defragmentWake wakes for such jobs only.)
func movableKind(rj *runJob, cl Class) bool {
	return !rj.releasing && rj.r.Kind != KindNotebook && rj.r.Class <= cl && !rj.r.NoMove && len(rj.nodes) == 1
}

// clearable is a node of a domain that one worker of the gang fits on once movers leave it.
type clearable struct {
	n      int32
	movers []*runJob
	lost   int64 // the work moving them throws away, in GPU-seconds (lostWork)
	gpus   int   // the movers' GPUs
}

// defragment is the Defragmentation rule of the package doc for the walker w, a gang whose
// topology level is required and that could neither start, hold nor preempt: if it has waited
// DefragmentAfter, and no gang of its class moved jobs in this pass nor one of its shape and class
// found none, it finds the domain of that level where it starts once the fewest GPUs of movable
// jobs leave, each of which fits on free capacity outside the domain now, and moves them
// (Preemption.Move) as it would preempt victims; ok is false if none does.
func (p *Pool) defragment(now time.Time, sc *scratch, pl *plan, w *waitReq, key waitKey) (outcome, []*runJob, bool) {
	sh := &p.shapes[key.shape]
	if !sh.required || len(sc.ownerNodes) > 0 || !sc.mayDefragment(p, now, w, key) {
		return 0, nil, false // (one gang of a class at a time: see Defragmentation in the package doc)
	}
	movers, ok := p.chooseMoves(now, sc, sh, key.class)
	if !ok {
		if int(key.shape) < len(sc.defragFailed) {
			sc.defragFailed[key.shape] |= 1 << key.class
		}
		return 0, nil, false
	}
	sc.defragDone[key.class] = true
	sc.moving = true
	kind, victims := p.preemptAndTake(now, sc, pl, w, sh, movers, nil)
	sc.moving = false
	return kind, victims, true
}

// chooseMoves finds the domain to clear for sh and the jobs to move out of it: per domain, the
// nodes a worker fits on already (free and releasing capacity in sight), then the clearable nodes
// whose movers lose the least work, then hold the fewest GPUs; the domain whose movers lose the
// least work in all (then hold the fewest GPUs, then are fewest, then the lowest domain) among
// those whose every mover fits on free capacity outside it, at most maxMoves of them.
func (p *Pool) chooseMoves(now time.Time, sc *scratch, sh *shape, cl Class) ([]*runJob, bool) {
	// A mover must start again at once on free capacity: without any, nothing can move.
	if sc.noSpare[sh.fam] {
		return nil, false
	}
	var spare []int32
	for _, n := range p.fams[sh.fam].live {
		if !sc.reserved[n] && sc.free[n].gpu > 0 {
			spare = append(spare, n)
		}
	}
	if len(spare) == 0 {
		sc.noSpare[sh.fam] = true
		return nil, false
	}
	level := sh.level
	dom := p.topo.domain[level]
	fit := make([]int, p.topo.domains[level])
	var cands []clearable
	for _, n := range p.placeable(sh) {
		if sc.reserved[n] {
			continue
		}
		have := sc.free[n].add(sc.rel[n])
		if sh.need.lessEqual(have) {
			fit[dom[n]]++
			continue
		}
		if c, ok := p.clearNode(now, sc, n, sh, cl, have); ok {
			cands = append(cands, c)
		}
	}
	slices.SortStableFunc(cands, func(a, b clearable) int {
		return cmp.Or(cmp.Compare(dom[a.n], dom[b.n]), cmp.Compare(a.lost, b.lost), cmp.Compare(a.gpus, b.gpus), cmp.Compare(len(a.movers), len(b.movers)))
	})
	type option struct {
		d           int32
		from, to    int // its nodes: cands[from:to]
		lost        int64
		gpus, count int
	}
	var opts []option
	for i := 0; i < len(cands); {
		d := dom[cands[i].n]
		j := i
		for j < len(cands) && dom[cands[j].n] == d {
			j++
		}
		if need := sh.workers - fit[d]; need > 0 && j-i >= need {
			o := option{d: d, from: i, to: i + need}
			for _, c := range cands[i : i+need] {
				o.lost += c.lost
				o.gpus += c.gpus
				o.count += len(c.movers)
			}
			if o.count <= maxMoves {
				opts = append(opts, o)
			}
		}
		i = j
	}
	slices.SortFunc(opts, func(a, b option) int {
		return cmp.Or(cmp.Compare(a.lost, b.lost), cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.count, b.count), cmp.Compare(a.d, b.d))
	})
	for _, o := range opts {
		var movers []*runJob
		for _, c := range cands[o.from:o.to] {
			movers = append(movers, c.movers...)
		}
		if p.fitElsewhere(sc, spare, movers, level, o.d) {
			return movers, true
		}
	}
	return nil, false
}

// clearNode finds the movable jobs on node n whose leaving makes one worker of sh fit there
// (it has have in sight): those losing the least work first, then the fewest GPUs, skipping any
// that frees nothing still lacking.
func (p *Pool) clearNode(now time.Time, sc *scratch, n int32, sh *shape, cl Class, have resources) (clearable, bool) {
	jobs := sc.moverBuf[:0]
	for _, nj := range p.nodes[n].jobs {
		if p.movable(nj.rj, cl, now, sc) {
			jobs = append(jobs, moverCand{rj: nj.rj, lost: lostWork(nj.rj, now)})
		}
	}
	sc.moverBuf = jobs
	if len(jobs) == 0 {
		return clearable{}, false
	}
	slices.SortFunc(jobs, func(a, b moverCand) int {
		return cmp.Or(cmp.Compare(a.lost, b.lost), cmp.Compare(a.rj.r.Demand.GPUs, b.rj.r.Demand.GPUs), cmp.Compare(a.rj.r.Job, b.rj.r.Job))
	})
	lack := sh.need.sub(have)
	c := clearable{n: n}
	for _, m := range jobs {
		d := demandOf(&m.rj.r.Demand)
		if !d.meets(lack) {
			continue
		}
		c.movers = append(c.movers, m.rj)
		c.gpus += m.rj.r.Demand.GPUs
		c.lost += m.lost
		if lack = lack.sub(d); fitsLack(lack) {
			return c, true
		}
	}
	return clearable{}, false
}

// moverCand is a movable job on a node, with the work moving it throws away.
type moverCand struct {
	rj   *runJob
	lost int64
}

// fitElsewhere reports whether every mover fits, one after another, on free capacity of a spare
// node (of the movers' family, with free GPUs, not reserved in this pass) outside domain d of the
// level, within its allowed nodes: a move only helps if the moved job can start again at once.
func (p *Pool) fitElsewhere(sc *scratch, spare []int32, movers []*runJob, level int8, d int32) bool {
	taken := map[int32]resources{}
	for _, rj := range movers {
		need := demandOf(&rj.r.Demand)
		placed := false
		for _, n := range spare {
			if p.topo.domain[level][n] == d || (len(rj.r.Nodes) > 0 && !slices.Contains(rj.r.Nodes, p.nodes[n].Name)) {
				continue
			}
			if left := sc.free[n].sub(taken[n]); need.lessEqual(left) {
				taken[n] = taken[n].add(need)
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

// domainName is node n's domain at the level, as its labels name it.
func (p *Pool) domainName(level int8, n int32) string {
	return p.nodes[n].Topology[p.topo.levels[level]]
}

// domainText names node n's domain at the level for people, with the coarser levels it lies in
// (a domain is named within its parent): "rack r1 of block b2", or "rack r1" with one level.
func (p *Pool) domainText(level int8, n int32) string {
	parts := make([]string, 0, level+1)
	for l := level; l >= 0; l-- {
		parts = append(parts, p.topo.levels[l]+" "+p.domainName(l, n))
	}
	return strings.Join(parts, " of ")
}

// defragmentWake is the earliest time after now at which a gang that requires a topology level
// may move jobs with no event to say so: it reaches DefragmentAfter, or (one past it waiting) a
// running job of one worker reaches MinRuntimeBeforeMove. Zero if none.
func (p *Pool) defragmentWake(now time.Time) time.Time {
	after := p.policy.defragmentAfter()
	if after < 0 || !slices.ContainsFunc(p.shapes, func(s shape) bool { return s.required }) {
		return time.Time{}
	}
	var wake time.Time
	upd := func(t time.Time) {
		if t.After(now) && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	due := Class(-1)                 // the highest class of a gang past DefragmentAfter
	for i, key := range p.waitKeys { // (contiguous: a long queue of rigid jobs is read fast)
		if !p.shapes[key.shape].required {
			continue
		}
		t := p.waiting[i].r.SubmittedAt.Add(after)
		if !t.After(now) {
			due = max(due, key.class)
		}
		upd(t)
	}
	if due >= Low {
		m := p.policy.minRuntimeBeforeMove()
		// Only a job younger than m can become movable later; a one-worker job is on one node.
		young := now.Add(-m)
		for n := range p.nodes {
			for _, nj := range p.nodes[n].jobs {
				rj := nj.rj
				if rj.startedAt.After(young) && movableKind(rj, due) {
					upd(rj.startedAt.Add(m))
				}
			}
		}
	}
	return wake
}

// movedOut is where a job moved for a gang (Preemption.Move) came from. Its next attempt keeps its
// place in the queue, ahead of the gang, and would otherwise be placed by best fit alone, often
// on the free capacity of the very domain the gang counts on: the gang would wait on, and the
// job be moved again. So while the gang waits, that attempt is placed outside the domain.
type movedOut struct {
	gang    string // the gang it made room for
	attempt int    // the attempt that was moved
	level   int8
	node    int32 // the node it left: the domain kept clear is this node's at level
}

// keptOut reports whether request r is the next attempt of a job moved for a gang that still
// waits, and so is kept out of the domain it left.
func (p *Pool) keptOut(r *Request) (movedOut, bool) {
	m, ok := p.movedOut[r.Job]
	return m, ok && r.Attempt > m.attempt && p.waitIdx[m.gang] != nil
}

// outsideDomain is the nodes (of allowed, in its order, or of the pool in node order if allowed
// is empty) outside the domain that moved job m left.
func (p *Pool) outsideDomain(allowed []string, m movedOut) []string {
	dom := p.topo.domain[m.level]
	var out []string
	if len(allowed) > 0 {
		for _, name := range allowed {
			if n, ok := p.nodeIdx[name]; ok && dom[n] != dom[m.node] {
				out = append(out, name)
			}
		}
		return out
	}
	for n := range p.nodes {
		if dom[n] != dom[m.node] {
			out = append(out, p.nodes[n].Name)
		}
	}
	return out
}

// releaseMovers forgets the moved jobs whose gang no longer waits (it started or left) or that
// run again, and places those still waiting as any request again. (In job order, so that the
// shapes it interns are numbered alike in every replay.)
func (p *Pool) releaseMovers() {
	if len(p.movedOut) == 0 {
		return
	}
	for _, job := range sortedKeys(p.movedOut) {
		m := p.movedOut[job]
		if rj := p.running[job]; p.waitIdx[m.gang] == nil || rj != nil && rj.r.Attempt > m.attempt {
			delete(p.movedOut, job)
			p.reshape(job)
		}
	}
}

// reshape places job's waiting request, if it has one, by what its shape is now (see keptOut).
func (p *Pool) reshape(job string) {
	if w := p.waitIdx[job]; w != nil {
		if s := p.shapeOf(&w.r); s != w.shape {
			w.shape = s
			p.waitKeys[p.waitPos(w)].shape = s
			p.dirty = true
		}
	}
}
