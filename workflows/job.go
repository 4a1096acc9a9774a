// Package workflows holds trainq's two durable workflows: JobWorkflow, one per
// training job or Jupyter server, and AllocatorWorkflow, one per allocation.
package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Error types a job workflow ends with.
const (
	ErrTypeJobFailed    = "JobFailed"
	ErrTypeJobPreempted = "JobPreempted"
	ErrTypeBadJob       = "BadJob"
)

// job is the state of one job workflow.
type job struct {
	name      string
	spec      protocol.JobSpec
	status    protocol.JobStatus
	seq       int64
	allocator string
	// grants, preempts and refusals are the allocator's signals.
	grants, preempts, refusals workflow.ReceiveChannel
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
	// cur is the current attempt's.
	cur *attemptRun
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
	// lostNodes are the nodes whose agent did not answer; busyNodes those
	// where the attempt's GPUs were found in use.
	lostNodes, busyNodes map[string]bool
	// notices counts the stop notices in flight, and noticing says some
	// are still to be sent (see giveNotice).
	notices  int
	noticing bool
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
	// started by hand from running something malformed.
	if _, err := j.spec.Normalize(); err != nil {
		j.status.Message = err.Error()
		j.setState(ctx, protocol.StateFailed)
		j.countFinished(ctx, protocol.StateFailed)
		return &j.status, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadJob, nil)
	}
	j.status.Priority, j.status.NWorkers, j.status.GPUs = j.spec.PriorityClass, j.spec.NWorkers, j.spec.GPUs()
	j.status.Spec = j.spec
	j.allocator = protocol.AllocatorWorkflowID(j.spec.Region, j.spec.AllocationName)
	j.grants = workflow.GetSignalChannel(ctx, protocol.SignalGrant)
	j.preempts = workflow.GetSignalChannel(ctx, protocol.SignalPreempt)
	j.refusals = workflow.GetSignalChannel(ctx, protocol.SignalRefuse)
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
			j.grants.Receive(ctx, &g)
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
	j := &job{name: in.Name, spec: in.Spec, requestCheck: requestCheckInterval, cur: newAttemptRun()}
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
		if !j.grants.ReceiveAsync(&g) {
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
	switch out.Kind {
	case attempts.Completed:
		j.recordRuntime(ctx)
		return true, j.finish(ctx, protocol.StateCompleted, nil)
	case attempts.Cancelled:
		_ = j.finish(ctx, protocol.StateStopped, nil)
		return true, temporal.NewCanceledError(j.status.Message)
	case attempts.NodeLost:
		return j.afterNodeLost(ctx, in, out)
	case attempts.TimeLimit:
		return true, j.finish(ctx, protocol.StateStopped, nil)
	case attempts.NodeDrained, attempts.Yielded:
		reason := metrics.ReasonNodeDrained
		if out.Kind == attempts.Yielded {
			reason = metrics.ReasonPreempted
		}
		j.metrics(ctx).WithTags(map[string]string{metrics.LabelReason: reason}).Counter(metrics.JobRestartsInstrument).Inc(1)
		j.setState(ctx, protocol.StateRestarting)
		if err := j.continueAsNewIfLong(ctx, in); err != nil {
			return true, err
		}
		return false, nil
	}
	if !j.reruns(out) {
		state, errType := protocol.StateFailed, ErrTypeJobFailed
		if out.Kind == attempts.Preempted {
			state, errType = protocol.StatePreempted, ErrTypeJobPreempted
		}
		if !out.Final {
			j.status.Message = fmt.Sprintf("%s; no retries left (max_retry %d)", out.Message, j.spec.MaxRetry)
		}
		return true, j.finish(ctx, state, temporal.NewNonRetryableApplicationError(j.status.Message, errType, nil))
	}
	j.status.Restarts++
	reason := metrics.ReasonFailed
	switch {
	case out.Kind == attempts.Preempted:
		reason = metrics.ReasonPreempted
	case out.Stuck:
		reason = metrics.ReasonStuck
	}
	j.metrics(ctx).WithTags(map[string]string{metrics.LabelReason: reason}).Counter(metrics.JobRestartsInstrument).Inc(1)
	j.setState(ctx, protocol.StateRestarting)
	if err := j.continueAsNewIfLong(ctx, in); err != nil {
		return true, err
	}
	return false, nil
}

// reruns says whether another attempt follows the one that ended with out
// (see attempts.Reruns).
func (j *job) reruns(out attempts.Outcome) bool {
	return attempts.Reruns(out, attempts.Record{Restarts: j.status.Restarts, MaxRetry: j.spec.MaxRetry, NodeLosses: j.status.NodeLosses})
}

// afterNodeLost reruns a job that lost a node, without spending max_retry,
// up to attempts.MaxNodeLossReruns times.
func (j *job) afterNodeLost(ctx workflow.Context, in protocol.JobInput, out attempts.Outcome) (end bool, err error) {
	rerun := j.reruns(out)
	j.status.NodeLosses++
	if rerun {
		j.metrics(ctx).WithTags(map[string]string{metrics.LabelReason: metrics.ReasonNodeLost}).Counter(metrics.JobRestartsInstrument).Inc(1)
		j.setState(ctx, protocol.StateRestarting)
		if err := j.continueAsNewIfLong(ctx, in); err != nil {
			return true, err
		}
		return false, nil
	}
	j.status.Message = fmt.Sprintf("%s; the job lost a node %d times, more than the %d reruns allowed for node losses", out.Message, j.status.NodeLosses, attempts.MaxNodeLossReruns)
	return true, j.finish(ctx, protocol.StateFailed, temporal.NewNonRetryableApplicationError(j.status.Message, ErrTypeJobFailed, nil))
}

