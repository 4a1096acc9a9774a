// Package simulate replays a workload through the real scheduler package as a discrete-event
// simulation, to judge scheduling policies on real traces before they reach an allocator.
//
// The simulated allocator does what the allocator workflow does: it calls Pool.Schedule after
// every event (a job arriving, a job's workers exiting, a stopped worker of a preempted job) and
// at Pool.NextWake, as the allocator's wake timer does (Options.EventsOnly: after events alone),
// and applies the decisions. A granted job runs for its remaining work and then its workers exit and
// are released at once. A preempted job's workers stop Options.StopDelay later (SIGTERM, the
// grace period, SIGKILL); once all have stopped the job is queued again, keeping its queue
// sequence, while Options.MaxRetry allows, and reruns from zero or from its last checkpoint.
//
// With a preemption notice (the policy's scheduler.Policy.PreemptionNotice, trainq simulate
// --notice) the victim is told first. A job that honours notices (a share Options.Honor of the
// jobs, drawn once per job from its id and Options.HonorSeed, so the same jobs over all their
// attempts and, at a higher share, a superset of them) saves its progress when told and exits
// Options.SaveTime later: it loses nothing, its workers free their capacity then, and from then
// on its requests say scheduler.Request.HonorsNotice. A job that does not honour them runs on to
// the deadline, is stopped Options.StopDelay after it, and loses the work since its last
// checkpoint. A victim whose work ends before it exits completes.
//
// Nothing here reads the clock except Options.Clock, which only times the Schedule calls, so
// every other figure of a run is deterministic.
package simulate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// Policy is one scheduling policy to compare.
type Policy struct {
	Name      string           `json:"name"`
	Scheduler scheduler.Policy `json:"scheduler"`
	// NoPriorities submits every job as a medium training job: the queue is plain FIFO (by
	// arrival) and nothing is ever preempted. Rows still group jobs by their own class.
	NoPriorities bool `json:"no_priorities,omitempty"`
	// Honor, when set, is this policy's share of jobs that honour a notice, instead of
	// Options.Honor (so that one run can compare shares side by side).
	Honor *float64 `json:"honor,omitempty"`
	// NoHonorsNotice never tells the pool that a job honoured its notices (its requests never say
	// HonorsNotice), as trainq did before it counted lost work from the notice: the jobs honour
	// them all the same, but the policy counts every victim's loss from its last checkpoint.
	NoHonorsNotice bool `json:"no_honors_notice,omitempty"`
	// NoTopology places gangs as if the workload had no topology (Workload.Topology).
	NoTopology bool `json:"no_topology,omitempty"`
	// GangTopology is how the gangs share the workload's topology levels (knobs
	// required_topology, preferred_topology): the allocation's default, set once the workload's
	// levels are known.
	GangTopology scheduler.GangTopology `json:"gang_topology,omitzero"`
}

// HonorShare is the share of jobs that honour a notice under p: p.Honor, or opt.Honor.
func (p Policy) HonorShare(opt Options) float64 {
	if p.Honor != nil {
		return *p.Honor
	}
	return opt.Honor
}

