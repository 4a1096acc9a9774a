package scheduler

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxNodeGPUs bounds GPUs per node: GPU indices are kept in a 64-bit mask.
const maxNodeGPUs = 64

type node struct {
	Node
	fam  int32
	used uint64 // GPU indices held by running or releasing workers

	free resources // not held by anyone
	rel  resources // held by workers of releasing jobs

	// lost: its agent stopped answering. Its accounting goes on as usual, but the pass sees no
	// capacity on it (see MarkNodeLost).
	lost bool

	// jobs holding capacity on the node (running or releasing, worker not yet released), in the
	// order they were placed: the victim search looks only at the jobs of the nodes it considers.
	jobs []nodeJob
	// victimList is the jobs on the node that a victim search may consider, kept in order.
	victimList []listedVictim
}

type nodeJob struct {
	rj *runJob
	w  int32 // its worker on this node
}

type family struct {
	name                   string
	nodes                  []int32 // config order
	live                   []int32 // nodes that are not lost, config order: the only ones a pass places on
	maxGPU, maxCPU, maxRAM int
}

// shape is a request's (family, per-worker demand, workers, allowed nodes); identical shapes
// behave identically within a pass, which lets the pass skip them after one failed. The allowed
// nodes are part of it: a request that may run anywhere and one held to some nodes fail apart.
type shape struct {
	fam     int32
	need    resources // one worker's demand
	workers int
	// An elastic shape (minWorkers between 1 and workers-1) is tried at its full size first;
	// least is its rigid shape of minWorkers workers, for what the gang can do at its least
	// size (preempt, reserve). A rigid shape has minWorkers 0 and least -1.
	minWorkers int
	least      int32
	// allow is 0 for a request that may run on any node of its family, else 1 + its index in
	// Pool.allows. For a constrained shape, allowed is that set's bitmap over the pool's nodes
	// and live its allowed nodes of its family that are not lost, in config order (see
	// Pool.placeable); both are nil for an unconstrained one.
	allow   int32
	allowed []uint64
	live    []int32
	// level is the topology level (index into Policy.Topology) whose domains the gang's workers
	// should share, -1 for none (no topology, or one worker); required: they may only.
	level    int8
	required bool
}

// shapeKey is what makes two shapes the same.
type shapeKey struct {
	fam        int32
	need       resources
	workers    int
	minWorkers int
	allow      int32
	level      int8
	required   bool
}

// may reports whether a worker of the shape may be placed on node n.
func (s *shape) may(n int32) bool {
	return s.allowed == nil || s.allowed[n>>6]&(1<<(uint32(n)&63)) != 0
}

type waitReq struct {
	r     Request
	shape int32
	ws    int32 // its workspace (noWorkspace: none)
	user  int32 // its (workspace, user) account (see fairShare)
}

// waitKey mirrors p.waiting[i] with what the pass reads for every request, stored contiguously
// so that a pass over 100k requests stays cache friendly.
type waitKey struct {
	shape int32
	class Class
	// prev is true while an older attempt of the same job still holds capacity.
	prev bool
}

type runJob struct {
	r           Request
	ws          int32 // its workspace (noWorkspace: none)
	user        int32 // its (workspace, user) account (see fairShare)
	fam         int32
	startedAt   time.Time
	nodes       []int32  // per worker
	gpus        []uint64 // per worker GPU index mask
	released    []bool   // per worker
	nReleased   int
	releasing   bool
	saves       bool // preempting it loses no work: it will save on the notice (see place)
	onLoan      bool // it started on a reservation's capacity by its RunLimit (Grant.OnLoan)
	borrowed    bool // it started beyond its allocation's cohort share (Grant.Borrowed)
	moved       bool // it was preempted as a move for a gang (Preemption.Move)
	preemptedBy *Preemptor
	// nominee is, per worker, who the capacity of this preempted attempt is nominated to: its
	// preemptor, or a strictly better request that took it over. Nil unless preempted.
	nominee []*Preemptor
	// preemptions counts the job's preemptions, this attempt's included; preemptSeq orders the
	// preemptions (1, 2, ... per pool) and is 0 unless this attempt was preempted.
	preemptions int
	preemptSeq  int64
	ckpt        time.Time // last checkpoint of this attempt (zero: none reported)
	// progFirst and progLast are this attempt's first and last progress reports (see
	// Progressed); zero: none.
	progFirst, progLast progressMark
}

