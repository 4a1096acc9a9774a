// Package workflows holds trainq's two durable workflows: JobWorkflow, one per
// training job or Jupyter server, and AllocatorWorkflow, one per allocation.
package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
)

// Error types a job workflow ends with.
const (
	ErrTypeJobFailed    = "JobFailed"
	ErrTypeJobPreempted = "JobPreempted"
	ErrTypeBadJob       = "BadJob"
)

// job is the state of one job workflow.
type job struct {
	name string
	// spec is the job's, parsed once (its instance type, its class).
	spec   protocol.CheckedSpec
	status protocol.JobStatus
	seq    int64
	alloc  allocatorLink
	// epoch is the allocator state this job answers to: grants and
	// preemptions of any other epoch come from an allocator that is gone.
	epoch string
	// registrations counts register updates, so that a capacity reply sent
	// before the latest registration cannot move epoch back.
	registrations int
	// runAttempts counts the attempts of this run (not of the whole job).
	runAttempts int
	// requestCheck is how long a waiting attempt waits before it checks:
	// requestCheckInterval, unless the input sets another (tests).
	requestCheck time.Duration
	// askWhy is, while a waiting attempt does not know where it is queued and why (the
	// allocator did not answer in time when it was queued), how long it waits before it asks
	// (checkRequest); 0: it knows, or has stopped asking sooner than requestCheck.
	askWhy time.Duration
	// notices are the stop notices in flight, of whichever attempt: Temporal
	// bounds a workflow's pending activities, not an attempt's, so a notice
	// that outlives its attempt still counts (see giveNotice).
	notices pendingNotices
	// flushing says this run's releases go through flushReleases.
	flushing bool
	// cur is the current attempt's.
	cur *attemptRun
}

// allocatorLink is the allocator workflow the job asks and the channels of
// the signals it sends the job.
type allocatorLink struct {
	id                         string
	grants, preempts, refusals workflow.ReceiveChannel
}

// pendingNotices counts the stop notices in flight (pending), and says some
// are still to be sent (sending).
type pendingNotices struct {
	pending int
	sending bool
}

// attemptRun is what the job keeps of one attempt while it runs. Each
// attempt starts from a fresh one, so that nothing the previous attempt
// released or lost is taken for the new one's (a register answer given
// between a rerun's grant and its start would otherwise report the new
// placement as released).
type attemptRun struct {
	// What the attempt holds or waits for, as a recovering allocator asks
	// it (see hold). phase moves none -> waiting -> holding -> none.
	phase   protocol.HoldPhase
	request protocol.CapacityRequest
	grant   *protocol.GrantSignal
	// released marks the workers whose capacity was given back; releases
	// are reported as each worker stops.
	released map[int]bool
	stopping bool
	signals  []sentRelease
	// unsent are the releases the flusher sends when the task's other work
	// is done (see sendRelease).
	unsent []protocol.ReleaseSignal
	// lostNodes are the nodes whose agent did not answer; busyNodes those
	// where the attempt's GPUs were found in use.
	lostNodes, busyNodes map[string]bool
	// nodeTimeout bounds how long a node's agent may leave work waiting.
	nodeTimeout time.Duration
}

func newAttemptRun() *attemptRun {
	return &attemptRun{phase: protocol.HoldNone, released: map[int]bool{}, lostNodes: map[string]bool{}, busyNodes: map[string]bool{}}
}

