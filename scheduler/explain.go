package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// maxWaitingFor bounds WaitingInfo.WaitingFor for requests blocked by better requests.
const maxWaitingFor = 5

// View returns the whole state. Waiting requests are explained by a dry run of the same pass
// Schedule runs, at the time of the last Schedule call.
func (p *Pool) View() View {
	return p.ViewPage(0, len(p.waiting))
}

// ViewPage is View with only the waiting requests from offset (0 = the first) to offset+limit
// explained and listed. The pass runs over the whole queue, but only that page pays for its
// explanations, so a page of a long queue costs little more than a scheduling pass.
func (p *Pool) ViewPage(offset, limit int) View {
	page := span{from: min(max(offset, 0), len(p.waiting))}
	page.to = page.from + min(max(limit, 0), len(p.waiting)-page.from)
	return p.view(page)
}

// ViewPageWhere is ViewPage over the waiting requests keep keeps (nil: all of them): the page
// lists the matching requests from offset to offset+limit, and the count is how many match in
// the whole queue. Each listed request is explained as the whole View explains it (its Position
// is its place in the whole queue), since the pass still runs over every request: a filter
// chooses what is listed, not what is scheduled. keep must not change the request.
func (p *Pool) ViewPageWhere(offset, limit int, keep func(*Request) bool) (View, int) {
	if keep == nil {
		return p.ViewPage(offset, limit), len(p.waiting)
	}
	offset, limit = max(offset, 0), max(limit, 0)
	var listed []int
	matched := 0
	for i, w := range p.waiting {
		if !keep(&w.r) {
			continue
		}
		if matched >= offset && len(listed) < limit {
			listed = append(listed, i)
		}
		matched++
	}
	var page span // none listed: explain nothing, as a page past the end
	if len(listed) > 0 {
		page = span{from: listed[0], to: listed[len(listed)-1] + 1, only: listed}
	}
	return p.view(page), matched
}

// view is the state with the waiting requests page explains listed.
func (p *Pool) view(page span) View {
	pl := p.plan(p.lastNow, newScratch(), page, -1)
	ex := p.newExplainer(pl)
	v := View{Waiting: make([]WaitingInfo, 0, page.size()), Nodes: p.nodeInfos()}
	if page.only != nil {
		for _, i := range page.only {
			v.Waiting = append(v.Waiting, ex.info(i))
		}
	} else {
		for i := page.from; i < page.to; i++ {
			v.Waiting = append(v.Waiting, ex.info(i))
		}
	}
	for _, r := range pl.reserves {
		for _, n := range r.nodes {
			v.Nodes[n].ReservedFor = r.w.r.Job
		}
	}
	running := p.sortedRunning()
	if len(running) > 0 {
		v.Running = make([]RunningInfo, len(running))
	}
	for i, rj := range running {
		v.Running[i] = p.runningInfo(rj)
	}
	return v
}

// WaitingByClass counts the waiting requests of each class (indexed by Class).
func (p *Pool) WaitingByClass() [3]int {
	var out perClass
	end := len(p.waiting)
	for c := Low; c <= High; c++ { // the queue holds the classes highest first
		start := sort.Search(len(p.waiting), func(i int) bool { return p.waiting[i].r.Class <= c })
		out[c], end = end-start, start
	}
	return out
}

// Explain explains one waiting job (see View).
func (p *Pool) Explain(job string) (WaitingInfo, bool) {
	w := p.waitIdx[job]
	if w == nil {
		return WaitingInfo{}, false
	}
	i := p.waitPos(w)
	pl := p.plan(p.lastNow, newScratch(), span{from: i, to: i + 1}, -1)
	return p.newExplainer(pl).info(i), true
}

type explainer struct {
	p          *Pool
	pl         *plan
	classStart perClass            // index of the first waiting request of each class
	holders    map[int32][]*runJob // node -> releasing (or to-be-preempted) jobs holding capacity there
	planVictim map[*runJob]*waitReq
	planTaken  map[*runJob]*waitReq // stopping victims whose capacity a better request takes over
	needs      map[int32]string     // needText per shape
	lost       map[int32]lostFit
	blocked    map[int]leastBlocked // per leastBlocked key
	held       map[int][]resources  // per class and starving (heldBy)
}

