// Package workflows holds trainq's two durable workflows: JobWorkflow, one per
// training job or Jupyter server, and AllocatorWorkflow, one per allocation.
package workflows

import (
	"errors"
	"fmt"
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

// Error types a job workflow ends with.
const (
	ErrTypeJobFailed    = "JobFailed"
	ErrTypeJobPreempted = "JobPreempted"
	ErrTypeBadJob       = "BadJob"
)

// How one attempt ended.
type outcomeKind int

const (
	outcomeCompleted outcomeKind = iota
	outcomeFailed
	outcomePreempted
	outcomeCancelled
)

type outcome struct {
	kind      outcomeKind
	message   string
	exitCode  *int
	preemptor *scheduler.Preemptor
	// final means a rerun cannot help (the allocation refused the job).
	final bool
}

// job is the state of one job workflow.
type job struct {
	name      string
	spec      protocol.JobSpec
	status    protocol.JobStatus
	seq       int64
	grants    workflow.ReceiveChannel
	preempts  workflow.ReceiveChannel
	refusals  workflow.ReceiveChannel
	allocator string
	// released marks the workers of the current attempt whose capacity was
	// given back; releases are reported as each worker stops.
	released map[int]bool
	stopping bool
	signals  []workflow.Future
}

// JobWorkflow runs one training job or Jupyter server: it asks the
// allocator for capacity, starts the workers on the granted nodes, watches
// them, and reruns the job after a failure or a preemption while max_retry
// allows. Cancelling the workflow stops the job (state Stopped).
func JobWorkflow(ctx workflow.Context, in protocol.JobInput) (*protocol.JobStatus, error) {
	j := &job{name: in.Name, spec: in.Spec}
	j.status = protocol.JobStatus{
		JobName: in.Name, State: protocol.StatePending, Kind: in.Spec.Kind,
		Priority: in.Spec.PriorityClass, Region: in.Spec.Region, Allocation: in.Spec.AllocationName,
		InstanceType: in.Spec.InstanceType, NWorkers: in.Spec.NWorkers, MaxRetry: in.Spec.MaxRetry,
		CreatedAt: workflow.GetInfo(ctx).WorkflowStartTime, Spec: in.Spec, Attempts: []protocol.AttemptRecord{},
	}
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

	for attempt := 1; ; attempt++ {
		j.status.Attempt = attempt
		now := workflow.Now(ctx)
		j.status.Attempts = append(j.status.Attempts, protocol.AttemptRecord{Number: attempt, QueuedAt: now})
		if j.status.PendingAt == nil {
			j.status.PendingAt = &now
		}
		j.setState(ctx, protocol.StatePending)

		out := j.runAttempt(ctx, attempt)

		ended := workflow.Now(ctx)
		j.current().EndedAt = &ended

		switch out.kind {
		case outcomeCompleted:
			return &j.status, j.finish(ctx, protocol.StateCompleted, nil)
		case outcomeCancelled:
			_ = j.finish(ctx, protocol.StateStopped, nil)
			return &j.status, temporal.NewCanceledError(j.status.Message)
		}
		if out.final || j.status.Restarts >= j.spec.MaxRetry {
			state, errType := protocol.StateFailed, ErrTypeJobFailed
			if out.kind == outcomePreempted {
				state, errType = protocol.StatePreempted, ErrTypeJobPreempted
			}
			if !out.final {
				j.status.Message = fmt.Sprintf("%s; no retries left (max_retry %d)", out.message, j.spec.MaxRetry)
			}
			return &j.status, j.finish(ctx, state, temporal.NewNonRetryableApplicationError(j.status.Message, errType, nil))
		}
		j.status.Restarts++
		reason := metrics.ReasonFailed
		if out.kind == outcomePreempted {
			reason = metrics.ReasonPreempted
		}
		j.metrics(ctx).WithTags(map[string]string{metrics.LabelReason: reason}).Counter(metrics.JobRestartsInstrument).Inc(1)
		j.setState(ctx, protocol.StateRestarting)
	}
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
func (j *job) noteOutcome(out outcome) {
	rec := j.current()
	rec.EndReason, rec.ExitCode, rec.Preemptor = out.message, out.exitCode, out.preemptor
	if out.preemptor != nil {
		j.status.Preemptors = append(j.status.Preemptors, *out.preemptor)
	}
	j.status.Message = out.message
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
func (j *job) runAttempt(ctx workflow.Context, attempt int) outcome {
	grant, out, ok := j.waitForCapacity(ctx, attempt)
	if !ok {
		j.noteOutcome(out)
		return out
	}
	j.released, j.stopping, j.signals = map[int]bool{}, false, nil
	rec := j.current()
	now := workflow.Now(ctx)
	rec.StartedAt, rec.Placement = &now, grant.Placement
	j.setState(ctx, protocol.StateStarting)

	out, started := j.startWorkers(ctx, attempt, grant)
	if errors.Is(ctx.Err(), workflow.ErrCanceled) {
		// Cancelled while starting: whatever did start is stopped below.
		out = outcome{kind: outcomeCancelled, message: "stopped by the user"}
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
	// while, and the user wants to see the preemptor meanwhile.
	j.noteOutcome(out)
	switch {
	case out.kind == outcomeCompleted:
		j.setState(ctx, protocol.StateCompleting)
	case out.kind != outcomeCancelled && j.status.Restarts < j.spec.MaxRetry:
		j.setState(ctx, protocol.StateRestarting)
	default:
		j.setState(ctx, protocol.StateStopping)
	}
	j.stopAndRelease(ctx, attempt, grant)
	return out
}

// waitForCapacity queues the attempt and waits for the grant. ok is false if
// the attempt ended before it started (refused, or cancelled while waiting).
func (j *job) waitForCapacity(ctx workflow.Context, attempt int) (protocol.GrantSignal, outcome, bool) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 30 * time.Second, NonRetryableErrorTypes: []string{activities.ErrTypeCapacityRefused}},
		Summary:             fmt.Sprintf("queue attempt %d in %s/%s", attempt, j.spec.Region, j.spec.AllocationName),
	})
	req := activities.RequestCapacityInput{Region: j.spec.Region, Allocation: j.spec.AllocationName, Request: protocol.CapacityRequest{
		Job: j.name, Attempt: attempt, Kind: j.spec.Kind, Class: j.spec.Class(), InstanceType: j.spec.InstanceType,
		Workers: j.spec.NWorkers, Seq: j.seq, SubmittedAt: j.status.CreatedAt,
	}}
	var reply protocol.CapacityReply
	if err := workflow.ExecuteActivity(actx, (*activities.Activities).RequestCapacity, req).Get(ctx, &reply); err != nil {
		if errors.Is(ctx.Err(), workflow.ErrCanceled) {
			j.withdraw(ctx, attempt)
			return protocol.GrantSignal{}, outcome{kind: outcomeCancelled, message: "stopped by the user while pending"}, false
		}
		var appErr *temporal.ApplicationError
		msg := err.Error()
		if errors.As(err, &appErr) {
			msg = appErr.Message()
		}
		return protocol.GrantSignal{}, outcome{kind: outcomeFailed, message: msg, final: true}, false
	}
	if j.seq == 0 {
		j.seq = reply.Seq
	}
	if !reply.Granted && reply.Reason != "" {
		// Show where the attempt was queued and why it waits. The job is not
		// told when its place changes; the allocator's current details and
		// `trainq status` have the live position.
		j.status.Position, j.status.Reason = reply.Position, reply.Reason
		workflow.SetCurrentDetails(ctx, j.details())
	}
	for {
		var grant protocol.GrantSignal
		var refusal *protocol.RefuseSignal
		cancelled := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(j.grants, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &grant) })
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })
		// The allocation was reconfigured and can no longer run this job;
		// the allocator has already dropped the request.
		sel.AddReceive(j.refusals, func(c workflow.ReceiveChannel, _ bool) {
			var r protocol.RefuseSignal
			c.Receive(ctx, &r)
			refusal = &r
		})
		sel.Select(ctx)
		if cancelled {
			j.withdraw(ctx, attempt)
			return protocol.GrantSignal{}, outcome{kind: outcomeCancelled, message: "stopped by the user while pending"}, false
		}
		if refusal != nil {
			if refusal.Attempt == attempt {
				return protocol.GrantSignal{}, outcome{kind: outcomeFailed, message: refusal.Reason, final: true}, false
			}
			continue // meant for an attempt that has already ended
		}
		if grant.Attempt == attempt {
			return grant, outcome{}, true
		}
		// A grant for an older attempt arrived late; that capacity was
		// already released, so it is ignored.
	}
}

