package scheduler

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// victimKey is what the victim ordering compares (see the package doc): the candidate with the
// smaller key is preempted first.
type victimKey struct {
	yields    bool // it is on loan past its RunLimit on the walker's reserved node (scratch.loanDue)
	class     Class
	protected bool          // it restarted after a preemption less than protectFor(preemptions) ago
	saves     bool          // it saves on its notice: it loses nothing (lost is 0)
	gpus      int64         // GPUs it holds
	lost      time.Duration // now − since (see since): the work preempting it throws away is gpus × lost
	job       string
}

// lostSec is the key's lost time in whole seconds (never negative), and lostGPUSec the work in
// GPU-seconds, as lostWork counts them: the node costs add these up.
func (k *victimKey) lostSec() int64    { return max(0, int64(k.lost/time.Second)) }
func (k *victimKey) lostGPUSec() int64 { return k.gpus * k.lostSec() }

// lostWork is the work preempting rj at now throws away, in GPU-seconds: its GPUs × the seconds
// since its attempt started or since its last checkpoint, whichever is later. A job that saves
// on its notice throws away none: counted from the notice's deadline (now + the notice), after
// which it no longer runs.
func lostWork(rj *runJob, now time.Time) int64 {
	if rj.saves {
		return 0
	}
	return gpusHeld(rj) * max(0, int64(now.Sub(since(rj))/time.Second))
}

// protectBase is how long a job that restarted after its first preemption is protected; each
// further preemption doubles it, up to protectMax.
var (
	protectBase = 15 * time.Minute
	protectMax  = 24 * time.Hour
)

// protectFor is how long after restarting a job preempted k times is protected.
func protectFor(k int) time.Duration {
	if k <= 0 {
		return 0
	}
	d := protectBase
	for i := 1; i < k && d < protectMax; i++ {
		d *= 2
	}
	return min(d, protectMax)
}

func keyOf(rj *runJob, now time.Time) victimKey {
	k := victimKey{class: rj.r.Class, protected: now.Sub(rj.startedAt) < protectFor(rj.preemptions), gpus: gpusHeld(rj), saves: rj.saves, job: rj.r.Job}
	if !rj.saves {
		k.lost = now.Sub(since(rj))
	}
	return k
}

// cmpVictim is the victim order: lowest class first, then unprotected before protected, then
// the least work lost: a job that saves on its notice (none) first, then GPUs × time since,
// exactly, then that time; then job id.
func cmpVictim(a, b victimKey) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if a.protected != b.protected {
		if b.protected {
			return -1
		}
		return 1
	}
	if a.saves != b.saves {
		if a.saves {
			return -1
		}
		return 1
	}
	if c := cmpWork(a.gpus, a.lost, b.gpus, b.lost); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lost, b.lost); c != 0 {
		return c
	}
	return strings.Compare(a.job, b.job)
}

// cmpWork compares ga × da with gb × db exactly (as 128-bit products: GPUs × nanoseconds
// overflows int64 within weeks). GPU counts are never negative; a duration is negative only for
// a checkpoint reported ahead of the pass's time.
func cmpWork(ga int64, da time.Duration, gb int64, db time.Duration) int {
	sa, sb := workSign(ga, da), workSign(gb, db)
	if sa != sb || sa == 0 {
		return cmp.Compare(sa, sb)
	}
	ha, la := bits.Mul64(uint64(ga), absDuration(da))
	hb, lb := bits.Mul64(uint64(gb), absDuration(db))
	c := cmp.Compare(ha, hb)
	if c == 0 {
		c = cmp.Compare(la, lb)
	}
	return c * sa // both negative: the larger magnitude is the smaller product
}

func workSign(g int64, d time.Duration) int {
	switch {
	case g == 0 || d == 0:
		return 0
	case d < 0:
		return -1
	}
	return 1
}

func absDuration(d time.Duration) uint64 {
	if d < 0 {
		return uint64(-d)
	}
	return uint64(d)
}

