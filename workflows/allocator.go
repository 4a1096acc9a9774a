package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Continue-as-new thresholds. Temporal suggests continue-as-new on history
// size and length; updates have their own per-run limit, so count them too.
const (
	maxUpdatesPerRun = 1000
	maxEventsPerRun  = 20000
	// explainLimit is the queue length up to which a request's reply says
	// its position and reason (one dry-run pass each). detailsLimit is the
	// queue length up to which every event re-renders the Web UI details
	// (a dry-run pass with a reason for every waiting job); beyond it they
	// are refreshed at most every detailsInterval, so that a burst of
	// requests in one workflow task stays cheap.
	explainLimit    = 1000
	detailsLimit    = 100
	detailsInterval = 5 * time.Second
)

// allocator is the state of one allocation's allocator workflow. Everything it
// needs after continue-as-new lives in protocol.AllocatorState.
type allocator struct {
	in      protocol.AllocatorInput
	pool    *scheduler.Pool
	nextSeq int64
	// orphans are jobs holding capacity whose workflow has gone; their
	// workers are stopped, then the capacity is freed.
	orphans  []string
	reclaims map[string]bool
	counters protocol.AllocatorCounters
	// epoch names this allocator's state (see protocol.AllocatorState.Epoch).
	epoch string
	// recovering is true while the state is rebuilt from the jobs: nothing
	// is granted or preempted, and requests and releases wait for it.
	recovering bool
	// fresh says this run carries no state over (first start, or a start
	// after a terminated run); canRecover says its code version recovers.
	fresh, canRecover bool
	// The signal channels, read by run's loops and drained before
	// continue-as-new.
	requests, releases, withdrawals workflow.ReceiveChannel
	// lastRecovery is what this run's latest recovery found.
	lastRecovery *protocol.RecoverReply
	// batched runs one scheduling pass per workflow task (see schedule);
	// dirty says the state changed since the last pass.
	batched, dirty bool
	// handOverPaused says this run's code pauses scheduling while it hands
	// over (versionHandOverPause); handingOver is true from then on.
	handOverPaused, handingOver bool
	// settleHandOver says this run's code lets the signal loops take what
	// the last task brought before it hands over (versionHandOverSettle);
	// settleAsked and settled are awaitHandOver's exchange with settle.
	settleHandOver, settleAsked, settled bool
	// registersStrangers: a fence first asks the node's agent what runs
	// there and the owners of unknown workers what they hold
	// (versionFenceRegistersStrangers).
	registersStrangers bool
	// wakeTimers arms a timer for the pool's next wake-up; wakeAt is the
	// earliest one armed (zero: none).
	wakeTimers bool
	wakeAt     time.Time
	// withdrawn are withdrawals that came before their request (oldest first).
	withdrawn []protocol.WithdrawSignal
	// afterReclaim are requests queued once their job's abandoned newer
	// attempt is reclaimed (see resetRequest); resetChecks counts the
	// requests whose job is being asked whether it was reset.
	afterReclaim []protocol.CapacityRequest
	resetChecks  int
	// unanswered are jobs that did not answer the last recovery's register
	// update; they are asked again every reclaim interval.
	unanswered []string
	// recoveredAt is when the state was last rebuilt from the jobs.
	recoveredAt time.Time
	// fencing are the nodes whose fence is in progress, and why each is fenced.
	fencing      map[string]int64
	fenceWhy     map[string]fenceState
	ghostAfter   string // where the next ghost-request check resumes
	reclaimTicks int
	updates      int
	inFlight     int // outgoing signals not yet delivered
	// outbox holds the signals decided while AllocatorSignalBudget were in
	// flight, oldest first; each delivery sends the next (see send).
	outbox []outgoing
	// activities counts this run's pending activities, bounded by
	// AllocatorActivityBudget (see executeActivity): fences' in
	// activities[fenceActivities], the rest in activities[otherActivities].
	activities [2]int
	detailsAt  time.Time
	lastEvent  string
}

// Versions of the allocator's workflow code (workflow.GetVersion).
const (
	// versionRecovery: a fresh allocator rebuilds its state from the jobs
	// and node agents before it grants anything.
	versionRecovery = "allocator-recovery"
	// versionBatchedSchedule: one scheduling pass per workflow task instead
	// of one per message.
	versionBatchedSchedule = "allocator-batched-schedule"
	// versionWakeTimer: a timer wakes the allocator when the policy may
	// decide something without an event (min_runtime_before_preemption
	// passes, reserve_after is reached).
	versionWakeTimer = "allocator-wake-timer"
	// versionRecoverOnce: a recover update that waited for a recovery
	// already under way takes its answer instead of rebuilding again.
	versionRecoverOnce = "allocator-recover-once"
	// versionAllPolicyKnobs: a reconfiguration that changes only
	// reserve_after, max_preemptions or max_loss_gpu_hours takes effect
	// (before, only queueing and min_runtime_before_preemption counted).
	versionAllPolicyKnobs = "allocator-reconfigure-all-policy-knobs"
	// versionOwnTaskQueue: a run continues as new on the allocators' own
	// task queue (protocol.AllocatorTaskQueue) with the current
	// protocol.AllocatorTaskTimeout, instead of inheriting the queue and
	// timeout the first run was started with.
	versionOwnTaskQueue = "allocator-own-task-queue"
	// versionHandOverPause: once a run should continue as new it grants and
	// preempts nothing more, so that its outgoing signals drain and it can
	// hand over under a steady stream of requests and releases (before, it
	// waited for a moment with no signal in flight and no pass pending, which
	// a busy allocation never gives: TestQueueAtScale saw a run reach 15,000
	// events without handing over). The next run schedules first thing.
	versionHandOverPause = "allocator-hand-over-pause"
	// versionHandOverSettle: before it hands over, a run lets its signal
	// loops take in what its last task brought (see awaitHandOver); before,
	// a signal that arrived in the task that handed over, handed straight to
	// its blocked loop, was lost (TestQueueAtScale lost one request in three
	// of its first four hand-overs, each the first signal of the task in
	// which the server suggested continue-as-new).
	versionHandOverSettle = "allocator-hand-over-settle"
	// versionRefenceStaleKeep: a fence whose answer kept a worker the pool
	// no longer holds does not bring its node back; the node is fenced again
	// with what is held now (before, a second watch lost while the fence
	// waited left that worker running on GPUs the pool then granted).
	versionRefenceStaleKeep = "allocator-refence-stale-keep"
	// versionResetRequest: a request for an attempt older than the pool's
	// (the job was reset) reclaims the newer attempt and is then queued
	// (before, it was dropped without an answer: see resetRequest).
	versionResetRequest = "allocator-reset-request"
	// versionFenceRegistersStrangers: before a fence stops workers nobody
	// holds, it asks their jobs whether they hold them (see
	// registerStrangers); before, a running job recovery missed had its
	// healthy workers killed.
	versionFenceRegistersStrangers = "allocator-fence-registers-strangers"
	// versionFenceAddedNodes: a node a reconfigure adds is fenced until its
	// agent confirms that no stray worker runs there (before, it was granted
	// at once, though it could come back from a fence or from another
	// allocation).
	versionFenceAddedNodes = "allocator-fence-added-nodes"
	// versionGhostSweepScales: the ghost check's slice grows with the queue
	// (see ghostBatch); before, it was always 64 requests.
	versionGhostSweepScales = "allocator-ghost-sweep-scales"
	// versionReclaimGeneration: a reclaim that outlived a recovery changes
	// nothing in the rebuilt pool (before, it could cancel a new attempt
	// with the number of the one it was for).
	versionReclaimGeneration = "allocator-reclaim-generation"
	// versionResendGrant: a repeated request for a granted attempt gets its
	// grant again (see resendGrant); before, it got nothing.
	versionResendGrant = "allocator-resend-grant"
)