// lostFit is Pool.lostFit for one shape.
type lostFit struct {
	live int
	lost []string
}

func (p *Pool) newExplainer(pl *plan) *explainer {
	ex := &explainer{p: p, pl: pl, holders: map[int32][]*runJob{}, planVictim: map[*runJob]*waitReq{}, planTaken: map[*runJob]*waitReq{},
		needs: map[int32]string{}, lost: map[int32]lostFit{}, blocked: map[int]leastBlocked{}, held: map[int][]resources{}}
	for _, t := range pl.takeovers {
		if t.v != nil {
			ex.planTaken[t.v] = t.by
		}
	}
	for c := Low; c <= High; c++ {
		ex.classStart[c] = sort.Search(len(p.waiting), func(i int) bool { return p.waiting[i].r.Class <= c })
	}
	for _, pp := range pl.preempts {
		ex.planVictim[pp.victim] = pp.by
	}
	for _, rj := range p.sortedRunning() {
		if !rj.releasing && ex.planVictim[rj] == nil {
			continue
		}
		for w, n := range rj.nodes {
			if !rj.released[w] {
				ex.holders[n] = append(ex.holders[n], rj)
			}
		}
	}
	return ex
}

func (ex *explainer) lostFit(shape int32, d Demand) (int, []string) {
	lf, ok := ex.lost[shape]
	if !ok {
		lf.live, lf.lost = ex.p.lostFit(&ex.p.shapes[shape], d)
		ex.lost[shape] = lf
	}
	return lf.live, lf.lost
}

func (ex *explainer) preemptedFor(rj *runJob, job string) bool {
	if by := ex.planVictim[rj]; by != nil {
		return by.r.Job == job
	}
	if by := ex.planTaken[rj]; by != nil {
		return by.r.Job == job
	}
	return slices.ContainsFunc(rj.nominee, func(nb *Preemptor) bool { return nb.Job == job })
}

// info explains the i-th waiting request from its outcome in the dry-run pass.
func (ex *explainer) info(i int) WaitingInfo {
	w := ex.p.waiting[i]
	r := &w.r
	wi := WaitingInfo{Job: r.Job, Attempt: r.Attempt, Kind: r.Kind, Class: r.Class, Workers: r.Workers,
		Demand: r.Demand, GPUs: r.Workers * r.Demand.GPUs, Position: i + 1, SubmittedAt: r.SubmittedAt, Seq: r.Seq, Nodes: slices.Clone(r.Nodes)}
	if r.elastic() {
		wi.MinWorkers = r.MinWorkers
	}
	o := ex.pl.out(i)
	higher := ex.classStart[r.Class]
	behind := behindText(higher, i-higher)
	need := ex.needText(w)
	if r.elastic() && o.nodes != nil && o.kind != outReserving {
		need = needText(r.Demand, len(o.nodes)) // the size the elastic gang got in the pass
		if len(o.nodes) < r.Workers {
			need += fmt.Sprintf(" (%d of its %d workers: it is elastic down to %d)", len(o.nodes), r.Workers, r.MinWorkers)
		}
	}
	switch o.kind {
	case outGranted:
		wi.Reason = "can start now: " + need + " " + plural(len(o.nodes), "is", "are") + " free; it starts at the next scheduling pass"
	case outNominated, outPreempting:
		ex.explainWaitForCapacity(&wi, o, need)
	case outStrictBlocked:
		ex.explainStrictBlocked(&wi, o, behind)
	case outReserving:
		ex.explainReserving(&wi, o, need, behind)
	case outCapped:
		wi.Reason = ex.p.capText(w, o.capUsed)
	case outBorrowCapped:
		wi.Reason = ex.p.shareText(w, o.capUsed)
	case outPrevAttempt:
		prev := ex.p.running[r.Job]
		wi.Reason = fmt.Sprintf("waiting for its previous attempt (%d) to release its capacity", prev.r.Attempt)
		wi.WaitingFor = []string{r.Job}
	default: // outNoFit
		ex.explainNoFit(&wi, i, o, need, behind)
	}
	if wi.Reason == "" { // defensive: the contract says never empty
		wi.Reason = "waiting"
	}
	return wi
}