// preemptible reports whether rj may be preempted now for a request of class cl: it is running
// (not stopping), not a notebook, of a strictly lower class, has run for at least
// MinRuntimeBeforePreemption, and was not already chosen in this pass.
func (p *Pool) preemptible(rj *runJob, cl Class, now time.Time, sc *scratch) bool {
	if rj.releasing || rj.r.Kind == KindNotebook || rj.r.Class >= cl || sc.victims[rj] {
		return false
	}
	if sc.shares.on && rj.r.Allocation != sc.walkerAllocation {
		return false // (another allocation's job gives way only when taken back: reclaimable)
	}
	if m := p.policy.maxPreemptions(); m >= 0 && rj.preemptions >= m && !(sc.starving && !p.policy.StrictMaxPreemptions && rj.preemptions == m) {
		return false // (a starving walker may preempt a job once more: see Starvation in the package doc)
	}
	if p.policy.Backfill && !rj.startedAt.Before(now) {
		return false // (Backfill: a job is not preempted at the instant it started, see the package doc)
	}
	if sc.overrunVictim(rj, now) || sc.starving {
		// (Backfill: it ran past its RunLimit on the walker's reserved nodes; StarvationAfter: the
		// walker starved. See Backfill and Starvation in the package doc.)
		l := p.policy.maxLossGPUSec()
		return !p.policy.LossWithinWait || l < 0 || lostWork(rj, now) <= max(sc.waitedGPUSec, l)
	}
	if l := p.policy.maxLossGPUSec(); l >= 0 {
		if lostWork(rj, now) > l {
			return false
		}
	}
	m := p.policy.MinRuntimeBeforePreemption
	return m <= 0 || now.Sub(rj.startedAt) >= m
}

// victimRef is a candidate of the victim search: a running job to preempt (nom < 0), or capacity
// nominated to a strictly lower-class request, to take over (rj == nil).
type victimRef struct {
	rj  *runJob
	nom int32
}

// victimCand is a candidate on one node: its key and what it frees there.
type victimCand struct {
	ref  victimRef
	key  victimKey
	take bool      // a takeover: it loses no work
	seq  int64     // a takeover: the nomination's sequence
	amt  resources // what it frees on the node
}