// AllocatorWorkflow owns the capacity of one allocation. Jobs ask it for
// capacity with the request-capacity signal (or update); it grants and
// preempts with signals, takes per-worker releases, and answers the queue
// query. All scheduling decisions come from package scheduler.
//
// Its shape follows samples-go's safe_message_handler: newAllocator builds
// the state (carried through continue-as-new in protocol.AllocatorState),
// registerHandlers installs the queries and updates, and run takes the
// signals until the run hands over to a fresh one.
//
// A run without carried-over state (the first start, or a start after the
// previous run was terminated or failed) first recovers: see recoverState.
//
// packedPool is the pool's state that a run hands to the next one when it
// continues as new (scheduler.PackSnapshot): a second argument, so that
// Temporal stores it as raw bytes rather than in the JSON of in. Starts pass
// none; runs continued by older code carry the pool in in.State.Pool.
func AllocatorWorkflow(ctx workflow.Context, in protocol.AllocatorInput, packedPool []byte) error {
	a, err := newAllocator(in, packedPool)
	if err != nil {
		// A state this code cannot read must not destroy the allocation:
		// failing the workflow task keeps the run (and its input) until a
		// worker that can read it is deployed.
		panic(fmt.Sprintf("allocator %s/%s: %v", in.Region, in.Allocation, err))
	}
	a.readVersions(ctx)
	if err := a.registerHandlers(ctx); err != nil {
		return err
	}
	return a.run(ctx)
}

// readVersions reads which versions of the workflow code this run follows.
func (a *allocator) readVersions(ctx workflow.Context) {
	a.canRecover = workflow.GetVersion(ctx, versionRecovery, workflow.DefaultVersion, 1) >= 1
	a.recovering = a.fresh && a.canRecover
	a.batched = workflow.GetVersion(ctx, versionBatchedSchedule, workflow.DefaultVersion, 1) >= 1
	a.wakeTimers = workflow.GetVersion(ctx, versionWakeTimer, workflow.DefaultVersion, 1) >= 1
	a.handOverPaused = workflow.GetVersion(ctx, versionHandOverPause, workflow.DefaultVersion, 1) >= 1
	a.settleHandOver = workflow.GetVersion(ctx, versionHandOverSettle, workflow.DefaultVersion, 1) >= 1
	a.registersStrangers = workflow.GetVersion(ctx, versionFenceRegistersStrangers, workflow.DefaultVersion, 1) >= 1
}

func (a *allocator) registerHandlers(ctx workflow.Context) error {
	if err := a.registerQueries(ctx); err != nil {
		return err
	}
	return a.registerUpdates(ctx)
}

// registerQueries installs the read-only views: the queue (trainq queue,
// the metrics collector), the counts (admission) and one job's place.
func (a *allocator) registerQueries(ctx workflow.Context) error {
	// Callers that send no page (older ones) get the first page.
	if err := workflow.SetQueryHandler(ctx, protocol.QueryQueue, func(page protocol.QueuePage) (protocol.QueueView, error) {
		if err := page.Validate(); err != nil {
			return protocol.QueueView{}, err
		}
		return a.view(page.WithDefaults()), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, protocol.QueryCounts, func() (protocol.QueueCounts, error) {
		return protocol.QueueCounts{Waiting: a.pool.WaitingCount(), MaxWaiting: a.in.MaxWaiting,
			Running: len(a.pool.RunningJobs()), Recovering: a.recovering, RecoveredAt: a.recoveredAt}, nil
	}); err != nil {
		return err
	}
	return workflow.SetQueryHandler(ctx, protocol.QueryExplain, func(job string) (protocol.ExplainReply, error) {
		return a.explain(job), nil
	})
}

func (a *allocator) registerUpdates(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateRequestCapacity, a.onRequestCapacity,
		workflow.UpdateHandlerOptions{Validator: a.validate}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateReconfigure, a.onReconfigure,
		workflow.UpdateHandlerOptions{Validator: a.validateReconfigure}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateRecover, a.onRecover,
		workflow.UpdateHandlerOptions{Validator: a.validateRecover}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateCheckpoint, a.onCheckpoint,
		workflow.UpdateHandlerOptions{Validator: a.validateCheckpoint})
}

// onRequestCapacity answers the request-capacity update (older clients;
// requests now come as signals, see onRequest).
func (a *allocator) onRequestCapacity(ctx workflow.Context, req protocol.CapacityRequest) (protocol.CapacityReply, error) {
	a.updates++
	// A request waits until the state is rebuilt: its queue sequence must
	// come after every recovered one.
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.CapacityReply{}, err
	}
	if err := a.withdrawnFirst(req); err != nil {
		return protocol.CapacityReply{}, err
	}
	reply := a.request(req, workflow.Now(ctx))
	// The reply says whether the request was granted: pass now.
	a.schedulePass(ctx)
	return a.replyFor(req.Job, reply), nil
}

func (a *allocator) onReconfigure(ctx workflow.Context, in protocol.AllocatorInput) (protocol.ReconfigureReply, error) {
	a.updates++
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.ReconfigureReply{}, err
	}
	return a.reconfigure(ctx, in)
}

func (a *allocator) onRecover(ctx workflow.Context) (protocol.RecoverReply, error) {
	a.updates++
	// A recovery already under way (a fresh allocator started by this very
	// request) answers it: rebuilding twice finds the same.
	underWay := a.recovering
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.RecoverReply{}, err
	}
	if underWay && a.lastRecovery != nil &&
		workflow.GetVersion(ctx, versionRecoverOnce, workflow.DefaultVersion, 1) >= 1 {
		return *a.lastRecovery, nil
	}
	a.recovering = true
	return a.recoverState(ctx), nil
}

func (a *allocator) validateRecover() error {
	if !a.canRecover {
		return errors.New("this allocator run predates recovery; terminate it and a fresh one recovers on start")
	}
	return nil
}

// awaitRecovered blocks while the state is rebuilt from the jobs.
func (a *allocator) awaitRecovered(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return !a.recovering })
}

// run takes signals until this run should hand over to a fresh one, then
// drains and continues as new.
func (a *allocator) run(ctx workflow.Context) error {
	a.startSignalLoops(ctx)
	if a.recovering {
		a.recoverState(ctx)
	}
	// Orphans and fenced nodes carried over from the previous run still
	// need their workers stopped.
	for _, job := range a.orphans {
		a.reclaim(ctx, job)
	}
	for _, node := range a.pool.LostNodes() {
		st := a.fenceOf(node)
		a.fence(ctx, node, st.cause, st.why)
	}
	a.schedule(ctx)

	if err := workflow.Await(ctx, func() bool { return a.shouldContinueAsNew(ctx) }); err != nil {
		return err
	}
	if err := a.awaitHandOver(ctx); err != nil {
		return err
	}
	a.drainSignals(ctx)
	workflow.GetLogger(ctx).Info("allocator continues as new", "waiting", a.pool.WaitingCount(), "running", len(a.pool.RunningJobs()))
	next := a.in
	next.State = a.snapshot()
	packed, err := scheduler.PackSnapshot(a.pool.Snapshot())
	if err != nil {
		return err
	}
	if workflow.GetVersion(ctx, versionOwnTaskQueue, workflow.DefaultVersion, 1) >= 1 {
		ctx = workflow.WithWorkflowTaskQueue(ctx, protocol.AllocatorTaskQueue)
		ctx = workflow.WithWorkflowTaskTimeout(ctx, protocol.AllocatorTaskTimeout)
	}
	return workflow.NewContinueAsNewError(ctx, AllocatorWorkflow, next, packed)
}

