package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/allocation"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Continue-as-new thresholds. Temporal suggests continue-as-new on history
// size and length (from 4Ki events by default); updates have their own
// per-run limit, so count them too; and a run hands over at maxEventsPerRun
// events whatever the server suggests: a worker that does not have the run
// cached replays all of it in one workflow task, which must stay well within
// protocol.AllocatorTaskTimeout (a 5,500-event run replays in 0.2 s on a
// loaded 2-core machine).
const (
	maxUpdatesPerRun = 1000
	maxEventsPerRun  = 10000
	// explainLimit is the queue length up to which a request's reply says
	// its position and reason (one dry-run pass each). detailsLimit is the
	// queue length up to which every event re-renders the Web UI details
	// (a dry-run pass with a reason for every waiting job); beyond it they
	// are refreshed at most every detailsInterval, so that a burst of
	// requests in one workflow task stays cheap.
	explainLimit    = 1000
	detailsLimit    = 100
	detailsInterval = 5 * time.Second
	// detailStartsInterval is how often the details' expected starts are
	// projected again when the jobs they list are the same: a projection
	// copies the pool (BenchmarkProject), which every pass would pay for.
	detailStartsInterval = 10 * time.Second
)

// allocator is one run of an allocation's allocator workflow: the carried
// state and its rules (package allocation), and what only this run has: the
// signal channels, what it has in flight and the hand-over handshake.
type allocator struct {
	st *allocation.State
	// recovering is true while the state is rebuilt from the jobs: nothing
	// is granted or preempted, and requests and releases wait for it.
	recovering bool
	// lastRecovery is what this run's latest recovery found.
	lastRecovery *protocol.RecoverReply
	// The signal channels, read by run's loops and drained before
	// continue-as-new.
	requests, releases, withdrawals workflow.ReceiveChannel
	// dirty says the state changed since the last pass (see schedule).
	dirty bool
	// handingOver is true once the run pauses scheduling to hand over
	// (see awaitHandOver); settleAsked and settled are awaitHandOver's
	// exchange with settle.
	handingOver, settleAsked, settled bool
	// wakeAt is the earliest wake-up timer armed (zero: none).
	wakeAt time.Time
	// resetChecks counts the requests whose job is being asked whether it
	// was reset (see checkReset).
	resetChecks int
	// reclaims are the jobs whose reclaim is under way; fencing are the
	// nodes whose fence is, each with the recovery generation it fences for.
	reclaims map[string]bool
	fencing  map[string]int64
	// ghostAfter is where the next ghost-request check resumes.
	ghostAfter   string
	reclaimTicks int
	updates      int
	inFlight     int // outgoing signals not yet delivered
	// inFlightTo counts them by job (see signalsPendingTo).
	inFlightTo map[string]int
	// outbox holds the signals decided while the budget's worth were in
	// flight (see signalBudget), oldest first; each delivery sends the next
	// (see send).
	outbox []allocation.Signal
	// activities counts this run's pending activities, bounded by their
	// shares (see executeActivity): fences' in activities[fenceActivities],
	// the rest in activities[otherActivities].
	activities [2]int
	// boundsArrivals says this run keeps within protocol.AllocatorArrivals
	// what its own fan-out brings in during one workflow task (see
	// versionBoundedArrivals); checkTimers counts the reset checks' retry
	// timers, and unansweredTries the tries of each node's fence in a row
	// whose agent did not take it (see probeTimeout).
	boundsArrivals  bool
	checkTimers     int
	unansweredTries map[string]int
	// gatesRead says the version gates have been read (see readGates).
	gatesRead bool
	// fencesEndWithEpoch: see versionFenceEndsWithItsEpoch;
	// strangersOfTheirEpoch: see versionStrangersOfTheirEpoch.
	fencesEndWithEpoch, strangersOfTheirEpoch bool
	// recoveryNotesRun: see versionRecoveryNotesItsRun;
	// registersAgainAfterReset: see versionRegisterAgainAfterReset.
	recoveryNotesRun, registersAgainAfterReset bool
	// watching are the futures the watch loop waits for,
	// in the order they were watched, each with what its completion does.
	watching []watched
	// passCut says the last pass stopped at the signal budget with waiting
	// requests it did not look at (see schedulePass); deliveries ask
	// for the next pass once the budget has room again (see passOn).
	passCut   bool
	detailsAt time.Time
	// starts are the details' expected starts, projected at most every
	// detailStartsInterval (not carried: a new run projects anew).
	starts    allocation.ExpectedStarts
	lastEvent string
	// gaveUp says a guard gave up on an activity the server did not close
	// (see guard): the run hands over, so that the next one starts on fresh
	// server-side state.
	gaveUp bool
	// tracksBuilds says this run notes the builds it runs on, and newBuild
	// that one it had not run on took a task: the run hands over (see
	// checkBuild).
	tracksBuilds, newBuild bool
	// noticesResets says this run looks for resets of itself, and runID is
	// the run it last found itself in (see resetSince).
	noticesResets bool
	runID         string
	// heldRequests are the requests that came as updates while the state
	// was rebuilt, in the order they came: the recovery's end takes them in
	// (see onRequestUpdate). Not carried: a run hands over only once
	// recovered.
	heldRequests []protocol.CapacityRequest
	// heldReleases and heldWithdrawals are the releases and withdrawals
	// that came as updates meanwhile (onReleaseUpdate, onWithdrawUpdate).
	// The releases are taken in before the requests, the withdrawals after
	// them: a withdrawal cancels its request whichever came first, but
	// remembers it (allocation.State.WithdrawnFirst) only if it finds none,
	// so a request taken in after it would wait for a job that has gone.
	heldReleases    []protocol.ReleaseSignal
	heldWithdrawals []protocol.WithdrawSignal
}

