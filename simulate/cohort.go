package simulate

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/trainq/trainq/cohort"
	"github.com/trainq/trainq/scheduler"
)

// CohortOptions split a workload into the allocations of a cohort (RunCohort).
type CohortOptions struct {
	// Members is how many allocations share the nodes: each gets every Members-th node of each
	// kind (family, GPUs, CPU, RAM), and the jobs a hash of Seed and their id puts in it.
	Members int
	Seed    uint64
	// LendingLimit and BorrowingLimit are every member's limits in GPUs (cohort.NoLimit: none).
	LendingLimit, BorrowingLimit int
}

// CohortResult compares the members as islands (each on its own nodes alone) with the same
// members in a cohort that lends idle nodes (package cohort), under one policy.
type CohortResult struct {
	Policy  string    `json:"policy"`
	Members int       `json:"members"`
	Islands CohortRun `json:"islands"`
	Cohort  CohortRun `json:"cohort"`
	// OneAllocation is every node and job in one allocation: the idle capacity its own policy
	// leaves is a floor that no lending between allocations goes below.
	OneAllocation CohortRun `json:"one_allocation"`
	// Shared is one pool whose allocations each have their own nodes' GPUs as a guaranteed
	// share and lend the rest by the GPU (scheduler.Policy.Cohort).
	Shared  CohortRun     `json:"shared"`
	Options CohortOptions `json:"options"`
}

// NoLimit is a lending or borrowing limit that does not limit (cohort.NoLimit).
const NoLimit = cohort.NoLimit

// cohortMode is how a cohort's replay treats its members.
type cohortMode uint8

const (
	asIslands cohortMode = iota // each member on its own nodes alone
	asCohort                    // members lend each other idle nodes
	asOne                       // one allocation holds every node and job
	asShared                    // one pool, shared by the members' shares (scheduler.Policy.Cohort)
)

// CohortRun is one replay of the members, as islands or as a cohort.
type CohortRun struct {
	Members []MemberRow `json:"members"`
	// IdleWhileWaitingGPUHours is the GPU-time left free on a node while some member had a
	// waiting job one of whose workers would fit what was free there (at most the GPUs waiting).
	IdleWhileWaitingGPUHours float64 `json:"idle_while_waiting_gpu_hours"`
	// IdleEmptyGPUHours is the part of it on nodes where nothing ran: all that lending whole
	// nodes can reach (the rest is free GPUs beside others' work).
	IdleEmptyGPUHours float64 `json:"idle_empty_gpu_hours"`
	UsefulGPUHours    float64 `json:"useful_gpu_hours"`
	Utilisation       float64 `json:"utilisation"`
	Makespan          Seconds `json:"makespan"`
	// Lends counts the nodes lent; OnLoanGPUHours the GPU-time borrowed work ran on them.
	// BorrowedStarts counts the attempts a shared pool started beyond their allocation's share.
	Lends          int     `json:"lends"`
	BorrowedStarts int     `json:"borrowed_starts,omitempty"`
	OnLoanGPUHours float64 `json:"on_loan_gpu_hours"`
	// Reclaims counts the attempts that left a borrowed node its owner took back, throwing away
	// ReclaimLostGPUHours of work (none for those that honour the notice).
	Reclaims            int     `json:"reclaims"`
	ReclaimLostGPUHours float64 `json:"reclaim_lost_gpu_hours"`
	ReclaimLostPct      float64 `json:"reclaim_lost_pct"` // of useful
}

// MemberRow is one member's own jobs.
type MemberRow struct {
	Name     string  `json:"name"`
	Nodes    int     `json:"nodes"`
	GPUs     int     `json:"gpus"`
	Jobs     int     `json:"jobs"`
	Rejected int     `json:"rejected,omitempty"` // fit none of its own nodes
	WaitP95  Seconds `json:"wait_p95"`
	WaitMax  Seconds `json:"wait_max"`
	// Useful and lost GPU-hours of its jobs (lost: preemptions and reclaims).
	UsefulGPUHours float64 `json:"useful_gpu_hours"`
	LostGPUHours   float64 `json:"lost_gpu_hours"`
	Reclaims       int     `json:"reclaims,omitempty"`
}

// MemberName is the name of the i-th member (0-based) of a simulated cohort.
func MemberName(i int) string { return fmt.Sprintf("alloc-%d", i+1) }