// needText describes what the request needs, once per shape.
func (ex *explainer) needText(w *waitReq) string {
	need, ok := ex.needs[w.shape]
	if !ok {
		need = needText(w.r.Demand, w.r.Workers)
		if sh := &ex.p.shapes[w.shape]; sh.required {
			by := w.r.Topology.Text()
			if by == "" {
				by = "the allocation's gang_topology"
			}
			need += fmt.Sprintf(" in one %s (%s)", ex.p.topo.levels[sh.level], by)
		}
		if w.r.elastic() {
			need += fmt.Sprintf(" (or at least %d of them: it is elastic)", w.r.MinWorkers)
		}
		ex.needs[w.shape] = need
	}
	return need
}

// holderGroup is capacity the request waits for, grouped by the jobs releasing it and by whether
// it is nominated to the request.
type holderGroup struct {
	holders string // the releasing jobs' names, joined
	mine    bool   // every holder is stopping for this request
	gpus    int
	nodes   []string
}

// explainWaitForCapacity explains a request that holds free and releasing capacity (and may
// preempt for it): which nodes, released by whom, and whether that capacity is nominated to it.
func (ex *explainer) explainWaitForCapacity(wi *WaitingInfo, o *planOut, need string) {
	groups, waitFor, nominated, freeHeld := ex.holderGroups(wi.Job, o)
	wi.Reason = "waiting for " + need
	if freeHeld > 0 {
		wi.Reason += fmt.Sprintf("; %d %s already free and held for it", freeHeld, plural(freeHeld, "node is", "nodes are"))
	}
	if o.kind == outPreempting {
		names := make([]string, len(o.victims))
		for k, v := range o.victims {
			names[k] = v.r.Job
		}
		wi.Reason += fmt.Sprintf("; lower-priority %s %s will be preempted to make room", plural(len(names), "job", "jobs"), strings.Join(names, ", "))
		nominated = append(nominated, names...)
		waitFor = append(waitFor, names...)
	}
	for gi, g := range groups {
		if gi == 4 {
			wi.Reason += fmt.Sprintf("; and capacity on %d more nodes", len(groups)-gi)
			break
		}
		wi.Reason += "; " + g.text(o.kind == outPreempting, wi.Demand.GPUs > 0)
	}
	wi.WaitingFor = sortedUnique(waitFor)
	wi.Nominated = sortedUnique(nominated)
}

// holderGroups groups the releasing capacity the request takes by its holders; it also returns
// every holder, those stopping for this request, and how many of its nodes are free already.
func (ex *explainer) holderGroups(job string, o *planOut) (groups []*holderGroup, waitFor, nominated []string, freeHeld int) {
	for k, n := range o.nodes {
		if !o.relUsed[k] {
			freeHeld++
			continue
		}
		var names []string
		mine := true
		for _, h := range ex.holders[n] {
			names = append(names, h.r.Job)
			if ex.preemptedFor(h, job) {
				nominated = append(nominated, h.r.Job)
			} else {
				mine = false
			}
		}
		waitFor = append(waitFor, names...)
		key := strings.Join(names, ", ")
		var g *holderGroup
		for _, x := range groups {
			if x.holders == key && x.mine == mine {
				g = x
			}
		}
		if g == nil {
			g = &holderGroup{holders: key, mine: mine}
			groups = append(groups, g)
		}
		g.gpus += int(o.relTake[k])
		g.nodes = append(g.nodes, ex.p.nodes[n].Name)
	}
	return groups, waitFor, nominated, freeHeld
}