// Versions of the allocator's workflow code (workflow.GetVersion). Each
// lives as long as the upgrade window needs it (see gates.go).
const (
	// versionGuardedActivities: an activity with a bounded life (one
	// attempt, or a schedule-to-close timeout) is also bounded by a timer of
	// the workflow's own, and given up when the server has not closed it in
	// time (see guard): the server may fire none of a reset run's activity
	// timeouts.
	versionGuardedActivities = "allocator-guarded-activities"
	// versionHandOverOnNewBuild: a run records the builds it runs on, and
	// hands over once a build it has not run on takes its workflow task (see
	// checkBuild), so that no run outlives the upgrade window.
	versionHandOverOnNewBuild = "allocator-hand-over-on-new-build"
	// versionNoticeResets: a run notices that it was reset (see resetSince)
	// before its next pass, hand-over or reclaim tick, and recovers.
	versionNoticeResets = "allocator-notice-resets"
	// versionRefuseOverCap: the allocator refuses a request that its
	// workspace's cap could never let start, however it arrives (a signal
	// sent before a reconfigure, a requeue, a recovery), and a reconfigure
	// that lowers a cap under a waiting job refuses the job, instead of
	// leaving it waiting for ever (see allocation.State.RefusesOverCap).
	versionRefuseOverCap = "allocator-refuse-over-cap"
	// versionTellAdoptedToLeave: a recovery, and the adoption of a job a
	// recovery missed, tell the jobs taken in on a drained node to leave
	// (see allocation.State.TellsAdoptedToLeave).
	versionTellAdoptedToLeave = "allocator-tell-adopted-to-leave"
	// versionChargeAdopted: a recovery charges fair-share usage from the
	// jobs it adopts (see allocation.State.ChargesAdopted).
	versionChargeAdopted = "allocator-charge-adopted"
	// versionReclaimForgotten: a request for the attempt the pool is
	// releasing has it reclaimed and the job rerun (see
	// allocation.State.ReclaimsForgotten).
	versionReclaimForgotten = "allocator-reclaim-forgotten"
	// versionBoundedArrivals: what the run's own fan-out can bring in during
	// one workflow task stays within protocol.AllocatorArrivals: fewer
	// signals and activities in flight, a node's fence tried again at a
	// tick of one timer rather than on a timer of its own (timers due
	// together fire together), its agent probed for 10 s at first (see
	// probeTimeout), a reclaim's stop bounded, and at most
	// AllocatorCheckTimers reset checks waiting on a timer. Runs before it
	// had up to 50 signals and 250 activities of each share in flight, so
	// 150 fences answered at once force-closed a task.
	versionBoundedArrivals = "allocator-bounded-arrivals"
	// versionGatesBeforeHandlers: the run reads its gates before it sets
	// its update handlers. An update the run's first workflow task brings
	// (a reconfigure sent right after the start or the hand-over) runs as
	// soon as its handler is set, and ran with every gate off when they
	// were read in run.
	versionGatesBeforeHandlers = "allocator-gates-before-handlers"
	// versionFenceEndsWithItsEpoch: a fence ends when a recovery draws a
	// new epoch, and one that starts during a recovery ends at once, not
	// only once the recovery has rebuilt the pool: a fence that went on
	// during the recovery built its keep list from the pool being replaced,
	// and after a reset that pool can have a running job as waiting, so the
	// fence stopped its worker (see fence).
	versionFenceEndsWithItsEpoch = "allocator-fence-ends-with-its-epoch"
	// versionStrangersOfTheirEpoch: a fence adopts the jobs that hold
	// workers on its node only while it is current (see registerStrangers):
	// their answers came from the epoch it was asked in, and a recovery that
	// rebuilt the pool meanwhile has each job's newer answer, or none for a
	// job that has ended, which the old answer would bring back as a holder.
	versionStrangersOfTheirEpoch = "allocator-strangers-of-their-epoch"
	// versionRecoveryNotesItsRun: every recovery notes the run it rebuilt
	// the state in (see resetSince). An operator's recovery of a reset run
	// (`trainq allocator recover`, as docs/failures.md says) left the run ID
	// of before the reset, so the next pass took the run for reset and
	// rebuilt the state a second time, fencing every node again.
	versionRecoveryNotesItsRun = "allocator-recovery-notes-its-run"
	// versionChargeStrangers: a job a recovery missed is charged fair-share
	// usage from the time the recovery charged its adopted jobs from, once a
	// fence or a second question adopts it (see
	// allocation.State.ChargesStrangers); before, from its adoption, so a
	// job that answered late ran uncharged until then.
	versionChargeStrangers = "allocator-charge-strangers"
	// versionRegisterAgainAfterReset: a recovery whose registration a reset
	// ran again registers the jobs again under a new epoch (see
	// recoverState). The reset run asked them under the epoch drawn before
	// the reset point, with the same update ID, and they answered with what
	// they held when first asked, perhaps hours before: the pool was rebuilt
	// from that, its fences given keep lists without the jobs granted since.
	versionRegisterAgainAfterReset = "allocator-register-again-after-reset"
)

// AllocatorWorkflow owns the capacity of one allocation. Jobs ask it for
// capacity with the request update (or, to start it, the request signal); it grants and
// preempts with signals, takes per-worker releases, and answers the queue
// query. All scheduling decisions come from package scheduler, and what each
// message does to the state from package allocation.
//
// Its shape follows samples-go's safe_message_handler: the state is one
// allocation.State, carried through continue-as-new; registerHandlers
// installs the queries and updates, and run takes the signals until the run
// hands over to a fresh one. Every handler calls one rule of the state and
// executes the commands it returns (execute), in order and in bounded
// batches.
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
	// Runs before versionGatesBeforeHandlers read the gates in run: an
	// update their first task brought ran with every gate off, and must
	// replay so.
	if workflow.GetVersion(ctx, versionGatesBeforeHandlers, workflow.DefaultVersion, 1) >= 1 {
		a.readGates(ctx)
	}
	if err := a.registerHandlers(ctx); err != nil {
		return err
	}
	return a.run(ctx)
}

// readGates asks the run's version gates (see versionGatesBeforeHandlers).
func (a *allocator) readGates(ctx workflow.Context) {
	a.gatesRead = true
	gate := func(id string) bool { return workflow.GetVersion(ctx, id, workflow.DefaultVersion, 1) >= 1 }
	// Runs of code before versionHandOverOnNewBuild recorded no build.
	a.tracksBuilds = gate(versionHandOverOnNewBuild)
	a.st.RefusesOverCap = gate(versionRefuseOverCap)
	a.st.TellsAdoptedToLeave = gate(versionTellAdoptedToLeave)
	a.st.ChargesAdopted = gate(versionChargeAdopted)
	a.st.ReclaimsForgotten = gate(versionReclaimForgotten)
	a.boundsArrivals = gate(versionBoundedArrivals)
	a.noticesResets = gate(versionNoticeResets)
	a.fencesEndWithEpoch = gate(versionFenceEndsWithItsEpoch)
	a.strangersOfTheirEpoch = gate(versionStrangersOfTheirEpoch)
	a.recoveryNotesRun = gate(versionRecoveryNotesItsRun)
	a.st.ChargesStrangers = gate(versionChargeStrangers)
	a.registersAgainAfterReset = gate(versionRegisterAgainAfterReset)
}