// RunCohort replays w split into co.Members allocations, first as islands and then as a cohort.
// A job fits its own member's nodes or is refused in both runs, so the two replay the same jobs.
// Expected starts are not measured.
func RunCohort(w *Workload, pol Policy, opt Options, co CohortOptions) (*CohortResult, error) {
	if co.Members < 2 {
		return nil, fmt.Errorf("a cohort needs at least 2 members, got %d", co.Members)
	}
	if co.Members > len(w.Nodes) {
		return nil, fmt.Errorf("%d members cannot share %d nodes", co.Members, len(w.Nodes))
	}
	res := &CohortResult{Policy: pol.Name, Members: co.Members, Options: co}
	for _, run := range []struct {
		mode cohortMode
		out  *CohortRun
	}{{asIslands, &res.Islands}, {asCohort, &res.Cohort}, {asOne, &res.OneAllocation}, {asShared, &res.Shared}} {
		mode, out := run.mode, run.out
		d, err := newCohortDriver(w, pol, opt, co, mode)
		if err != nil {
			return nil, err
		}
		if *out, err = d.run(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// cohortDriver plays the members' sims on one clock: each keeps its own events, pool and jobs,
// and every pool has all the cohort's nodes, those its member does not hold marked out of
// scheduling (as an allocation's drained nodes are). Node moves are the cohort's commands.
type cohortDriver struct {
	state   *cohort.State
	members []*sim
	first   []time.Duration
	lend    bool
	split   int    // the members the jobs are counted in (one allocation: the cohort's)
	seed    uint64 // which member a job is in
	nodeIdx map[string]int32
	used    []int     // GPUs held on each node (by its holder's jobs: no one else's can be there)
	workers []int     // workers on each node, with GPUs or without
	on      [][]int32 // jobs with a worker on each node
	lends   int

	lastT                           time.Duration
	idleArea, emptyArea, onLoanArea float64 // GPU-seconds
	idleNow, emptyNow, onLoanNow    float64 // GPUs, as of the last event
	minWorker                       map[string]int
	ownNodes, ownGPUs               []int
}

func newCohortDriver(w *Workload, pol Policy, opt Options, co CohortOptions, mode cohortMode) (*cohortDriver, error) {
	split := co.Members
	if mode == asOne || mode == asShared {
		split = 1
	}
	owner := splitNodes(w.Nodes, split)
	if mode == asShared {
		w, pol = sharedPool(w, pol, co)
	}
	members := make([]cohort.Member, split)
	for m := range members {
		members[m] = cohort.Member{Name: MemberName(m), LendingLimit: co.LendingLimit, BorrowingLimit: co.BorrowingLimit}
	}
	nodes := make([]cohort.Node, len(w.Nodes))
	d := &cohortDriver{lend: mode == asCohort, split: co.Members, seed: co.Seed, nodeIdx: map[string]int32{}, used: make([]int, len(w.Nodes)), workers: make([]int, len(w.Nodes)), on: make([][]int32, len(w.Nodes)),
		ownNodes: make([]int, split), ownGPUs: make([]int, split)}
	for i, n := range w.Nodes {
		nodes[i] = cohort.Node{Name: n.Name, Family: n.Family, GPUs: n.GPUs, Owner: owner[i]}
		d.nodeIdx[n.Name] = int32(i)
		d.ownNodes[owner[i]]++
		d.ownGPUs[owner[i]] += n.GPUs
	}
	var err error
	if split == 1 {
		d.state = &cohort.State{Members: members, Nodes: nodes, Holder: make([]int, len(nodes)), Reclaiming: make([]bool, len(nodes))}
	} else if d.state, err = cohort.New(members, nodes); err != nil {
		return nil, err
	}
	est := Estimates{Kind: EstimateNone}
	if pol.Scheduler.Backfill {
		if len(opt.Estimates) != 1 {
			return nil, fmt.Errorf("policy %s backfills by the requests' RunLimits: give one --estimates model (exact, limit:Kx or learned), got %d", pol.Name, len(opt.Estimates))
		}
		est = opt.Estimates[0]
	}
	opt.Estimates = nil
	jobs := make([][]Job, split)
	for _, j := range w.Jobs {
		m := TeamOf(co.Seed, j.ID, split) - 1
		jobs[m] = append(jobs[m], j)
	}
	for m := range split {
		wm := *w
		wm.Jobs = jobs[m]
		s, err := newSim(&wm, pol, opt, est)
		if err != nil {
			return nil, err
		}
		var own []scheduler.Node
		for i, n := range s.pool.Nodes() {
			if owner[i] == m {
				own = append(own, n)
			} else {
				s.pool.MarkNodeLost(n.Name)
				s.pool.SetNodeNote(n.Name, "held by another allocation of the cohort")
			}
		}
		ownPool, err := scheduler.NewPool(own, s.pol.Scheduler)
		if err != nil {
			return nil, fmt.Errorf("%s's own nodes: %w", MemberName(m), err)
		}
		s.admit = ownPool.Admit
		if mode == asShared {
			if s.admit, err = admitOwn(s.pool.Nodes(), w.Nodes, pol, co); err != nil {
				return nil, err
			}
		}
		s.member = &memberState{d: d, m: m, groups: map[wantKey]*wantGroup{}, workerNode: map[int32][]int32{}}
		d.members = append(d.members, s)
		d.first = append(d.first, -1)
	}
	return d, nil
}

// sharedPool is w with each job in its member's allocation, and pol with the members' shares:
// each its own nodes' GPUs, borrowing up to co.BorrowingLimit (shares have no lending limit yet:
// co.LendingLimit applies to lending whole nodes only).
func sharedPool(w *Workload, pol Policy, co CohortOptions) (*Workload, Policy) {
	owner := splitNodes(w.Nodes, co.Members)
	shares := make([]scheduler.CohortShare, co.Members)
	for m := range shares {
		shares[m] = scheduler.CohortShare{Allocation: MemberName(m), BorrowingLimit: co.BorrowingLimit}
	}
	for i, n := range w.Nodes {
		shares[owner[i]].GPUs += n.GPUs
	}
	wc := *w
	wc.Jobs = slices.Clone(w.Jobs)
	for i := range wc.Jobs {
		wc.Jobs[i].Allocation = MemberName(TeamOf(co.Seed, wc.Jobs[i].ID, co.Members) - 1)
	}
	pol.Scheduler.Cohort = shares
	return &wc, pol
}

// admitOwn refuses, in the shared pool, a job that fits none of its allocation's own nodes, as
// its island would.
func admitOwn(poolNodes, nodes []scheduler.Node, pol Policy, co CohortOptions) (func(scheduler.Request) error, error) {
	owner := splitNodes(nodes, co.Members)
	base := pol.Scheduler
	base.Cohort = nil
	own := make(map[string]*scheduler.Pool, co.Members)
	for m := range co.Members {
		var ns []scheduler.Node
		for i, n := range poolNodes {
			if owner[i] == m {
				ns = append(ns, n)
			}
		}
		p, err := scheduler.NewPool(ns, base)
		if err != nil {
			return nil, fmt.Errorf("%s's own nodes: %w", MemberName(m), err)
		}
		own[MemberName(m)] = p
	}
	return func(r scheduler.Request) error { return own[r.Allocation].Admit(r) }, nil
}

// splitNodes gives each node an owner: the nodes are grouped by kind (as Shrink does) and dealt
// in turn, so that every member gets a like share of each kind.
func splitNodes(nodes []scheduler.Node, members int) []int {
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &nodes[a], &nodes[b]
		return cmp.Or(cmp.Compare(x.Family, y.Family), cmp.Compare(y.GPUs, x.GPUs), cmp.Compare(y.CPU, x.CPU), cmp.Compare(y.RAMGB, x.RAMGB))
	})
	owner := make([]int, len(nodes))
	for k, i := range order {
		owner[i] = k % members
	}
	return owner
}

// run plays every member's events in time order (ties: the lower member first), asks the cohort
// what to lend or take back before each pass (so that a member takes back its own nodes before
// it preempts) and after it (so that what the pass left waiting may borrow), and sums the run.
func (d *cohortDriver) run() (CohortRun, error) {
	for {
		m := -1
		for k, s := range d.members {
			if len(s.q) > 0 && (m < 0 || s.q[0].t < d.members[m].q[0].t) {
				m = k
			}
		}
		if m < 0 {
			break
		}
		s := d.members[m]
		e := s.q.pop()
		if d.first[m] < 0 {
			d.first[m] = e.t
		}
		d.advance(e.t)
		d.sync(s, e.t)
		if s.apply(e) {
			if err := d.step(m); err != nil {
				return CohortRun{}, err
			}
			if err := s.schedule(); err != nil {
				return CohortRun{}, err
			}
			if err := d.step(-1); err != nil {
				return CohortRun{}, err
			}
		}
		d.measure()
	}
	return d.result(), nil
}

// sync brings a member's clock (and its held GPU-time) to t.
func (d *cohortDriver) sync(s *sim, t time.Duration) {
	s.heldArea += float64(s.held) * (t - s.lastT).Seconds()
	s.lastT, s.now = t, t
}

// advance adds the time since the last event to the run's sums.
func (d *cohortDriver) advance(t time.Duration) {
	dt := (t - d.lastT).Seconds()
	d.idleArea += d.idleNow * dt
	d.emptyArea += d.emptyNow * dt
	d.onLoanArea += d.onLoanNow * dt
	d.lastT = t
}

// step asks the cohort what to do and does it; every member that gained a node (but skip, whose
// own pass comes next) runs a pass.
func (d *cohortDriver) step(skip int) error {
	if !d.lend {
		return nil
	}
	v := cohort.View{Waiting: make([][]cohort.Want, len(d.members)), Use: make([]cohort.NodeUse, len(d.used))}
	for m, s := range d.members {
		v.Waiting[m] = s.member.wants()
	}
	for i := range d.used {
		v.Use[i] = cohort.NodeUse{Workers: d.workers[i], UsedGPUs: d.used[i], AtRisk: d.atRisk(int32(i))}
	}
	gained := make([]bool, len(d.members))
	for _, c := range d.state.Step(v) {
		switch c := c.(type) {
		case cohort.Lend:
			d.lends++
			d.move(c.Node, c.From, c.To, "lent to "+MemberName(c.To))
			gained[c.To] = true
		case cohort.Return:
			d.move(c.Node, c.From, c.To, "held by another allocation of the cohort")
			gained[c.To] = true
		case cohort.Reclaim:
			d.reclaim(c.Node, c.From)
		}
	}
	for m, g := range gained {
		if g && m != skip {
			s := d.members[m]
			d.sync(s, d.lastT)
			if err := s.schedule(); err != nil {
				return err
			}
		}
	}
	return nil
}

// move takes node out of from's scheduling and gives it to to's.
func (d *cohortDriver) move(node string, from, to int, note string) {
	d.members[from].pool.MarkNodeLost(node)
	d.members[from].pool.SetNodeNote(node, note)
	d.members[to].pool.MarkNodeUp(node)
	d.members[to].pool.SetNodeNote(node, "")
}

// reclaim takes node out of its borrower's scheduling and tells the borrower's jobs there to
// leave, as a drain does: a notice, and a rerun that spends no retry.
func (d *cohortDriver) reclaim(node string, borrower int) {
	s := d.members[borrower]
	d.sync(s, d.lastT)
	s.pool.MarkNodeLost(node)
	s.pool.SetNodeNote(node, "taken back by its owner")
	for _, vi := range slices.Clone(d.on[d.nodeIdx[node]]) {
		s.reclaim(vi)
	}
}

// reclaim tells a running job on a node its owner took back to leave.
func (s *sim) reclaim(vi int32) {
	j, st := &s.w.Jobs[vi], &s.jobs[vi]
	if st.phase != phRunning {
		return // already told, by a preemption or another node's reclaim
	}
	s.pool.BeginRelease(j.ID)
	st.preempted++
	st.yields++ // (its rerun spends no retry)
	s.reclaims++
	st.reclaims++
	st.yielding, st.moving, st.reclaimed, st.preemptedBy = false, false, true, vi
	st.phase, st.noticeAt = phNotice, s.now
	s.teams.releasing += j.GPUs()
	s.tell(vi)
}

// atRisk is the work the jobs on node would lose if they left now: their GPU-time there since
// their last checkpoint.
func (d *cohortDriver) atRisk(i int32) float64 {
	s := d.members[d.state.Holder[i]] // (only the holder's jobs can be there)
	var sum float64
	for _, vi := range d.on[i] {
		st := &s.jobs[vi]
		for _, n := range s.member.workerNode[vi] {
			if n == i {
				sum += (s.now - max(st.startedAt, st.ckptAt)).Seconds() * float64(s.w.Jobs[vi].Demand.GPUs)
			}
		}
	}
	return sum
}

// measure sets the GPUs idle while a job that would fit them waits, and those on loan, as of now.
func (d *cohortDriver) measure() {
	clear(d.minWorker)
	if d.minWorker == nil {
		d.minWorker = map[string]int{}
	}
	waiting := 0
	for _, s := range d.members {
		for k, g := range s.member.groups {
			if g.gpus <= 0 {
				continue
			}
			waiting += g.gpus
			if w, ok := d.minWorker[k.family]; !ok || k.workerGPUs < w {
				d.minWorker[k.family] = k.workerGPUs
			}
		}
	}
	idle, empty, onLoan := 0, 0, 0
	for i, n := range d.state.Nodes {
		free := n.GPUs - d.used[i]
		if w, ok := d.minWorker[n.Family]; ok && free >= w {
			idle += free
			if d.workers[i] == 0 {
				empty += free
			}
		}
		if d.state.Borrowed(i) {
			onLoan += d.used[i]
		}
	}
	d.idleNow, d.emptyNow, d.onLoanNow = float64(min(idle, waiting)), float64(min(empty, waiting)), float64(onLoan)
}

func (d *cohortDriver) result() CohortRun {
	var out CohortRun
	end := time.Duration(0)
	start := time.Duration(math.MaxInt64)
	var held, lost float64
	rows := make([]MemberRow, d.split)
	for k := range rows {
		rows[k].Name = MemberName(k)
	}
	waits := make([][]time.Duration, d.split)
	for m, s := range d.members {
		first := max(d.first[m], 0)
		r := s.result(first)
		for i, j := range s.w.Jobs {
			k := m
			if len(d.members) == 1 {
				k = TeamOf(d.seed, j.ID, d.split) - 1 // the member it would be in
			}
			st, row := &s.jobs[i], &rows[k]
			row.Jobs++
			if st.phase == phRejected {
				row.Rejected++
				continue
			}
			waits[k] = append(waits[k], st.waited)
			if st.phase == phDone {
				row.UsefulGPUHours += j.Runtime.Hours() * float64(j.GPUs())
			}
			row.LostGPUHours += st.lost / 3600
			row.Reclaims += st.reclaims
		}
		out.UsefulGPUHours += r.Row(RowAll).UsefulGPUHours
		out.Reclaims += s.reclaims
		out.BorrowedStarts += s.borrowed
		lost += s.reclaimLost
		held += s.heldArea
		start = min(start, first)
		end = max(end, first+time.Duration(r.Makespan))
	}
	for k := range rows {
		sorted := slices.Sorted(slices.Values(waits[k]))
		rows[k].WaitP95 = Seconds(quantile(sorted, 0.95))
		if len(sorted) > 0 {
			rows[k].WaitMax = Seconds(sorted[len(sorted)-1])
		}
		if len(d.members) > 1 {
			rows[k].Nodes, rows[k].GPUs = d.ownNodes[k], d.ownGPUs[k]
		}
	}
	out.Members = rows
	gpus := 0
	for _, n := range d.state.Nodes {
		gpus += n.GPUs
	}
	out.Makespan = Seconds(end - start)
	if span := (end - start).Seconds(); span > 0 && gpus > 0 {
		out.Utilisation = held / (span * float64(gpus))
	}
	out.IdleWhileWaitingGPUHours = d.idleArea / 3600
	out.IdleEmptyGPUHours = d.emptyArea / 3600
	out.OnLoanGPUHours = d.onLoanArea / 3600
	out.Lends = d.lends
	out.ReclaimLostGPUHours = lost / 3600
	if out.UsefulGPUHours > 0 {
		out.ReclaimLostPct = 100 * out.ReclaimLostGPUHours / out.UsefulGPUHours
	}
	return out
}

// memberState is a member's share of the cohort's bookkeeping: its waiting jobs grouped by what
// one worker needs, and where its running jobs' workers are.
type memberState struct {
	d          *cohortDriver
	m          int
	groups     map[wantKey]*wantGroup
	workerNode map[int32][]int32 // a running job's node per worker (-1: released)
}

type wantKey struct {
	family     string
	workerGPUs int
	class      scheduler.Class
}

// wantGroup is a member's waiting jobs of one key: their GPUs, and a queue in the order they
// were queued from which those no longer waiting are dropped lazily.
type wantGroup struct {
	gpus  int
	queue []queuedAttempt
}

type queuedAttempt struct {
	job     int32
	attempt int
	at      time.Duration
}

func (ms *memberState) key(s *sim, i int32) wantKey {
	j := &s.w.Jobs[i]
	return wantKey{family: j.Demand.Family, workerGPUs: j.Demand.GPUs, class: s.class(i)}
}

func (ms *memberState) queued(s *sim, i int32) {
	if ms == nil {
		return
	}
	k := ms.key(s, i)
	g := ms.groups[k]
	if g == nil {
		g = &wantGroup{}
		ms.groups[k] = g
	}
	g.gpus += s.w.Jobs[i].GPUs()
	g.queue = append(g.queue, queuedAttempt{job: i, attempt: s.jobs[i].attempt, at: s.now})
}

// started books a grant's workers on their nodes; a grant on a node its member does not hold
// would give a GPU two holders, and ends the run.
func (ms *memberState) started(s *sim, i int32, g scheduler.Grant) error {
	if ms == nil {
		return nil
	}
	for _, p := range g.Placement {
		if n := ms.d.nodeIdx[p.Node]; ms.d.state.Holder[n] != ms.m || ms.d.state.Reclaiming[n] {
			return fmt.Errorf("%s granted %s on node %s, which it does not hold", MemberName(ms.m), g.Job, p.Node)
		}
	}
	ms.groups[ms.key(s, i)].gpus -= s.w.Jobs[i].GPUs()
	nodes := make([]int32, s.w.Jobs[i].Workers)
	for _, p := range g.Placement {
		n := ms.d.nodeIdx[p.Node]
		nodes[p.Worker] = n
		ms.d.used[n] += s.w.Jobs[i].Demand.GPUs
		ms.d.workers[n]++
		if !slices.Contains(ms.d.on[n], i) {
			ms.d.on[n] = append(ms.d.on[n], i)
		}
	}
	ms.workerNode[i] = nodes
	return nil
}

// released frees one worker's GPUs on its node.
func (ms *memberState) released(i int32, worker, gpus int) {
	if ms == nil {
		return
	}
	nodes := ms.workerNode[i]
	if nodes == nil || nodes[worker] < 0 {
		return
	}
	n := nodes[worker]
	nodes[worker] = -1
	ms.d.used[n] -= gpus
	ms.d.workers[n]--
	if !slices.Contains(nodes, n) {
		ms.d.on[n] = slices.DeleteFunc(ms.d.on[n], func(j int32) bool { return j == i })
	}
	if !slices.ContainsFunc(nodes, func(x int32) bool { return x >= 0 }) {
		delete(ms.workerNode, i)
	}
}

// wants are the member's waiting jobs as the cohort sees them: one per group, with its GPUs and
// the time its longest-queued job was queued.
func (ms *memberState) wants() []cohort.Want {
	s := ms.d.members[ms.m]
	var out []cohort.Want
	for k, g := range ms.groups {
		for len(g.queue) > 0 {
			q := g.queue[0]
			if st := &s.jobs[q.job]; st.phase == phWaiting && st.attempt == q.attempt {
				break
			}
			g.queue = g.queue[1:]
		}
		if g.gpus <= 0 || len(g.queue) == 0 {
			continue
		}
		out = append(out, cohort.Want{Family: k.family, WorkerGPUs: k.workerGPUs, GPUs: g.gpus, Class: int(k.class),
			Since: Epoch.Add(g.queue[0].at)})
	}
	slices.SortFunc(out, func(a, b cohort.Want) int {
		return cmp.Or(cmp.Compare(b.Class, a.Class), a.Since.Compare(b.Since), cmp.Compare(a.Family, b.Family), cmp.Compare(a.WorkerGPUs, b.WorkerGPUs))
	})
	return out
}

// WriteCohortMarkdown prints, per policy, each member's waits as an island and in the cohort, and
// what the cohort lent, took back and left idle.
func WriteCohortMarkdown(w io.Writer, wl *Workload, rs []*CohortResult) {
	if len(rs) == 0 {
		return
	}
	co := rs[0].Options
	limit := func(n int) string {
		if n == cohort.NoLimit {
			return "none"
		}
		return fmt.Sprintf("%d GPUs", n)
	}
	fmt.Fprintf(w, "Workload %s split into %d allocations: each holds every %d-th node of each kind, and a hash of seed %d and the job id puts each job in one. "+
		"As **islands** each runs on its own nodes alone. Lending **whole nodes**, an allocation lends idle nodes that none of its waiting jobs fits and takes them back "+
		"when its own jobs wait (lending limit %s, borrowing limit %s per allocation). **Shared** by the GPU, one pool holds every node, each allocation's own nodes' GPUs are its guaranteed share, "+
		"and beyond it a job borrows what the others leave unused (borrowing limit %s), taken back, whatever its class, before the lender preempts a job of its own. "+
		"Taken back, a job gets the preemption notice and reruns without spending max_retry. A job that fits none of its allocation's own nodes is refused in all three. "+
		"**One allocation** holds every node and job with no shares: what its own policy leaves idle, no lending goes below.\n\n",
		wl.Name, co.Members, co.Members, co.Seed, limit(co.LendingLimit), limit(co.BorrowingLimit), limit(co.BorrowingLimit))
	for _, r := range rs {
		fmt.Fprintf(w, "### %s\n\n", r.Policy)
		fmt.Fprintln(w, "| allocation | nodes (GPUs) | jobs | p95 wait: island → whole nodes → shared (one allocation) | longest wait: the same | taken back: whole nodes, shared |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
		for k, is := range r.Islands.Members {
			c, sh, one := r.Cohort.Members[k], r.Shared.Members[k], r.OneAllocation.Members[k]
			fmt.Fprintf(w, "| %s | %d (%d) | %d | %s → %s → %s (%s) | %s → %s → %s (%s) | %d, %d |\n", is.Name, is.Nodes, is.GPUs, is.Jobs,
				Dur(is.WaitP95.D()), Dur(c.WaitP95.D()), Dur(sh.WaitP95.D()), Dur(one.WaitP95.D()),
				Dur(is.WaitMax.D()), Dur(c.WaitMax.D()), Dur(sh.WaitMax.D()), Dur(one.WaitMax.D()), c.Reclaims, sh.Reclaims)
		}
		is, c, sh, one := &r.Islands, &r.Cohort, &r.Shared, &r.OneAllocation
		fewer := func(x float64) string {
			if x <= 0 {
				return "none"
			}
			return fmt.Sprintf("%.0f (%.1f× fewer)", x, is.IdleWhileWaitingGPUHours/x)
		}
		fmt.Fprintf(w, "\n| | islands | whole nodes | shared | one allocation |\n|---|--:|--:|--:|--:|\n")
		fmt.Fprintf(w, "| GPU-hours idle while a job that fits waits | %.0f | %s | %s | %s |\n", is.IdleWhileWaitingGPUHours, fewer(c.IdleWhileWaitingGPUHours), fewer(sh.IdleWhileWaitingGPUHours), fewer(one.IdleWhileWaitingGPUHours))
		fmt.Fprintf(w, "| of which on nodes where nothing ran | %.0f | %.0f | %.0f | %.0f |\n", is.IdleEmptyGPUHours, c.IdleEmptyGPUHours, sh.IdleEmptyGPUHours, one.IdleEmptyGPUHours)
		fmt.Fprintf(w, "| utilisation | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", 100*is.Utilisation, 100*c.Utilisation, 100*sh.Utilisation, 100*one.Utilisation)
		fmt.Fprintf(w, "| makespan | %s | %s | %s | %s |\n", Dur(is.Makespan.D()), Dur(c.Makespan.D()), Dur(sh.Makespan.D()), Dur(one.Makespan.D()))
		fmt.Fprintf(w, "| lent: nodes; starts beyond a share | — | %d | %d | — |\n", c.Lends, sh.BorrowedStarts)
		fmt.Fprintf(w, "| taken back; GPU-hours thrown away (of useful) | — | %d; %.1f (%.2f%%) | %d; %.1f (%.2f%%) | — |\n\n", c.Reclaims, c.ReclaimLostGPUHours, c.ReclaimLostPct, sh.Reclaims, sh.ReclaimLostGPUHours, sh.ReclaimLostPct)
	}
}