// Options describe the simulated cluster; they are the same for every policy compared.
type Options struct {
	// StopDelay is how long a preempted job's workers take to stop.
	StopDelay time.Duration `json:"stop_delay"`
	// Checkpoint: 0 means a preempted job reruns from zero; otherwise a running job saves its
	// progress every Checkpoint of running time, reports it to the pool, and a rerun resumes
	// from the last one.
	Checkpoint time.Duration `json:"checkpoint,omitempty"`
	// MaxRetry is how many times a job reruns after being preempted; negative means without
	// limit. A job preempted once more ends (it counts as "given up").
	MaxRetry int `json:"max_retry"`
	// Burst makes every job arrive at time 0, in arrival order.
	Burst bool `json:"burst,omitempty"`
	// EventsOnly schedules after events alone. By default the simulator also schedules at
	// Pool.NextWake (a running job passes min_runtime_before_preemption or a loan falls due, a
	// class's first request reaches reserve_after or starvation_after), as the allocator's wake
	// timer does; EventsOnly shows what a policy does without that timer.
	EventsOnly bool `json:"events_only,omitempty"`
	// Honor is the share of jobs (0 to 1) that honour a preemption notice: told, they save and
	// exit SaveTime later (see the package doc). It matters only under a notice.
	Honor float64 `json:"honor,omitempty"`
	// SaveTime is how long a job that honours a notice takes to save and exit (default
	// DefaultSaveTime); it must be shorter than the notice.
	SaveTime time.Duration `json:"save_time,omitempty"`
	// HonorSeed picks which jobs honour notices (a hash of it and the job's id).
	HonorSeed uint64 `json:"honor_seed,omitempty"`
	// Clock times the Schedule calls (nil: time.Now). It never influences a decision.
	Clock func() time.Time `json:"-"`
	// Estimates are the runtime estimate models whose expected starts are measured (see
	// Result.ETA); none: no request carries a RunLimit and nothing is measured. Each model is
	// one more run of the same schedule (a RunLimit changes no decision).
	Estimates []Estimates `json:"estimates,omitempty"`
	// ETASample is the share of jobs (0 to 1; 0: all) whose expected starts are measured, drawn
	// from a hash of ETASeed and the job's id.
	ETASample float64 `json:"eta_sample,omitempty"`
	ETASeed   uint64  `json:"eta_seed,omitempty"`
	// RateWindow is the window of the baseline's admission rate (default DefaultRateWindow).
	RateWindow time.Duration `json:"rate_window,omitempty"`
}

// DefaultSaveTime is Options.SaveTime when it is 0: a checkpoint written on notice, and the exit.
const DefaultSaveTime = 10 * time.Second

func (o Options) saveTime() time.Duration {
	if o.SaveTime > 0 {
		return o.SaveTime
	}
	return DefaultSaveTime
}

// honours reports whether the job honours preemption notices, at share p: idHash of the seed and
// its id, taken as uniform on [0, 1), below p.
func honours(seed uint64, id string, p float64) bool {
	return float64(idHash(seed, id)>>11)/(1<<53) < p
}

// idHash is a hash of a seed and a job id: FNV-1a, then SplitMix64's finalizer, so that ids that
// differ in a digit spread evenly.
func idHash(seed uint64, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(id))
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Epoch is the simulated time of the workload's start.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type evKind uint8

const (
	evArrive     evKind = iota
	evFinish            // the attempt's work is done: its workers exit and are released
	evStopped           // one worker of a preempted attempt has stopped
	evCheckpoint        // a running attempt saves its progress
	evWake              // the pool's NextWake
	evNoticeEnd         // a told victim exits (it saved) or reaches the notice's deadline
	evProbe             // measure a waiting job's expected start (ETA runs; changes nothing)
	evExplain           // sample a longest waiter's reason (changes nothing)
)

type event struct {
	t       time.Duration
	seq     uint64
	kind    evKind
	job     int32
	attempt int32
	worker  int32
}

// eventQueue is a binary min-heap on (t, seq): events at the same time run in the order they
// were scheduled.
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

type phase uint8

const (
	phNew phase = iota
	phWaiting
	phRunning
	phNotice   // preempted and told: it runs on until it exits or the deadline comes
	phStopping // preempted, workers stopping
	phDone     // completed
	phGivenUp  // preempted with no retries left
	phRejected // can never fit the pool
)

type jobState struct {
	attempt   int
	queuedAt  time.Duration
	startedAt time.Duration
	ckptAt    time.Duration // last checkpoint of the running attempt (absolute)
	phase     phase
	remaining time.Duration
	waited    time.Duration
	preempted int
	yields    int  // of its preemptions, loans it gave back (scheduler.Preemption.Loan): no retry spent
	yielding  bool // the preempted attempt yields a loan
	// preemptedBy is the request it was last preempted for (set with phNotice).
	preemptedBy int32
	moving      bool          // the preempted attempt is moved out of a domain for a gang
	moved       int           // times it was moved out of a domain for a gang
	movedAt     time.Duration // when it was last moved (moved > 0)
	stopped     int           // workers of the preempted attempt that have stopped
	nodes       []string
	// firstNodes are where the first attempt ran (GangStats).
	firstNodes []string
	lost       float64 // GPU-seconds of work thrown away
	pending    []int32 // preemptions made for this job, judged at its next grant
	endedAt    time.Duration
	honours    bool          // it honours notices (see honours)
	honoured   int           // notices it saved and exited on
	noticeAt   time.Duration // when its preemption told it (phNotice)
	capHit     bool          // the pool explained its wait by its workspace's cap, at least once
	capPos     int32         // its index in sim.capWait while it waits in a capped class
	ran        time.Duration // run time of its earlier (preempted) attempts
	estimate   time.Duration // learned estimate given at submission (hasEst)
	hasEst     bool
	estLevel   int8          // which shape key gave it (0 fine, 1 coarse)
	firstAt    time.Duration // when the first attempt started (-1: never)
	reclaimed  bool          // the preempted attempt leaves capacity it borrowed, taken back (cohorts)
	reclaims   int           // times its borrowed capacity was taken back
	spans      []waitSpan    // its waits: each attempt's queueing to start
}