func newAllocator(in protocol.AllocatorInput, packedPool []byte) (*allocator, error) {
	// A run without carried state recovers it first.
	a := &allocator{reclaims: map[string]bool{}, inFlightTo: map[string]int{}, fencing: map[string]int64{},
		unansweredTries: map[string]int{}, recovering: in.State == nil}
	var err error
	if in.State != nil {
		a.st, err = allocation.Restore(in, packedPool)
	} else {
		a.st, err = allocation.New(in)
	}
	return a, err
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
		return a.st.View(page.WithDefaults(), a.recovering, laterOf(workflow.Now(ctx), page.Now)), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, protocol.QueryCounts, func() (protocol.QueueCounts, error) {
		return a.st.Counts(a.recovering), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, protocol.QueryDryRun, func(req protocol.CapacityRequest) (scheduler.DryRun, error) {
		return a.st.DryRun(req, workflow.Now(ctx))
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, protocol.QueryExpectedStart, func(q protocol.ExpectedStartQuery) (*scheduler.ExpectedStart, error) {
		return a.st.ExpectedStart(q.Job, laterOf(workflow.Now(ctx), q.Now)), nil
	}); err != nil {
		return err
	}
	return workflow.SetQueryHandler(ctx, protocol.QueryExplain, func(job string) (protocol.ExplainReply, error) {
		return a.st.Explain(job), nil
	})
}

func (a *allocator) registerUpdates(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateRequestCapacity, a.onRequestCapacity,
		workflow.UpdateHandlerOptions{Validator: a.st.Validate}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, protocol.UpdateRequest, a.onRequestUpdate); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, protocol.UpdateRelease, a.onReleaseUpdate); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, protocol.UpdateWithdraw, a.onWithdrawUpdate); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateReconfigure, a.onReconfigure,
		workflow.UpdateHandlerOptions{Validator: a.st.ValidateReconfigure}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, protocol.UpdateRecover, a.onRecover); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateCheckpoint, a.onCheckpoint,
		workflow.UpdateHandlerOptions{Validator: a.validateCheckpoint}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateDrain, a.onDrain,
		workflow.UpdateHandlerOptions{Validator: func(r protocol.DrainRequest) error { return a.st.ValidateDrain(r) }})
}

// onDrain takes a node out of service or puts it back (see
// allocation.State.Drain).
func (a *allocator) onDrain(ctx workflow.Context, r protocol.DrainRequest) (protocol.DrainReply, error) {
	a.updates++
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.DrainReply{}, err
	}
	reply, cmds := a.st.Drain(r)
	if reply.Changed {
		workflow.GetLogger(ctx).Info("node drain changed", "node", r.Node, "drained", reply.Drained, "jobs", reply.Jobs)
	}
	a.execute(ctx, cmds)
	return reply, nil
}

// onRequestCapacity answers the request-capacity update (older clients;
// requests now come as the request update, see onRequestUpdate).
func (a *allocator) onRequestCapacity(ctx workflow.Context, req protocol.CapacityRequest) (protocol.CapacityReply, error) {
	a.updates++
	// A request waits until the state is rebuilt: its queue sequence must
	// come after every recovered one.
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.CapacityReply{}, err
	}
	if err := a.st.WithdrawnFirst(req); err != nil {
		return protocol.CapacityReply{}, err
	}
	reply, cmds := a.st.Enqueue(req, workflow.Now(ctx))
	a.execute(ctx, cmds)
	// The reply says whether the request was granted: pass now.
	a.schedulePass(ctx)
	return a.st.ReplyFor(req.Job, reply), nil
}

// onRequestUpdate takes a capacity request sent as an update
// (protocol.UpdateRequest) by the rules of the signal (onRequest), and says
// where it stands. It runs no pass of its own: the pass that may grant it
// runs with the rest (the grant comes as a signal), so a task that takes in
// several requests passes once. While the state is rebuilt it keeps the
// request for the end of the recovery (heldRequests) and answers at once: an
// update that waited would hold one of the server's few in-flight updates
// per workflow, and ten of them would shut out every other update
// (reconfigure, drain, checkpoint, recover) for the whole recovery.
func (a *allocator) onRequestUpdate(ctx workflow.Context, req protocol.CapacityRequest) (protocol.CapacityReply, error) {
	if a.recovering {
		a.heldRequests = append(a.heldRequests, req)
		return protocol.CapacityReply{}, nil
	}
	a.onRequest(ctx, req)
	return a.st.Standing(req), nil
}

// onReleaseUpdate takes a release sent as an update (protocol.UpdateRelease)
// as the release signal's loop does, and, like onRequestUpdate, keeps it for
// the end of a recovery rather than wait for it.
func (a *allocator) onReleaseUpdate(ctx workflow.Context, s protocol.ReleaseSignal) error {
	if a.recovering {
		a.heldReleases = append(a.heldReleases, s)
		return nil
	}
	a.onRelease(ctx, s)
	a.schedule(ctx)
	return nil
}

// onWithdrawUpdate takes a withdrawal sent as an update
// (protocol.UpdateWithdraw) as onReleaseUpdate takes a release.
func (a *allocator) onWithdrawUpdate(ctx workflow.Context, w protocol.WithdrawSignal) error {
	if a.recovering {
		a.heldWithdrawals = append(a.heldWithdrawals, w)
		return nil
	}
	a.onWithdraw(ctx, w)
	a.schedule(ctx)
	return nil
}

func (a *allocator) onReconfigure(ctx workflow.Context, in protocol.AllocatorInput) (protocol.ReconfigureReply, error) {
	a.updates++
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.ReconfigureReply{}, err
	}
	reply, cmds, err := a.st.Reconfigure(in)
	if err != nil || !reply.Changed {
		return reply, err
	}
	refused, more := a.st.RefuseOverCap()
	reply.Refused = append(reply.Refused, refused...)
	cmds = append(cmds, more...)
	workflow.GetLogger(ctx).Info("allocator reconfigured", "changes", reply.Summary, "refused", reply.Refused)
	a.execute(ctx, cmds)
	return reply, nil
}

func (a *allocator) onRecover(ctx workflow.Context) (protocol.RecoverReply, error) {
	a.updates++
	// A recovery already under way (a fresh allocator started by this very
	// request) answers it: rebuilding twice finds the same.
	underWay := a.recovering
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.RecoverReply{}, err
	}
	if underWay && a.lastRecovery != nil {
		return *a.lastRecovery, nil
	}
	a.recovering = true
	return a.recoverState(ctx), nil
}

// validateCheckpoint refuses, before anything is written to the history, a
// report for a job that does not hold capacity here in that attempt: a report
// that arrives after its attempt ended is harmless but must say so.
func (a *allocator) validateCheckpoint(r protocol.CheckpointReport) error {
	if r.Job == "" {
		return fmt.Errorf("checkpoint: job is empty")
	}
	if err := protocol.CheckProgress(r.Progress); err != nil {
		return err
	}
	if a.recovering {
		return nil // the rebuilt pool decides, once it is there
	}
	return a.st.CheckRunning(r)
}