// awaitHandOver lets handlers and outgoing signals finish before the run
// hands over, so that nothing is lost. Reclaims and fences are not waited
// for: orphans and lost nodes are carried in the state, and the next run takes
// them up again. A pass asked for in this task runs before the hand-over;
// with versionHandOverPause it is the last one of this run.
//
// With versionHandOverSettle it then gives every other coroutine a turn: a
// signal that arrived in this very task went straight to its loop, which was
// blocked waiting for it, and is neither in the state nor in the channel for
// drainSignals until that loop runs (the settler, started after the loops,
// says when they have).
func (a *allocator) awaitHandOver(ctx workflow.Context) error {
	if a.handOverPaused {
		if a.dirty && !a.recovering {
			a.dirty = false
			a.schedulePass(ctx)
		}
		a.handingOver = true
	}
	ready := func() bool {
		return workflow.AllHandlersFinished(ctx) && a.inFlight == 0 && len(a.outbox) == 0 && a.resetChecks == 0 &&
			!a.recovering && (!a.dirty || a.handingOver)
	}
	for {
		if err := workflow.Await(ctx, ready); err != nil {
			return err
		}
		if !a.settleHandOver {
			return nil
		}
		a.settleAsked, a.settled = true, false
		if err := workflow.Await(ctx, func() bool { return a.settled }); err != nil {
			return err
		}
		if ready() {
			return nil
		}
	}
}

// settle answers awaitHandOver once every coroutine started before it has had
// its turn in the current round.
func (a *allocator) settle(ctx workflow.Context) {
	for {
		if workflow.Await(ctx, func() bool { return a.settleAsked }) != nil {
			return
		}
		a.settleAsked, a.settled = false, true
	}
}

// startSignalLoops starts one coroutine per signal channel, the batched
// scheduling pass and the reclaim loop. Each signal waits while the state
// is rebuilt, then applies in the order it came: a release sent after a job
// answered the register update must not be lost.
func (a *allocator) startSignalLoops(ctx workflow.Context) {
	a.releases = workflow.GetSignalChannel(ctx, protocol.SignalRelease)
	a.withdrawals = workflow.GetSignalChannel(ctx, protocol.SignalWithdraw)
	a.requests = workflow.GetSignalChannel(ctx, protocol.SignalRequest)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req protocol.CapacityRequest
			a.requests.Receive(ctx, &req)
			if a.awaitRecovered(ctx) != nil {
				return
			}
			a.onRequest(ctx, req)
		}
	})
	if a.batched {
		workflow.Go(ctx, a.passLoop)
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var s protocol.ReleaseSignal
			a.releases.Receive(ctx, &s)
			if a.awaitRecovered(ctx) != nil {
				return
			}
			a.onRelease(ctx, s)
			a.schedule(ctx)
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var s protocol.WithdrawSignal
			a.withdrawals.Receive(ctx, &s)
			if a.awaitRecovered(ctx) != nil {
				return
			}
			a.onWithdraw(s)
			a.schedule(ctx)
		}
	})
	workflow.Go(ctx, a.reclaimLoop)
	workflow.Go(ctx, a.settle) // last: see awaitHandOver
}

// passLoop runs one scheduling pass per workflow task, however many
// requests, releases and withdrawals the task brought: the condition is
// checked once every other coroutine of the task is blocked.
func (a *allocator) passLoop(ctx workflow.Context) {
	for {
		if workflow.Await(ctx, func() bool { return a.dirty && !a.recovering }) != nil {
			return
		}
		a.dirty = false
		a.schedulePass(ctx)
	}
}

// drainSignals takes in the signals that arrived after the last handler
// finished, just before continue-as-new.
func (a *allocator) drainSignals(ctx workflow.Context) {
	for {
		var s protocol.ReleaseSignal
		if !a.releases.ReceiveAsync(&s) {
			break
		}
		a.onRelease(ctx, s)
	}
	for {
		var s protocol.WithdrawSignal
		if !a.withdrawals.ReceiveAsync(&s) {
			break
		}
		a.onWithdraw(s)
	}
	for {
		var req protocol.CapacityRequest
		if !a.requests.ReceiveAsync(&req) {
			break
		}
		a.onRequest(ctx, req)
	}
}

func newAllocator(in protocol.AllocatorInput, packedPool []byte) (*allocator, error) {
	a := &allocator{in: in, nextSeq: 1, reclaims: map[string]bool{}, fencing: map[string]int64{}, fenceWhy: map[string]fenceState{},
		fresh: in.State == nil}
	a.in.State = nil
	if in.State != nil {
		snap := in.State.Pool
		if len(packedPool) > 0 {
			var err error
			if snap, err = scheduler.UnpackSnapshot(packedPool); err != nil {
				return nil, fmt.Errorf("restore allocator state: %w", err)
			}
		}
		pool, err := scheduler.Restore(snap)
		if err != nil {
			return nil, fmt.Errorf("restore allocator state: %w", err)
		}
		a.pool = pool
		a.nextSeq = in.State.NextSeq
		a.orphans = in.State.Orphans
		a.counters = in.State.Counters
		a.epoch = in.State.Epoch
		a.withdrawn = in.State.Withdrawn
		a.afterReclaim = in.State.AfterReclaim
		a.unanswered = in.State.Unanswered
		a.recoveredAt = in.State.RecoveredAt
		for _, f := range in.State.Fenced {
			a.fenceWhy[f.Node] = carriedFence(f)
		}
		return a, nil
	}
	pool, err := scheduler.NewPool(in.Nodes, in.Policy)
	if err != nil {
		return nil, err
	}
	a.pool = pool
	return a, nil
}

// snapshot is the state the next run starts from, but for the pool, which
// travels packed beside it (see AllocatorWorkflow).
func (a *allocator) snapshot() *protocol.AllocatorState {
	return &protocol.AllocatorState{
		NextSeq:      a.nextSeq,
		Orphans:      a.orphans,
		Counters:     a.counters,
		Epoch:        a.epoch,
		Withdrawn:    a.withdrawn,
		Fenced:       a.fenced(),
		AfterReclaim: a.afterReclaim,
		Unanswered:   a.unanswered,
		RecoveredAt:  a.recoveredAt,
	}
}

func (a *allocator) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	limit := a.in.MaxUpdatesPerRun
	if limit <= 0 {
		limit = maxUpdatesPerRun
	}
	return info.GetContinueAsNewSuggested() || a.updates >= limit || info.GetCurrentHistoryLength() >= maxEventsPerRun
}

func (a *allocator) toRequest(req protocol.CapacityRequest) (scheduler.Request, error) {
	if req.Job == "" {
		return scheduler.Request{}, errors.New("job: must not be empty")
	}
	if req.Attempt < 1 {
		return scheduler.Request{}, fmt.Errorf("attempt: must be at least 1, got %d", req.Attempt)
	}
	return requestFor(a.pool, req)
}

// validate refuses, before anything is recorded, a request that can never fit
// and one its job has already withdrawn.
func (a *allocator) validate(req protocol.CapacityRequest) error {
	_, err := a.toRequest(req)
	if err != nil {
		return fmt.Errorf("allocation %s/%s cannot run %s: %w", a.in.Region, a.in.Allocation, req.Job, err)
	}
	if err := a.withdrawnFirst(req); err != nil {
		return err
	}
	return a.queueFull(req)
}