func cmpVictimCand(a, b victimCand) int {
	if a.key.yields != b.key.yields { // a loan that is due goes first, whatever its class
		if a.key.yields {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.key.class, b.key.class); c != 0 {
		return c
	}
	if a.take != b.take {
		if a.take {
			return -1
		}
		return 1
	}
	if a.take {
		return cmp.Compare(a.seq, b.seq)
	}
	return cmpVictim(a.key, b.key)
}

// lack is what one worker of sh still misses on node n beyond the pass's free and visible
// releasing capacity (negative: to spare).
func (sc *scratch) lack(n int32, sh *shape) resources {
	return sh.need.sub(sc.free[n]).sub(sc.rel[n])
}

// fitsLack reports whether a worker that lacks l lacks nothing.
func fitsLack(l resources) bool { return l.lessEqual(resources{}) }

// candidates lists node n's candidates for a request of class cl, in victim order (cmpVictimCand):
// capacity nominated to strictly lower-class requests (a takeover loses no work, so it comes
// before preempting a job of the same class), and preemptible jobs, class by class. The jobs
// come from the node's victim list, kept in order (see listedVictim), not sorted here.
func (p *Pool) candidates(now time.Time, sc *scratch, n int32, cl Class) []victimCand {
	takes := sc.takeoverCands[:0]
	for _, k := range sc.byNode[n] {
		x := &sc.nominations[k]
		if x.class < cl && x.hidden.positive() && p.sameAllocation(sc, x.by) { // the walker's own are of its class
			takes = append(takes, victimCand{ref: victimRef{nom: k}, key: victimKey{class: x.class}, take: true, seq: x.seq, amt: x.hidden})
		}
	}
	if len(takes) > 1 {
		slices.SortFunc(takes, cmpVictimCand) // (a handful at most: the nominations on one node)
	}
	sc.takeoverCands = takes
	out := sc.nodeVictimCands[:0]
	list := p.nodes[n].victimList // by class, then GPUs
	sc.loansListed = len(sc.ownerNodes) > 0 && slices.Contains(sc.ownerNodes, n)
	if sc.loansListed {
		out = sc.dueLoans(now, list, out)
	}
	if sc.reclaiming {
		out = sc.borrowedJobs(now, list, out)
	}
	for c := Low; c < cl; c++ {
		for len(takes) > 0 && takes[0].key.class == c {
			out, takes = append(out, takes[0]), takes[1:]
		}
		k := 0
		for k < len(list) && list[k].class == c {
			k++
		}
		if k > 0 {
			out = p.mergeClass(now, sc, list[:k], cl, out)
			list = list[k:]
		}
	}
	sc.nodeVictimCands = out
	return out
}

// dueLoans appends the jobs of a node's victim list that are on loan past their RunLimit there
// (the walker reserved the node: see scratch.loanDue), whatever their class, in victim order.
func (sc *scratch) dueLoans(now time.Time, list []listedVictim, out []victimCand) []victimCand {
	from := len(out)
	for _, lv := range list {
		if rj := lv.rj; !sc.victims[rj] && sc.loanDue(rj, now) {
			k := keyOf(rj, now)
			k.yields = true
			out = append(out, victimCandOf(rj, k))
		}
	}
	slices.SortFunc(out[from:], cmpVictimCand)
	return out
}

// nodeVictims finds the candidates on node n that let one worker of sh fit there: in victim
// order, skipping every one that frees nothing the worker still lacks, until nothing is lacking;
// then, walking the chosen ones backwards, it drops each that the worker fits without. They are
// appended to sc.perNodeVictims; ok is false if n cannot be made to fit.
func (p *Pool) nodeVictims(now time.Time, sc *scratch, n int32, sh *shape, cl Class) (ok bool) {
	l := sc.lack(n, sh)
	if fitsLack(l) {
		return true
	}
	start := len(sc.perNodeVictims)
	for _, c := range p.candidates(now, sc, n, cl) {
		if !c.amt.meets(l) { // it frees nothing the worker still lacks
			continue
		}
		sc.perNodeVictims = append(sc.perNodeVictims, c)
		l = l.sub(c.amt)
		if fitsLack(l) {
			break
		}
	}
	if !fitsLack(l) {
		sc.perNodeVictims = sc.perNodeVictims[:start]
		return false
	}
	for k := len(sc.perNodeVictims) - 1; k >= start; k-- {
		a := sc.perNodeVictims[k].amt
		if fitsLack(l.add(a)) {
			l = l.add(a)
			sc.perNodeVictims = slices.Delete(sc.perNodeVictims, k, k+1)
		}
	}
	return true
}

// nodeCost is what making one node fit costs: the highest class among its victims (or among the
// requests whose nominated capacity it takes over), how many of its victims are protected after
// a preemption, the work they lose, and how many they are.
type nodeCost struct {
	n        int32
	maxClass Class
	// takenClass is the highest class among the borrowed jobs taken back there (a cohort's
	// reclaim): after maxClass, which counts only the walker's own allocation's victims (-1:
	// none), so that taking back comes before preempting and the lower class is taken first.
	takenClass Class
	protected  int
	lost       int64 // GPU-seconds
	lostSec    int64
	count      int
	start, end int // its candidates: sc.perNodeVictims[start:end]
}

func cmpNodeCost(a, b nodeCost) int {
	if c := cmp.Compare(a.maxClass, b.maxClass); c != 0 {
		return c
	}
	if c := cmp.Compare(a.takenClass, b.takenClass); c != 0 {
		return c
	}
	if c := cmp.Compare(a.protected, b.protected); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lost, b.lost); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lostSec, b.lostSec); c != 0 {
		return c
	}
	if c := cmp.Compare(a.count, b.count); c != 0 {
		return c
	}
	return cmp.Compare(a.n, b.n)
}