// withdraw tells the allocator that this attempt holds nothing any more.
func (j *job) withdraw(ctx workflow.Context, attempt int) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.SignalExternalWorkflow(dctx, j.allocator, "", protocol.SignalWithdraw,
		protocol.WithdrawSignal{Job: j.name, Attempt: attempt}).Get(dctx, nil)
}

func (j *job) nodeOptions(ctx workflow.Context, node, summary string, o workflow.ActivityOptions) workflow.Context {
	o.TaskQueue = protocol.NodeTaskQueue(node)
	o.Summary = summary
	return workflow.WithActivityOptions(ctx, o)
}

// startWorkers starts every worker of the gang. Starts are short and are
// never abandoned half-way, even on cancellation: a start still in flight
// could otherwise launch a worker after it was stopped. A preemption or
// cancellation that arrives meanwhile is seen by watch.
func (j *job) startWorkers(ctx workflow.Context, attempt int, grant protocol.GrantSignal) (outcome, bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	short := workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}}
	master := grant.Placement[0].Node
	var rv activities.Rendezvous
	err := workflow.ExecuteActivity(j.nodeOptions(dctx, master, "pick MASTER_ADDR and MASTER_PORT on "+master, short),
		(*activities.Activities).Rendezvous, activities.RendezvousInput{Job: j.name, Attempt: attempt}).Get(dctx, &rv)
	if err != nil {
		return outcome{kind: outcomeFailed, message: "could not pick a rendezvous address: " + errorText(err)}, false
	}
	var starts []workflow.Future
	for _, p := range grant.Placement {
		spec := cluster.WorkerSpec{
			ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker}, Workers: j.spec.NWorkers,
			Node: p.Node, GPUs: p.GPUs, Type: j.spec.Type, Script: j.spec.Script, BaseImage: j.spec.BaseImage,
			ProcessesPerWorker: j.spec.ProcessesPerWorker, Env: j.spec.EnvVariables, Flags: j.spec.Flags,
			MasterAddr: rv.Addr, MasterPort: rv.Port, CheckpointDir: j.spec.CheckpointDir,
		}
		summary := fmt.Sprintf("start worker %d on %s (GPUs %v)", p.Worker, p.Node, p.GPUs)
		starts = append(starts, workflow.ExecuteActivity(j.nodeOptions(dctx, p.Node, summary, short), (*activities.Activities).StartWorker, spec))
	}
	var failure *outcome
	for i, f := range starts {
		if err := f.Get(dctx, nil); err != nil && failure == nil {
			failure = &outcome{kind: outcomeFailed, message: fmt.Sprintf("worker %d could not start on %s: %s", grant.Placement[i].Worker, grant.Placement[i].Node, errorText(err))}
		}
	}
	if failure != nil {
		return *failure, false
	}
	return outcome{}, true
}