// queueFull refuses a new job when the queue holds max_waiting requests. A
// rerun of an admitted job is never refused: it already had its place.
func (a *allocator) queueFull(req protocol.CapacityRequest) error {
	if a.in.MaxWaiting <= 0 || req.Attempt > 1 || req.Seq != 0 || a.pool.WaitingCount() < a.in.MaxWaiting {
		return nil
	}
	if _, ok := a.pool.Waiting(req.Job); ok {
		return nil // a repeated request
	}
	return &protocol.QueueFullError{Region: a.in.Region, Allocation: a.in.Allocation, Waiting: a.pool.WaitingCount()}
}

// withdrawnFirst refuses a request whose withdrawal came first: the job was
// cancelled while its request was on its way, and queueing it now would
// leave a ghost that holds a place, or even preempts, for nobody.
func (a *allocator) withdrawnFirst(req protocol.CapacityRequest) error {
	for _, w := range a.withdrawn {
		if w.Job == req.Job && w.Attempt >= req.Attempt {
			return fmt.Errorf("%s withdrew attempt %d before its request arrived", req.Job, w.Attempt)
		}
	}
	return nil
}

// maxWithdrawn bounds the remembered early withdrawals; they are rare (a
// cancel racing its own request), and the ghost check catches any that
// fall out of the list.
const maxWithdrawn = 1000

func (a *allocator) rememberWithdrawal(s protocol.WithdrawSignal) {
	a.withdrawn = append(a.withdrawn, s)
	if len(a.withdrawn) > maxWithdrawn {
		a.withdrawn = slices.Delete(a.withdrawn, 0, len(a.withdrawn)-maxWithdrawn)
	}
}

func (a *allocator) request(req protocol.CapacityRequest, now time.Time) protocol.CapacityReply {
	r, err := a.toRequest(req)
	if err != nil {
		// The validator already refused such requests; the state may have
		// changed since only through continue-as-new, so report and move on.
		return protocol.CapacityReply{Epoch: a.epoch, Reason: err.Error()}
	}
	if running, ok := a.pool.Running(r.Job); ok && running.Attempt == r.Attempt {
		// A repeated request for an attempt already granted (the update ID
		// deduplicates only within one run): nothing to do.
		return protocol.CapacityReply{Epoch: a.epoch, Seq: r.Seq}
	}
	if r.Seq == 0 {
		if w, ok := a.pool.Waiting(r.Job); ok {
			r.Seq = w.Seq
		} else {
			r.Seq = a.nextSeq
			a.nextSeq++
		}
	}
	if r.SubmittedAt.IsZero() {
		r.SubmittedAt = now
	}
	if r.Seq >= a.nextSeq {
		a.nextSeq = r.Seq + 1
	}
	if err := a.pool.Enqueue(r); err != nil {
		return protocol.CapacityReply{Epoch: a.epoch, Seq: r.Seq, Reason: err.Error()}
	}
	a.note(fmt.Sprintf("queued %s (attempt %d, %s)", r.Job, r.Attempt, r.Class))
	return protocol.CapacityReply{Epoch: a.epoch, Seq: r.Seq}
}

func (a *allocator) replyFor(job string, reply protocol.CapacityReply) protocol.CapacityReply {
	if a.pool.WaitingCount() > explainLimit {
		// Explaining costs a dry-run pass; with a long queue the caller
		// asks for the position when it needs it.
		reply.Reason = fmt.Sprintf("queued behind up to %d waiting jobs", a.pool.WaitingCount()-1)
		return reply
	}
	if w, ok := a.pool.Explain(job); ok {
		reply.Position, reply.Reason = w.Position, w.Reason
		return reply
	}
	if _, ok := a.pool.Running(job); ok {
		reply.Granted = true
	}
	return reply
}

// validateReconfigure refuses, before anything is recorded, a config the
// allocation cannot take now (see scheduler.Pool.Reconfigure).
func (a *allocator) validateReconfigure(in protocol.AllocatorInput) error {
	name := a.in.Region + "/" + a.in.Allocation
	if (in.Region != "" && in.Region != a.in.Region) || (in.Allocation != "" && in.Allocation != a.in.Allocation) {
		return fmt.Errorf("allocation %s cannot take the config of allocation %s/%s", name, in.Region, in.Allocation)
	}
	if in.StopGracePeriod < 0 || in.ReclaimInterval < 0 {
		return fmt.Errorf("allocation %s cannot take the new config: stop_grace_period and reclaim_interval must not be negative", name)
	}
	if _, err := a.pool.CheckReconfigure(in.Nodes, in.Policy); err != nil {
		return fmt.Errorf("allocation %s cannot take the new config: %w", name, err)
	}
	return nil
}

// reconfigure applies a changed config: the pool's nodes and policy, and
// the stop grace period and reclaim interval, all carried through
// continue-as-new in a.in. Waiting jobs that can no longer fit are told so.
func (a *allocator) reconfigure(ctx workflow.Context, in protocol.AllocatorInput) (protocol.ReconfigureReply, error) {
	summary := a.configChanges(ctx, in)
	if summary == "" {
		return protocol.ReconfigureReply{}, nil
	}
	nodesBefore := a.pool.Nodes()
	unfit, err := a.pool.Reconfigure(in.Nodes, in.Policy)
	if err != nil {
		// The validator ran the same check just before; nothing changed.
		return protocol.ReconfigureReply{}, err
	}
	a.fenceAddedNodes(ctx, nodesBefore)
	a.in.Nodes, a.in.Policy = a.pool.Nodes(), a.pool.Policy()
	a.in.StopGracePeriod, a.in.ReclaimInterval, a.in.NodeTimeout = in.StopGracePeriod, in.ReclaimInterval, in.NodeTimeout
	a.in.MaxWaiting = in.MaxWaiting
	reply := protocol.ReconfigureReply{Changed: true, Summary: summary}
	for _, u := range unfit {
		reply.Refused = append(reply.Refused, u.Job)
		reason := fmt.Sprintf("allocation %s/%s was reconfigured and can no longer run this job: %s", a.in.Region, a.in.Allocation, u.Reason)
		a.send(ctx, u.Job, protocol.SignalRefuse, protocol.RefuseSignal{Attempt: u.Attempt, Reason: reason}, func(workflow.Context) {
			// The job is gone; it held nothing.
		})
	}
	note := "reconfigured: " + summary
	if len(unfit) > 0 {
		note += fmt.Sprintf("; refused %d waiting job(s) that no longer fit", len(unfit))
	}
	a.note(note)
	workflow.GetLogger(ctx).Info("allocator reconfigured", "changes", summary, "refused", reply.Refused)
	a.schedule(ctx)
	return reply, nil
}