// waitSpan is one attempt's wait, from queueing to start.
type waitSpan struct{ from, to time.Duration }

type preemptRec struct {
	victim, by int32 // the victim and its preemptor
	nodes      []string
	at         time.Duration
	// takenOver: a job of a higher class than the preemptor started on the victim's nodes
	// before the preemptor started elsewhere, as a takeover of the victim's capacity does
	// (rule 7); forNothing: the preemptor started elsewhere and nothing took it over.
	takenOver, forNothing bool
}

type sim struct {
	w    *Workload
	pol  Policy
	opt  Options
	pool *scheduler.Pool
	idx  map[string]int32
	jobs []jobState
	q    eventQueue
	seq  uint64
	now  time.Duration

	preempts []preemptRec
	// unjudged is the preemptions whose preemptor has not started yet (judged at its start).
	unjudged   []int32
	held       int // GPUs held by running or stopping workers
	heldArea   float64
	lastT      time.Duration
	schedTimes []time.Duration
	ckpt       checkpointer
	wakeAt     time.Duration // the pending evWake, -1 if none
	// preemptorWaits are, per grant of a job that preempted others, the time from its first
	// preemption decision to its start.
	preemptorWaits []time.Duration
	teams          teamState
	// loans counts the attempts started on loan (scheduler.Grant.OnLoan); yields those that
	// gave their loan back, and yieldLost the GPU-seconds of work they threw away.
	loans, yields int
	yieldLost     float64
	// moves counts the jobs moved out of a domain for a gang (scheduler.Preemption.Move), and
	// moveLost the GPU-seconds of work they threw away.
	moves    int
	moveLost float64
	// mostMoves is the most times one job was moved, and closestMoves the shortest time
	// between two moves of one job (0 while no job was moved twice).
	mostMoves    int
	closestMoves time.Duration

	est       Estimates       // the model requests' RunLimits follow
	learn     *learner        // EstimateLearned
	starts    []time.Duration // every start of an attempt, in order (the baseline's admission rate)
	eta       *etaRun         // nil: not measuring expected starts
	watch     *watchRun       // nil: not sampling longest waiters' reasons
	firstPlan *sim            // the plain run this one replays (nil: none)

	// admit, when set, refuses what the pool would hold but its member's own nodes cannot
	// (a cohort's member: see cohort.go); member is its share of the cohort's bookkeeping.
	admit  func(scheduler.Request) error
	member *memberState
	// reclaims counts the attempts that left a borrowed node its owner took back, and
	// reclaimLost the GPU-seconds of work they threw away.
	reclaims    int
	reclaimLost float64
	borrowed    int // attempts started beyond their allocation's share (scheduler.Grant.Borrowed)

	bound        StarvationBound          // the starvation bound's check (checkStarving)
	marks        map[int32]starvationMark // the bounds of starving heads, by job
	passStarving []int32                  // the heads that starve in the current pass
}

// checkpointer is the pool's optional checkpoint report (see Pool.Checkpointed).
type checkpointer interface {
	Checkpointed(job string, attempt int, at time.Time) bool
}

func (s *sim) push(t time.Duration, k evKind, job int32, attempt, worker int) {
	s.seq++
	s.q.push(event{t: t, seq: s.seq, kind: k, job: job, attempt: int32(attempt), worker: int32(worker)})
}