// addInterrupts makes sel wake up for a preemption of this attempt or a cancellation.
func (j *job) addInterrupts(ctx workflow.Context, sel workflow.Selector, attempt int, out *outcome, done *bool) {
	sel.AddReceive(j.preempts, func(c workflow.ReceiveChannel, _ bool) {
		var p protocol.PreemptSignal
		c.Receive(ctx, &p)
		if p.Attempt != attempt {
			return // meant for an attempt that has already ended
		}
		pre := p.Preemptor
		*out, *done = outcome{kind: outcomePreempted, message: fmt.Sprintf("preempted by %s (%s %s): %s", pre.Job, pre.Class, pre.Kind, p.Reason), preemptor: &pre}, true
	})
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
		*out, *done = outcome{kind: outcomeCancelled, message: "stopped by the user"}, true
	})
}

// watch waits until every worker exits, one fails, or the attempt is
// interrupted.
func (j *job) watch(ctx workflow.Context, attempt int, grant protocol.GrantSignal) outcome {
	wctx, stopWatching := workflow.WithCancel(ctx)
	defer stopWatching()
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 10 * 365 * 24 * time.Hour, // notebooks run until stopped
		HeartbeatTimeout:    15 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"WorkerNotFound"}},
	}
	type exit struct {
		worker int
		status cluster.WorkerStatus
		err    error
	}
	var exits []exit
	sel := workflow.NewSelector(ctx)
	for _, p := range grant.Placement {
		id := cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker}
		worker := p.Worker
		f := workflow.ExecuteActivity(j.nodeOptions(wctx, p.Node, fmt.Sprintf("watch worker %d on %s", p.Worker, p.Node), opts), (*activities.Activities).WatchWorker, id)
		sel.AddFuture(f, func(f workflow.Future) {
			var st cluster.WorkerStatus
			err := f.Get(ctx, &st)
			exits = append(exits, exit{worker: worker, status: st, err: err})
		})
	}
	var out outcome
	done := false
	j.addInterrupts(ctx, sel, attempt, &out, &done)
	for !done {
		sel.Select(ctx)
		if done {
			break
		}
		if len(exits) == 0 {
			continue
		}
		last := exits[len(exits)-1]
		if last.err == nil {
			// The worker's processes are gone: its capacity is free now,
			// whatever the other workers do.
			j.release(ctx, attempt, last.worker)
		}
		switch {
		case last.err != nil && errors.Is(ctx.Err(), workflow.ErrCanceled):
			out, done = outcome{kind: outcomeCancelled, message: "stopped by the user"}, true
		case last.err != nil:
			out, done = outcome{kind: outcomeFailed, message: fmt.Sprintf("lost track of worker %d: %s", last.worker, errorText(last.err))}, true
		case last.status.ExitCode != 0:
			code := last.status.ExitCode
			out, done = outcome{kind: outcomeFailed, message: fmt.Sprintf("worker %d exited with code %d", last.worker, code), exitCode: &code}, true
		case len(exits) == len(grant.Placement):
			zero := 0
			out, done = outcome{kind: outcomeCompleted, message: "all workers exited with code 0", exitCode: &zero}, true
		}
	}
	return out
}