// fenceAddedNodes fences every node a reconfigure added (it was not in
// nodesBefore) before anything is granted there: its agent must first confirm
// that no stray worker runs on it. A node can come back after it was removed
// while fenced (its strays were never confirmed stopped), or move in from
// another allocation whose jobs may still run there (a node_selector
// relabel): granting it at once could double-book its GPUs.
func (a *allocator) fenceAddedNodes(ctx workflow.Context, nodesBefore []scheduler.Node) {
	before := map[string]bool{}
	for _, n := range nodesBefore {
		before[n.Name] = true
	}
	var added []string
	for _, n := range a.pool.Nodes() {
		if !before[n.Name] {
			added = append(added, n.Name)
		}
	}
	if len(added) == 0 || workflow.GetVersion(ctx, versionFenceAddedNodes, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, node := range added {
		a.fence(ctx, node, fenceAdded, "added to the allocation: waiting for its agent to confirm that no stray worker runs there")
	}
}

// configChanges describes how in differs from the config in effect; "" if
// it does not.
func (a *allocator) configChanges(ctx workflow.Context, in protocol.AllocatorInput) string {
	var parts []string
	old := map[string]scheduler.Node{}
	for _, n := range a.pool.Nodes() {
		old[n.Name] = n
	}
	var added, changed []string
	for _, n := range in.Nodes {
		o, ok := old[n.Name]
		switch {
		case !ok:
			added = append(added, n.Name)
		case o != n:
			changed = append(changed, n.Name)
		}
		delete(old, n.Name)
	}
	var removed []string
	for _, n := range a.pool.Nodes() {
		if _, ok := old[n.Name]; ok {
			removed = append(removed, n.Name)
		}
	}
	for _, c := range []struct {
		what  string
		nodes []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(c.nodes) > 0 {
			parts = append(parts, fmt.Sprintf("%s node(s) %s", c.what, strings.Join(c.nodes, ", ")))
		}
	}
	if len(parts) == 0 && !slices.Equal(a.pool.Nodes(), in.Nodes) {
		parts = append(parts, "reordered the nodes")
	}
	parts = append(parts, a.policyChanges(ctx, in.Policy)...)
	if a.in.StopGracePeriod != in.StopGracePeriod {
		parts = append(parts, fmt.Sprintf("stop_grace_period %s -> %s", a.in.StopGracePeriod, in.StopGracePeriod))
	}
	if a.in.MaxWaiting != in.MaxWaiting {
		parts = append(parts, fmt.Sprintf("max_waiting %d -> %d", a.in.MaxWaiting, in.MaxWaiting))
	}
	if a.in.NodeTimeout != in.NodeTimeout {
		parts = append(parts, fmt.Sprintf("node_timeout %s -> %s", a.in.NodeTimeout, in.NodeTimeout))
	}
	if a.in.ReclaimInterval != in.ReclaimInterval {
		parts = append(parts, fmt.Sprintf("reclaim_interval %s -> %s", a.in.ReclaimInterval, in.ReclaimInterval))
	}
	return strings.Join(parts, "; ")
}

// policyChanges lists the policy settings that next changes. Older builds
// compared only queueing and min_runtime_before_preemption; the version gate
// is asked only when another setting changes, so that a history without such
// a change records no marker.
func (a *allocator) policyChanges(ctx workflow.Context, next scheduler.Policy) []string {
	pol := a.pool.Policy()
	all := pol.Changes(next)
	legacy := scheduler.Policy{Queueing: pol.Queueing, MinRuntimeBeforePreemption: pol.MinRuntimeBeforePreemption}
	old := legacy.Changes(scheduler.Policy{Queueing: next.Queueing, MinRuntimeBeforePreemption: next.MinRuntimeBeforePreemption})
	if len(all) == len(old) || workflow.GetVersion(ctx, versionAllPolicyKnobs, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return old
	}
	return all
}

func (a *allocator) onRelease(ctx workflow.Context, s protocol.ReleaseSignal) {
	a.updates++ // every signal counts towards the server's per-run limits
	if r, ok := a.pool.Running(s.Job); !ok || r.Attempt != s.Attempt {
		return
	}
	// Fence first: the lost workers' capacity must not look free for a moment.
	for _, node := range s.LostNodes {
		a.nodeLost(ctx, node, fmt.Sprintf("%s could not confirm its workers there stopped: the node's agent did not answer", s.Job))
	}
	if s.Stopping {
		a.pool.BeginRelease(s.Job)
	}
	for _, w := range s.Workers {
		a.pool.Release(s.Job, s.Attempt, w)
	}
	a.note(fmt.Sprintf("%s released worker(s) %v", s.Job, s.Workers))
}

func (a *allocator) onWithdraw(s protocol.WithdrawSignal) {
	a.updates++
	if w, ok := a.pool.Waiting(s.Job); ok && w.Attempt == s.Attempt {
		a.pool.CancelAttempt(s.Job, s.Attempt)
		a.note(fmt.Sprintf("%s withdrew its request", s.Job))
		return
	}
	// Granted but the job was cancelled before it saw the grant: it started
	// no worker, so the capacity is free at once.
	if r, ok := a.pool.Running(s.Job); ok && r.Attempt == s.Attempt {
		a.pool.CancelAttempt(s.Job, s.Attempt)
		a.note(fmt.Sprintf("%s gave back its grant unused", s.Job))
		return
	}
	// The request has not arrived yet (or never will): remember the
	// withdrawal so that the request is refused when it comes.
	a.rememberWithdrawal(s)
}

// onRequest takes in a capacity request that came as a signal. A request
// that can no longer fit, or that its job has withdrawn, is refused with a
// signal (the activity already refused what could never fit).
func (a *allocator) onRequest(ctx workflow.Context, req protocol.CapacityRequest) {
	a.updates++
	if a.resetRequest(ctx, req) {
		return
	}
	if err := a.validate(req); err != nil {
		if req.Job != "" {
			a.send(ctx, req.Job, protocol.SignalRefuse, protocol.RefuseSignal{Attempt: req.Attempt, Reason: err.Error()}, func(workflow.Context) {})
		}
		return
	}
	if a.resendGrant(ctx, req) {
		return
	}
	a.request(req, workflow.Now(ctx))
	a.schedule(ctx)
}

// resetRequest takes a request for an attempt older than the one the pool
// has for its job. A job asks for one attempt at a time, in order, so such a
// request means the job's workflow was reset to before its newer attempt
// (`temporal workflow reset`): that attempt belongs to a run that no longer
// exists. A waiting one is dropped; a held one is reclaimed like a vanished
// job's (its workers stopped, then its capacity freed), and the request is
// queued after. Refusing the request instead would leave the job waiting for
// ever while the abandoned workers keep their GPUs.
//
// A late duplicate of an old request (a signal delayed in the network past
// its retry) looks the same, so the job's workflow is asked first which
// attempt it is at: only a job that really went back is served this way.
func (a *allocator) resetRequest(ctx workflow.Context, req protocol.CapacityRequest) bool {
	if !a.hasNewerAttempt(req) {
		return false
	}
	if workflow.GetVersion(ctx, versionResetRequest, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	a.resetChecks++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { a.resetChecks-- }()
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			HeartbeatTimeout:    20 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
			Summary:             fmt.Sprintf("is %s back at attempt %d?", req.Job, req.Attempt),
		})
		var attempts []int
		var err error
		// The reset run upserts its attempt in the same workflow task that
		// sends the request, so the job's record can show the older
		// attempt for a moment: ask again, backing off, before dropping.
		for try, delay := 0, time.Second; ; try, delay = try+1, 2*delay {
			attempts = nil
			err = a.executeActivity(actx, (*activities.Activities).CurrentAttempts, []string{req.Job}).Get(ctx, &attempts)
			if try >= resetCheckTries || (err == nil && len(attempts) == 1 && attempts[0] >= req.Attempt) {
				break
			}
			if workflow.NewTimerWithOptions(ctx, delay, workflow.TimerOptions{Summary: "ask " + req.Job + " its attempt again"}).Get(ctx, nil) != nil {
				return
			}
		}
		switch {
		case err != nil || len(attempts) != 1:
			workflow.GetLogger(ctx).Warn("could not tell whether a job was reset; dropping its old request", "job", req.Job, "attempt", req.Attempt, "error", err)
		case attempts[0] != req.Attempt:
			a.note(fmt.Sprintf("dropped a late request of %s attempt %d: the job is at attempt %d", req.Job, req.Attempt, attempts[0]))
		case !a.hasNewerAttempt(req):
			a.onRequest(ctx, req) // the newer attempt ended meanwhile
		default:
			a.serveReset(ctx, req)
		}
	})
	return true
}