// text says what capacity the group holds and who releases it, e.g. "4 GPUs on n-3 are being
// released by low-2w (nominated to you)".
func (g *holderGroup) text(preempting, gpus bool) string {
	where := strings.Join(g.nodes, ", ")
	if len(g.nodes) > 3 {
		where = fmt.Sprintf("%s and %d more nodes", strings.Join(g.nodes[:3], ", "), len(g.nodes)-3)
	}
	verb := "being released"
	if preempting && g.mine {
		verb = "to be released"
	}
	holders := g.holders
	if holders == "" { // cannot happen: releasing capacity always has a holder
		holders = "stopping jobs"
	}
	var out string
	if gpus {
		out = fmt.Sprintf("%d %s on %s %s %s by %s", g.gpus, plural(g.gpus, "GPU", "GPUs"), where, plural(g.gpus, "is", "are"), verb, holders)
	} else {
		out = fmt.Sprintf("capacity on %s is %s by %s", where, verb, holders)
	}
	if g.mine {
		out += " (nominated to you)"
	}
	return out
}

// explainStrictBlocked explains a request behind a strict-fifo blocker.
func (ex *explainer) explainStrictBlocked(wi *WaitingInfo, o *planOut, behind string) {
	b := ex.p.waiting[o.blocker]
	wi.Reason = fmt.Sprintf("%s; the allocation uses strict-fifo queueing, so nothing starts before %s (position %d), which cannot start yet",
		behind, b.r.Job, o.blocker+1)
	wi.WaitingFor = []string{b.r.Job}
}

// explainReserving explains a long-waiting first request of its class that reserves nodes.
func (ex *explainer) explainReserving(wi *WaitingInfo, o *planOut, need, behind string) {
	p := ex.p
	names := make([]string, len(o.nodes))
	for k, n := range o.nodes {
		names[k] = p.nodes[n].Name
	}
	wi.Reserved = names
	since := p.lastNow.Sub(p.heads[wi.Class].since)
	rule := "no later job starts there until it fits"
	switch {
	case o.drains:
		rule += " (when it will fit is unknown: a job there has no time limit, or has run past its estimate, so nothing may start there on loan)"
	case p.policy.Backfill:
		rule = "until it fits, only jobs whose time limits end them before then, or that fit beside it, start there (backfill)"
	}
	w := p.waitIdx[wi.Job]
	sh := &p.shapes[w.shape]
	where := plural(len(names), "node", "nodes") + " " + listText(names)
	if sh.required && len(o.nodes) > 0 { // (the gang's nodes are one domain)
		where += " (" + p.domainText(sh.level, o.nodes[0]) + ")"
	}
	wi.Reason = fmt.Sprintf("waiting for %s; it has been the first %s-priority request for %s (reserve_after %s), so %s %s reserved for it: %s",
		need, wi.Class, since.Round(time.Second), p.policy.ReserveAfter, where, plural(len(names), "is", "are"), rule)
	in := p.inTheWay(wi.Class, p.starvingHead(w), o.nodes)
	if blockers := p.blockers(o.nodes, sh.need, in); len(blockers) > 0 {
		wi.Reason += "; the jobs there that it may not preempt and that leave it no room are " + p.blockersText(wi, blockers)
	}
	if behind != "" {
		wi.Reason = behind + "; " + wi.Reason
	}
}

// blockersText names the first blockers with how long each has run (blockerText), "a (…), b
// (…) and c (…)" or "… and 3 more", and adds them to wi.WaitingFor.
func (p *Pool) blockersText(wi *WaitingInfo, blockers []*runJob) string {
	shown := blockers[:min(len(blockers), 4)]
	texts := make([]string, len(shown))
	for k, rj := range shown {
		texts[k] = p.blockerText(rj)
		wi.WaitingFor = append(wi.WaitingFor, rj.r.Job)
	}
	slices.Sort(wi.WaitingFor)
	if more := len(blockers) - len(shown); more > 0 {
		return fmt.Sprintf("%s and %d more", strings.Join(texts, ", "), more)
	}
	if len(texts) == 1 {
		return texts[0]
	}
	return strings.Join(texts[:len(texts)-1], ", ") + " and " + texts[len(texts)-1]
}