// Pool is the state of one allocation. It is not safe for concurrent use.
type Pool struct {
	policy Policy
	// notes say why some nodes out of scheduling are out (SetNodeNote).
	notes   map[string]string
	nodes   []node
	fams    []family
	famIdx  map[string]int32
	nodeIdx map[string]int32
	topo    topology

	waiting  []*waitReq // launch order: class desc, Seq asc, Job asc
	waitKeys []waitKey  // parallel to waiting
	waitIdx  map[string]*waitReq
	running  map[string]*runJob

	shapes   []shape
	shapeIdx map[shapeKey]int32
	// Workspaces, interned as requests and jobs come (see workspaceOf): per workspace its
	// Policy.Limits cap per class (-1: none) and the GPUs it holds per class.
	wsIdx   map[string]int32
	wsNames []string
	wsCap   []perClass
	wsHeld  []perClass
	// wsWaiting counts each workspace's waiting requests per class.
	wsWaiting []perClass
	// fs is the usage accounting of Policy.Ordering fair-share.
	fs fairShare
	// cohort is the accounting of Policy.Cohort's shares.
	cohort cohortPool
	// allows are the allowed-node sets (Request.Nodes) of the shapes that have one, interned by
	// their names joined, each as a bitmap over the nodes' indices.
	allows   [][]uint64
	allowIdx map[string]int32

	// victims are the releasing jobs that were preempted, in preemption order: their capacity is
	// nominated to their preemptor until they have stopped.
	victims    []*runJob
	preemptSeq int64 // last preemption's sequence
	// movedOut is, per job moved for a gang (Preemption.Move), the domain it left: its next
	// attempt is placed outside it while that gang waits (see keptOut).
	movedOut map[string]movedOut
	// holds is free capacity a stopped victim left, still nominated to its waiting preemptor, in
	// (sequence, node) order: it stays the preemptor's until it is granted or withdrawn.
	holds []hold
	// memo remembers, for a while, how often a preempted job whose capacity is gone had been
	// preempted, so that its next attempt starts with that count (see Request.Preemptions).
	memo      map[string]memoEntry
	memoOrder []string // memo keys, oldest first
	// heads is, per class, the first waiting request and since when it has been first, with the
	// nodes reserved for it by the last pass (see Policy.ReserveAfter).
	heads [3]head

	// nPreemptible counts, per family and class, the running jobs that are not stopping and not
	// notebooks: a request with none below its class needs no victim search.
	nPreemptible []perClass

	// dirty is false after a pass that decided nothing while no event changed the pool since: a
	// pass at a time before wake then decides nothing either, and Schedule returns at once.
	dirty bool
	wake  time.Time // zero: no time-driven change pending

	lastNow time.Time
	// lastGrant is when the last pass that granted anything ran: with Backfill, the jobs it
	// started may be preempted from just after it (see nextWake).
	lastGrant time.Time
	// movedAt is when a pass last saw a head move its reservation to other nodes: the requests
	// walked before it in that pass saw the old ones reserved (see nextWake).
	movedAt time.Time
	// forecast is the record of how wrong the expected starts have been (see Forecast).
	forecast forecastRecord
	sc       *scratch
}

type hold struct {
	by     string // the preemptor
	class  Class  // its class
	node   int32
	amount resources // what is held
	seq    int64     // the victim's preemption sequence
	taken  bool      // its nominee took it over from the preemptor
	// stale: its nominee was granted. What it did not use stays out of sight until the next
	// event, so that a second pass at the same instant sees what the first saw.
	stale bool
}

type memoEntry struct {
	count int
	at    time.Time
}

// preemptionMemory is how long the pool remembers a preempted job after its capacity is gone, for
// its next attempt (which a job queues right after its workers stopped).
const preemptionMemory = time.Hour

type head struct {
	job   string
	since time.Time
	nodes []int32 // reserved for it by the last pass
	// pinned is what it reserved in the first pass it starved in and reserved: it keeps those
	// nodes while it starves, so that its bound (see Starvation) holds.
	pinned []int32
}

// Head is the first waiting request of class c as the last pass saw it, since when it has been
// first (the clock of ReserveAfter and StarvationAfter), and the nodes that pass reserved for it
// (none: it reserved nothing); ok is false if no request of c waited then.
func (p *Pool) Head(c Class) (job string, since time.Time, reserved []string, ok bool) {
	h := &p.heads[c]
	if h.job == "" {
		return "", time.Time{}, nil, false
	}
	for _, n := range h.nodes {
		reserved = append(reserved, p.nodes[n].Name)
	}
	return h.job, h.since, reserved, true
}