// resetCheckTries is how many more times a job is asked its attempt while
// its record still shows an older one (1 s, 2 s, ... 32 s apart).
const resetCheckTries = 6

// hasNewerAttempt says whether the pool holds or queues a later attempt of
// req's job than req's.
func (a *allocator) hasNewerAttempt(req protocol.CapacityRequest) bool {
	if w, ok := a.pool.Waiting(req.Job); ok && w.Attempt > req.Attempt {
		return true
	}
	r, ok := a.pool.Running(req.Job)
	return ok && r.Attempt > req.Attempt
}

// serveReset drops the reset job's newer waiting attempt, reclaims its newer
// held one, and queues req (after the reclaim, if there is one).
func (a *allocator) serveReset(ctx workflow.Context, req protocol.CapacityRequest) {
	newer := 0
	if w, ok := a.pool.Waiting(req.Job); ok && w.Attempt > req.Attempt {
		newer = w.Attempt
	}
	r, held := a.pool.Running(req.Job)
	held = held && r.Attempt > req.Attempt
	if newer != 0 {
		a.pool.CancelAttempt(req.Job, newer)
		a.note(fmt.Sprintf("%s was reset to attempt %d: dropped the request of its attempt %d", req.Job, req.Attempt, newer))
	}
	if !held {
		a.onRequest(ctx, req)
		return
	}
	a.note(fmt.Sprintf("%s was reset to attempt %d: reclaiming its attempt %d", req.Job, req.Attempt, r.Attempt))
	a.afterReclaim = slices.DeleteFunc(a.afterReclaim, func(q protocol.CapacityRequest) bool { return q.Job == req.Job })
	a.afterReclaim = append(a.afterReclaim, req)
	a.reclaim(ctx, req.Job)
}

// requestsAfterReclaim queues the requests that waited for job's reclaim.
func (a *allocator) requestsAfterReclaim(ctx workflow.Context, job string) {
	var later []protocol.CapacityRequest
	a.afterReclaim = slices.DeleteFunc(a.afterReclaim, func(q protocol.CapacityRequest) bool {
		if q.Job == job {
			later = append(later, q)
			return true
		}
		return false
	})
	for _, req := range later {
		a.onRequest(ctx, req)
	}
}

// schedule runs a scheduling pass, or, in batched mode, asks for one at the
// end of the workflow task.
func (a *allocator) schedule(ctx workflow.Context) {
	if a.batched {
		a.dirty = true
		return
	}
	a.schedulePass(ctx)
}

// schedulePass runs one scheduling pass and sends its decisions.
func (a *allocator) schedulePass(ctx workflow.Context) {
	if a.recovering || a.handingOver {
		return
	}
	now := workflow.Now(ctx)
	// The pass's wall-clock duration feeds only the scheduling-pass
	// histogram. Reading the clock here is safe although workflow code must
	// not: the value never reaches workflow state, a branch or a command, so
	// a replay takes exactly the same path whatever it reads; and the
	// replay-aware handler drops the sample while replaying.
	//workflowcheck:ignore
	passStart := time.Now()
	d := a.pool.Schedule(now)
	a.metrics(ctx).Timer(metrics.SchedulingPassInstrument).Record(time.Since(passStart)) //workflowcheck:ignore
	for _, g := range d.Grants {
		a.counters.Grants++
		a.note(fmt.Sprintf("granted %s attempt %d on %s", g.Job, g.Attempt, scheduler.PlacementText(g.Placement)))
		var seq int64
		if r, ok := a.pool.Running(g.Job); ok {
			seq = r.Seq
		}
		grant := a.grantSignal(seq, g.Attempt, g.Placement)
		job, attempt := g.Job, g.Attempt
		a.send(ctx, job, protocol.SignalGrant, grant, func(ctx workflow.Context) {
			// The job's workflow is gone, so it never saw the grant and
			// started nothing: the capacity is free again.
			if r, ok := a.pool.Running(job); ok && r.Attempt == attempt {
				a.pool.CancelAttempt(job, attempt)
				a.note(fmt.Sprintf("%s vanished before its grant; capacity returned", job))
				a.schedule(ctx)
			}
		})
	}
	for _, p := range d.Preemptions {
		a.counters.Preemptions++
		victimClass := "unknown"
		if r, ok := a.pool.Running(p.Victim); ok {
			victimClass = r.Class.String()
		}
		a.metrics(ctx).WithTags(map[string]string{
			metrics.LabelVictimPriority: victimClass, metrics.LabelPreemptorPriority: p.Preemptor.Class.String(),
		}).Counter(metrics.PreemptionsInstrument).Inc(1)
		a.note(fmt.Sprintf("preempting %s for %s", p.Victim, p.Preemptor.Job))
		victim := p.Victim
		sig := protocol.PreemptSignal{Epoch: a.epoch, Attempt: p.VictimAttempt, Preemptor: p.Preemptor, Reason: p.Reason}
		a.send(ctx, victim, protocol.SignalPreempt, sig, func(ctx workflow.Context) {
			// The victim's workflow is gone but its workers may still run.
			a.reclaim(ctx, victim)
		})
	}
	a.armWake(ctx, now)
	// Rendering the queue for the Web UI costs a dry-run pass; with a long
	// queue, refresh it at most every detailsInterval.
	if a.pool.WaitingCount() <= detailsLimit || now.Sub(a.detailsAt) >= detailsInterval {
		a.detailsAt = now
		workflow.SetCurrentDetails(ctx, a.details())
	}
}

// outgoing is a signal to a job that waits in the outbox.
type outgoing struct {
	job, name string
	arg       any
	onGone    func(workflow.Context)
}

func (a *allocator) grantSignal(seq int64, attempt int, placement []scheduler.WorkerPlacement) protocol.GrantSignal {
	return protocol.GrantSignal{Epoch: a.epoch, Seq: seq, Attempt: attempt, Placement: placement,
		StopGracePeriod: a.in.StopGracePeriod, NodeTimeout: a.nodeTimeout()}
}