// JobWorkflow runs one training job or Jupyter server: it asks the
// allocator for capacity, starts the workers on the granted nodes, watches
// them, and reruns the job after a failure or a preemption while max_retry
// allows. Cancelling the workflow stops the job (state Stopped).
func JobWorkflow(ctx workflow.Context, in protocol.JobInput) (*protocol.JobStatus, error) {
	j := newJob(ctx, in)
	if err := workflow.SetQueryHandler(ctx, protocol.QueryStatus, func() (protocol.JobStatus, error) {
		return j.status, nil
	}); err != nil {
		return nil, err
	}
	// The spec was checked at the edge; checking again keeps a workflow
	// started by hand from running something malformed, and the demand and
	// class parsed here are the ones the job's requests carry.
	checked, _, err := protocol.ParseSpec(j.spec.JobSpec)
	if err != nil {
		j.status.Message = err.Error()
		j.setState(ctx, protocol.StateFailed)
		j.countFinished(ctx, protocol.StateFailed)
		return &j.status, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadJob, nil)
	}
	j.spec = checked
	j.status.Priority, j.status.NWorkers, j.status.GPUs = j.spec.PriorityClass, j.spec.NWorkers, j.spec.GPUs()
	j.status.Spec = j.spec.JobSpec
	j.alloc.id = protocol.AllocatorWorkflowID(j.spec.Region, j.spec.AllocationName)
	j.alloc.grants = workflow.GetSignalChannel(ctx, protocol.SignalGrant)
	j.alloc.preempts = workflow.GetSignalChannel(ctx, protocol.SignalPreempt)
	j.alloc.refusals = workflow.GetSignalChannel(ctx, protocol.SignalRefuse)
	// Registering an update handler yields to the other coroutines, so the
	// grant loop starts after it: a grant already in this task's history
	// (the capacity request is a local activity, so the grant can come
	// before the first task completes) must find the attempt waiting.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, protocol.UpdateRegister, j.onRegister,
		workflow.UpdateHandlerOptions{Validator: validateRegister}); err != nil {
		return nil, err
	}
	// Grants are taken in as they arrive, not only while the attempt waits,
	// so that a register update always sees every grant delivered before it.
	gctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(gctx, func(ctx workflow.Context) {
		for {
			var g protocol.GrantSignal
			j.alloc.grants.Receive(ctx, &g)
			j.takeGrant(ctx, g)
		}
	})
	checkpoints := workflow.GetSignalChannel(ctx, protocol.SignalCheckpointed)
	workflow.Go(gctx, func(ctx workflow.Context) {
		for {
			var c protocol.CheckpointReply
			checkpoints.Receive(ctx, &c)
			j.checkpointed(c)
		}
	})
	return j.run(ctx, in)
}

func newJob(ctx workflow.Context, in protocol.JobInput) *job {
	j := &job{name: in.Name, spec: protocol.CheckedSpec{JobSpec: in.Spec}, requestCheck: requestCheckInterval, cur: newAttemptRun()}
	if in.RequestCheckInterval > 0 {
		j.requestCheck = in.RequestCheckInterval
	}
	j.status = protocol.JobStatus{
		JobName: in.Name, State: protocol.StatePending, Kind: in.Spec.Kind,
		Priority: in.Spec.PriorityClass, Region: in.Spec.Region, Allocation: in.Spec.AllocationName,
		InstanceType: in.Spec.InstanceType, NWorkers: in.Spec.NWorkers, MaxRetry: in.Spec.MaxRetry,
		CreatedAt: workflow.GetInfo(ctx).WorkflowStartTime, Spec: in.Spec, Attempts: []protocol.AttemptRecord{},
	}
	if c := in.Carry; c != nil {
		// A run continued from an earlier one: the job goes on where it was.
		j.status, j.seq, j.epoch = c.Status, c.Seq, c.Epoch
	}
	return j
}

// onRegister answers a recovering allocator's register update with what
// the job holds or waits for.
func (j *job) onRegister(ctx workflow.Context, r protocol.RegisterRequest) (protocol.JobHold, error) {
	// A grant delivered in the same workflow task as this update must
	// count in the answer.
	for {
		var g protocol.GrantSignal
		if !j.alloc.grants.ReceiveAsync(&g) {
			break
		}
		j.takeGrant(ctx, g)
	}
	if protocol.NewerEpoch(j.epoch, r.Epoch) {
		// A dead allocator run's recovery (its activity outlives the run by
		// a few seconds) must not move the job back from its successor.
		workflow.GetLogger(ctx).Warn("a register update of an older allocator epoch; the job keeps its epoch", "register_epoch", r.Epoch, "epoch", j.epoch)
		return j.hold(), nil
	}
	j.epoch = r.Epoch
	j.registrations++
	return j.hold(), nil
}

func validateRegister(r protocol.RegisterRequest) error {
	if r.Epoch == "" {
		return errors.New("epoch: must not be empty")
	}
	return nil
}

// run runs attempts until one ends the job (or the run continues as new).
func (j *job) run(ctx workflow.Context, in protocol.JobInput) (*protocol.JobStatus, error) {
	for attempt := j.status.Attempt + 1; ; attempt++ {
		j.status.Attempt = attempt
		now := workflow.Now(ctx)
		j.status.Attempts = append(j.status.Attempts, protocol.AttemptRecord{Number: attempt, QueuedAt: now})
		if j.status.PendingAt == nil {
			j.status.PendingAt = &now
		}
		j.setState(ctx, protocol.StatePending)

		out := j.runAttempt(ctx, attempt)
		j.runAttempts++

		ended := workflow.Now(ctx)
		j.current().EndedAt = &ended
		if end, err := j.afterAttempt(ctx, in, out); end {
			// With a continue-as-new error the result is not recorded.
			return &j.status, err
		}
	}
}