// onCheckpoint stamps the report with the allocator's clock.
func (a *allocator) onCheckpoint(ctx workflow.Context, r protocol.CheckpointReport) (protocol.CheckpointReply, error) {
	a.updates++
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.CheckpointReply{}, err
	}
	reply, cmds, err := a.st.Checkpoint(r, workflow.Now(ctx))
	a.execute(ctx, cmds)
	return reply, err
}

// awaitRecovered blocks while the state is rebuilt from the jobs.
func (a *allocator) awaitRecovered(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return !a.recovering })
}

// run takes signals until this run should hand over to a fresh one, then
// drains and continues as new.
func (a *allocator) run(ctx workflow.Context) error {
	if !a.gatesRead {
		a.readGates(ctx)
	}
	a.checkBuild(ctx, true)
	if a.noticesResets {
		a.runID = a.currentRun(ctx)
		// A reset to the run's first task runs that task afresh, so the
		// run ID it reads is its own: only the original run ID tells (the
		// SDK's test environment has none).
		if info := workflow.GetInfo(ctx); a.runID == info.WorkflowExecution.RunID && info.OriginalRunID != "" && info.OriginalRunID != info.WorkflowExecution.RunID {
			a.recovering = true
		}
	}
	a.startSignalLoops(ctx)
	if a.recovering {
		a.recoverState(ctx)
	}
	// Orphans and fenced nodes carried over from the previous run still
	// need their workers stopped.
	for _, job := range a.st.OrphansToResume() {
		a.reclaim(ctx, job)
	}
	a.execute(ctx, a.st.FencesCarried())
	a.schedule(ctx)

	if err := workflow.Await(ctx, func() bool { return a.shouldContinueAsNew(ctx) }); err != nil {
		return err
	}
	for {
		if err := a.awaitHandOver(ctx); err != nil {
			return err
		}
		// A reset run must not hand its pool to the next: that run would
		// carry no mark of the reset at all.
		if !a.resetSince(ctx) {
			break
		}
		a.recoverState(ctx)
	}
	a.drainSignals(ctx)
	workflow.GetLogger(ctx).Info("allocator continues as new", "waiting", a.st.Pool.WaitingCount(), "running", len(a.st.Pool.RunningJobs()))
	next, packed, err := a.st.Carry()
	if err != nil {
		return err
	}
	// The next run takes the allocators' own task queue and the current
	// task timeout, not those the first run was started with.
	ctx = workflow.WithWorkflowTaskQueue(ctx, protocol.AllocatorTaskQueue)
	ctx = workflow.WithWorkflowTaskTimeout(ctx, protocol.AllocatorTaskTimeout)
	return workflow.NewContinueAsNewError(ctx, AllocatorWorkflow, next, packed)
}

// checkBuild notes the build of the worker that runs this workflow task, and
// has the run hand over (newBuild) the first time it is a build the
// allocation has not run on: handing over on a new build bounds how old a live
// run can be to one upgrade, which is what lets a release retire the version
// gates of releases before its upgrade window (see gates.go). The build is read
// through workflow.MutableSideEffect, which records it whenever it changes, so
// a replay takes each decision where the original run took it. (The SDK's
// GetCurrentBuildID does not serve: a worker that replays the run for its first
// task reports the previous task's build for it, and a replay the task's own.)
// It runs at the run's start, which only notes the build (the run's own code
// is that build's), and at every reclaim tick.
func (a *allocator) checkBuild(ctx workflow.Context, atStart bool) {
	if !a.tracksBuilds {
		return
	}
	var build string
	same := func(x, y any) bool { return x == y }
	if workflow.MutableSideEffect(ctx, "worker-build", func(workflow.Context) any { return thisWorkerBuild() }, same).Get(&build) != nil {
		return
	}
	if a.st.RanOn(build) {
		return
	}
	if !atStart && !a.newBuild {
		workflow.GetLogger(ctx).Info("allocator hands over to a run on its new build", "build", build)
		a.newBuild = true
	}
	a.st.NoteBuild(build)
}

// resetSince tells whether the run was reset (`temporal workflow reset`)
// since it last looked. A reset run replays its history up to the reset point
// and goes on from there under a new run ID, with the pool and the epoch it
// had then: it may believe free what jobs have held since, and grant it. The
// run ID is read through workflow.MutableSideEffect, which records it when it
// changes, so that the replay before the reset point reads the run ID it had
// then, the first task after it reads the new one, and a later replay of
// either takes each decision where the run took it. (Temporal's
// LastResetTime does not serve: it is kept only for the reset run itself, and
// the reset run may continue as new before anyone reads it.)
func (a *allocator) resetSince(ctx workflow.Context) bool {
	if !a.noticesResets {
		return false
	}
	run := a.currentRun(ctx)
	if run == a.runID {
		return false
	}
	workflow.GetLogger(ctx).Warn("the allocator was reset; rebuilding its state from the jobs", "from_run", a.runID, "run", run)
	a.runID = run
	return true
}

// currentRun reads the run ID (see resetSince).
func (a *allocator) currentRun(ctx workflow.Context) string {
	var run string
	same := func(x, y any) bool { return x == y }
	if err := workflow.MutableSideEffect(ctx, "run-id", func(ctx workflow.Context) any { return workflow.GetInfo(ctx).WorkflowExecution.RunID }, same).Get(&run); err != nil {
		panic(fmt.Sprintf("read the allocator's run ID: %v", err))
	}
	return run
}

// awaitHandOver lets handlers and outgoing signals finish before the run
// hands over, so that nothing is lost. Reclaims and fences are not waited
// for: orphans and lost nodes are carried in the state, and the next run takes
// them up again. A pass asked for in this task runs before the hand-over,
// and is the last one of this run: a run that kept granting while it waited
// for its signals to drain would never hand over under a steady stream of
// requests and releases.
//
// It then gives every other coroutine a turn: a
// signal that arrived in this very task went straight to its loop, which was
// blocked waiting for it, and is neither in the state nor in the channel for
// drainSignals until that loop runs (the settler, started after the loops,
// says when they have).
func (a *allocator) awaitHandOver(ctx workflow.Context) error {
	if a.dirty && !a.recovering {
		a.dirty = false
		a.schedulePass(ctx)
	}
	a.handingOver = true
	ready := func() bool {
		return workflow.AllHandlersFinished(ctx) && a.inFlight == 0 && len(a.outbox) == 0 && a.resetChecks == 0 &&
			!a.recovering
	}
	for {
		if err := workflow.Await(ctx, ready); err != nil {
			return err
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
	workflow.Go(ctx, a.passLoop)
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
			a.onWithdraw(ctx, s)
			a.schedule(ctx)
		}
	})
	workflow.Go(ctx, a.reclaimLoop)
	if a.boundsArrivals {
		workflow.Go(ctx, a.fenceLoop)
	}
	workflow.Go(ctx, a.watchLoop)
	workflow.Go(ctx, a.settle) // last: see awaitHandOver
}