// chooseVictims finds the running jobs to preempt, and the nominated capacity to take over, so
// that sh fits on free + visible releasing + their capacity (see the package doc for the exact
// rules); ok is false if nothing does. Nodes reserved in this pass are left alone.
func (p *Pool) chooseVictims(now time.Time, sc *scratch, sh *shape, cl Class) (victims []*runJob, takeovers []int32, ok bool) {
	if len(sc.ownerNodes) == 0 && !sc.reclaiming && !sc.takeable(cl) && !p.anyPreemptibleBelow(now, sc, sh.fam, cl) {
		return nil, nil, false // nothing below its class may be preempted, and nothing is nominated below it
	}
	fit := p.costNodes(now, sc, sh, cl)
	need := sh.workers - fit
	slices.SortFunc(sc.costs, cmpNodeCost)
	if sh.required {
		if need = sc.cheapestDomain(p, sh); need > 0 {
			defer func() { sc.scopeLevel = -1 }()
		}
	}
	if need <= 0 || len(sc.costs) < need {
		return nil, nil, false
	}
	vs := sc.cheapestNodesVictims(need)
	sc.dropUnneeded(p, vs, sh)
	for _, v := range vs {
		switch {
		case v.ref.nom == droppedVictim:
		case v.ref.rj != nil:
			victims = append(victims, v.ref.rj)
			sc.addRef(p, v.ref, sh, -1)
		default:
			takeovers = append(takeovers, v.ref.nom)
			sc.addRef(p, v.ref, sh, -1)
		}
	}
	sc.victimBuf = vs[:0]
	return victims, takeovers, true
}

// droppedVictim marks a candidate that dropUnneeded found unneeded.
const droppedVictim = -2

// anyPreemptibleBelow reports whether a running job of family fam and a class below cl might be
// a victim now: one that is not stopping, not a notebook, and (with
// Policy.MinRuntimeBeforePreemption) has run long enough. It may say true when the limits rule
// every one out, never false when one qualifies.
func (p *Pool) anyPreemptibleBelow(now time.Time, sc *scratch, fam int32, cl Class) bool {
	m := p.policy.MinRuntimeBeforePreemption
	if len(sc.ownerNodes) > 0 || sc.starving {
		m = 0 // (an overrun job on its reserved nodes, or a starving walker, ignores it)
	}
	for c := Low; c < cl; c++ {
		if p.nPreemptible[fam][c] == 0 {
			continue
		}
		if m <= 0 || now.Sub(sc.oldestStart(p, fam, c)) >= m {
			return true
		}
	}
	return false
}

// oldestStart is the earliest start of a running job of family fam and class c that is not
// stopping and not a notebook, computed once per pass when first needed: while every such job is
// younger than MinRuntimeBeforePreemption, no victim search is needed (a burst of arrivals would
// otherwise search every node on every pass).
func (sc *scratch) oldestStart(p *Pool, fam int32, c Class) time.Time {
	if !sc.oldestKnown {
		sc.oldest = grow(sc.oldest, len(p.fams))
		clear(sc.oldest)
		// The earliest start is the same in any map order.
		//workflowcheck:ignore
		for _, rj := range p.running {
			if rj.releasing || rj.r.Kind == KindNotebook {
				continue
			}
			if o := &sc.oldest[rj.fam][rj.r.Class]; o.IsZero() || rj.startedAt.Before(*o) {
				*o = rj.startedAt
			}
		}
		sc.oldestKnown = true
	}
	return sc.oldest[fam][c]
}