// Versions of the job workflow's code (workflow.GetVersion). Each lives as
// long as the upgrade window needs it (see gates.go).
const (
	// versionLearnedEstimate: a training job that completes records its
	// shape and runtime for the jobs after it to learn their estimates from
	// (see recordRuntime; learning one is in the capacity request's local
	// activity, which replays from its marker).
	versionLearnedEstimate = "job-learned-estimate"
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

// waitForCapacity queues the attempt and waits for the grant. ok is false if
// the attempt ended before it started (refused, or cancelled while waiting).
func (j *job) waitForCapacity(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 30 * time.Second, NonRetryableErrorTypes: []string{activities.ErrTypeCapacityRefused}},
		Summary:             fmt.Sprintf("queue attempt %d in %s/%s", attempt, j.spec.Region, j.spec.AllocationName),
	})
	most, least := j.spec.GangSize()
	var runLimit, runEstimate time.Duration
	if j.spec.TimeLimit > 0 {
		runLimit = max(j.spec.TimeLimit-j.runTime(workflow.Now(ctx)), time.Millisecond)
	} else if e := j.status.Estimate; e != nil {
		runEstimate = scheduler.EstimatedRunLimit(e.Runtime, j.runTime(workflow.Now(ctx)))
	}
	j.cur.request = protocol.CapacityRequest{
		Job: j.name, Attempt: attempt, Kind: j.spec.Kind, Class: j.spec.Class(), InstanceType: j.spec.InstanceType,
		Workers: most, Seq: j.seq, SubmittedAt: j.status.CreatedAt, Preemptions: j.preemptions(),
		HonorsNotice: j.honorsNotices(), Nodes: j.spec.AllowedNodes, MinWorkers: least, Workspace: j.spec.Workspace, RunLimit: runLimit,
		RunEstimate: runEstimate, User: j.spec.Author,
	}
	j.cur.phase, j.cur.grant = protocol.HoldWaiting, nil
	req := activities.RequestCapacityInput{Region: j.spec.Region, Allocation: j.spec.AllocationName, Request: j.cur.request, Learn: j.learnInput()}
	registrations := j.registrations
	var reply protocol.CapacityReply
	if err := j.requestCapacity(ctx, actx, req).Get(ctx, &reply); err != nil {
		if errors.Is(ctx.Err(), workflow.ErrCanceled) {
			return j.withdraw(ctx, attempt)
		}
		j.cur.phase = protocol.HoldNone
		var appErr *temporal.ApplicationError
		msg := err.Error()
		if errors.As(err, &appErr) {
			msg = appErr.Message()
		}
		return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Failed, Message: msg, Final: true}, false
	}
	if j.seq == 0 {
		j.seq = reply.Seq
		j.cur.request.Seq = reply.Seq
	}
	j.learned(reply.Estimate)
	// A recovering allocator that registered this job meanwhile is newer
	// than the one that answered.
	if reply.Epoch != "" && j.registrations == registrations && j.cur.grant == nil {
		j.epoch = reply.Epoch
	}
	if !reply.Granted && reply.Reason != "" && j.cur.grant == nil {
		// Show where the attempt was queued and why it waits. The job is not
		// told when its place changes; the allocator's current details and
		// `trainq status` have the live position.
		j.status.Position, j.status.Reason = reply.Position, reply.Reason
		workflow.SetCurrentDetails(ctx, j.details())
	}
	return j.awaitGrant(ctx, attempt)
}

// awaitGrant waits for the attempt's grant, a refusal, or a cancellation.
func (j *job) awaitGrant(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	for {
		// Grants arrive through takeGrant. A refusal says the allocation was
		// reconfigured and can no longer run this job; the allocator has
		// already dropped the request.
		// Every requestCheck the attempt makes sure the allocator has its
		// request (a recovered allocator may not).
		settled := func() bool { return j.cur.grant != nil || j.refusals.Len() > 0 }
		ok, err := workflow.AwaitWithTimeout(ctx, j.requestCheck, settled)
		if err == nil && !ok {
			j.checkRequest(ctx, attempt)
			continue
		}
		if j.cur.grant != nil {
			return *j.cur.grant, attempts.Outcome{}, true
		}
		if err != nil {
			return j.withdraw(ctx, attempt)
		}
		var refusal protocol.RefuseSignal
		j.refusals.ReceiveAsync(&refusal)
		if refusal.Attempt == attempt {
			j.cur.phase = protocol.HoldNone
			return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Failed, Message: refusal.Reason, Final: true}, false
		}
		// Otherwise meant for an attempt that has already ended.
	}
}

// requestCheckInterval is how long a job waits for its grant before it makes
// sure the allocator still has its request (see checkRequest).
const requestCheckInterval = 30 * time.Minute

// checkRequest asks the allocator whether it has the attempt's request and
// sends it again if not: a recovering allocator that missed this job (its
// listing lagged, the job did not answer in time) never queues it otherwise,
// and the job would wait for ever.
func (j *job) checkRequest(ctx workflow.Context, attempt int) {
	// The check is a query (10 s at most) and perhaps one signal: 20 s is
	// ample, and a check whose worker died is tried again that soon.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 20 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             fmt.Sprintf("make sure %s/%s still has attempt %d's request", j.spec.Region, j.spec.AllocationName, attempt),
	})
	in := activities.RequestCapacityInput{Region: j.spec.Region, Allocation: j.spec.AllocationName, Request: j.cur.request}
	var check activities.RequestCheck
	if err := workflow.ExecuteActivity(actx, (*activities.Activities).CheckRequest, in).Get(ctx, &check); err != nil {
		workflow.GetLogger(ctx).Warn("could not make sure the allocator has the request; asking again later", "attempt", attempt, "error", err)
		return
	}
	if check.Resent {
		workflow.GetLogger(ctx).Warn("the allocator did not have the request; sent it again", "attempt", attempt)
	}
}