// NewPool validates nodes (unique non-empty names, family, GPUs>=0) and policy.
func NewPool(nodes []Node, policy Policy) (*Pool, error) {
	switch policy.Queueing {
	case "", BestEffortFIFO, StrictFIFO:
	default:
		return nil, fmt.Errorf("unknown queueing %q: use %q or %q", policy.Queueing, BestEffortFIFO, StrictFIFO)
	}
	if policy.MinRuntimeBeforePreemption < 0 {
		return nil, fmt.Errorf("min_runtime_before_preemption must not be negative, got %s", policy.MinRuntimeBeforePreemption)
	}
	if policy.ReserveAfter < 0 {
		return nil, fmt.Errorf("reserve_after must not be negative, got %s", policy.ReserveAfter)
	}
	if policy.StarvationAfter < 0 {
		return nil, fmt.Errorf("starvation_after must not be negative (0: off), got %s", policy.StarvationAfter)
	}
	if policy.PreemptionNotice < 0 {
		return nil, fmt.Errorf("preemption_notice must not be negative, got %s", policy.PreemptionNotice)
	}
	if err := checkLimits(policy.Limits); err != nil {
		return nil, err
	}
	if err := checkOrdering(policy); err != nil {
		return nil, err
	}
	if err := checkCohort(policy.Cohort); err != nil {
		return nil, err
	}
	p := &Pool{
		policy:   policy,
		famIdx:   map[string]int32{},
		nodeIdx:  map[string]int32{},
		waitIdx:  map[string]*waitReq{},
		running:  map[string]*runJob{},
		shapeIdx: map[shapeKey]int32{},
		allowIdx: map[string]int32{},
		wsIdx:    map[string]int32{},
		memo:     map[string]memoEntry{},
		movedOut: map[string]movedOut{},
		fs:       newFairShare(policy),
		cohort:   newCohortPool(policy.Cohort),
		dirty:    true,
	}
	for i, n := range nodes {
		switch {
		case n.Name == "":
			return nil, fmt.Errorf("node %d has no name", i+1)
		case n.Family == "":
			return nil, fmt.Errorf("node %q has no instance family", n.Name)
		case n.GPUs < 0 || n.CPU < 0 || n.RAMGB < 0:
			return nil, fmt.Errorf("node %q has a negative GPU, CPU or RAM count", n.Name)
		case n.GPUs > maxNodeGPUs:
			return nil, fmt.Errorf("node %q has %d GPUs; at most %d per node are supported", n.Name, n.GPUs, maxNodeGPUs)
		}
		if _, dup := p.nodeIdx[n.Name]; dup {
			return nil, fmt.Errorf("node name %q is used twice", n.Name)
		}
		f, ok := p.famIdx[n.Family]
		if !ok {
			f = int32(len(p.fams))
			p.famIdx[n.Family] = f
			p.fams = append(p.fams, family{name: n.Family})
		}
		fm := &p.fams[f]
		fm.nodes = append(fm.nodes, int32(i))
		fm.live = append(fm.live, int32(i))
		fm.maxGPU = max(fm.maxGPU, n.GPUs)
		fm.maxCPU = max(fm.maxCPU, n.CPU)
		fm.maxRAM = max(fm.maxRAM, n.RAMGB)
		p.nodeIdx[n.Name] = int32(i)
		p.nodes = append(p.nodes, node{Node: n, fam: f, free: capacityOf(&n)})
	}
	topo, err := newTopology(policy.Topology, nodes)
	if err != nil {
		return nil, err
	}
	if err := topo.checkGang(policy.GangTopology, "gang_topology"); err != nil {
		return nil, err
	}
	p.topo = topo
	p.nPreemptible = make([]perClass, len(p.fams))
	p.sc = newScratch()
	p.sizeVictimLists()
	return p, nil
}

// Policy returns the pool's policy.
func (p *Pool) Policy() Policy { return p.policy }

// Nodes returns the pool's nodes in config order.
func (p *Pool) Nodes() []Node {
	out := make([]Node, len(p.nodes))
	for i := range p.nodes {
		out[i] = p.nodes[i].Node
	}
	return out
}

func (p *Pool) strict() bool { return p.policy.Queueing == StrictFIFO }

func (p *Pool) familyNames() string {
	names := make([]string, len(p.fams))
	for i := range p.fams {
		names[i] = p.fams[i].name
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "it has no nodes"
	}
	return "it has " + strings.Join(names, ", ")
}

// normalize fills defaults: empty kind means job, notebooks are high.
func normalize(r Request) Request {
	if r.Kind == "" {
		r.Kind = KindJob
	}
	if r.Kind == KindNotebook {
		r.Class = High
	}
	r.SubmittedAt = normTime(r.SubmittedAt)
	r.Nodes = canonNodes(r.Nodes)
	r.RunLimit = max(r.RunLimit.Truncate(time.Millisecond), 0) // as snapshots keep it
	return r
}