// starvingHead reports whether w is the first waiting request of its class and starving (see
// Starvation in the package doc).
func (p *Pool) starvingHead(w *waitReq) bool {
	i := p.firstOf(w.r.Class)
	return i >= 0 && p.waiting[i] == w && p.starving(p.lastNow, w)
}

// inTheWay is whether a request of class c (starving: see starvingHead), owner of a reservation
// on ownNodes (nil: none), may not preempt rj now, by the same rule as the pass (preemptible):
// its own or a higher class, a notebook, at MaxPreemptions, protected by MaxLossGPUHours or
// MinRuntimeBeforePreemption (with LossWithinWait, by MaxLossGPUHours alone: the blockers are
// kept per shape, not per request, so no request's wait widens it here). A releasing job is not in the way (it is going), nor is a loan on
// the owner's nodes (the owner takes it back: see Loans).
func (p *Pool) inTheWay(c Class, starving bool, ownNodes []int32) func(*runJob) bool {
	sc := &scratch{walkerState: walkerState{starving: starving, ownerNodes: ownNodes}}
	return func(rj *runJob) bool {
		if rj.releasing || rj.onLoan && len(ownNodes) > 0 {
			return false
		}
		return !p.preemptible(rj, c, p.lastNow, sc)
	}
}

// leastBlocked is, for a waiting request of shape sh (an elastic gang: at its least size) and
// class c, the nodes where what the jobs it may not preempt hold (inTheWay) leaves a worker the
// least short, as many as it has workers (config order breaks ties), and those jobs there that
// leave a worker no room (blockers), in the words of leastBlockedText; nothing if too few nodes
// hold a worker even when empty, if those jobs leave every chosen node room for a worker (then
// they are not what it waits for), or for a gang bound to one topology domain. It depends on the
// shape, the class and whether the request starves, so the explainer keeps it per triple: a
// view explains thousands of requests of a few shapes.
func (ex *explainer) leastBlocked(sh int32, c Class, starving bool) leastBlocked {
	key := 2*shapeClass(sh, c) + boolInt(starving)
	if lb, ok := ex.blocked[key]; ok {
		return lb
	}
	p, shp := ex.p, &ex.p.shapes[sh]
	if shp.least >= 0 {
		shp = &p.shapes[shp.least]
	}
	var lb leastBlocked
	if shp.required {
		ex.blocked[key] = lb
		return lb
	}
	in := p.inTheWay(c, starving, nil)
	held := ex.heldBy(2*int(c)+boolInt(starving), in)
	short := func(n int32) resources { // what a worker lacks on n once everything else has gone
		return shp.need.sub(capacityOf(&p.nodes[n].Node).sub(held[n])).nonNegative()
	}
	less := func(a, b int32) bool {
		if c := short(a).compare(short(b)); c != 0 {
			return c < 0
		}
		return a < b
	}
	best := make([]int32, 0, shp.workers) // the least short so far, in less order
	for _, n := range p.placeable(shp) {
		if !shp.need.lessEqual(capacityOf(&p.nodes[n].Node)) || len(best) == shp.workers && !less(n, best[len(best)-1]) {
			continue
		}
		k := len(best)
		if k < shp.workers {
			best = append(best, n)
		}
		for k = min(k, len(best)-1); k > 0 && less(n, best[k-1]); k-- {
			best[k] = best[k-1]
		}
		best[k] = n
	}
	if len(best) == shp.workers {
		slices.Sort(best)
		if blockers := p.blockers(best, shp.need, in); len(blockers) > 0 {
			var names []string
			for _, n := range best {
				if short(n) != (resources{}) {
					names = append(names, p.nodes[n].Name)
				}
			}
			var named WaitingInfo
			lb.text = fmt.Sprintf("; on %s, where jobs it may not preempt leave it the least short, they are %s",
				listText(names), p.blockersText(&named, blockers))
			lb.jobs = named.WaitingFor
		}
	}
	ex.blocked[key] = lb
	return lb
}