// requestCapacity sends the attempt's capacity request as a local activity:
// a signal-with-start from the workflow's own worker, without a round trip
// through the server's activity queue. The request is a signal the allocator
// takes once per attempt, so a local activity run again after a worker crash
// does no harm.
func (j *job) requestCapacity(ctx, actx workflow.Context, req activities.RequestCapacityInput) workflow.Future {
	opts := workflow.GetActivityOptions(actx)
	req.Brief = true
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy, Summary: opts.Summary,
	})
	// By name: the replayer, which registers no activities, then replays
	// the local activity from its marker (a method expression would need
	// the registration).
	return workflow.ExecuteLocalActivity(lctx, activities.RequestCapacityName, req)
}

// releaseTo names the allocator the node activities report releases to: the
// node activity that sees a worker gone reports its release a workflow task
// before the job could.
func (j *job) releaseTo() string {
	return j.allocator
}

// takeGrant takes in a grant signal. A grant counts only for the attempt
// that waits for it, and only from the allocator epoch the job answers to:
// a grant of an allocator that has since been replaced by a recovered one
// was never known to its successor, so using it would double-book GPUs.
func (j *job) takeGrant(ctx workflow.Context, g protocol.GrantSignal) {
	switch {
	case j.cur.phase != protocol.HoldWaiting || g.Attempt != j.status.Attempt:
		// A grant for an older attempt arrived late; that capacity was
		// already released, so it is ignored.
		return
	case g.Epoch != "" && j.epoch != "" && g.Epoch != j.epoch && !j.movesToEpoch(g.Epoch):
		workflow.GetLogger(ctx).Warn("ignoring a grant of a replaced allocator", "attempt", g.Attempt, "grant_epoch", g.Epoch, "epoch", j.epoch)
		return
	}
	if g.Epoch != "" {
		j.epoch = g.Epoch
	}
	if j.seq == 0 && g.Seq != 0 {
		// A rerun asks with it, to keep its place in the queue.
		j.seq, j.cur.request.Seq = g.Seq, g.Seq
	}
	j.cur.grant, j.cur.phase = &g, protocol.HoldHolding
}

// movesToEpoch says whether a grant or preemption of epoch e, which is not
// the job's, comes from a newer allocator state: the allocator that drew e
// knows the job (it grants only requests it has, and preempts only holds it
// has), so the job answers to it from now on. Its grant could otherwise
// arrive just before the capacity reply that names the new epoch, be
// ignored, and leave the job waiting while the allocator holds its GPUs. A
// message of an older epoch is a dead allocator's and stays ignored.
func (j *job) movesToEpoch(e string) bool {
	return protocol.NewerEpoch(e, j.epoch)
}

// hold says what the job holds or waits for (the register update's answer).
func (j *job) hold() protocol.JobHold {
	h := protocol.JobHold{Job: j.name, Phase: j.cur.phase, Request: j.cur.request}
	if j.cur.phase != protocol.HoldHolding || j.cur.grant == nil {
		return h
	}
	h.Placement = j.cur.grant.Placement
	if rec := j.current(); rec.StartedAt != nil {
		h.StartedAt = *rec.StartedAt
	}
	h.Releasing = j.cur.stopping
	for _, p := range j.cur.grant.Placement {
		if j.cur.released[p.Worker] {
			h.Released = append(h.Released, p.Worker)
		}
	}
	return h
}

// withdraw tells the allocator that this attempt holds nothing any more: it
// was cancelled while pending.
func (j *job) withdraw(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.SignalExternalWorkflow(dctx, j.allocator, "", protocol.SignalWithdraw,
		protocol.WithdrawSignal{Job: j.name, Attempt: attempt}).Get(dctx, nil)
	j.cur.phase, j.cur.grant = protocol.HoldNone, nil
	return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Cancelled, Message: "stopped by the user while pending"}, false
}

func (j *job) nodeOptions(ctx workflow.Context, node, summary string, o workflow.ActivityOptions) workflow.Context {
	o.TaskQueue = protocol.NodeTaskQueue(node)
	o.Summary = summary
	// A node's agent that does not pick up its work within the node
	// timeout is lost: the activity fails instead of waiting for ever.
	o.ScheduleToStartTimeout = j.cur.nodeTimeout
	return workflow.WithActivityOptions(ctx, o)
}

// nodeLost is the outcome of an attempt whose node's agent did not answer.
func (j *job) nodeLost(node string) attempts.Outcome {
	j.cur.lostNodes[node] = true
	return attempts.NodeLostAfter(node, j.cur.nodeTimeout)
}