// costNodes finds, on every node sh may be placed on (Pool.placeable: of its family, within its
// allowed nodes) that is not reserved in this pass, the candidates that make one worker fit
// (sc.perNodeVictims) and what they cost (sc.costs). It returns how many nodes fit a worker
// without any. No other node is looked at: a request never preempts for capacity it may not use.
func (p *Pool) costNodes(now time.Time, sc *scratch, sh *shape, cl Class) (fit int) {
	sc.perNodeVictims, sc.costs, sc.fitNodes = sc.perNodeVictims[:0], sc.costs[:0], sc.fitNodes[:0]
	for _, n := range p.placeable(sh) {
		if sc.reserved[n] {
			continue
		}
		start := len(sc.perNodeVictims)
		if !p.nodeVictims(now, sc, n, sh, cl) {
			continue
		}
		if len(sc.perNodeVictims) == start {
			fit++
			sc.fitNodes = append(sc.fitNodes, n)
			continue
		}
		c := nodeCost{n: n, count: len(sc.perNodeVictims) - start, start: start, end: len(sc.perNodeVictims)}
		if sc.reclaiming {
			c.maxClass = -1
		}
		for _, v := range sc.perNodeVictims[start:] {
			switch {
			case v.ref.rj != nil && sc.reclaimable(v.ref.rj):
				c.takenClass = max(c.takenClass, v.key.class)
			case !v.key.yields: // (a due loan costs a node no class)
				c.maxClass = max(c.maxClass, v.key.class)
			}
			if v.key.protected {
				c.protected++
			}
			c.lost += v.key.lostGPUSec()
			c.lostSec += v.key.lostSec()
		}
		sc.costs = append(sc.costs, c)
	}
	return fit
}

// domainCost is what making one domain hold a gang of a required level costs: the nodes of it
// that fit a worker already, how many more it needs, and the costs of the cheapest of those, added
// up as one nodeCost (its highest class, the sums of the rest).
type domainCost struct {
	fit, taken int
	cost       nodeCost
}

// cheapestDomain narrows the victim search of a gang whose topology level is required to one
// domain of that level: the one whose cheapest nodes make it hold the gang at the least cost
// (cmpNodeCost on the sums; then the lowest domain), so that the victims free one domain rather
// than several. It keeps in sc.costs (sorted) only those nodes, sets the scope (see
// scratch.scopeLevel) and returns how many of them are needed; 0 if no domain can be made to
// hold the gang, or one holds it without victims.
func (sc *scratch) cheapestDomain(p *Pool, sh *shape) int {
	dom := p.topo.domain[sh.level]
	sc.domainTally = grow(sc.domainTally, p.topo.domains[sh.level])
	tally := sc.domainTally
	clear(tally)
	for _, n := range sc.fitNodes {
		tally[dom[n]].fit++
	}
	for _, c := range sc.costs { // sorted: the cheapest nodes of each domain first
		t := &tally[dom[c.n]]
		if t.fit+t.taken >= sh.workers {
			continue
		}
		if t.taken == 0 {
			t.cost = nodeCost{n: c.n, maxClass: c.maxClass}
		}
		t.taken++
		t.cost.maxClass = max(t.cost.maxClass, c.maxClass)
		t.cost.takenClass = max(t.cost.takenClass, c.takenClass)
		t.cost.protected += c.protected
		t.cost.lost += c.lost
		t.cost.lostSec += c.lostSec
		t.cost.count += c.count
	}
	best := int32(-1)
	for d := range tally {
		t := &tally[d]
		if t.fit >= sh.workers {
			return 0 // (it fits there without victims: nothing to preempt for)
		}
		if t.taken == 0 || t.fit+t.taken < sh.workers {
			continue
		}
		if best < 0 || cmpNodeCost(t.cost, tally[best].cost) < 0 {
			best = int32(d)
		}
	}
	if best < 0 {
		return 0
	}
	sc.costs = slices.DeleteFunc(sc.costs, func(c nodeCost) bool { return dom[c.n] != best })
	sc.scopeLevel, sc.scopeDomain = sh.level, best
	return tally[best].taken
}

// inScope reports whether node n counts in the victim search (see scratch.scopeLevel).
func (sc *scratch) inScope(p *Pool, n int32) bool {
	return sc.scopeLevel < 0 || p.topo.domain[sc.scopeLevel][n] == sc.scopeDomain
}