// resendGrant answers a repeated request for an attempt the pool has granted
// and that is not stopping: the grant is sent again. The job takes a grant
// only while it waits for that attempt, so a duplicate request (a retried
// activity) changes nothing; but a job reset to before it took its grant
// waits for one that was delivered to the run the reset replaced, and would
// otherwise wait for ever while the pool holds its GPUs.
func (a *allocator) resendGrant(ctx workflow.Context, req protocol.CapacityRequest) bool {
	r, ok := a.pool.Running(req.Job)
	if !ok || r.Attempt != req.Attempt || r.Releasing {
		return false
	}
	if workflow.GetVersion(ctx, versionResendGrant, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	a.note(fmt.Sprintf("sent %s its grant of attempt %d again: it asked again", req.Job, req.Attempt))
	a.send(ctx, req.Job, protocol.SignalGrant, a.grantSignal(r.Seq, r.Attempt, r.Placement), func(workflow.Context) {})
	return true
}

// send signals a job workflow; onGone runs if the workflow no longer exists.
// At most AllocatorSignalBudget signals are in flight: Temporal fails every
// workflow task that would have more than TemporalPendingSignalsLimit, and a
// pass can decide thousands of grants at once (a big job ends while many
// small ones wait). The rest wait in the outbox, in order, and each delivery
// sends the next, so a burst goes out over the following workflow tasks with
// no outside event needed.
func (a *allocator) send(ctx workflow.Context, job, name string, arg any, onGone func(workflow.Context)) {
	o := outgoing{job: job, name: name, arg: arg, onGone: onGone}
	if a.inFlight >= protocol.AllocatorSignalBudget || len(a.outbox) > 0 {
		a.outbox = append(a.outbox, o)
		return
	}
	a.signal(ctx, o)
}

func (a *allocator) signal(ctx workflow.Context, o outgoing) {
	f := workflow.SignalExternalWorkflow(ctx, o.job, "", o.name, o.arg)
	a.inFlight++
	workflow.Go(ctx, func(ctx workflow.Context) {
		err := f.Get(ctx, nil)
		a.inFlight--
		a.flushOutbox(ctx)
		if err != nil {
			workflow.GetLogger(ctx).Warn("signal to job failed", "job", o.job, "signal", o.name, "error", err)
			o.onGone(ctx)
		}
	})
}

// flushOutbox sends waiting signals while the budget allows.
func (a *allocator) flushOutbox(ctx workflow.Context) {
	for len(a.outbox) > 0 && a.inFlight < protocol.AllocatorSignalBudget {
		o := a.outbox[0]
		a.outbox[0] = outgoing{}
		a.outbox = a.outbox[1:]
		a.signal(ctx, o)
	}
	if len(a.outbox) == 0 {
		a.outbox = nil
	}
}

// The two shares of the activity budget: a fence of a dead node holds its
// slot for node_timeout on every try, so hundreds of dead nodes must not
// starve the reclaims, leak checks and reset checks, nor these the fences.
const (
	fenceActivities = iota
	otherActivities
)

// executeActivity schedules an activity (of the other share) once its share
// of AllocatorActivityBudget allows, so that no workflow task passes
// TemporalPendingActivitiesLimit however many workers a reclaim stops or
// nodes a recovery fences. Under the budget it schedules at once.
func (a *allocator) executeActivity(ctx workflow.Context, activity any, args ...any) workflow.Future {
	return a.executeActivityOf(ctx, otherActivities, activity, args...)
}

// executeFenceActivity is executeActivity for the fences' share.
func (a *allocator) executeFenceActivity(ctx workflow.Context, activity any, args ...any) workflow.Future {
	return a.executeActivityOf(ctx, fenceActivities, activity, args...)
}

func (a *allocator) executeActivityOf(ctx workflow.Context, share int, activity any, args ...any) workflow.Future {
	_ = workflow.Await(ctx, func() bool { return a.activities[share] < protocol.AllocatorActivityBudget/2 })
	a.activities[share]++
	f := workflow.ExecuteActivity(ctx, activity, args...)
	workflow.Go(ctx, func(gctx workflow.Context) {
		_ = f.Get(gctx, nil)
		a.activities[share]--
	})
	return f
}

// reclaimLoop looks, every ReclaimInterval, for jobs that hold capacity
// although their workflow is gone (terminated from the UI or CLI, timed out)
// and reclaims their capacity, and for waiting requests nobody waits for.
func (a *allocator) reclaimLoop(ctx workflow.Context) {
	for {
		// Read each time: a reconfigure may have changed it.
		if err := workflow.NewTimerWithOptions(ctx, a.reclaimInterval(), workflow.TimerOptions{Summary: "look for vanished jobs"}).Get(ctx, nil); err != nil {
			return
		}
		if a.recovering {
			continue
		}
		a.findVanishedJobs(ctx)
		a.askUnansweredAgain(ctx)
		// Ghost requests are rare (the withdrawal list catches the race
		// that makes them), so the queue is walked at a tenth of the pace.
		if a.reclaimTicks++; a.reclaimTicks%ghostCheckEvery == 0 {
			a.dropGhostRequests(ctx, a.ghostBatch(ctx))
		}
	}
}

// askUnansweredAgain registers again the jobs that did not answer the last
// recovery: a job that waited then has no worker for a fence to find, and
// would otherwise never be queued again.
func (a *allocator) askUnansweredAgain(ctx workflow.Context) {
	if len(a.unanswered) == 0 || a.epoch == "" {
		return
	}
	reg, err := a.registerNamed(ctx, otherActivities, a.unanswered,
		fmt.Sprintf("ask the %d job(s) that did not answer recovery again", len(a.unanswered)))
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not ask the jobs that did not answer recovery again", "error", err)
		return
	}
	for _, h := range reg.Holds {
		a.adoptStranger(ctx, "", h, nil)
	}
	a.unanswered = reg.Unanswered
}

// ghostCheckEvery is how many reclaim intervals pass between two slices of
// the ghost-request check.
const ghostCheckEvery = 10

func (a *allocator) reclaimInterval() time.Duration {
	if a.in.ReclaimInterval <= 0 {
		return 30 * time.Second
	}
	return a.in.ReclaimInterval
}

func (a *allocator) nodeTimeout() time.Duration {
	if a.in.NodeTimeout <= 0 {
		return protocol.DefaultNodeTimeout
	}
	return a.in.NodeTimeout
}

func (a *allocator) findVanishedJobs(ctx workflow.Context) {
	jobs := a.pool.RunningJobs()
	if len(jobs) == 0 {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		Summary:             fmt.Sprintf("check %d jobs holding capacity", len(jobs)),
	})
	var gone []string
	if err := a.executeActivity(actx, (*activities.Activities).FindVanishedJobs, jobs).Get(ctx, &gone); err != nil {
		workflow.GetLogger(ctx).Warn("could not check jobs", "error", err)
		return
	}
	for _, job := range gone {
		a.reclaim(ctx, job)
	}
}

// ghostBatch is how many waiting requests one leak check looks at: the check
// walks the queue a slice at a time. ghostSweepSlices is how many slices a
// whole sweep takes at most (with the defaults, 30 s x 10 x 12: an hour),
// so a slice grows with the queue, up to ghostBatchMax (one activity that
// describes that many workflows in a few seconds): a 50,000-job queue is
// swept in about an hour and a quarter, not the two days fixed slices of 64
// took.
const (
	ghostBatch       = 64
	ghostSweepSlices = 12
	ghostBatchMax    = 1000
)

// ghostBatch is the size of the next slice of the ghost check.
func (a *allocator) ghostBatch(ctx workflow.Context) int {
	n := min(max(ghostBatch, a.pool.WaitingCount()/ghostSweepSlices), ghostBatchMax)
	if n == ghostBatch || workflow.GetVersion(ctx, versionGhostSweepScales, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ghostBatch
	}
	return n
}

// dropGhostRequests drops waiting requests whose job has ended or moved on to
// a later attempt (a cancel that raced its own request, a withdrawal lost).
func (a *allocator) dropGhostRequests(ctx workflow.Context, size int) {
	batch := a.pool.WaitingAfter(a.ghostAfter, size)
	if len(batch) < size {
		a.ghostAfter = ""
	} else {
		a.ghostAfter = batch[len(batch)-1].Job
	}
	if len(batch) == 0 {
		return
	}
	requests := make([]protocol.WithdrawSignal, len(batch))
	for i, w := range batch {
		requests[i] = protocol.WithdrawSignal{Job: w.Job, Attempt: w.Attempt}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		Summary:             fmt.Sprintf("check %d waiting requests", len(requests)),
	})
	var ghosts []protocol.WithdrawSignal
	if err := a.executeActivity(actx, (*activities.Activities).FindGhostRequests, requests).Get(ctx, &ghosts); err != nil {
		workflow.GetLogger(ctx).Warn("could not check waiting requests", "error", err)
		return
	}
	dropped := 0
	for _, g := range ghosts {
		if w, ok := a.pool.Waiting(g.Job); ok && w.Attempt == g.Attempt && a.pool.CancelAttempt(g.Job, g.Attempt) {
			dropped++
			a.note(fmt.Sprintf("dropped the request of %s attempt %d: nobody waits for it", g.Job, g.Attempt))
		}
	}
	if dropped > 0 {
		a.schedule(ctx)
	}
}