// release reports one stopped worker to the allocator. The first report of
// an attempt also marks the job as stopping, so that the capacity its other
// workers still hold counts as releasing, not free.
func (j *job) release(ctx workflow.Context, attempt, worker int) {
	if j.released[worker] {
		return
	}
	j.released[worker] = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	s := protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Workers: []int{worker}, Stopping: !j.stopping}
	j.stopping = true
	j.signals = append(j.signals, workflow.SignalExternalWorkflow(dctx, j.allocator, "", protocol.SignalRelease, s))
}

// stopAndRelease stops the attempt's remaining workers and releases their
// capacity worker by worker, as each one is gone. It runs even after
// cancellation, and returns once the allocator has every release.
func (j *job) stopAndRelease(ctx workflow.Context, attempt int, grant protocol.GrantSignal) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if !j.stopping {
		j.stopping = true
		j.signals = append(j.signals, workflow.SignalExternalWorkflow(dctx, j.allocator, "", protocol.SignalRelease,
			protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Stopping: true}))
	}
	grace := grant.StopGracePeriod
	sel := workflow.NewSelector(dctx)
	pending := 0
	for _, p := range grant.Placement {
		if j.released[p.Worker] {
			continue
		}
		worker := p.Worker
		in := activities.StopWorkerInput{ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: worker}, Grace: grace}
		actx := j.nodeOptions(dctx, p.Node, fmt.Sprintf("stop worker %d on %s (SIGTERM, SIGKILL after %s)", worker, p.Node, grace), workflow.ActivityOptions{
			StartToCloseTimeout: grace + time.Minute,
			HeartbeatTimeout:    15 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
		})
		pending++
		sel.AddFuture(workflow.ExecuteActivity(actx, (*activities.Activities).StopWorker, in), func(f workflow.Future) {
			if err := f.Get(dctx, nil); err != nil {
				workflow.GetLogger(dctx).Error("could not stop worker", "worker", worker, "error", err)
			}
			j.release(dctx, attempt, worker)
		})
	}
	for ; pending > 0; pending-- {
		sel.Select(dctx)
	}
	for _, f := range j.signals {
		if err := f.Get(dctx, nil); err != nil {
			workflow.GetLogger(dctx).Warn("could not report a release to the allocator", "error", err)
		}
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
		fmt.Fprintf(&b, "Live position: the current details of %s, or `trainq status %s`.\n\n", j.allocator, j.name)
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
			fmt.Fprintf(&b, "Placement: %s (%d GPUs on %d %s)\n\n", placementText(p), gpus, len(p), nodes)
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