// heldBy is, per node, what the jobs in the way (in) hold there, kept per class and starving
// (key): the same for every shape.
func (ex *explainer) heldBy(key int, in func(*runJob) bool) []resources {
	if h, ok := ex.held[key]; ok {
		return h
	}
	p := ex.p
	h := make([]resources, len(p.nodes))
	for n := range p.nodes {
		for _, nj := range p.nodes[n].jobs {
			if in(nj.rj) {
				h[n] = h[n].add(demandOf(&nj.rj.r.Demand))
			}
		}
	}
	ex.held[key] = h
	return h
}

// leastBlocked is what explainer.leastBlocked finds, as leastBlockedText says it: the text and
// the blockers it names (sorted), or nothing.
type leastBlocked struct {
	text string
	jobs []string
}

// blockers are the jobs in the way (in) on those of nodes where what they hold leaves a worker
// needing need no room even when everything else there has gone: it waits for some of them to
// end. Those expected to end last come first (no known end, or past an estimate: first of all),
// then by job id.
func (p *Pool) blockers(nodes []int32, need resources, in func(*runJob) bool) []*runJob {
	var out []*runJob
	for _, n := range nodes {
		var held resources
		var here []*runJob
		for _, nj := range p.nodes[n].jobs {
			if in(nj.rj) {
				held = held.add(demandOf(&nj.rj.r.Demand))
				here = append(here, nj.rj)
			}
		}
		if need.lessEqual(capacityOf(&p.nodes[n].Node).sub(held)) {
			continue // (they leave it room: what it waits for there is others)
		}
		for _, rj := range here {
			if !slices.Contains(out, rj) {
				out = append(out, rj)
			}
		}
	}
	now := p.lastNow
	end := func(rj *runJob) time.Time {
		if outranItsEstimate(rj, now) {
			return time.Time{}
		}
		return jobEnd(rj, now)
	}
	slices.SortFunc(out, func(a, b *runJob) int {
		ea, eb := end(a), end(b)
		switch {
		case ea.IsZero() != eb.IsZero():
			return boolInt(eb.IsZero()) - boolInt(ea.IsZero())
		case !ea.Equal(eb):
			return eb.Compare(ea)
		}
		return strings.Compare(a.r.Job, b.r.Job)
	})
	return out
}

// blockerText says who a job in the way is and how long it has run against its limit, e.g.
// "a (high, running 279h12m, past its estimate of 11h11m)".
func (p *Pool) blockerText(rj *runJob) string {
	// (A pool rebuilt from the workflows' records has no time until its first pass.)
	ran, known := p.lastNow.Sub(rj.startedAt), !p.lastNow.IsZero() && !p.lastNow.Before(rj.startedAt)
	who := rj.r.Class.String()
	if rj.r.Kind == KindNotebook {
		who += " notebook"
	}
	var limit string
	switch rl := rj.r.RunLimit; {
	case rl <= 0:
		limit = "no time limit"
	case rj.r.RunEstimated && known && ran >= rl:
		limit = "past its estimate of " + minutesText(rl)
	case rj.r.RunEstimated:
		limit = "estimated " + minutesText(rl)
	default:
		limit = "time limit " + minutesText(rl)
	}
	if !known {
		return fmt.Sprintf("%s (%s, %s)", rj.r.Job, who, limit)
	}
	return fmt.Sprintf("%s (%s, running %s, %s)", rj.r.Job, who, minutesText(ran), limit)
}