// isNodeTimeout tells whether an activity failed because no agent of its
// node picked it up within the node timeout.
func isNodeTimeout(err error) bool {
	var timeoutErr *temporal.TimeoutError
	return errors.As(err, &timeoutErr) && timeoutErr.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// startWorkers starts every worker of the gang. Starts are short and are
// never abandoned half-way, even on cancellation: a start still in flight
// could otherwise launch a worker after it was stopped. A preemption or
// cancellation that arrives meanwhile is seen by watch.
func (j *job) startWorkers(ctx workflow.Context, attempt int, grant protocol.GrantSignal) (attempts.Outcome, bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	short := workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}}
	// The start heartbeats: an agent that dies mid-start is noticed after
	// the heartbeat timeout, not the start's 2 minutes (the retry then
	// waits at most node_timeout for the agent before the node counts as lost).
	startOptions := short
	startOptions.HeartbeatTimeout = 15 * time.Second
	rv, out, ok := j.rendezvous(dctx, attempt, grant, short)
	if !ok {
		return out, false
	}
	notebook := j.spec.Kind == scheduler.KindNotebook
	var starts []workflow.Future
	for _, p := range grant.Placement {
		spec := cluster.WorkerSpec{
			// The grant's size: n_workers, or for an elastic gang what fitted.
			ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker}, Workers: len(grant.Placement),
			Node: p.Node, GPUs: p.GPUs, Type: j.spec.Type, Script: j.spec.Script, BaseImage: j.spec.BaseImage,
			ProcessesPerWorker: j.spec.ProcessesPerWorker, Env: j.spec.EnvVariables, Flags: j.spec.Flags,
			MasterAddr: rv.Addr, MasterPort: rv.Port, CheckpointDir: j.spec.CheckpointDir, Notebook: notebook,
			CondaEnv: j.spec.CondaEnv, ShmGB: j.spec.ShmGB(), NoInternet: j.spec.Internet != nil && !*j.spec.Internet,
			ElasticMinWorkers: j.spec.ElasticMinWorkers, ElasticMaxWorkers: j.spec.ElasticMaxWorkers, ElasticMaxRestarts: j.spec.ElasticMaxRestarts,
		}
		summary := fmt.Sprintf("start worker %d on %s (GPUs %v)", p.Worker, p.Node, p.GPUs)
		starts = append(starts, workflow.ExecuteActivity(j.nodeOptions(dctx, p.Node, summary, startOptions), (*activities.Activities).StartWorker, spec))
	}
	var failure *attempts.Outcome
	for i, f := range starts {
		var st cluster.WorkerStatus
		err := f.Get(dctx, &st)
		switch {
		case err == nil:
			if st.URL != "" {
				j.current().URL = st.URL // a Jupyter server says where it serves
			}
		case isNodeTimeout(err):
			lost := j.nodeLost(grant.Placement[i].Node)
			if failure == nil || failure.Kind != attempts.NodeLost {
				failure = &lost
			}
		case isGPUsBusy(err):
			// The grant's GPUs are not really free: the allocator's view
			// is wrong (a reset allocator, a worker it never knew of).
			// Nothing was started there; the node is reported with the
			// release, so the allocator fences it and its agent says who
			// runs there, and this attempt reruns like one that lost a node.
			lost := j.nodeLost(grant.Placement[i].Node)
			j.cur.busyNodes[grant.Placement[i].Node] = true
			lost.Message = fmt.Sprintf("worker %d could not start: %s; the node is fenced until its agent says who uses them",
				grant.Placement[i].Worker, errorText(err))
			if failure == nil || failure.Kind != attempts.NodeLost {
				failure = &lost
			}
		case failure == nil:
			failure = &attempts.Outcome{Kind: attempts.Failed, Message: fmt.Sprintf("worker %d could not start on %s: %s", grant.Placement[i].Worker, grant.Placement[i].Node, errorText(err))}
		}
	}
	if failure != nil {
		return *failure, false
	}
	return attempts.Outcome{}, true
}

// rendezvous picks the attempt's MASTER_ADDR and MASTER_PORT on worker 0's
// node. A one-worker attempt leaves them empty: its StartWorker picks them on
// its own node, saving a round trip.
func (j *job) rendezvous(ctx workflow.Context, attempt int, grant protocol.GrantSignal, o workflow.ActivityOptions) (activities.Rendezvous, attempts.Outcome, bool) {
	var rv activities.Rendezvous
	if len(grant.Placement) == 1 {
		return rv, attempts.Outcome{}, true
	}
	master := grant.Placement[0].Node
	err := workflow.ExecuteActivity(j.nodeOptions(ctx, master, "pick MASTER_ADDR and MASTER_PORT on "+master, o),
		(*activities.Activities).Rendezvous, activities.RendezvousInput{Job: j.name, Attempt: attempt}).Get(ctx, &rv)
	if isNodeTimeout(err) {
		return rv, j.nodeLost(master), false
	}
	if err != nil {
		return rv, attempts.Outcome{Kind: attempts.Failed, Message: "could not pick a rendezvous address: " + errorText(err)}, false
	}
	return rv, attempts.Outcome{}, true
}

// addInterrupts makes sel wake up for a preemption of this attempt or a
// cancellation, and hands them to on. When the attempt's stops give notices
// (noticeStops) it goes on after a cancellation while its workers act on
// their notice, and a closed Done channel is ready at every Select: the
// cancellation then comes through a channel that carries it once.
func (j *job) addInterrupts(ctx workflow.Context, sel workflow.Selector, attempt int, noticeStops bool,
	watchEnded workflow.ReceiveChannel, on func(attempts.Event)) {
	sel.AddReceive(j.preempts, func(c workflow.ReceiveChannel, _ bool) {
		var p protocol.PreemptSignal
		c.Receive(ctx, &p)
		if p.Attempt != attempt {
			return // meant for an attempt that has already ended
		}
		if p.Epoch != "" && j.epoch != "" && p.Epoch != j.epoch {
			if !j.movesToEpoch(p.Epoch) {
				return // from an allocator that has since been replaced
			}
			j.epoch = p.Epoch
		}
		on(attempts.Preempt{Preemptor: p.Preemptor, Reason: p.Reason, Drain: p.Drain, Loan: p.Loan, Notice: p.Notice})
	})
	if !noticeStops {
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { on(attempts.Cancel{}) })
		return
	}
	once := workflow.NewBufferedChannel(ctx, 1)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(gctx workflow.Context) {
		wait := workflow.NewSelector(gctx)
		wait.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { once.Send(gctx, true) })
		wait.AddReceive(watchEnded, func(workflow.ReceiveChannel, bool) {})
		wait.Select(gctx)
	})
	sel.AddReceive(once, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(dctx, nil)
		on(attempts.Cancel{})
	})
}