// watched is a future the watch loop waits for, and what its completion does.
type watched struct {
	f    workflow.Future
	done func(ctx workflow.Context, err error)
}

// watch has done run with f's error once f is ready, in the watch loop.
// done must not block: the watch loop is what frees the budgets.
func (a *allocator) watch(f workflow.Future, done func(ctx workflow.Context, err error)) {
	a.watching = append(a.watching, watched{f: f, done: done})
}

// watchLoop waits until some watched future is ready, then runs the
// completions of all that are, in the order they were watched. Its one
// coroutine costs every workflow task a look at each future in flight, not a
// coroutine switch each: the SDK runs every blocked coroutine of a workflow
// on every workflow task (a goroutine switch, a deadlock-detector ticker and
// a stack walk each), which for hundreds of signals in flight made tasks, and
// replays of whole runs, outlast protocol.AllocatorTaskTimeout.
func (a *allocator) watchLoop(ctx workflow.Context) {
	for {
		if workflow.Await(ctx, a.anyWatchedReady) != nil {
			return
		}
		var ready []watched
		k := 0
		for _, w := range a.watching {
			if w.f.IsReady() {
				ready = append(ready, w)
			} else {
				a.watching[k] = w
				k++
			}
		}
		clear(a.watching[k:])
		a.watching = a.watching[:k]
		for _, w := range ready {
			w.done(ctx, w.f.Get(ctx, nil)) // ready: Get does not block
		}
	}
}

func (a *allocator) anyWatchedReady() bool {
	for _, w := range a.watching {
		if w.f.IsReady() {
			return true
		}
	}
	return false
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
		a.onWithdraw(ctx, s)
	}
	for {
		var req protocol.CapacityRequest
		if !a.requests.ReceiveAsync(&req) {
			break
		}
		a.onRequest(ctx, req)
	}
}

func (a *allocator) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	limit := a.st.Config.MaxUpdatesPerRun
	if limit <= 0 {
		limit = maxUpdatesPerRun
	}
	return info.GetContinueAsNewSuggested() || a.updates >= limit || info.GetCurrentHistoryLength() >= maxEventsPerRun ||
		a.gaveUp || a.newBuild
}

// Every signal counts towards the server's per-run limits (a.updates).

func (a *allocator) onRequest(ctx workflow.Context, req protocol.CapacityRequest) {
	a.updates++
	a.execute(ctx, a.st.Request(req, workflow.Now(ctx)))
}

func (a *allocator) onRelease(ctx workflow.Context, s protocol.ReleaseSignal) {
	a.updates++
	a.execute(ctx, a.st.Release(s))
}

func (a *allocator) onWithdraw(ctx workflow.Context, s protocol.WithdrawSignal) {
	a.updates++
	a.execute(ctx, a.st.Withdraw(s))
}

// execute carries out a rule's commands, in order.
func (a *allocator) execute(ctx workflow.Context, cmds []allocation.Command) {
	for _, c := range cmds {
		switch c := c.(type) {
		case allocation.Signal:
			a.send(ctx, c)
		case allocation.FenceNode:
			a.fence(ctx, c.Node)
		case allocation.Reclaim:
			a.reclaim(ctx, c.Job)
		case allocation.CheckReset:
			a.checkReset(ctx, c.Request)
		case allocation.CheckForgotten:
			a.checkForgotten(ctx, c.Request)
		case allocation.Requeue:
			a.onRequest(ctx, c.Request)
		case allocation.Schedule:
			a.schedule(ctx)
		case allocation.Note:
			a.lastEvent = c.Text
		case allocation.Warn:
			workflow.GetLogger(ctx).Warn(c.Msg, c.KV...)
		case allocation.Count:
			a.count(ctx, c)
		default:
			panic(fmt.Sprintf("allocator: no executor for command %T", c))
		}
	}
}

func (a *allocator) count(ctx workflow.Context, c allocation.Count) {
	switch c.Metric {
	case allocation.MetricPreemption:
		a.metrics(ctx).WithTags(map[string]string{
			metrics.LabelVictimPriority: c.VictimClass, metrics.LabelPreemptorPriority: c.PreemptorClass,
		}).Counter(metrics.PreemptionsInstrument).Inc(1)
	case allocation.MetricReclaimed:
		a.metrics(ctx).Counter(metrics.LeakedReclaimedInstrument).Inc(1)
	}
}

// checkReset asks the workflow of a job that requested an older attempt than
// the pool's which attempt it is at (see allocation.State.ResetAnswered): a
// reset job is served, a late duplicate dropped.
func (a *allocator) checkReset(ctx workflow.Context, req protocol.CapacityRequest) {
	a.resetChecks++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { a.resetChecks-- }()
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			HeartbeatTimeout:    20 * time.Second,
			// Bounded (see guard): a hung check would keep the run from
			// handing over (awaitHandOver waits for the reset checks).
			ScheduleToCloseTimeout: reclaimCheckLife,
			RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
			Summary:                fmt.Sprintf("is %s back at attempt %d?", req.Job, req.Attempt),
		})
		var attempts []int
		var err error
		for try, delay := 0, time.Second; ; try, delay = try+1, 2*delay {
			attempts = nil
			err = a.executeActivity(actx, (*activities.Activities).CurrentAttempts, []string{req.Job}).Get(ctx, &attempts)
			if try >= resetCheckTries || allocation.ResetSettled(req, attempts, err) {
				break
			}
			if !a.awaitCheckTimer(ctx, delay, "ask "+req.Job+" its attempt again") {
				return
			}
		}
		a.execute(ctx, a.st.ResetAnswered(req, attempts, err))
	})
}