// minutesText is d to the minute for sentences ("279h12m", "11h", "45m"); under a minute, to
// the second.
func minutesText(d time.Duration) string {
	r := d.Round(time.Minute)
	h, m := int64(r/time.Hour), int64(r%time.Hour/time.Minute)
	switch {
	case r == 0:
		return d.Round(time.Second).String()
	case h == 0:
		return fmt.Sprintf("%dm", m)
	case m == 0:
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}

// explainNoFit explains a request that can neither start, nor wait for releasing capacity, nor
// preempt: what its allowed nodes leave it, which earlier requests took the capacity (on its
// allowed nodes), why it may not preempt, and which nodes of its family are not answering.
func (ex *explainer) explainNoFit(wi *WaitingInfo, i int, o *planOut, need, behind string) {
	p, w := ex.p, ex.p.waiting[i]
	sh := &p.shapes[w.shape]
	for _, c := range ex.pl.consumers[sh.fam] {
		if int(c.i) >= i || len(wi.WaitingFor) == maxWaitingFor {
			break
		}
		if sh.allowed == nil || slices.ContainsFunc(c.nodes, sh.may) {
			wi.WaitingFor = append(wi.WaitingFor, p.waiting[c.i].r.Job)
		}
	}
	why := "not enough capacity is free or being released"
	if len(wi.WaitingFor) > 0 {
		why = "the free and releasing capacity is held for earlier requests (" + strings.Join(wi.WaitingFor, ", ") + ")"
	}
	mv, kept := p.keptOut(&w.r)
	switch {
	case kept && len(w.r.Nodes) == 0:
		why = fmt.Sprintf("outside %s, %s", p.domainText(mv.level, mv.node), why)
	case sh.allowed != nil:
		why = allowedRoomText(w, o, p.fams[sh.fam].name) + "; " + strings.Replace(why, "capacity", "capacity there", 1)
	}
	if kept {
		why = fmt.Sprintf("it was moved out of %s to make room for %s and runs elsewhere while that gang waits: %s", p.domainText(mv.level, mv.node), mv.gang, why)
	}
	if sh.required && o.domainRoom < w.r.leastWorkers() && (sh.allowed == nil && o.room >= w.r.leastWorkers() || sh.allowed != nil && o.roomAllowed >= w.r.leastWorkers()) {
		lv := p.topo.levels[sh.level]
		why = fmt.Sprintf("nodes with room are spread out: no %s has more than %d", lv, o.domainRoom)
	}
	why += ex.noPreemptionText(wi.Class)
	if len(wi.WaitingFor) == 0 {
		why += ex.leastBlockedText(wi, w)
	}
	if fm := &p.fams[sh.fam]; len(fm.live) < len(fm.nodes) { // some node of its family is lost
		why = ex.withLostNodes(wi, w, why)
	}
	wi.Reason = "waiting for " + need + "; " + why
	if behind != "" {
		wi.Reason = behind + "; " + wi.Reason
	}
	slices.Sort(wi.WaitingFor)
}

// leastBlockedText says, for a request with no earlier request to wait for, which jobs it may
// not preempt leave it no room on the nodes where they leave it the least short (leastBlocked),
// e.g. "; on n-3, where jobs it may not preempt leave it the least short, they are a (high,
// running 3h, estimated 4h)", and adds them to wi.WaitingFor; nothing if none do.
func (ex *explainer) leastBlockedText(wi *WaitingInfo, w *waitReq) string {
	lb := ex.leastBlocked(w.shape, wi.Class, ex.p.starvingHead(w))
	wi.WaitingFor = append(wi.WaitingFor, lb.jobs...)
	return lb.text
}

// allowedRoomText says what the allowed nodes of a request that cannot start, hold or preempt
// leave it, e.g. "its allowed nodes (n-1, n-2) are full, though 3 other a100 nodes have room for
// a worker", or "excluded nodes leave 1 of the 4 a100 nodes with room for a worker (its allowed
// nodes are n-1, n-2); it needs 2".
func allowedRoomText(w *waitReq, o *planOut, fam string) string {
	allowed := listText(w.r.Nodes)
	others := o.room - o.roomAllowed
	switch {
	case o.roomAllowed == 0 && others == 0:
		return fmt.Sprintf("its allowed nodes (%s) are full", allowed)
	case o.roomAllowed == 0:
		return fmt.Sprintf("its allowed nodes (%s) are full, though %d other %s %s room for a worker", allowed, others, fam, plural(others, "node has", "nodes have"))
	case others > 0:
		return fmt.Sprintf("excluded nodes leave %d of the %d %s nodes with room for a worker (its allowed nodes are %s); it needs %d",
			o.roomAllowed, o.room, fam, allowed, w.r.Workers)
	}
	return fmt.Sprintf("its allowed nodes (%s) have room for %d %s; it needs %d", allowed, o.roomAllowed, plural(o.roomAllowed, "worker", "workers"), w.r.Workers)
}

// noPreemptionText says why a request of class c does not preempt the jobs holding the rest.
func (ex *explainer) noPreemptionText(c Class) string {
	if c == Low {
		return ", and low-priority jobs do not preempt others"
	}
	why := ", and the jobs holding the rest may not be preempted for it (equal or higher priority, or notebooks"
	if m := ex.p.policy.MinRuntimeBeforePreemption; m > 0 {
		why += fmt.Sprintf(", or running for less than %s", m)
	}
	if sa := ex.p.policy.StarvationAfter; sa > 0 {
		why += fmt.Sprintf("; max_loss_gpu_hours and min_runtime_before_preemption protect lower-class jobs only until it has been the first of its class for %s", sa)
		if ex.p.policy.LossWithinWait {
			why += ", and then only from losing more GPU-hours than it has waited"
		}
	}
	return why + ")"
}

// withLostNodes adds the lost nodes of the request's family to why; when too few nodes answer
// for it to fit at all, that alone is the reason.
func (ex *explainer) withLostNodes(wi *WaitingInfo, w *waitReq, why string) string {
	live, lost := ex.lostFit(w.shape, w.r.Demand)
	among := ""
	if len(w.r.Nodes) > 0 {
		among = " among its allowed nodes"
	}
	switch {
	case len(lost) > 0 && live < w.r.Workers:
		// Nothing it could wait for or preempt helps: too few nodes are answering.
		wi.WaitingFor = nil
		if live == 0 {
			return fmt.Sprintf("no %s node large enough for one of its workers%s is answering (%s)", w.r.Demand.Family, among, ex.p.outText(lost))
		}
		return fmt.Sprintf("only %d of the %d %s nodes large enough for one of its workers%s %s answering (%s)",
			live, live+len(lost), w.r.Demand.Family, among, plural(live, "is", "are"), ex.p.outText(lost))
	case len(lost) > 0:
		return why + "; " + ex.p.outText(lost) + ", so " + plural(len(lost), "its", "their") + " capacity is not counted"
	}
	return why
}

// listText joins names, shortening long lists: "a, b, c and 4 more".
func listText(names []string) string {
	if len(names) > 4 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

func behindText(higher, same int) string {
	var parts []string
	if higher > 0 {
		parts = append(parts, fmt.Sprintf("%d higher-priority %s", higher, plural(higher, "job", "jobs")))
	}
	if same > 0 {
		parts = append(parts, fmt.Sprintf("%d earlier %s of the same class", same, plural(same, "job", "jobs")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "behind " + strings.Join(parts, " and ")
}

// needText describes the capacity a request needs, e.g. "2 nodes with 8 free a100plus GPUs each".
func needText(d Demand, workers int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", workers, plural(workers, "node", "nodes"))
	var parts []string
	if d.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d free %s %s", d.GPUs, d.Family, plural(d.GPUs, "GPU", "GPUs")))
	} else {
		b.Reset()
		fmt.Fprintf(&b, "%d %s %s", workers, d.Family, plural(workers, "node", "nodes"))
	}
	if d.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%d free CPU cores", d.CPU))
	}
	if d.RAMGB > 0 {
		parts = append(parts, fmt.Sprintf("%d GB free RAM", d.RAMGB))
	}
	if len(parts) == 0 {
		b.WriteString(" with free capacity")
		return b.String()
	}
	b.WriteString(" with ")
	if len(parts) == 1 {
		b.WriteString(parts[0])
	} else {
		b.WriteString(strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1])
	}
	if workers > 1 {
		b.WriteString(" each")
	}
	return b.String()
}

// Waiting returns job's waiting request, if it has one: a map lookup, for the
// callers that only need to know whether (and which attempt) waits, not where
// or why (that is Explain, a dry-run pass up to the job's place).
func (p *Pool) Waiting(job string) (Request, bool) {
	w := p.waitIdx[job]
	if w == nil {
		return Request{}, false
	}
	r := w.r
	r.Nodes = slices.Clone(r.Nodes)
	return r, true
}