// watch runs the attempt while its workers run: it turns preemptions, a
// cancellation, the time limit, notices' deadlines, autoshutdown and each
// worker's watch into events for the attempt's rules (attempts.Running) and
// carries out the commands they return, in order, until the attempt ends.
func (j *job) watch(ctx workflow.Context, attempt int, grant protocol.GrantSignal) attempts.Outcome {
	run := attempts.NewRunning(workersOf(grant), grant.Notice, j.cur.nodeTimeout, j.spec.Health)
	// The attempt's own stops (a cancel, its time limit, stuck) give its
	// workers a notice first when the grant gives one.
	noticeStops := grant.Notice > 0
	base := ctx
	if noticeStops {
		// A cancellation must not cancel the watches: they see the workers
		// exit on their notice.
		base, _ = workflow.NewDisconnectedContext(ctx)
	}
	wctx, stopWatching := workflow.WithCancel(base)
	defer stopWatching()
	var ended []attempts.WatchEnded
	sel := workflow.NewSelector(ctx)
	releaseTo := j.releaseTo()
	registrations := j.registrations
	watchWorker := func(p scheduler.WorkerPlacement, judges bool) {
		in := activities.WatchWorkerInput{WorkerID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker}, ReleaseTo: releaseTo}
		if j.spec.Health != nil && judges {
			// Worker 0's watch judges the whole attempt: the job is stuck
			// only when none of its workers writes (often only rank 0 logs).
			in.LogPeriod, in.Workers = j.spec.Health.LogPeriod, len(grant.Placement)
		}
		worker := p.Worker
		f := workflow.ExecuteActivity(j.nodeOptions(wctx, p.Node, fmt.Sprintf("watch worker %d on %s", p.Worker, p.Node), watchOptions), (*activities.Activities).WatchWorker, in)
		sel.AddFuture(f, func(f workflow.Future) {
			var st cluster.WorkerStatus
			err := f.Get(ctx, &st)
			ended = append(ended, watchEnd(worker, st, err, errors.Is(ctx.Err(), workflow.ErrCanceled)))
		})
	}
	for _, p := range grant.Placement {
		watchWorker(p, p.Worker == 0)
	}
	var on func(attempts.Event)
	execute := func(cmds []attempts.Command) {
		for _, c := range cmds {
			switch c := c.(type) {
			case attempts.GiveNotice:
				j.giveNotice(wctx, sel, attempt, grant, c, func() { on(attempts.DeadlinePassed{}) })
			case attempts.Release:
				// The worker's processes are gone: its capacity is free
				// now, whatever the other workers do.
				j.releaseAfterNode(ctx, attempt, c.Worker, c.Reported, registrations)
			case attempts.WatchForExit:
				for _, p := range grant.Placement {
					if p.Worker == c.Worker {
						watchWorker(p, false)
					}
				}
			case attempts.MarkNodeLost:
				j.cur.lostNodes[c.Node] = true
			case attempts.NotifyStuck:
				j.notifyStuck(ctx)
			case attempts.ExitedOnNotice:
				now := workflow.Now(ctx)
				j.current().ExitedOnNoticeAt = &now
			}
		}
	}
	on = func(e attempts.Event) { execute(run.On(workflow.Now(ctx), e)) }
	j.addInterrupts(ctx, sel, attempt, noticeStops, wctx.Done(), on)
	j.addTimeLimit(wctx, sel, on)
	j.addAutoshutdown(wctx, sel, attempt, grant, on)
	for !run.Done {
		sel.Select(ctx)
		if run.Done || len(ended) == 0 {
			continue
		}
		last := ended[len(ended)-1]
		ended = ended[:len(ended)-1]
		on(last)
	}
	return run.Out
}

// workersOf lists the grant's workers and their nodes for the attempt's rules.
func workersOf(grant protocol.GrantSignal) []attempts.Worker {
	ws := make([]attempts.Worker, 0, len(grant.Placement))
	for _, p := range grant.Placement {
		ws = append(ws, attempts.Worker{ID: p.Worker, Node: p.Node})
	}
	return ws
}

// watchEnd says how a worker's watch ended, for the attempt's rules;
// cancelled says the job was being cancelled then.
func watchEnd(worker int, st cluster.WorkerStatus, err error, cancelled bool) attempts.WatchEnded {
	w := attempts.WatchEnded{Worker: worker, Cancelled: cancelled}
	switch {
	case err == nil:
		w.End, w.Code, w.Reason, w.Reported = attempts.WorkerGone, st.ExitCode, st.Reason, st.ReleaseReported
		return w
	case isNodeTimeout(err):
		w.End = attempts.NodeSilent
	case isStuck(err):
		w.End = attempts.Silent
	case isNodeLost(err):
		w.End = attempts.NodeLostTrack
	default:
		w.End = attempts.WatchFailed
	}
	w.Error = errorText(err)
	return w
}

// watchOptions are a worker watch's: it lasts as long as the worker.
var watchOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * 365 * 24 * time.Hour, // notebooks run until stopped
	HeartbeatTimeout:    15 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"WorkerNotFound"}},
}