// checkForgotten asks the workflow of a job that requested the attempt the
// pool is releasing what it holds (see allocation.State.ForgottenAnswered).
// It asks once every signal this allocator sent the job has reached it: an
// answer given before a grant of ours arrived would take a held attempt for a
// forgotten one.
func (a *allocator) checkForgotten(ctx workflow.Context, req protocol.CapacityRequest) {
	a.resetChecks++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { a.resetChecks-- }()
		if workflow.Await(ctx, func() bool { return !a.signalsPendingTo(req.Job) }) != nil {
			return
		}
		// No heartbeat: the one update it sends waits up to 30 s for the
		// job's workflow, and a minute bounds it.
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			// Bounded (see guard), as the reset checks are.
			ScheduleToCloseTimeout: reclaimCheckLife,
			RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
			Summary:                fmt.Sprintf("does %s still know it holds attempt %d?", req.Job, req.Attempt),
		})
		in := activities.JobHoldInput{Job: req.Job, Epoch: a.st.Epoch,
			UpdateID: fmt.Sprintf("forgotten/%s/%d/%d", a.st.Epoch, req.Attempt, workflow.Now(ctx).UnixNano())}
		var hold *protocol.JobHold
		err := a.executeActivity(actx, (*activities.Activities).JobHold, in).Get(ctx, &hold)
		a.execute(ctx, a.st.ForgottenAnswered(req, hold, err))
	})
}

// awaitCheckTimer waits delay on a timer of the reset checks', once fewer
// than AllocatorCheckTimers of them are armed (see versionBoundedArrivals);
// false if the workflow is going away.
func (a *allocator) awaitCheckTimer(ctx workflow.Context, delay time.Duration, summary string) bool {
	if a.boundsArrivals {
		if workflow.Await(ctx, func() bool { return a.checkTimers < protocol.AllocatorCheckTimers }) != nil {
			return false
		}
		a.checkTimers++
		defer func() { a.checkTimers-- }()
	}
	return workflow.NewTimerWithOptions(ctx, delay, workflow.TimerOptions{Summary: summary}).Get(ctx, nil) == nil
}

// signalsPendingTo says whether a signal to job waits in the outbox or is
// on its way.
func (a *allocator) signalsPendingTo(job string) bool {
	return a.inFlightTo[job] > 0 || slices.ContainsFunc(a.outbox, func(o allocation.Signal) bool { return o.Job == job })
}

// resetCheckTries is how many more times a job is asked its attempt while
// its record still shows an older one (1 s, 2 s, ... 32 s apart).
const resetCheckTries = 6

// schedule asks for a scheduling pass at the end of the workflow task (see
// passLoop): one pass however many messages the task brought.
func (a *allocator) schedule(workflow.Context) {
	a.dirty = true
}