// Run replays w under one policy. With Options.Estimates it measures expected starts, and it
// names the longest waiter of each class and what held it back: a first run gives every job's
// waits; a second run, per estimates model, replays the same schedule and measures at the
// moments the first one knows (see eta.go).
//
// A policy with backfill decides by its requests' RunLimits, so its plain run carries them: those
// of the one estimates model it is given (Options.Estimates), which its replay carries too.
func Run(w *Workload, pol Policy, opt Options) (*Result, error) {
	est := Estimates{Kind: EstimateNone}
	if pol.Scheduler.Backfill {
		if len(opt.Estimates) != 1 {
			return nil, fmt.Errorf("policy %s backfills by the requests' RunLimits: give one --estimates model (exact, limit:Kx or learned), got %d", pol.Name, len(opt.Estimates))
		}
		est = opt.Estimates[0]
	}
	s, err := newSim(w, pol, opt, est)
	if err != nil {
		return nil, err
	}
	first, err := s.loop()
	if err != nil {
		return nil, err
	}
	res := s.result(max(first, 0))
	return res, s.measure(res)
}

// newSim checks the options and sets up a run whose requests carry the RunLimits of est.
func newSim(w *Workload, pol Policy, opt Options, est Estimates) (*sim, error) {
	if opt.StopDelay < 0 || opt.Checkpoint < 0 || opt.SaveTime < 0 {
		return nil, errors.New("the stop delay, checkpoint interval and save time must not be negative")
	}
	share := pol.HonorShare(opt)
	if share < 0 || share > 1 || math.IsNaN(share) {
		return nil, fmt.Errorf("the share of jobs that honour a notice must be between 0 and 1, got %g", share)
	}
	if n := pol.Scheduler.PreemptionNotice; n > 0 && share > 0 && !pol.NoPriorities && opt.saveTime() >= n {
		return nil, fmt.Errorf("the save time %s must be shorter than the preemption notice %s", opt.saveTime(), n)
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	nodes := w.Nodes
	pol.Scheduler.Topology, pol.Scheduler.GangTopology = w.Topology, pol.GangTopology
	if pol.NoTopology {
		nodes, pol.Scheduler.Topology, pol.Scheduler.GangTopology = withoutTopology(w.Nodes), nil, scheduler.GangTopology{}
	}
	pool, err := scheduler.NewPool(nodes, pol.Scheduler)
	if err != nil {
		return nil, err
	}
	s := &sim{w: w, pol: pol, opt: opt, pool: pool, idx: make(map[string]int32, len(w.Jobs)), jobs: make([]jobState, len(w.Jobs)), wakeAt: -1, est: est}
	if est.Kind == EstimateLearned {
		s.learn = newLearner(est.percentile())
	}
	s.ckpt, _ = any(pool).(checkpointer)
	s.teams.init(s)
	for i := range w.Jobs {
		j := &w.Jobs[i]
		if _, dup := s.idx[j.ID]; dup {
			return nil, fmt.Errorf("job id %q is used twice", j.ID)
		}
		if j.Workers < 1 || j.Runtime < 0 {
			return nil, fmt.Errorf("job %s: needs at least one worker and a non-negative runtime", j.ID)
		}
		s.idx[j.ID] = int32(i)
		s.jobs[i].remaining = j.Runtime
		s.jobs[i].firstAt = -1
		s.jobs[i].honours = share > 0 && honours(opt.HonorSeed, j.ID, share)
		at := j.Arrival
		if opt.Burst {
			at = 0
		}
		s.push(at, evArrive, int32(i), 1, 0)
	}
	return s, nil
}

// loop plays every event; it returns the time of the first.
func (s *sim) loop() (time.Duration, error) {
	first := time.Duration(-1)
	for len(s.q) > 0 {
		e := s.q.pop()
		if first < 0 {
			first = e.t
		}
		s.heldArea += float64(s.held) * (e.t - s.lastT).Seconds()
		s.lastT, s.now = e.t, e.t
		if !s.apply(e) {
			continue
		}
		if err := s.schedule(); err != nil {
			return 0, err
		}
		if s.eta != nil {
			s.pool.SampleForecasts(Epoch.Add(s.now), s.stopBound())
		}
		if e.kind == evArrive && s.eta != nil {
			s.eta.submitted(s, e.job)
		}
	}
	return first, nil
}

// apply handles one event; it reports whether the allocator would schedule after it.
func (s *sim) apply(e event) bool {
	j, st := &s.w.Jobs[e.job], &s.jobs[e.job]
	switch e.kind {
	case evArrive:
		st.attempt, st.queuedAt = 1, s.now
		if s.learn != nil {
			st.estimate, st.estLevel, st.hasEst = s.learnedEstimate(j)
		}
		r := s.request(e.job)
		if s.admit != nil && s.admit(r) != nil {
			st.phase, st.endedAt = phRejected, s.now
			return false
		}
		if err := s.pool.Enqueue(r); err != nil {
			st.phase, st.endedAt = phRejected, s.now
			return false
		}
		st.phase = phWaiting
		s.teams.queued(s, e.job)
		s.member.queued(s, e.job)
	case evFinish:
		if (st.phase != phRunning && st.phase != phNotice) || int(e.attempt) != st.attempt {
			return false // preempted meanwhile
		}
		if st.phase == phRunning {
			s.pool.BeginRelease(j.ID)
		}
		for w := 0; w < j.Workers; w++ {
			s.pool.Release(j.ID, st.attempt, w)
			s.member.released(e.job, w, j.Demand.GPUs)
		}
		s.held -= j.GPUs()
		s.teams.hold(s, e.job, -j.GPUs())
		if st.phase == phNotice { // a told victim whose work ended first
			s.teams.releasing -= j.GPUs()
		}
		st.phase, st.endedAt, st.remaining = phDone, s.now, 0
		if s.learn != nil {
			s.learn.observe(shapeKeys(j), j.Runtime)
		}
	case evStopped:
		if st.phase != phStopping || int(e.attempt) != st.attempt {
			return false
		}
		s.pool.Release(j.ID, st.attempt, int(e.worker))
		s.member.released(e.job, int(e.worker), j.Demand.GPUs)
		s.held -= j.Demand.GPUs
		s.teams.hold(s, e.job, -j.Demand.GPUs)
		s.teams.releasing -= j.Demand.GPUs
		st.stopped++
		if st.stopped < j.Workers {
			return true
		}
		if s.opt.MaxRetry >= 0 && st.preempted-st.yields > s.opt.MaxRetry {
			st.phase, st.endedAt = phGivenUp, s.now
			return true
		}
		st.attempt++
		st.phase, st.queuedAt = phWaiting, s.now
		if err := s.pool.Enqueue(s.request(e.job)); err != nil {
			panic(fmt.Sprintf("simulate: re-queue of %s refused: %v", j.ID, err)) // it was admitted before
		}
		s.teams.queued(s, e.job)
		s.member.queued(s, e.job)
	case evNoticeEnd:
		if st.phase != phNotice || int(e.attempt) != st.attempt {
			return false // it completed first
		}
		s.stop(e.job)
		return false // nothing is released yet: its workers stop after this
	case evCheckpoint:
		if (st.phase != phRunning && st.phase != phNotice) || int(e.attempt) != st.attempt {
			return false
		}
		st.ckptAt = s.now
		s.ckpt.Checkpointed(j.ID, st.attempt, Epoch.Add(s.now))
		if next := s.now + s.opt.Checkpoint; next < st.startedAt+st.remaining {
			s.push(next, evCheckpoint, e.job, st.attempt, 0)
		}
		return false // a checkpoint changes no decision the allocator would make at once
	case evWake:
		if e.t != s.wakeAt {
			return false
		}
		s.wakeAt = -1
	case evProbe:
		s.eta.probe(s, e.job)
		return false
	case evExplain:
		s.watch.sample(s, e.job)
		return false
	}
	return true
}

// class is the class of job i's requests (medium for every job without priorities).
func (s *sim) class(i int32) scheduler.Class {
	if s.pol.NoPriorities {
		return scheduler.Medium
	}
	return s.w.Jobs[i].Class
}

func (s *sim) request(i int32) scheduler.Request {
	j, st := &s.w.Jobs[i], &s.jobs[i]
	r := scheduler.Request{Job: j.ID, Attempt: st.attempt, Kind: j.Kind, Class: j.Class, Demand: j.Demand,
		Workers: j.Workers, Seq: int64(i) + 1, SubmittedAt: Epoch.Add(j.Arrival), Nodes: j.Nodes,
		Workspace: j.Workspace, Allocation: j.Allocation}
	if s.opt.Burst {
		r.SubmittedAt = Epoch
	}
	if s.pol.NoPriorities {
		r.Kind, r.Class = scheduler.KindJob, scheduler.Medium
	}
	r.HonorsNotice = st.honoured > 0 && !s.pol.NoHonorsNotice
	r.RunLimit = s.runLimit(i)
	// A learned estimate is no limit: the job runs on past it (exact and limit:Kx never do).
	r.RunEstimated = r.RunLimit > 0 && s.est.Kind == EstimateLearned
	return r
}

func (s *sim) schedule() error {
	s.starvingBefore()
	start := s.opt.Clock()
	d := s.pool.Schedule(Epoch.Add(s.now))
	s.schedTimes = append(s.schedTimes, s.opt.Clock().Sub(start))
	if !s.opt.EventsOnly {
		if at, ok := s.pool.NextWake(); ok {
			if t := at.Sub(Epoch); t > s.now && t != s.wakeAt {
				s.wakeAt = t
				s.push(t, evWake, 0, 0, 0)
			}
		}
	}
	for _, g := range d.Grants {
		if err := s.start(g); err != nil {
			return err
		}
	}
	for _, p := range d.Preemptions {
		if err := s.preempt(p); err != nil {
			return err
		}
	}
	s.teams.checkCaps(s)
	s.checkStarving()
	return nil
}

// start runs a granted job until it finishes (and checkpoints it, with Options.Checkpoint), and
// judges the preemptions made for it: for nothing if it started on none of their nodes.
func (s *sim) start(g scheduler.Grant) error {
	i, ok := s.idx[g.Job]
	if !ok {
		return fmt.Errorf("grant for unknown job %s", g.Job)
	}
	j, st := &s.w.Jobs[i], &s.jobs[i]
	if st.phase != phWaiting || g.Attempt != st.attempt {
		return fmt.Errorf("grant for %s attempt %d, which is not waiting", g.Job, g.Attempt)
	}
	st.phase, st.startedAt, st.ckptAt = phRunning, s.now, s.now
	st.waited += s.now - st.queuedAt
	st.spans = append(st.spans, waitSpan{st.queuedAt, s.now})
	if st.attempt == 1 {
		st.firstAt = s.now
	}
	s.starts = append(s.starts, s.now)
	st.nodes = st.nodes[:0]
	for _, p := range g.Placement {
		if len(j.Nodes) > 0 && !slices.Contains(j.Nodes, p.Node) {
			return fmt.Errorf("grant for %s on %s, which is not one of its nodes %v", g.Job, p.Node, j.Nodes)
		}
		st.nodes = append(st.nodes, p.Node)
	}
	if st.attempt == 1 && j.Workers > 1 {
		st.firstNodes = slices.Clone(st.nodes)
	}
	s.boundAtStart(i, g.OnLoan)
	s.held += j.GPUs()
	if g.OnLoan {
		s.loans++
	}
	if g.Borrowed {
		s.borrowed++
	}
	s.teams.started(s, i)
	if err := s.member.started(s, i, g); err != nil {
		return err
	}
	s.push(s.now+st.remaining, evFinish, i, st.attempt, 0)
	if s.opt.Checkpoint > 0 && s.ckpt != nil && s.opt.Checkpoint < st.remaining {
		s.push(s.now+s.opt.Checkpoint, evCheckpoint, i, st.attempt, 0)
	}
	s.judgePreemptions(i, st.nodes)
	for k, pi := range st.pending {
		if k == 0 {
			s.preemptorWaits = append(s.preemptorWaits, s.now-s.preempts[pi].at)
		}
	}
	st.pending = st.pending[:0]
	return nil
}

// judgePreemptions is called as job i starts on nodes: it marks taken over each preemption
// still unjudged, made for a job of a lower class than i, whose victim ran on one of those
// nodes, and judges the preemptions made for i: for nothing when it starts elsewhere and none
// was taken over.
func (s *sim) judgePreemptions(i int32, nodes []string) {
	class := s.w.Jobs[i].Class
	for _, pi := range s.unjudged {
		if pr := &s.preempts[pi]; pr.by != i && class > s.w.Jobs[pr.by].Class && overlaps(nodes, pr.nodes) {
			pr.takenOver = true
		}
	}
	s.unjudged = slices.DeleteFunc(s.unjudged, func(pi int32) bool { return s.preempts[pi].by == i })
	for _, pi := range s.jobs[i].pending {
		pr := &s.preempts[pi]
		elsewhere := !overlaps(nodes, pr.nodes)
		pr.takenOver = pr.takenOver && elsewhere // (it counts only where the preemptor lost the capacity)
		pr.forNothing = elsewhere && !pr.takenOver
	}
}

// preempt tells a victim: without a notice it is stopped at once (see stop); under one it runs
// on until it exits on the notice (it honours notices: Options.SaveTime later) or until the
// deadline.
func (s *sim) preempt(p scheduler.Preemption) error {
	vi, ok1 := s.idx[p.Victim]
	pi, ok2 := s.idx[p.Preemptor.Job]
	if !ok1 || !ok2 {
		return fmt.Errorf("preemption of unknown job %s for %s", p.Victim, p.Preemptor.Job)
	}
	st := &s.jobs[vi]
	if st.phase != phRunning || p.VictimAttempt != st.attempt {
		return fmt.Errorf("preemption of %s attempt %d, which is not running", p.Victim, p.VictimAttempt)
	}
	if by := s.w.Jobs[pi].Nodes; len(by) > 0 && !overlaps(st.nodes, by) {
		return fmt.Errorf("preemption of %s for %s, which may not use its nodes %v", p.Victim, p.Preemptor.Job, st.nodes)
	}
	st.preempted++
	if p.Loan || p.Move {
		st.yields++ // (its rerun spends no retry)
	}
	switch {
	case p.Reclaim:
		s.reclaims++
		st.reclaims++
	case p.Loan:
		s.yields++
	}
	if p.Move {
		s.moves++
		if st.moved > 0 && (s.closestMoves == 0 || s.now-st.movedAt < s.closestMoves) {
			s.closestMoves = s.now - st.movedAt
		}
		st.moved++
		st.movedAt = s.now
		s.mostMoves = max(s.mostMoves, st.moved)
	}
	st.yielding, st.moving, st.reclaimed, st.preemptedBy = p.Loan && !p.Reclaim, p.Move, p.Reclaim, pi
	st.phase, st.noticeAt = phNotice, s.now
	s.teams.releasing += s.w.Jobs[vi].GPUs()
	s.preempts = append(s.preempts, preemptRec{victim: vi, by: pi, nodes: slices.Clone(st.nodes), at: s.now})
	s.unjudged = append(s.unjudged, int32(len(s.preempts)-1))
	s.jobs[pi].pending = append(s.jobs[pi].pending, int32(len(s.preempts)-1))
	s.tell(vi)
	return nil
}

// tell gives a victim (phNotice) the allocation's preemption notice: without one it stops now.
func (s *sim) tell(vi int32) {
	st := &s.jobs[vi]
	notice := s.pol.Scheduler.PreemptionNotice
	switch {
	case notice <= 0:
		s.stop(vi)
	case st.honours:
		s.push(s.now+s.opt.saveTime(), evNoticeEnd, vi, st.attempt, 0)
	default:
		s.push(s.now+notice, evNoticeEnd, vi, st.attempt, 0)
	}
}

// stop ends a told victim's attempt now. One that honours notices (under a notice) saved its
// progress when told and exits: it loses nothing. Any other is at its deadline (or, without a
// notice, preempted now): it loses the work since its last checkpoint, and its workers stop
// Options.StopDelay later.
func (s *sim) stop(vi int32) {
	j, st := &s.w.Jobs[vi], &s.jobs[vi]
	delay := s.opt.StopDelay
	if st.honours && s.pol.Scheduler.PreemptionNotice > 0 {
		st.remaining -= min(st.noticeAt-st.startedAt, st.remaining)
		st.honoured++
		delay = 0
	} else {
		progress := min(s.now-st.startedAt, st.remaining)
		saved := time.Duration(0)
		if s.opt.Checkpoint > 0 {
			saved = progress / s.opt.Checkpoint * s.opt.Checkpoint
		}
		st.remaining -= saved
		lost := (progress - saved).Seconds() * float64(j.GPUs())
		st.lost += lost
		switch {
		case st.yielding:
			s.yieldLost += lost
		case st.moving:
			s.moveLost += lost
		case st.reclaimed:
			s.reclaimLost += lost
		}
	}
	st.ran += s.now - st.startedAt
	st.phase, st.stopped = phStopping, 0
	for w := 0; w < j.Workers; w++ {
		s.push(s.now+delay, evStopped, vi, st.attempt, w)
	}
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