// giveNotice tells the attempt's running workers that they are to be
// stopped, why, and by when they must have exited (the notice file, see
// activities.NoticeWorker), and makes sel end the attempt at that deadline,
// when whatever still runs is stopped as usual (sel calls atDeadline).
func (j *job) giveNotice(ctx workflow.Context, sel workflow.Selector, attempt int, grant protocol.GrantSignal,
	g attempts.GiveNotice, atDeadline func()) {
	reason, by, d := g.Reason, g.By, g.Notice
	now := workflow.Now(ctx)
	deadline := now.Add(d)
	rec := j.current()
	rec.NoticeDeadline = &deadline
	rec.NoticeReason, rec.NoticedAt = reason, &now
	notice := protocol.WorkerNotice{Reason: reason, Deadline: deadline, Job: j.name, Attempt: attempt, By: by}
	opts := workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}}
	// Beside the attempt's pending watches, at most what JobActivityBudget
	// leaves is in flight (an attempt of MaxNWorkers workers would otherwise
	// pass TemporalPendingActivitiesLimit); the stops wait for them (see
	// stopAndRelease), so notices and stops are never pending together.
	atOnce := max(jobActivityBudget-len(grant.Placement), 1)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	j.cur.noticing = true
	workflow.Go(dctx, func(gctx workflow.Context) {
		defer func() { j.cur.noticing = false }()
		for _, pl := range grant.Placement {
			if j.cur.released[pl.Worker] {
				continue
			}
			if workflow.Await(gctx, func() bool { return j.cur.notices < atOnce }) != nil {
				return
			}
			in := activities.NoticeWorkerInput{ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: pl.Worker}, Notice: notice, Signal: grant.NoticeSignal}
			f := workflow.ExecuteActivity(j.nodeOptions(gctx, pl.Node, fmt.Sprintf("tell worker %d on %s %s (deadline in %s)", pl.Worker, pl.Node, noticeSummary(reason), d), opts),
				(*activities.Activities).NoticeWorker, in)
			j.cur.notices++
			worker := pl.Worker
			workflow.Go(gctx, func(fctx workflow.Context) {
				err := f.Get(fctx, nil)
				j.cur.notices--
				if err != nil {
					workflow.GetLogger(fctx).Warn("could not give a worker its notice; it is stopped at the deadline", "worker", worker, "error", err)
				}
			})
		}
	})
	summary := "the preemption notice's deadline"
	if reason != protocol.NoticeReasonPreempted {
		summary = "the notice's deadline: " + noticeSummary(reason)
	}
	timer := workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) == nil {
			atDeadline()
		}
	})
}

// noticeSummary names a notice's reason in the activity and timer
// summaries people read in the Web UI.
func noticeSummary(reason string) string {
	switch reason {
	case protocol.NoticeReasonPreempted:
		return "it is preempted"
	case protocol.NoticeReasonCancelled:
		return "the job is cancelled"
	case protocol.NoticeReasonTimeLimit:
		return "the job reached its time limit"
	case protocol.NoticeReasonStuck:
		return "the job is stuck"
	}
	return reason
}

// addTimeLimit makes sel wake up when the job has run for its stop_timer
// (JobSpec.TimeLimit), counting every attempt's time since its start. A job
// without one arms nothing, so histories from before the field replay as
// they were.
func (j *job) addTimeLimit(ctx workflow.Context, sel workflow.Selector, on func(attempts.Event)) {
	limit := j.spec.TimeLimit
	if limit <= 0 {
		return
	}
	left := max(limit-j.runTime(workflow.Now(ctx)), 0)
	minutes := int(limit / time.Minute)
	timer := workflow.NewTimerWithOptions(ctx, left, workflow.TimerOptions{Summary: fmt.Sprintf("stop_timer: %d minutes of running", minutes)})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) != nil {
			return // the watch ended first
		}
		on(attempts.TimeLimitReached{Minutes: minutes})
	})
}

// runTime is how long the job's attempts have run, up to now.
func (j *job) runTime(now time.Time) time.Duration {
	var d time.Duration
	for _, a := range j.status.Attempts {
		switch {
		case a.StartedAt == nil:
		case a.EndedAt != nil:
			d += a.EndedAt.Sub(*a.StartedAt)
		default:
			d += now.Sub(*a.StartedAt)
		}
	}
	return d
}

// isNodeLost tells whether a watch ended because the worker's node lost
// track of it (a pod stuck in phase Unknown).
func isNodeLost(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeNodeLost
}

// isGPUsBusy tells whether a start found its GPUs used by a live worker
// of another job or attempt.
func isGPUsBusy(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeGPUsBusy
}

func isStuck(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeWorkerStuck
}

// notifyStuck reports a stuck job as an event when its health_params ask
// for it (sub_actions [notify]): a warning in trainq-worker's log, which
// names the job, and the jobs-stuck counter operators can alert on.
func (j *job) notifyStuck(ctx workflow.Context) {
	if j.spec.Health == nil || !j.spec.Health.Notify {
		return
	}
	workflow.GetLogger(ctx).Warn("job stuck: no worker wrote a log line for its health_params.log_period", "job", j.name,
		"log_period", j.spec.Health.LogPeriod, "action", j.spec.Health.Action, "workspace", j.spec.Workspace)
	j.metrics(ctx).Counter(metrics.JobsStuckInstrument).Inc(1)
}

// release reports one stopped worker to the allocator. The first report of
// an attempt also marks the job as stopping, so that the capacity its other
// workers still hold counts as releasing, not free.
func (j *job) release(ctx workflow.Context, attempt, worker int) {
	j.releaseWorkers(ctx, attempt, []int{worker}, nil)
}