// afterAttempt ends the job or prepares the next attempt. end says the
// workflow returns err (a continue-as-new error included).
func (j *job) afterAttempt(ctx workflow.Context, in protocol.JobInput, out attempts.Outcome) (end bool, err error) {
	next := attempts.After(out, j.record())
	if next.NodeLoss {
		j.status.NodeLosses++
	}
	if !next.Rerun {
		if next.Message != "" {
			j.status.Message = next.Message
		}
		switch next.Ending {
		case attempts.EndsCancelled:
			_ = j.finish(ctx, next.State, nil)
			return true, temporal.NewCanceledError(j.status.Message)
		case attempts.EndsFailed:
			return true, j.finish(ctx, next.State, temporal.NewNonRetryableApplicationError(j.status.Message, ErrTypeJobFailed, nil))
		case attempts.EndsPreempted:
			return true, j.finish(ctx, next.State, temporal.NewNonRetryableApplicationError(j.status.Message, ErrTypeJobPreempted, nil))
		}
		if next.State == protocol.StateCompleted {
			j.recordRuntime(ctx)
		}
		return true, j.finish(ctx, next.State, nil)
	}
	if next.SpendsRetry {
		j.status.Restarts++
	}
	j.metrics(ctx).WithTags(map[string]string{metrics.LabelReason: restartReasons[next.Why]}).Counter(metrics.JobRestartsInstrument).Inc(1)
	j.setState(ctx, protocol.StateRestarting)
	if err := j.continueAsNewIfLong(ctx, in); err != nil {
		return true, err
	}
	return false, nil
}

// restartReasons are the restart counter's reason labels.
var restartReasons = map[attempts.Restart]string{
	attempts.RestartFailed: metrics.ReasonFailed, attempts.RestartPreempted: metrics.ReasonPreempted, attempts.RestartStuck: metrics.ReasonStuck,
	attempts.RestartNodeLost: metrics.ReasonNodeLost, attempts.RestartNodeDrained: metrics.ReasonNodeDrained,
}

// reruns says whether another attempt follows the one that ended with out
// (see attempts.Reruns).
func (j *job) reruns(out attempts.Outcome) bool { return attempts.Reruns(out, j.record()) }

// record is what the job has spent of its reruns, for the attempts' rules.
func (j *job) record() attempts.Record {
	return attempts.Record{Restarts: j.status.Restarts, MaxRetry: j.spec.MaxRetry, NodeLosses: j.status.NodeLosses}
}

// Versions of the job workflow's code (workflow.GetVersion). Each lives as
// long as the upgrade window needs it (see gates.go).
const (
	// versionLearnedEstimate: a training job that completes records its
	// shape and runtime for the jobs after it to learn their estimates from
	// (see recordRuntime; learning one is in the capacity request's local
	// activity, which replays from its marker).
	versionLearnedEstimate = "job-learned-estimate"
	// versionReleaseStaleGrant: a grant for an attempt that has ended is
	// given back, its nodes named lost (see releaseStaleGrant).
	versionReleaseStaleGrant = "job-release-stale-grant"
	// versionAskWhyAgain: an attempt queued without learning where and why
	// it waits asks its allocator again soon (see askWhy), not only at the
	// next request check.
	versionAskWhyAgain = "job-ask-why-again"
	// versionCoalesceReleases: the releases the job sends itself within a
	// workflow task go as one signal per attempt (see sendRelease).
	versionCoalesceReleases = "job-coalesce-releases"
	// versionWithdrawByUpdate: a job cancelled while it waits withdraws its
	// request by an update from an activity, not a signal (see withdraw and
	// activities.ReportWithdrawal).
	versionWithdrawByUpdate = "job-withdraw-by-update"
)

// defaultJobEventsPerRun is the history length past which a job continues
// as new between attempts: an attempt costs about 30 + 13 per worker
// events, so a 32-worker job with max_retry 100 would otherwise approach
// Temporal's 51,200-event limit.
const defaultJobEventsPerRun = 4000

// continueAsNewIfLong hands the job over to a fresh run between attempts
// once its history is long, carrying its status (attempts table,
// preemptors, restarts), its queue sequence and its allocator epoch. It
// returns the continue-as-new error to end this run with, or nil to go on.
func (j *job) continueAsNewIfLong(ctx workflow.Context, in protocol.JobInput) error {
	limit := in.MaxEventsPerRun
	if limit <= 0 {
		limit = defaultJobEventsPerRun
	}
	info := workflow.GetInfo(ctx)
	// The server's count, or an estimate from this run's attempts where
	// the count is not known (the test environment).
	length := max(info.GetCurrentHistoryLength(), j.runAttempts*(30+13*j.spec.NWorkers))
	if !info.GetContinueAsNewSuggested() && length < limit {
		return nil
	}
	// A register answer must finish in this run. A cancellation belongs to
	// this run too, so a cancelled job does not hand over: its next attempt
	// sees the cancellation at once and stops the job.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil || ctx.Err() != nil {
		return nil // cancelled: the next attempt's wait sees it and stops the job
	}
	next := protocol.JobInput{Name: in.Name, Spec: in.Spec, MaxEventsPerRun: in.MaxEventsPerRun, RequestCheckInterval: in.RequestCheckInterval,
		Carry: &protocol.JobCarry{Status: j.status, Seq: j.seq, Epoch: j.epoch}}
	workflow.GetLogger(ctx).Info("job continues as new", "attempt", j.status.Attempt, "history_length", length)
	return workflow.NewContinueAsNewError(ctx, JobWorkflow, next)
}