// schedulePass runs one scheduling pass and sends its decisions.
func (a *allocator) schedulePass(ctx workflow.Context) {
	if a.recovering || a.handingOver {
		return
	}
	if a.resetSince(ctx) {
		a.recoverState(ctx)
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
	// Decide no more than can be sent at once: the rest of the queue waits
	// for the next pass (passOn), so that what this run has decided and not
	// yet delivered stays within the budget, and the run can hand over
	// however many jobs one release lets start.
	var cmds []allocation.Command
	room := a.signalBudget() - a.inFlight - len(a.outbox)
	if a.passCut = room <= 0; !a.passCut {
		cmds, a.passCut = a.st.PassAtMost(now, room)
	}
	a.metrics(ctx).Timer(metrics.SchedulingPassInstrument).Record(time.Since(passStart)) //workflowcheck:ignore
	a.execute(ctx, cmds)
	a.armWake(ctx, now)
	// Rendering the queue for the Web UI costs a dry-run pass; with a long
	// queue, refresh it at most every detailsInterval.
	if a.st.Pool.WaitingCount() <= detailsLimit || now.Sub(a.detailsAt) >= detailsInterval {
		a.detailsAt = now
		if a.starts.Stale(a.st, now, detailStartsInterval) {
			a.starts = a.st.DetailStarts(now)
		}
		workflow.SetCurrentDetails(ctx, a.details())
	}
}

// signalBudget is how many signals a run may have in flight.
func (a *allocator) signalBudget() int {
	if !a.boundsArrivals {
		return unboundedSignalsInFlight
	}
	return protocol.AllocatorSignalsInFlight
}

// The budgets of runs before versionBoundedArrivals: half the
// buffered-events limit in signals, and a quarter of the pending-activities
// limit in activities (half for each share).
const (
	unboundedSignalsInFlight = protocol.TemporalBufferedEventsLimit / 2
	unboundedActivityShare   = protocol.TemporalPendingActivitiesLimit / 8
)

// send signals a job workflow; if the workflow no longer exists, what the
// signal's IfGone says is done.
// At most signalBudget signals are in flight: Temporal fails every workflow
// task that would have more than TemporalPendingSignalsLimit, or during which
// more than TemporalBufferedEventsLimit events came in, and a pass can decide
// more than the budget (refusals, the victims of a large preemptor). The rest wait in the outbox, in order, and each
// delivery sends the next, so that they go out over the following workflow
// tasks with no outside event needed.
func (a *allocator) send(ctx workflow.Context, o allocation.Signal) {
	if a.inFlight >= a.signalBudget() || len(a.outbox) > 0 {
		a.outbox = append(a.outbox, o)
		return
	}
	a.signal(ctx, o)
}

func (a *allocator) signal(ctx workflow.Context, o allocation.Signal) {
	f := workflow.SignalExternalWorkflow(ctx, o.Job, "", o.Name, o.Arg)
	a.inFlight++
	a.inFlightTo[o.Job]++
	a.watch(f, func(ctx workflow.Context, err error) {
		a.inFlight--
		if a.inFlightTo[o.Job]--; a.inFlightTo[o.Job] <= 0 {
			delete(a.inFlightTo, o.Job)
		}
		a.flushOutbox(ctx)
		if err != nil {
			workflow.GetLogger(ctx).Warn("signal to job failed", "job", o.Job, "signal", o.Name, "error", err)
			a.jobGone(ctx, o)
		}
		a.passOn(ctx)
	})
}

// passOn asks for the next pass once a pass that stopped at the signal budget
// has a tenth of it free again: the rest of a burst is granted in slices of
// at least a tenth of the budget as earlier grants are delivered, and the
// budget stays nearly full. (A pass that stops early costs little: it walks
// the queue only up to its cut.)
func (a *allocator) passOn(ctx workflow.Context) {
	if budget := a.signalBudget(); a.passCut && a.inFlight+len(a.outbox) <= budget-budget/10 {
		a.passCut = false
		a.schedule(ctx)
	}
}

// jobGone does what a signal's IfGone says once its job's workflow is found
// gone.
func (a *allocator) jobGone(ctx workflow.Context, o allocation.Signal) {
	switch o.IfGone {
	case allocation.GoneFreeGrant:
		a.execute(ctx, a.st.GrantNotDelivered(o.Job, o.Attempt))
	case allocation.GoneReclaim:
		// The victim's workflow is gone but its workers may still run.
		a.reclaim(ctx, o.Job)
	}
}

// flushOutbox sends waiting signals while the budget allows.
func (a *allocator) flushOutbox(ctx workflow.Context) {
	for len(a.outbox) > 0 && a.inFlight < a.signalBudget() {
		o := a.outbox[0]
		a.outbox[0] = allocation.Signal{}
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
// allows (see shareOf), so that what closes during a workflow task stays
// within protocol.AllocatorArrivals however many workers a reclaim stops or
// nodes a recovery fences. Under the budget it schedules at once.
func (a *allocator) executeActivity(ctx workflow.Context, activity any, args ...any) workflow.Future {
	return a.executeActivityOf(ctx, otherActivities, activity, args...)
}

// executeFenceActivity is executeActivity for the fences' share.
func (a *allocator) executeFenceActivity(ctx workflow.Context, activity any, args ...any) workflow.Future {
	return a.executeActivityOf(ctx, fenceActivities, activity, args...)
}

func (a *allocator) executeActivityOf(ctx workflow.Context, share int, activity any, args ...any) workflow.Future {
	_ = workflow.Await(ctx, func() bool { return a.activities[share] < a.shareOf(share) })
	a.activities[share]++
	f, result := a.startActivity(ctx, activity, args...)
	// The slot is freed when f resolves: when the server closes it, or at
	// once when a guard cancels it. The server closes a cancelled activity
	// that had not started; one that had may stay pending on its side, but
	// not for long: a run whose guard gave up hands over (gaveUp), and the
	// server drops its pending activities then.
	a.watch(f, func(workflow.Context, error) { a.activities[share]-- })
	return result
}

// shareOf is how many activities of share the run may have pending.
func (a *allocator) shareOf(share int) int {
	switch {
	case !a.boundsArrivals:
		return unboundedActivityShare
	case share == fenceActivities:
		return protocol.AllocatorFenceActivities
	default:
		return protocol.AllocatorOtherActivities
	}
}

// executeGuarded runs an activity outside the budget's shares, guarded if
// its options bound its life.
func (a *allocator) executeGuarded(ctx workflow.Context, activity any, args ...any) workflow.Future {
	_, result := a.startActivity(ctx, activity, args...)
	return result
}

// startActivity schedules an activity and returns its future and the one to
// wait for: the same, or its guard's when its options bound its life.
func (a *allocator) startActivity(ctx workflow.Context, activity any, args ...any) (f, result workflow.Future) {
	bound := guardBound(workflow.GetActivityOptions(ctx))
	if bound == 0 || !a.guarded(ctx) {
		f = workflow.ExecuteActivity(ctx, activity, args...)
		return f, f
	}
	actx, giveUp := workflow.WithCancel(ctx)
	f = workflow.ExecuteActivity(actx, activity, args...)
	return f, a.guard(ctx, f, giveUp, bound)
}

// reclaimCheckLife bounds each of the reclaim loop's checks (its retries
// included).
const reclaimCheckLife = 5 * time.Minute

// guarded says whether this run guards its bounded activities
// (versionGuardedActivities). It is asked where the first guard would be
// set, not at the run's start, so that a run started by older code and reset
// after the upgrade is guarded from then on.
func (a *allocator) guarded(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionGuardedActivities, workflow.DefaultVersion, 1) >= 1
}

// guardSlack is how long past its own timeouts an activity is waited for
// before the guard gives up on it.
const guardSlack = 15 * time.Second

// guardBound is how long an activity with these options can live by its
// own timeouts (its schedule-to-close timeout, or for a single attempt its
// schedule-to-start and start-to-close ones), plus guardSlack; zero when
// its life is unbounded (unlimited retries, or waiting for ever for a worker).
func guardBound(o workflow.ActivityOptions) time.Duration {
	switch {
	case o.ScheduleToCloseTimeout > 0:
		return o.ScheduleToCloseTimeout + guardSlack
	case o.RetryPolicy != nil && o.RetryPolicy.MaximumAttempts == 1 && o.ScheduleToStartTimeout > 0 && o.StartToCloseTimeout > 0:
		return o.ScheduleToStartTimeout + o.StartToCloseTimeout + guardSlack
	}
	return 0
}

// guard returns a future that takes f's outcome, or, if the server has not
// closed f within bound, an activityUnanswered error, and then asks the
// server to cancel f and has the run hand over (gaveUp). The server closes
// an activity by its timeouts, but a run that `temporal workflow reset` made
// from a history with an activity pending can have none of its activity
// timeouts fire (seen on Temporal v1.29.1: every later activity of the run
// stayed pending, fences and inventories included, so a node stayed fenced
// for ever); cancelling the oldest one lets the server arm the others'
// timeouts again, and the next run starts on state of its own in any case.
// Both waits run in the watch loop: no coroutine per activity.
func (a *allocator) guard(ctx workflow.Context, f workflow.Future, giveUp workflow.CancelFunc, bound time.Duration) workflow.Future {
	result, settle := workflow.NewFuture(ctx)
	tctx, stopTimer := workflow.WithCancel(ctx)
	timer := workflow.NewTimerWithOptions(tctx, bound, workflow.TimerOptions{Summary: "give up on an activity the server has not closed"})
	a.watch(f, func(workflow.Context, error) {
		stopTimer()
		if !result.IsReady() {
			settle.Chain(f)
		}
	})
	a.watch(timer, func(_ workflow.Context, err error) {
		if err != nil || result.IsReady() {
			return
		}
		giveUp()
		settle.SetError(activityUnanswered{after: bound})
		a.gaveUp = true
	})
	return result
}

// activityUnanswered is what a guarded activity fails with when the server
// did not close it within its own timeouts (see guard).
type activityUnanswered struct{ after time.Duration }

func (e activityUnanswered) Error() string {
	return fmt.Sprintf("the server did not close the activity within %s, its own timeouts included; given up", e.after)
}

// isUnanswered tells whether err is a guard's giving up (activityUnanswered).
func isUnanswered(err error) bool {
	var u activityUnanswered
	return errors.As(err, &u)
}

// reclaimLoop looks, every ReclaimInterval, for jobs that hold capacity
// although their workflow is gone (terminated from the UI or CLI, timed out)
// and reclaims their capacity, and for waiting requests nobody waits for.
func (a *allocator) reclaimLoop(ctx workflow.Context) {
	for {
		// Read each time: a reconfigure may have changed it.
		if err := workflow.NewTimerWithOptions(ctx, a.st.ReclaimInterval(), workflow.TimerOptions{Summary: "look for vanished jobs"}).Get(ctx, nil); err != nil {
			return
		}
		a.checkBuild(ctx, false)
		if a.recovering {
			continue
		}
		if a.resetSince(ctx) {
			a.recoverState(ctx)
			continue
		}
		a.findVanishedJobs(ctx)
		a.askUnansweredAgain(ctx)
		// Ghost requests are rare (the withdrawal list catches the race
		// that makes them), so the queue is walked at a tenth of the pace.
		if a.reclaimTicks++; a.reclaimTicks%ghostCheckEvery == 0 {
			a.dropGhostRequests(ctx, a.st.GhostBatch())
		}
	}
}

// fenceLoop fences again, every ReclaimInterval, the fenced nodes whose last
// try failed (see fence). A loop of its own: the reclaim loop waits for its
// checks, which wait for a slot of the other activities' share, and a fence
// must not wait for a reclaim's stops.
func (a *allocator) fenceLoop(ctx workflow.Context) {
	for {
		if err := workflow.NewTimerWithOptions(ctx, a.st.ReclaimInterval(), workflow.TimerOptions{Summary: "fence the unanswered nodes again"}).Get(ctx, nil); err != nil {
			return
		}
		if !a.recovering {
			a.fenceAgain(ctx)
		}
	}
}

// askUnansweredAgain registers again the jobs that did not answer the last
// recovery: a job that waited then has no worker for a fence to find, and
// would otherwise never be queued again.
func (a *allocator) askUnansweredAgain(ctx workflow.Context) {
	if len(a.st.Unanswered) == 0 || a.st.Epoch == "" {
		return
	}
	reg, err := a.registerNamed(ctx, otherActivities, a.st.Unanswered,
		fmt.Sprintf("ask the %d job(s) that did not answer recovery again", len(a.st.Unanswered)))
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not ask the jobs that did not answer recovery again", "error", err)
		return
	}
	for _, h := range reg.Holds {
		a.execute(ctx, a.st.AdoptStranger("", h, nil))
	}
	a.st.Unanswered = reg.Unanswered
}

// ghostCheckEvery is how many reclaim intervals pass between two slices of
// the ghost-request check.
const ghostCheckEvery = 10

func (a *allocator) findVanishedJobs(ctx workflow.Context) {
	jobs := a.st.Pool.RunningJobs()
	if len(jobs) == 0 {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		// Bounded, so that the reclaim loop, which waits for it, goes on
		// at its next tick whatever happens to this one (see guard).
		ScheduleToCloseTimeout: reclaimCheckLife,
		Summary:                fmt.Sprintf("check %d jobs holding capacity", len(jobs)),
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

// dropGhostRequests drops waiting requests whose job has ended or moved on to
// a later attempt (a cancel that raced its own request, a withdrawal lost).
func (a *allocator) dropGhostRequests(ctx workflow.Context, size int) {
	batch := a.st.Pool.WaitingAfter(a.ghostAfter, size)
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
		// Bounded, so that the reclaim loop, which waits for it, goes on
		// at its next tick whatever happens to this one (see guard).
		ScheduleToCloseTimeout: reclaimCheckLife,
		Summary:                fmt.Sprintf("check %d waiting requests", len(requests)),
	})
	var ghosts []protocol.WithdrawSignal
	if err := a.executeActivity(actx, (*activities.Activities).FindGhostRequests, requests).Get(ctx, &ghosts); err != nil {
		workflow.GetLogger(ctx).Warn("could not check waiting requests", "error", err)
		return
	}
	found := make([]allocation.GhostRequest, len(ghosts))
	for i, g := range ghosts {
		found[i] = allocation.GhostRequest{Job: g.Job, Attempt: g.Attempt}
	}
	a.execute(ctx, a.st.GhostsFound(found))
}

// reclaimStopSlack is what a reclaim's stop may take beyond the agent's
// timeout and the stop's grace, tries included, before its node is fenced.
const reclaimStopSlack = 2 * time.Minute

// reclaim stops the workers of a vanished job through its nodes' agents,
// then frees its capacity (see allocation.State.BeginReclaim). A node whose
// agent does not answer is fenced instead: its capacity stays unused until
// the agent confirms.
func (a *allocator) reclaim(ctx workflow.Context, job string) {
	if a.reclaims[job] {
		return
	}
	plan, cmds, ok := a.st.BeginReclaim(job)
	if !ok {
		a.execute(ctx, cmds)
		return
	}
	a.reclaims[job] = true
	workflow.Go(ctx, func(ctx workflow.Context) {
		futures := make([]workflow.Future, len(plan.Workers))
		for i, w := range plan.Workers {
			actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue:              protocol.NodeTaskQueue(plan.Nodes[i]),
				ScheduleToStartTimeout: a.st.NodeTimeout(),
				StartToCloseTimeout:    a.st.Config.StopGracePeriod + time.Minute,
				HeartbeatTimeout:       20 * time.Second,
				RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
				Summary:                fmt.Sprintf("reclaim worker %d of vanished %s on %s", w.Worker, job, plan.Nodes[i]),
			})
			if a.boundsArrivals {
				// Bounded (and so guarded): an agent that takes the stop and
				// hangs must not hold one of the few slots for ever; its node
				// is fenced instead.
				actx = workflow.WithScheduleToCloseTimeout(actx, a.st.NodeTimeout()+a.st.Config.StopGracePeriod+reclaimStopSlack)
			}
			in := activities.StopWorkerInput{ID: w, Grace: a.st.Config.StopGracePeriod}
			futures[i] = a.executeActivity(actx, (*activities.Activities).StopWorker, in)
		}
		for i, f := range futures {
			if err := f.Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Error("could not stop a vanished job's worker; fencing its node", "job", job, "node", plan.Nodes[i], "error", err)
				a.execute(ctx, a.st.ReclaimStopFailed(job, plan.Nodes[i]))
			}
		}
		cmds, counted := a.st.ReclaimDone(job, plan)
		if !counted {
			return
		}
		delete(a.reclaims, job)
		a.execute(ctx, cmds)
	})
}

// metrics is the SDK's replay-aware metrics handler with the allocation's
// labels: nothing it records during a replay is emitted, so a worker that
// replays this history after a restart counts nothing twice.
func (a *allocator) metrics(ctx workflow.Context) client.MetricsHandler {
	return workflow.GetMetricsHandler(ctx).WithTags(metrics.Tags(a.st.Config.Region, a.st.Config.Allocation))
}

// details renders the allocation for the Web UI's current details.
func (a *allocator) details() string { return a.st.Details(a.recovering, a.lastEvent, a.starts) }

// armWake starts a timer for the pool's next wake-up, unless an earlier one
// is armed: a waiting job may become able to preempt, or to reserve nodes,
// with no event to trigger a pass.
func (a *allocator) armWake(ctx workflow.Context, now time.Time) {
	wake, ok := a.st.Pool.NextWake()
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

// laterOf is the later of two times.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