// releaseAfterNode takes in a worker the node activity saw gone. When that
// activity says it reported the release to the allocator itself, the job
// only records it; otherwise, or when a
// recovering allocator registered the job since the activity was
// scheduled (registrations then moved: the report may have gone to the
// allocator it replaced, and the register answer said the worker still
// held its capacity), the job reports the release, which the allocator
// applies once.
func (j *job) releaseAfterNode(ctx workflow.Context, attempt, worker int, reported bool, registrations int) {
	if !reported || j.registrations != registrations {
		j.release(ctx, attempt, worker)
		return
	}
	j.markReleased(ctx, attempt, worker)
	j.cur.stopping = true
}

// markReleased records that a worker's capacity is released, and when (the
// attempt's Released, which the UI's timeline draws worker by worker).
func (j *job) markReleased(ctx workflow.Context, attempt, worker int) {
	j.cur.released[worker] = true
	for i := len(j.status.Attempts) - 1; i >= 0; i-- {
		if a := &j.status.Attempts[i]; a.Number == attempt {
			a.Released = append(a.Released, protocol.WorkerRelease{Worker: worker, At: workflow.Now(ctx).UTC()})
			return
		}
	}
}

// releaseLost reports workers whose node's agent did not answer: nobody can
// confirm they stopped, so the allocator fences their node until its agent
// is back and has stopped them.
func (j *job) releaseLost(ctx workflow.Context, attempt int, workers []int, node string) {
	j.releaseWorkers(ctx, attempt, workers, []string{node})
}

func (j *job) releaseWorkers(ctx workflow.Context, attempt int, workers []int, lostNodes []string) {
	workers = slices.DeleteFunc(slices.Clone(workers), func(w int) bool { return j.cur.released[w] })
	if len(workers) == 0 {
		return
	}
	for _, w := range workers {
		j.markReleased(ctx, attempt, w)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	s := protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Workers: workers, Stopping: !j.cur.stopping, LostNodes: lostNodes}
	for _, node := range lostNodes {
		if j.cur.busyNodes[node] {
			s.GPUsBusy = append(s.GPUsBusy, node)
		}
	}
	j.cur.stopping = true
	j.sendRelease(dctx, s)
}

// jobActivityBudget is protocol.JobActivityBudget; tests lower it to see the
// bound at work with fewer workers than the test environment runs in a second.
var jobActivityBudget = protocol.JobActivityBudget

// sentRelease is a release signal sent to the allocator and its delivery.
type sentRelease struct {
	signal    protocol.ReleaseSignal
	delivered workflow.Future
}

func (j *job) sendRelease(ctx workflow.Context, s protocol.ReleaseSignal) {
	j.cur.signals = append(j.cur.signals, sentRelease{signal: s,
		delivered: workflow.SignalExternalWorkflow(ctx, j.allocator, "", protocol.SignalRelease, s)})
}

// deliverRelease waits until the allocator has r. The server refuses a
// signal to a run that has taken its TemporalSignalsPerRun (an allocator
// that recovers while releases pile up): dropping it would leave the
// attempt's capacity held for ever, so it is sent again, backing off, until
// the allocator takes it. An allocator that does not exist needs no
// release: the one started next recovers from the jobs.
func (j *job) deliverRelease(ctx workflow.Context, r sentRelease) {
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		err := r.delivered.Get(ctx, nil)
		if err == nil {
			return
		}
		var gone *temporal.UnknownExternalWorkflowExecutionError
		if errors.As(err, &gone) {
			workflow.GetLogger(ctx).Warn("could not report a release to the allocator", "error", err)
			return
		}
		workflow.GetLogger(ctx).Warn("the allocator refused a release; sending it again", "workers", r.signal.Workers, "in", delay, "error", err)
		if workflow.NewTimerWithOptions(ctx, delay, workflow.TimerOptions{Summary: "report a release again"}).Get(ctx, nil) != nil {
			return
		}
		r.delivered = workflow.SignalExternalWorkflow(ctx, j.allocator, "", protocol.SignalRelease, r.signal)
	}
}

// stopAndRelease stops the attempt's remaining workers and releases their
// capacity worker by worker, as each one is gone. Workers on a lost node
// are released as lost at once. It runs even after cancellation, and
// returns once the allocator has every release.
func (j *job) stopAndRelease(ctx workflow.Context, attempt int, grant protocol.GrantSignal) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	// Notices still in flight finish first where stops beside them could
	// pass the pending-activities budget (a job without notices waits for
	// nothing). An attempt of up to a third of the budget has room for its
	// watches, notices and stops together: a slow notice must not put off
	// the deadline's stops.
	if (j.cur.notices > 0 || j.cur.noticing) && 3*len(grant.Placement) > jobActivityBudget {
		_ = workflow.Await(dctx, func() bool { return j.cur.notices == 0 && !j.cur.noticing })
	}
	if !j.cur.stopping {
		j.cur.stopping = true
		j.sendRelease(dctx, protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Stopping: true})
	}
	grace := grant.StopGracePeriod
	releaseTo := j.releaseTo()
	registrations := j.registrations
	sel := workflow.NewSelector(dctx)
	pending := 0
	// The watches of the attempt's workers may still be pending (cancelled,
	// not yet acknowledged) while the stops run: with MaxNWorkers workers
	// both would pass TemporalPendingActivitiesLimit, so the stops in flight
	// are bounded to what JobActivityBudget leaves, the next one scheduled as
	// each ends. An attempt of up to half the budget stops all at once.
	stopsAtOnce := max(jobActivityBudget-len(grant.Placement), 1)
	var queued []func()
	var stop func(worker int, node string)
	stop = func(worker int, node string) {
		if pending >= stopsAtOnce {
			queued = append(queued, func() { stop(worker, node) })
			return
		}
		in := activities.StopWorkerInput{ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: worker}, Grace: grace, ReleaseTo: releaseTo}
		actx := j.nodeOptions(dctx, node, fmt.Sprintf("stop worker %d on %s (SIGTERM, SIGKILL after %s)", worker, node, grace), workflow.ActivityOptions{
			StartToCloseTimeout: grace + time.Minute,
			HeartbeatTimeout:    15 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
		})
		pending++
		sel.AddFuture(workflow.ExecuteActivity(actx, (*activities.Activities).StopWorker, in), func(f workflow.Future) {
			pending--
			if len(queued) > 0 {
				next := queued[0]
				queued = queued[1:]
				next()
			}
			var st cluster.WorkerStatus
			if err := f.Get(dctx, &st); err != nil {
				// Retries end only when the node's agent stopped answering
				// (or the stop cannot be expressed): the worker may still
				// run, so its node is fenced rather than its GPUs freed.
				workflow.GetLogger(dctx).Error("could not stop worker; fencing its node", "worker", worker, "node", node, "error", err)
				j.cur.lostNodes[node] = true
				j.releaseLost(dctx, attempt, []int{worker}, node)
				return
			}
			j.releaseAfterNode(dctx, attempt, worker, st.ReleaseReported, registrations)
		})
	}
	for _, p := range grant.Placement {
		if j.cur.released[p.Worker] {
			continue
		}
		if j.cur.lostNodes[p.Node] {
			j.releaseLost(dctx, attempt, []int{p.Worker}, p.Node)
			continue
		}
		stop(p.Worker, p.Node)
	}
	for pending > 0 {
		sel.Select(dctx)
	}
	for _, r := range j.cur.signals {
		j.deliverRelease(dctx, r)
	}
}