// metrics is the SDK's replay-aware metrics handler with the job's labels:
// nothing it records during a replay is emitted, so a worker that replays
// this history after a restart counts nothing twice.
func (j *job) metrics(ctx workflow.Context) client.MetricsHandler {
	h := workflow.GetMetricsHandler(ctx).WithTags(metrics.Tags(j.spec.Region, j.spec.AllocationName))
	return h.WithTags(map[string]string{metrics.LabelPriority: j.spec.PriorityClass})
}

func (j *job) countFinished(ctx workflow.Context, state protocol.JobState) {
	j.metrics(ctx).WithTags(map[string]string{metrics.LabelState: string(state)}).Counter(metrics.JobsFinishedInstrument).Inc(1)
}

// noteOutcome records why the current attempt ends.
func (j *job) noteOutcome(out attempts.Outcome) {
	rec := j.current()
	rec.EndReason, rec.ExitCode, rec.Preemptor = out.Message, out.ExitCode, out.Preemptor
	if out.Preemptor != nil {
		j.status.Preemptors = append(j.status.Preemptors, *out.Preemptor)
	}
	j.status.Message = out.Message
}

// checkpointed records a checkpoint the allocator recorded for one of the
// job's attempts (its last one counts).
func (j *job) checkpointed(c protocol.CheckpointReply) {
	for i := range j.status.Attempts {
		a := &j.status.Attempts[i]
		if a.Number == c.Attempt && (a.CheckpointAt == nil || c.At.After(*a.CheckpointAt)) {
			at := c.At
			a.CheckpointAt = &at
		}
	}
}

func (j *job) current() *protocol.AttemptRecord { return &j.status.Attempts[len(j.status.Attempts)-1] }

func (j *job) finish(ctx workflow.Context, state protocol.JobState, err error) error {
	now := workflow.Now(ctx)
	j.status.CompletedAt = &now
	j.setState(ctx, state)
	j.countFinished(ctx, state)
	return err
}

// runAttempt takes one attempt from queueing to the moment all its workers
// have stopped and their capacity is released.
func (j *job) runAttempt(ctx workflow.Context, attempt int) attempts.Outcome {
	j.cur = newAttemptRun()
	grant, out, ok := j.waitForCapacity(ctx, attempt)
	if !ok {
		j.noteOutcome(out)
		return out
	}
	j.cur.nodeTimeout = grant.NodeTimeout
	if j.cur.nodeTimeout <= 0 {
		j.cur.nodeTimeout = protocol.DefaultNodeTimeout
	}
	rec := j.current()
	now := workflow.Now(ctx)
	rec.StartedAt, rec.Placement, rec.OnLoan = &now, grant.Placement, grant.OnLoan
	j.setState(ctx, protocol.StateStarting)

	out, started := j.startWorkers(ctx, attempt, grant)
	if errors.Is(ctx.Err(), workflow.ErrCanceled) {
		// Cancelled while starting: whatever did start is stopped below.
		out = attempts.Outcome{Kind: attempts.Cancelled, Message: "stopped by the user"}
	} else if started {
		now := workflow.Now(ctx)
		if j.status.RunningAt == nil {
			j.status.RunningAt = &now
		}
		j.setState(ctx, protocol.StateRunning)
		// Queue wait: from this attempt's queueing (the submission, or the
		// re-queue after a restart) until it runs.
		j.metrics(ctx).Timer(metrics.QueueWaitInstrument).Record(now.Sub(rec.QueuedAt))
		out = j.watch(ctx, attempt, grant)
	}
	// Say why the attempt ends as soon as it is known: stopping may take a
	// while, and the user wants to see the preemptor meanwhile. A warning
	// of a coming stop is over (the attempt's record keeps it).
	j.status.Warning = ""
	j.noteOutcome(out)
	switch {
	case out.Kind == attempts.Completed:
		j.setState(ctx, protocol.StateCompleting)
	case j.reruns(out):
		j.setState(ctx, protocol.StateRestarting)
	default:
		j.setState(ctx, protocol.StateStopping)
	}
	j.stopAndRelease(ctx, attempt, grant)
	j.cur.phase, j.cur.grant = protocol.HoldNone, nil
	return out
}