// cheapestNodesVictims is the union of the candidates of the need cheapest nodes (sc.costs is
// sorted), in victim order.
func (sc *scratch) cheapestNodesVictims(need int) []victimCand {
	clear(sc.seenVictims)
	vs := sc.victimBuf[:0]
	for _, c := range sc.costs[:need] {
		for _, v := range sc.perNodeVictims[c.start:c.end] {
			if !sc.seenVictims[v.ref] {
				sc.seenVictims[v.ref] = true
				vs = append(vs, v)
			}
		}
	}
	slices.SortFunc(vs, cmpVictimCand)
	return vs
}

// dropUnneeded marks (droppedVictim) every candidate of vs the request still fits without,
// walking from the most valuable: a victim with workers on several nodes may make others
// unneeded. The kept candidates stay counted in sc.victim until chooseVictims takes them out.
func (sc *scratch) dropUnneeded(p *Pool, vs []victimCand, sh *shape) {
	cnt := 0
	for _, n := range p.placeable(sh) {
		if !sc.reserved[n] && sc.inScope(p, n) && sc.fitsEx(n, sh) {
			cnt++
		}
	}
	for _, v := range vs {
		cnt += sc.addRef(p, v.ref, sh, +1)
	}
	if cnt < sh.workers {
		panic("scheduler: the chosen victims do not make room") // unreachable: each chosen node fits
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if d := sc.addRef(p, vs[i].ref, sh, -1); cnt+d >= sh.workers {
			cnt += d
			vs[i].ref = victimRef{nom: droppedVictim}
		} else {
			sc.addRef(p, vs[i].ref, sh, +1)
		}
	}
}

// takeable reports whether any nomination of a class below cl exists in this pass.
func (sc *scratch) takeable(cl Class) bool {
	for i := range sc.nominations {
		if sc.nominations[i].class < cl {
			return true
		}
	}
	return false
}

// addRef adds (sign=+1) or removes (-1) a candidate's capacity (see addEx).
func (sc *scratch) addRef(p *Pool, r victimRef, sh *shape, sign int) int {
	if r.rj != nil {
		return sc.addEx(p, r.rj, sh, sign)
	}
	x := &sc.nominations[r.nom]
	n := x.node
	if p.nodes[n].fam != sh.fam || sc.reserved[n] || !sh.may(n) || !sc.inScope(p, n) {
		return 0
	}
	before := sc.fitsEx(n, sh)
	sc.markChanged(n)
	sc.victim[n] = sc.victim[n].add(x.hidden.times(sign))
	after := sc.fitsEx(n, sh)
	switch {
	case after && !before:
		return 1
	case before && !after:
		return -1
	}
	return 0
}

func (sc *scratch) fitsEx(n int32, sh *shape) bool {
	return sh.need.lessEqual(sc.free[n].add(sc.rel[n]).add(sc.victim[n]))
}

// addEx adds (sign=+1) or removes (-1) a tentative victim's capacity and returns the change in the
// number of nodes that can hold one worker of sh. Workers on lost or reserved nodes add nothing:
// that capacity serves no one even once they stop; nor do those on nodes sh may not use.
func (sc *scratch) addEx(p *Pool, rj *runJob, sh *shape, sign int) int {
	d, delta := demandOf(&rj.r.Demand).times(sign), 0
	for w, n := range rj.nodes {
		if rj.released[w] || p.nodes[n].lost || sc.reserved[n] || p.nodes[n].fam != sh.fam || !sh.may(n) || !sc.inScope(p, n) {
			continue
		}
		before := sc.fitsEx(n, sh)
		sc.markChanged(n)
		sc.victim[n] = sc.victim[n].add(d)
		after := sc.fitsEx(n, sh)
		if after && !before {
			delta++
		} else if before && !after {
			delta--
		}
	}
	return delta
}