// setState records a state change in the status, the search attributes and
// the Web UI's current details.
func (j *job) setState(ctx workflow.Context, s protocol.JobState) {
	j.status.State = s
	// The place in the queue is known only from the allocator's reply to
	// this attempt's request (see waitForCapacity).
	j.status.Position, j.status.Reason = 0, ""
	err := workflow.UpsertTypedSearchAttributes(ctx,
		protocol.KeyState.ValueSet(string(s)),
		protocol.KeyAttempt.ValueSet(int64(j.status.Attempt)),
	)
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not update search attributes", "error", err)
	}
	workflow.SetCurrentDetails(ctx, j.details())
}

func (j *job) details() string {
	var b strings.Builder
	st := j.status
	fmt.Fprintf(&b, "## %s · attempt %d · restarts %d/%d\n\n", st.State, st.Attempt, st.Restarts, st.MaxRetry)
	if st.Message != "" {
		fmt.Fprintf(&b, "%s\n\n", st.Message)
	}
	if st.Warning != "" {
		fmt.Fprintf(&b, "**Warning**: %s\n\n", st.Warning)
	}
	if st.State == protocol.StatePending && st.Reason != "" {
		queued := ""
		if len(st.Attempts) > 0 {
			queued = " at " + stamp(&st.Attempts[len(st.Attempts)-1].QueuedAt)
		}
		if st.Position > 0 {
			fmt.Fprintf(&b, "**Queue position %d** when queued%s: %s\n\n", st.Position, queued, st.Reason)
		} else {
			fmt.Fprintf(&b, "**Waiting** since%s: %s\n\n", queued, st.Reason)
		}
		fmt.Fprintf(&b, "Live position: the current details of %s, or `trainq status %s`; expected start: `trainq status --eta %s`.\n\n", j.allocator, j.name, j.name)
	}
	if st.Estimate != nil && !st.State.Terminal() {
		fmt.Fprintf(&b, "**Runtime estimate** %s.\n\n", st.Estimate)
	}
	if len(st.Attempts) > 0 {
		if p := st.Attempts[len(st.Attempts)-1].Placement; len(p) > 0 && !st.State.Terminal() {
			gpus := 0
			for _, w := range p {
				gpus += len(w.GPUs)
			}
			nodes := "nodes"
			if len(p) == 1 {
				nodes = "node"
			}
			fmt.Fprintf(&b, "Placement: %s (%d GPUs on %d %s)\n\n", scheduler.PlacementText(p), gpus, len(p), nodes)
		}
	}
	b.WriteString("| attempt | queued | started | ended | why it ended | preemptor |\n|---|---|---|---|---|---|\n")
	for _, a := range st.Attempts {
		pre := ""
		if a.Preemptor != nil {
			pre = fmt.Sprintf("%s (%s %s)", a.Preemptor.Job, a.Preemptor.Class, a.Preemptor.Kind)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", a.Number, stamp(&a.QueuedAt), stamp(a.StartedAt), stamp(a.EndedAt), a.EndReason, pre)
	}
	return b.String()
}

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05")
}

func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "timed out: " + timeoutErr.Error()
	}
	return err.Error()
}

// preemptions counts the job's attempts that ended preempted. The request
// carries it, so that the policy's limit on preemptions of one job holds
// even after the allocator has forgotten the job (a recovery, or a long wait).
// honorsNotices says whether the job honoured every preemption notice it
// was given, and was given at least one: each such attempt saved a
// checkpoint within the notice's window and its workers exited before the
// deadline. The policy then counts the job as losing nothing when preempted
// (scheduler.Request.HonorsNotice).
func (j *job) honorsNotices() bool {
	given := false
	for _, a := range j.status.Attempts {
		if a.Preemptor == nil || a.NoticeDeadline == nil {
			continue
		}
		if !a.HonouredNotice() || a.ExitedOnNoticeAt == nil {
			return false
		}
		given = true
	}
	return given
}

func (j *job) preemptions() int {
	n := 0
	for _, a := range j.status.Attempts {
		if a.Preemptor != nil {
			n++
		}
	}
	return n
}