// canonNodes is a copy of names sorted, each once; nil if there are none.
func canonNodes(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

// normTime drops the monotonic reading and location so that times round-trip exactly.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

// Admit is the read-only admission check: nil if the request could fit the EMPTY pool
// (family exists, enough distinct nodes of that family with enough GPUs/CPU/RAM per node,
// Workers >= 1, valid class/kind) within its allowed nodes (Request.Nodes: every name a node of
// the pool, and enough of them of its family large enough for a worker). Error is a plain
// sentence naming the problem. A notebook's class is ignored (notebooks are always high).
func (p *Pool) Admit(r Request) error {
	if err := p.admitAnywhere(r); err != nil {
		return err
	}
	if err := p.admitNodes(&r); err != nil {
		return err
	}
	if err := p.admitAllocation(&r); err != nil {
		return err
	}
	return p.admitTopology(&r)
}

// admitTopology is Admit's check of a request's own gang topology: its level is one of the
// pool's, and a required one has a domain with enough nodes, within its allowed nodes, large
// enough for a worker.
func (p *Pool) admitTopology(r *Request) error {
	g := r.Topology
	field := "preferred_topology"
	if g.Required {
		field = "required_topology"
	}
	if err := p.topo.checkGang(g, field); err != nil {
		return &TopologyError{Field: field, Err: err}
	}
	own := field
	if g == (GangTopology{}) {
		field, own = "the allocation's gang_topology (a job may set its own preferred_topology)", ""
	}
	level, required := p.gangLevel(r)
	if !required {
		return nil
	}
	var allowed map[string]bool
	if len(r.Nodes) > 0 {
		allowed = make(map[string]bool, len(r.Nodes))
		for _, n := range r.Nodes {
			allowed[n] = true
		}
	}
	d := demandOf(&r.Demand)
	counts := make([]int, p.topo.domains[level])
	most := 0
	for _, n := range p.fams[p.famIdx[r.Demand.Family]].nodes {
		nd := &p.nodes[n]
		if (allowed != nil && !allowed[nd.Name]) || !d.lessEqual(capacityOf(&nd.Node)) {
			continue
		}
		dom := p.topo.domain[level][n]
		counts[dom]++
		most = max(most, counts[dom])
	}
	if need := r.leastWorkers(); most < need {
		lv := p.topo.levels[level]
		where := "in this allocation"
		if allowed != nil {
			where = "among " + allowedNodesText
		}
		return &TopologyError{Field: own, Err: fmt.Errorf("%s: the job needs %s in one %s, but no %s %s has more than %d %s %s large enough (%d GPUs, %d CPU cores, %d GB RAM each)",
			field, workersText(r), lv, lv, where, most, r.Demand.Family, plural(most, "node", "nodes"), r.Demand.GPUs, r.Demand.CPU, r.Demand.RAMGB)}
	}
	return nil
}

// TopologyError is Admit's refusal of a request's topology. Field is the request's field that
// asked for it (required_topology or preferred_topology), or "" when the allocation's default did.
type TopologyError struct {
	Field string
	Err   error
}

func (e *TopologyError) Error() string { return e.Err.Error() }
func (e *TopologyError) Unwrap() error { return e.Err }

// admitAnywhere is Admit without the allowed nodes.
func (p *Pool) admitAnywhere(r Request) error {
	if r.Job == "" {
		return errors.New("the request has no job id")
	}
	switch r.Kind {
	case "", KindJob, KindNotebook:
	default:
		return fmt.Errorf("unknown kind %q: use %q or %q", r.Kind, KindJob, KindNotebook)
	}
	if r.Kind != KindNotebook && !r.Class.valid() {
		return fmt.Errorf("unknown priority class %d: allowed values are low, medium, high", int(r.Class))
	}
	if r.Workers < 1 {
		return fmt.Errorf("a job needs at least 1 worker, got %d", r.Workers)
	}
	if r.MinWorkers < 0 || r.MinWorkers > r.Workers {
		return fmt.Errorf("an elastic gang's least size must be between 1 and its %d workers, got %d", r.Workers, r.MinWorkers)
	}
	if r.Preemptions < 0 {
		return fmt.Errorf("the request's preemption count must not be negative, got %d", r.Preemptions)
	}
	d := r.Demand
	if d.GPUs < 0 || d.CPU < 0 || d.RAMGB < 0 || d.VRAMGB < 0 {
		return fmt.Errorf("the per-worker demand must not be negative (GPUs %d, CPU %d, RAM %d GB)", d.GPUs, d.CPU, d.RAMGB)
	}
	f, ok := p.famIdx[d.Family]
	if !ok {
		return fmt.Errorf("instance family %q is not in this allocation (%s)", d.Family, p.familyNames())
	}
	fm := &p.fams[f]
	need := r.leastWorkers()
	if need > len(fm.nodes) {
		return fmt.Errorf("the job needs %s, each on its own %s node, but this allocation has only %d %s %s",
			workersText(&r), d.Family, len(fm.nodes), d.Family, plural(len(fm.nodes), "node", "nodes"))
	}
	if d.GPUs > fm.maxGPU {
		return fmt.Errorf("instance type needs %d %s GPUs per worker but the largest %s node in this allocation has %d",
			d.GPUs, d.Family, d.Family, fm.maxGPU)
	}
	if d.CPU > fm.maxCPU {
		return fmt.Errorf("instance type needs %d CPU cores per worker but the largest %s node in this allocation has %d",
			d.CPU, d.Family, fm.maxCPU)
	}
	if d.RAMGB > fm.maxRAM {
		return fmt.Errorf("instance type needs %d GB RAM per worker but the largest %s node in this allocation has %d GB",
			d.RAMGB, d.Family, fm.maxRAM)
	}
	fit := 0
	for _, n := range fm.nodes {
		nd := &p.nodes[n]
		if demandOf(&d).lessEqual(capacityOf(&nd.Node)) {
			fit++
		}
	}
	if fit < need {
		return fmt.Errorf("the job needs %s on distinct %s nodes with %d GPUs, %d CPU cores and %d GB RAM each, but only %d %s in this allocation %s that large",
			workersText(&r), d.Family, d.GPUs, d.CPU, d.RAMGB, fit, plural(fit, "node", "nodes"), plural(fit, "is", "are"))
	}
	return nil
}

// allowedNodesText names the allowed nodes in Admit's sentences as the user set them.
const allowedNodesText = "the nodes the job may run on (include_nodes minus exclude_nodes)"

// admitNodes is Admit's check of the allowed nodes of a request that passes the rest: every name
// is a node of the pool, and enough of them, of its family, are large enough for a worker.
func (p *Pool) admitNodes(r *Request) error {
	if len(r.Nodes) == 0 {
		return nil
	}
	names := canonNodes(r.Nodes)
	var unknown []string
	for _, name := range names {
		if _, ok := p.nodeIdx[name]; !ok {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	if len(unknown) == 1 {
		return fmt.Errorf("node %s, one of %s, is not in this allocation", unknown[0], allowedNodesText)
	}
	if len(unknown) > 1 {
		return fmt.Errorf("nodes %s, among %s, are not in this allocation", listText(unknown), allowedNodesText)
	}
	d := &r.Demand
	var fit, small []string
	for _, name := range names {
		nd := &p.nodes[p.nodeIdx[name]]
		switch {
		case nd.Family != d.Family:
		case demandOf(d).lessEqual(capacityOf(&nd.Node)):
			fit = append(fit, nd.Name)
		default:
			small = append(small, nd.Name)
		}
	}
	if len(fit) >= r.leastWorkers() {
		return nil
	}
	if len(fit)+len(small) == 0 {
		return fmt.Errorf("the nodes the job may run on (include_nodes minus exclude_nodes: %s) include no node of family %s", listText(names), d.Family)
	}
	var which []string
	if len(fit) > 0 {
		which = append(which, listText(fit))
	}
	if len(small) > 0 {
		which = append(which, listText(small)+" "+plural(len(small), "is", "are")+" too small")
	}
	count := "no node"
	if len(fit) > 0 {
		count = fmt.Sprintf("%d %s", len(fit), plural(len(fit), "node", "nodes"))
	}
	return fmt.Errorf("%s leave %s of family %s that can hold a worker (%s); the job needs %s",
		allowedNodesText, count, d.Family, strings.Join(which, "; "), workersText(r))
}

// workersText is how many workers r needs, for Admit's sentences: "4 workers", "at least 2 workers".
func workersText(r *Request) string {
	n := r.leastWorkers()
	text := fmt.Sprintf("%d %s", n, plural(n, "worker", "workers"))
	if r.elastic() {
		return "at least " + text
	}
	return text
}

// shapeOf interns r's shape; r passed Admit.
func (p *Pool) shapeOf(r *Request) int32 {
	k := shapeKey{fam: p.famIdx[r.Demand.Family], need: demandOf(&r.Demand), workers: r.Workers}
	if r.elastic() {
		k.minWorkers = r.MinWorkers
	}
	if m, ok := p.keptOut(r); ok {
		k.allow = p.allowOf(p.outsideDomain(r.Nodes, m))
	} else if len(r.Nodes) > 0 {
		k.allow = p.allowOf(r.Nodes)
	}
	k.level, k.required = p.gangLevel(r)
	if id, ok := p.shapeIdx[k]; ok {
		return id
	}
	least := int32(-1)
	if r.elastic() {
		rigid := *r
		rigid.Workers, rigid.MinWorkers = r.MinWorkers, 0
		least = p.shapeOf(&rigid)
	}
	id := int32(len(p.shapes))
	s := shape{fam: k.fam, need: k.need, workers: k.workers, minWorkers: k.minWorkers, least: least, allow: k.allow,
		level: k.level, required: k.required}
	if k.allow > 0 {
		s.allowed = p.allows[k.allow-1]
	}
	p.shapes = append(p.shapes, s)
	p.shapeIdx[k] = id
	p.refreshShapeLive(&p.shapes[id])
	return id
}

// allowOf interns a set of allowed nodes (each once, all nodes of the pool, in a fixed order:
// sorted, or in node order) and returns 1 + its index in p.allows.
func (p *Pool) allowOf(names []string) int32 {
	key := strings.Join(names, "\x00")
	if i, ok := p.allowIdx[key]; ok {
		return i + 1
	}
	a := make([]uint64, (len(p.nodes)+63)/64)
	for _, name := range names {
		n := p.nodeIdx[name]
		a[n>>6] |= 1 << (uint32(n) & 63)
	}
	i := int32(len(p.allows))
	p.allows = append(p.allows, a)
	p.allowIdx[key] = i
	return i + 1
}

// refreshShapeLive rebuilds a constrained shape's list of the nodes a pass may place it on.
func (p *Pool) refreshShapeLive(s *shape) {
	if s.allowed == nil {
		return
	}
	s.live = s.live[:0]
	for _, n := range p.fams[s.fam].live {
		if s.may(n) {
			s.live = append(s.live, n)
		}
	}
}

// placeable is the nodes a pass may place a worker of sh on: the live nodes of its family, within
// its allowed nodes if it has any, in config order.
func (p *Pool) placeable(sh *shape) []int32 {
	if sh.allowed == nil {
		return p.fams[sh.fam].live
	}
	return sh.live
}

// waitPos is where w is, or would go, in the queue (see before).
func (p *Pool) waitPos(w *waitReq) int {
	return sort.Search(len(p.waiting), func(i int) bool { return !p.before(p.waiting[i], w) })
}

// newWaitReq interns what a waiting request refers to.
func (p *Pool) newWaitReq(r Request) *waitReq {
	ws := p.workspaceOf(r.Workspace)
	return &waitReq{r: r, shape: p.shapeOf(&r), ws: ws, user: p.userOf(r.Workspace, r.User)}
}

// Enqueue adds a waiting request (after Admit). Idempotent: the same Job with the same Attempt
// already waiting or running is a no-op returning nil. A newer Attempt for a Job replaces the old
// waiting entry. Notebooks are forced to High. An older Attempt than the one known is an error.
// The request is admitted (see Admit) first.
func (p *Pool) Enqueue(r Request) error {
	r = normalize(r)
	if err := p.Admit(r); err != nil {
		return err
	}
	if rj := p.running[r.Job]; rj != nil {
		if rj.r.Attempt == r.Attempt {
			return nil
		}
		if r.Attempt < rj.r.Attempt {
			return fmt.Errorf("job %q: attempt %d is older than its running attempt %d", r.Job, r.Attempt, rj.r.Attempt)
		}
		r.Preemptions = max(r.Preemptions, rj.preemptions)
	}
	if w := p.waitIdx[r.Job]; w != nil {
		if w.r.Attempt == r.Attempt {
			return nil
		}
		if r.Attempt < w.r.Attempt {
			return fmt.Errorf("job %q: attempt %d is older than its waiting attempt %d", r.Job, r.Attempt, w.r.Attempt)
		}
		p.removeWaiting(w)
		r.Preemptions = max(r.Preemptions, w.r.Preemptions)
	}
	if m, ok := p.memo[r.Job]; ok {
		r.Preemptions = max(r.Preemptions, m.count)
		delete(p.memo, r.Job)
	}
	p.insertWaiting(p.newWaitReq(r))
	p.forecast.enqueued(r.Job)
	p.touch()
	return nil
}

func (p *Pool) insertWaiting(w *waitReq) {
	i := p.waitPos(w)
	p.waiting = slices.Insert(p.waiting, i, w)
	p.countWaiting(w, +1)
	p.waitKeys = slices.Insert(p.waitKeys, i, waitKey{shape: w.shape, class: w.r.Class, prev: p.running[w.r.Job] != nil})
	p.waitIdx[w.r.Job] = w
}

func (p *Pool) removeWaiting(w *waitReq) {
	i := p.waitPos(w)
	if i < len(p.waiting) && p.waiting[i] == w {
		p.waiting = slices.Delete(p.waiting, i, i+1)
		p.countWaiting(w, -1)
		p.waitKeys = slices.Delete(p.waitKeys, i, i+1)
	}
	delete(p.waitIdx, w.r.Job)
}

// Release reports that one worker of a running or releasing job has stopped: its capacity becomes
// free. Marks the job releasing if it was running. When its last worker is released the job is gone.
// Releases for an unknown job/attempt/worker are ignored (returns false).
func (p *Pool) Release(job string, attempt int, worker int) bool {
	rj := p.running[job]
	if rj == nil || rj.r.Attempt != attempt || worker < 0 || worker >= len(rj.nodes) || rj.released[worker] {
		return false
	}
	p.beginRelease(rj)
	p.freeWorker(rj, worker)
	if rj.nReleased == len(rj.nodes) {
		p.dropRunning(rj)
	}
	p.touch()
	return true
}

// BeginRelease marks a running job as stopping (e.g. it finished, or the user cancelled it):
// its capacity becomes "releasing", not free, until each worker is Released.
// It returns false if the job is unknown or already releasing.
func (p *Pool) BeginRelease(job string) bool {
	rj := p.running[job]
	if rj == nil || rj.releasing {
		return false
	}
	p.beginRelease(rj)
	p.touch()
	return true
}

func (p *Pool) beginRelease(rj *runJob) {
	if rj.releasing {
		return
	}
	p.countPreemptible(rj, -1)
	rj.releasing = true
	d := demandOf(&rj.r.Demand)
	for w, n := range rj.nodes {
		if !rj.released[w] {
			p.nodeChanged(n)
			nd := &p.nodes[n]
			nd.rel = nd.rel.add(d)
		}
	}
}

func (p *Pool) freeWorker(rj *runJob, w int) {
	d := &rj.r.Demand
	nd := &p.nodes[rj.nodes[w]]
	p.nodeChanged(rj.nodes[w])
	if rj.nominee != nil && rj.preemptSeq > 0 && p.waitIdx[rj.nominee[w].Job] != nil {
		pb := rj.nominee[w]
		p.addHold(hold{by: pb.Job, class: pb.Class, node: rj.nodes[w], amount: demandOf(d), seq: rj.preemptSeq,
			taken: rj.preemptedBy == nil || pb.Job != rj.preemptedBy.Job})
	}
	nd.used &^= rj.gpus[w]
	nd.free = nd.free.add(demandOf(d))
	if rj.releasing {
		nd.rel = nd.rel.sub(demandOf(d))
	}
	rj.released[w] = true
	rj.nReleased++
	p.holdGPUs(rj, -d.GPUs)
	nd.jobs = slices.DeleteFunc(nd.jobs, func(nj nodeJob) bool { return nj.rj == rj })
}

// addHold keeps the capacity a stopped victim left nominated to its waiting preemptor.
func (p *Pool) addHold(h hold) {
	i, _ := slices.BinarySearchFunc(p.holds, h, cmpHold)
	p.holds = slices.Insert(p.holds, i, h)
}

func cmpHold(a, b hold) int {
	if a.seq != b.seq {
		if a.seq < b.seq {
			return -1
		}
		return 1
	}
	return int(a.node - b.node)
}

// dropHolds forgets the capacity held for job (it was withdrawn).
func (p *Pool) dropHolds(job string) {
	p.holds = slices.DeleteFunc(p.holds, func(h hold) bool { return h.by == job })
}

// touch records an event: the next pass runs in full, and the holds of granted jobs go.
func (p *Pool) touch() {
	p.dirty = true
	if slices.ContainsFunc(p.holds, func(h hold) bool { return h.stale }) {
		p.holds = slices.DeleteFunc(p.holds, func(h hold) bool { return h.stale })
	}
}

// place records that rj's unreleased workers hold capacity on their nodes (for the victim search).
func (p *Pool) place(rj *runJob) {
	// It saves on the notice if it says it honours notices and there is one. A policy changes
	// only through Reconfigure, which places every job afresh.
	rj.saves = rj.r.HonorsNotice && p.policy.PreemptionNotice > 0
	p.countPreemptible(rj, +1)
	for w, n := range rj.nodes {
		if !rj.released[w] {
			p.nodes[n].jobs = append(p.nodes[n].jobs, nodeJob{rj: rj, w: int32(w)})
			p.holdGPUs(rj, rj.r.Demand.GPUs)
		}
	}
}

func (p *Pool) dropRunning(rj *runJob) {
	delete(p.running, rj.r.Job)
	if rj.preemptSeq > 0 {
		p.victims = slices.DeleteFunc(p.victims, func(v *runJob) bool { return v == rj })
	}
	if w := p.waitIdx[rj.r.Job]; w != nil {
		p.waitKeys[p.waitPos(w)].prev = false
	} else if rj.preemptedBy != nil {
		p.remember(rj.r.Job, rj.preemptions)
	}
}

// remember keeps a preempted job's preemption count for its next attempt (see preemptionMemory).
func (p *Pool) remember(job string, count int) {
	if _, ok := p.memo[job]; !ok {
		p.memoOrder = append(p.memoOrder, job)
	}
	p.memo[job] = memoEntry{count: count, at: p.lastNow}
}

// forget drops the memo entries older than preemptionMemory (and those already used).
func (p *Pool) forget(now time.Time) {
	k := 0
	for k < len(p.memoOrder) {
		m, ok := p.memo[p.memoOrder[k]]
		if ok && now.Sub(m.at) < preemptionMemory {
			break
		}
		if ok {
			delete(p.memo, p.memoOrder[k])
		}
		k++
	}
	if k > 0 {
		p.memoOrder = slices.Delete(p.memoOrder, 0, k)
	}
}

// Cancel forgets every attempt of the job: it removes its waiting request, if any, AND frees at
// once all capacity its running or releasing attempt still holds, if any, as if each remaining
// worker had been Released. Freeing is only right once the caller knows those workers are stopped
// (e.g. leak reclaim, or a grant that was never delivered). To withdraw one attempt, use
// CancelAttempt: Cancel would also free an older attempt that is still stopping, and its capacity
// would be granted while its workers still run. It returns false if the job is unknown.
func (p *Pool) Cancel(job string) bool {
	ok := false
	if w := p.waitIdx[job]; w != nil {
		p.removeWaiting(w)
		p.dropHolds(job)
		p.releaseMovers()
		ok = true
	}
	if rj := p.running[job]; rj != nil {
		p.reclaim(rj)
		ok = true
	}
	delete(p.memo, job)
	p.touch()
	return ok
}

// CancelAttempt is Cancel restricted to one attempt: it removes the job's waiting request only if
// that request is this attempt, and frees the capacity of the job's running or releasing attempt
// only if that is this attempt. Any other attempt of the job is left exactly as it was, so
// withdrawing a re-queued attempt never frees capacity its previous attempt is still releasing.
// It returns false if the job has no such attempt.
func (p *Pool) CancelAttempt(job string, attempt int) bool {
	ok := false
	if w := p.waitIdx[job]; w != nil && w.r.Attempt == attempt {
		p.removeWaiting(w)
		p.dropHolds(job)
		p.releaseMovers()
		ok = true
	}
	if rj := p.running[job]; rj != nil && rj.r.Attempt == attempt {
		p.reclaim(rj)
		ok = true
	}
	if ok {
		p.touch()
	}
	return ok
}

// Checkpointed records that a running attempt saved its progress at the given time: preempting
// it from now on loses only the work done since (see the victim ordering in the package doc). A
// report for another attempt, an unknown job, a time before the attempt started or before its
// last checkpoint is ignored and returns false. It never changes whether a pass preempts, only
// whom, so it does not make the next pass run in full.
func (p *Pool) Checkpointed(job string, attempt int, at time.Time) bool {
	rj := p.running[job]
	at = normTime(at)
	if rj == nil || rj.r.Attempt != attempt || at.Before(rj.startedAt) || !at.After(rj.ckpt) {
		return false
	}
	listed := !rj.releasing && rj.r.Kind != KindNotebook
	if listed {
		p.listVictim(rj, false) // its place in the victim lists moves with its checkpoint
	}
	rj.ckpt = at
	if listed {
		p.listVictim(rj, true)
	}
	return true
}

// NextWake is the earliest time after the last Schedule call at which a pass may decide
// something although no event happened: a running job becomes preemptible
// (Policy.MinRuntimeBeforePreemption) or the first request of a class may reserve nodes
// (Policy.ReserveAfter). The allocator should call Schedule then. ok is false if no such time
// is pending.
func (p *Pool) NextWake() (time.Time, bool) {
	return p.wake, !p.wake.IsZero()
}

// countPreemptible counts rj (running, not stopping) among the jobs a victim search looks at.
func (p *Pool) countPreemptible(rj *runJob, delta int) {
	if !rj.releasing && rj.r.Kind != KindNotebook {
		p.nPreemptible[rj.fam][rj.r.Class] += delta
		p.listVictim(rj, delta > 0)
	}
}

func (p *Pool) reclaim(rj *runJob) {
	p.countPreemptible(rj, -1) // it leaves the pool
	for w := range rj.nodes {
		if !rj.released[w] {
			p.freeWorker(rj, w)
		}
	}
	p.dropRunning(rj)
}

// WaitingCount is the number of waiting requests.
func (p *Pool) WaitingCount() int { return len(p.waiting) }

// RunningJobs returns the running and releasing jobs, sorted.
func (p *Pool) RunningJobs() []string { return sortedKeys(p.running) }

// sortedKeys is m's keys, sorted: map order does not reach a decision through it.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	//workflowcheck:ignore
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Running describes a running or releasing job.
func (p *Pool) Running(job string) (RunningInfo, bool) {
	rj := p.running[job]
	if rj == nil {
		return RunningInfo{}, false
	}
	return p.runningInfo(rj), true
}

func (p *Pool) runningInfo(rj *runJob) RunningInfo {
	ri := RunningInfo{
		Job: rj.r.Job, Attempt: rj.r.Attempt, Kind: rj.r.Kind, Class: rj.r.Class, Seq: rj.r.Seq,
		GPUs: rj.r.Demand.GPUs * len(rj.nodes), StartedAt: rj.startedAt, Releasing: rj.releasing,
		Placement: p.placement(rj.nodes, rj.gpus), Preemptions: rj.preemptions, CheckpointAt: rj.ckpt,
		HonorsNotice: rj.r.HonorsNotice, Workspace: rj.r.Workspace, OnLoan: rj.onLoan,
	}
	for _, nb := range rj.nominee {
		name := ""
		if nb != nil {
			name = nb.Job
		}
		ri.Nominees = append(ri.Nominees, name)
	}
	for w, rel := range rj.released {
		if rel {
			ri.Released = append(ri.Released, w)
		}
	}
	if rj.preemptedBy != nil {
		pb := *rj.preemptedBy
		ri.PreemptedBy = &pb
	}
	return ri
}

func (p *Pool) placement(nodes []int32, gpus []uint64) []WorkerPlacement {
	out := make([]WorkerPlacement, len(nodes))
	for w, n := range nodes {
		out[w] = WorkerPlacement{Worker: w, Node: p.nodes[n].Name, GPUs: maskIndices(gpus[w])}
	}
	return out
}

func maskIndices(m uint64) []int {
	out := make([]int, 0, bits.OnesCount64(m))
	for m != 0 {
		i := bits.TrailingZeros64(m)
		out = append(out, i)
		m &^= 1 << i
	}
	return out
}

// lowestFree picks the k lowest GPU indices not in used, on a node with total GPUs.
func lowestFree(used uint64, total, k int) uint64 {
	var m uint64
	for i := 0; i < total && k > 0; i++ {
		if used&(1<<i) == 0 {
			m |= 1 << i
			k--
		}
	}
	return m
}

func (p *Pool) nodeInfos() []NodeInfo {
	out := make([]NodeInfo, len(p.nodes))
	for i := range p.nodes {
		nd := &p.nodes[i]
		out[i] = NodeInfo{Name: nd.Name, Family: nd.Family, GPUs: nd.GPUs, FreeGPUs: nd.free.gpu, Topology: nd.Topology,
			AllocatedGPUs: nd.GPUs - nd.free.gpu - nd.rel.gpu, ReleasingGPUs: nd.rel.gpu, Lost: nd.lost}
	}
	for _, h := range p.holds {
		if h.stale || h.amount.gpu == 0 || p.waitIdx[h.by] == nil {
			continue
		}
		ni := &out[h.node]
		ni.HeldGPUs += h.amount.gpu
		if ni.HeldFor == "" {
			ni.HeldFor = h.by
		}
	}
	return out
}

// sortedRunning returns running jobs sorted by StartedAt then Job.
func (p *Pool) sortedRunning() []*runJob {
	out := make([]*runJob, 0, len(p.running))
	// Map order does not reach the result: it is sorted.
	//workflowcheck:ignore
	for _, rj := range p.running {
		out = append(out, rj)
	}
	slices.SortFunc(out, func(a, b *runJob) int {
		if c := a.startedAt.Compare(b.startedAt); c != 0 {
			return c
		}
		return strings.Compare(a.r.Job, b.r.Job)
	})
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