// reclaim stops the workers of a vanished job through its nodes' agents,
// then frees its capacity. A node whose agent does not answer is fenced
// instead: its capacity stays unused until the agent confirms.
func (a *allocator) reclaim(ctx workflow.Context, job string) {
	if a.reclaims[job] {
		return
	}
	r, ok := a.pool.Running(job)
	if !ok {
		a.dropOrphan(job)
		a.requestsAfterReclaim(ctx, job)
		return
	}
	a.reclaims[job] = true
	a.addOrphan(job)
	generation := a.counters.Recoveries
	workflow.Go(ctx, func(ctx workflow.Context) {
		released := map[int]bool{}
		for _, w := range r.Released {
			released[w] = true
		}
		var futures []workflow.Future
		var nodes []string
		for _, p := range r.Placement {
			if released[p.Worker] {
				continue
			}
			actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue:              protocol.NodeTaskQueue(p.Node),
				ScheduleToStartTimeout: a.nodeTimeout(),
				StartToCloseTimeout:    a.in.StopGracePeriod + time.Minute,
				HeartbeatTimeout:       20 * time.Second,
				RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
				Summary:                fmt.Sprintf("reclaim worker %d of vanished %s on %s", p.Worker, job, p.Node),
			})
			in := activities.StopWorkerInput{ID: cluster.WorkerID{Job: job, Attempt: r.Attempt, Worker: p.Worker}, Grace: a.in.StopGracePeriod}
			futures = append(futures, a.executeActivity(actx, (*activities.Activities).StopWorker, in))
			nodes = append(nodes, p.Node)
		}
		for i, f := range futures {
			if err := f.Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Error("could not stop a vanished job's worker; fencing its node", "job", job, "node", nodes[i], "error", err)
				a.nodeLost(ctx, nodes[i], fmt.Sprintf("could not stop a worker of vanished job %s there", job))
			}
		}
		if a.counters.Recoveries != generation && a.reclaimsAcrossRecovery(ctx) {
			// A recovery rebuilt the pool meanwhile: what it holds for
			// this job now (maybe a new attempt with the same number) is
			// not what this reclaim was for, and it fences every node itself.
			return
		}
		if cur, ok := a.pool.Running(job); ok && cur.Attempt == r.Attempt {
			a.pool.CancelAttempt(job, r.Attempt)
		}
		// Counted even when the capacity is back already: stopping the
		// workers made their node agents report the exits first (see
		// activities.WatchWorkerInput.ReleaseTo).
		a.counters.Reclaimed++
		a.metrics(ctx).Counter(metrics.LeakedReclaimedInstrument).Inc(1)
		a.note(fmt.Sprintf("reclaimed the capacity of vanished job %s", job))
		delete(a.reclaims, job)
		a.dropOrphan(job)
		a.requestsAfterReclaim(ctx, job)
		a.schedule(ctx)
	})
}

// reclaimsAcrossRecovery is asked only when a reclaim outlived a recovery,
// so that histories without one record no marker.
func (a *allocator) reclaimsAcrossRecovery(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionReclaimGeneration, workflow.DefaultVersion, 1) >= 1
}

func (a *allocator) addOrphan(job string) {
	if !slices.Contains(a.orphans, job) {
		a.orphans = append(a.orphans, job)
	}
}

func (a *allocator) dropOrphan(job string) {
	a.orphans = slices.DeleteFunc(a.orphans, func(j string) bool { return j == job })
}

func (a *allocator) note(event string) { a.lastEvent = event }

// metrics is the SDK's replay-aware metrics handler with the allocation's
// labels: nothing it records during a replay is emitted, so a worker that
// replays this history after a restart counts nothing twice.
func (a *allocator) metrics(ctx workflow.Context) client.MetricsHandler {
	return workflow.GetMetricsHandler(ctx).WithTags(metrics.Tags(a.in.Region, a.in.Allocation))
}

func (a *allocator) explain(job string) protocol.ExplainReply {
	var out protocol.ExplainReply
	if w, ok := a.pool.Explain(job); ok {
		out.Waiting = &w
	}
	if r, ok := a.pool.Running(job); ok {
		out.Running = &r
	}
	return out
}

func (a *allocator) view(page protocol.QueuePage) protocol.QueueView {
	v := protocol.QueueView{Region: a.in.Region, Allocation: a.in.Allocation, View: a.pool.ViewPage(page.Offset, page.Limit),
		Offset: page.Offset, Limit: page.Limit, Counters: a.counters, WaitingTotal: a.pool.WaitingCount(),
		WaitingByClass: map[string]int{}, Recovering: a.recovering, Fenced: a.fenced()}
	for class, n := range a.pool.WaitingByClass() {
		v.WaitingByClass[scheduler.Class(class).String()] = n
	}
	return v
}

// details renders the allocation for the Web UI's current details.
func (a *allocator) details() string {
	const listed = 20 // waiting jobs
	v := a.pool.ViewPage(0, listed)
	var b strings.Builder
	fmt.Fprintf(&b, "## Allocation %s/%s\n\n", a.in.Region, a.in.Allocation)
	if a.recovering {
		b.WriteString("**Recovering**: rebuilding the state from the jobs and the node agents; nothing is granted until it is done.\n\n")
	}
	if a.lastEvent != "" {
		fmt.Fprintf(&b, "Last event: %s\n\n", a.lastEvent)
	}
	for _, f := range a.fenced() {
		fmt.Fprintf(&b, "- **%s fenced**: %s\n", f.Node, f.Reason)
	}
	b.WriteString("| node | family | GPUs | free | allocated | releasing |\n|---|---|---|---|---|---|\n")
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", n.Name, n.Family, n.GPUs, n.FreeGPUs, n.AllocatedGPUs, n.ReleasingGPUs)
	}
	fmt.Fprintf(&b, "\n### Running (%d)\n\n", len(v.Running))
	for _, r := range v.Running {
		state := "running"
		if r.Releasing {
			state = "releasing"
		}
		fmt.Fprintf(&b, "- %s · %s · %d GPUs · %s · %s\n", r.Job, r.Class, r.GPUs, state, scheduler.PlacementText(r.Placement))
	}
	waiting := a.pool.WaitingCount()
	fmt.Fprintf(&b, "\n### Waiting (%d)\n\n", waiting)
	for _, w := range v.Waiting {
		fmt.Fprintf(&b, "%d. %s · %s · %d GPUs — %s\n", w.Position, w.Job, w.Class, w.GPUs, w.Reason)
	}
	if waiting > len(v.Waiting) {
		fmt.Fprintf(&b, "- … and %d more\n", waiting-len(v.Waiting))
	}
	return b.String()
}

// armWake starts a timer for the pool's next wake-up, unless an earlier one
// is armed: a waiting job may become able to preempt, or to reserve nodes,
// with no event to trigger a pass.
func (a *allocator) armWake(ctx workflow.Context, now time.Time) {
	if !a.wakeTimers {
		return
	}
	wake, ok := a.pool.NextWake()
	if !ok || (!a.wakeAt.IsZero() && !wake.Before(a.wakeAt)) {
		return
	}
	a.wakeAt = wake
	d := max(wake.Sub(now), time.Second)
	workflow.Go(ctx, func(ctx workflow.Context) {
		err := workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: "the policy may decide something now"}).Get(ctx, nil)
		if err != nil {
			return
		}
		if a.wakeAt.Equal(wake) {
			a.wakeAt = time.Time{}
		}
		a.schedule(ctx)
	})
}
