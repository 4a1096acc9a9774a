// Package activities holds trainq's activities: the control activities that
// talk to Temporal (capacity requests, leak detection) and the node
// activities that start, watch and stop a job's workers through a cluster
// backend. Node activities run on the task queue of the node they touch.
package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// ErrTypeCapacityRefused marks a capacity request the allocator can never satisfy.
const ErrTypeCapacityRefused = "CapacityRefused"

// Activities carries what the activities need. One value serves every task
// queue of a worker process.
type Activities struct {
	Client  client.Client
	Config  *config.Config
	Backend cluster.Backend
	// TestListingLag is for tests only (zero, the default, costs nothing):
	// recovery's listing of an allocation's jobs leaves out every job whose
	// workflow started less than this long before the listing, as a
	// visibility store that lags this far behind would. trainq-worker sets
	// it from $TRAINQ_TEST_LISTING_LAG (see ListingLagFromEnv).
	TestListingLag time.Duration
	// Estimates caches EstimateRuntime's listings (nil: none).
	Estimates *EstimateCache
}

// RequestCapacityInput names the allocator and the request.
type RequestCapacityInput struct {
	Region     string                   `json:"region"`
	Allocation string                   `json:"allocation"`
	Request    protocol.CapacityRequest `json:"request"`
	// Brief asks where the request stands once, with a short deadline:
	// run as a local activity, the request holds up the job's workflow
	// task, and so the handling of a grant that comes meanwhile.
	Brief bool `json:"brief,omitempty"`
	// Learn, for a job without a time limit or an estimate yet, asks for
	// its learned runtime estimate first (EstimateRuntime): the request
	// carries it as RunEstimate, and the reply tells the job.
	Learn *protocol.EstimateRuntimeInput `json:"learn,omitempty"`
}

// RequestCapacityName is RequestCapacity's registered name (the job runs it
// as a local activity, by name).
const RequestCapacityName = "RequestCapacity"

// RequestCapacity asks the allocation's allocator for capacity, starting the
// allocator if it is not running (see SendRequest). A request sent again is
// harmless: the allocator queues each attempt once. A request that can never
// fit the allocation as configured fails for good here; one that no longer
// fits when it arrives is refused by the allocator with a signal.
func (a *Activities) RequestCapacity(ctx context.Context, in RequestCapacityInput) (protocol.CapacityReply, error) {
	start, err := a.Config.AllocatorInput(in.Region, in.Allocation)
	if err != nil {
		return protocol.CapacityReply{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCapacityRefused, nil)
	}
	// The nodes of a node_selector allocation change while this process
	// runs (only its allocator has the current list): the allocator judges.
	_, alloc, _ := a.Config.Allocation(in.Region, in.Allocation)
	err = admit(start, in.Request, alloc == nil || len(alloc.NodeSelector) == 0)
	if err != nil {
		return protocol.CapacityReply{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("allocation %s/%s cannot run %s: %v", in.Region, in.Allocation, in.Request.Job, err), ErrTypeCapacityRefused, nil)
	}
	estimate := a.learnEstimate(ctx, in)
	if estimate != nil {
		in.Request.RunEstimate = scheduler.EstimatedRunLimit(estimate.Runtime, 0)
	}
	allocator := protocol.AllocatorWorkflowID(in.Region, in.Allocation)
	reply, err := SendRequest(ctx, a.Client, allocator, in.Request, func(ctx context.Context) error {
		_, err := a.Client.SignalWithStartWorkflow(ctx, allocator, protocol.SignalRequest,
			in.Request, protocol.AllocatorStartOptions(in.Region, in.Allocation), protocol.AllocatorWorkflowName, start)
		return err
	})
	if err != nil {
		return protocol.CapacityReply{}, err
	}
	if !reply.Granted {
		// Where it waits and why, for the job's details: the answer leaves
		// them out (they cost a dry-run pass inside the allocator's task).
		where := a.whereQueued(ctx, in)
		reply.Position, reply.Reason = where.Position, where.Reason
		if reply.Seq == 0 { // not answered in time, or refused or sent to be checked
			reply.Seq = where.Seq
		}
	}
	reply.Estimate = estimate
	return reply, nil
}

// standingTimeout bounds how long sendUpdate waits, once the allocator has
// accepted a message, for its answer (a courtesy, as whereQueued's).
const standingTimeout = 2 * time.Second

// SendRequest sends a capacity request to its allocator as an update
// (protocol.UpdateRequest: see sendUpdate), and fills in the reply if the
// allocator answered in time. An allocator that is not running (its first
// request, or after it was terminated) is started by signalWithStart, which
// also carries the request wherever sendUpdate falls back to a signal.
func SendRequest(ctx context.Context, c client.Client, allocator string, req protocol.CapacityRequest, signalWithStart func(context.Context) error) (reply protocol.CapacityReply, err error) {
	err = sendUpdate(ctx, c, client.UpdateWorkflowOptions{WorkflowID: allocator, UpdateName: protocol.UpdateRequest, Args: []any{req}},
		&reply, signalWithStart)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return reply, signalWithStart(ctx)
	}
	return reply, err
}

// sendUpdate sends a message to an allocator as an update and returns once
// the allocator has accepted it, with its answer in result if that came
// within standingTimeout. Updates keep a burst of messages from failing the
// allocator's workflow task: a signal that comes in while a task runs is an
// event, and past protocol.TemporalBufferedEventsLimit of them the server
// force-closes the task, while the server admits only
// protocol.TemporalInFlightUpdates updates at a time and refuses the rest
// (ResourceExhausted), which the client retries until ctx ends. A run that
// rejects the update (a build without its handler) or has taken all the
// updates a run may (history.maxTotalUpdates: the run is handing over) is
// sent the message by signal instead. The message is durable once accepted.
func sendUpdate(ctx context.Context, c client.Client, opts client.UpdateWorkflowOptions, result any, signal func(context.Context) error) error {
	opts.WaitForStage = client.WorkflowUpdateStageAccepted
	handle, err := c.UpdateWorkflow(ctx, opts)
	var full *serviceerror.FailedPrecondition
	switch {
	case errors.As(err, &full):
		return signal(ctx)
	case err != nil:
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, standingTimeout)
	defer cancel()
	var rejected *temporal.ApplicationError
	if err := handle.Get(wctx, result); errors.As(err, &rejected) {
		return signal(ctx)
	}
	return nil // accepted: the allocator has it
}

// learnEstimateTimeout bounds how long a capacity request waits for the listing its estimate is
// learned from: an estimate is worth less than the job's place in the queue.
const learnEstimateTimeout = 2 * time.Second

// learnEstimate is the runtime estimate in.Learn asks for, or nil (none asked, too few jobs
// like it, or visibility did not answer in time).
func (a *Activities) learnEstimate(ctx context.Context, in RequestCapacityInput) *protocol.RuntimeEstimate {
	if in.Learn == nil || in.Request.RunLimit > 0 || in.Request.RunEstimate > 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, learnEstimateTimeout)
	defer cancel()
	est, err := a.EstimateRuntime(lctx, *in.Learn)
	if err != nil {
		activity.GetLogger(ctx).Warn("no runtime estimate: the completed jobs like this one could not be listed", "job", in.Request.Job, "error", err)
		return nil
	}
	return est
}

// whereQueued asks the allocator, briefly, where the request stands, for the
// job's Web UI details. The answer is a courtesy: an allocator that has not
// taken the signal in yet, or is busy, gets no more than a few short tries,
// and the job waits for its grant all the same.
func (a *Activities) whereQueued(ctx context.Context, in RequestCapacityInput) protocol.CapacityReply {
	var reply protocol.CapacityReply
	tries, deadline := 3, time.Second
	if in.Brief {
		tries, deadline = 1, briefQueryTimeout
	}
	for try := 0; try < tries; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return reply
			case <-time.After(100 * time.Millisecond):
			}
		}
		qctx, cancel := context.WithTimeout(ctx, deadline)
		resp, err := a.Client.QueryWorkflow(qctx, protocol.AllocatorWorkflowID(in.Region, in.Allocation), "", protocol.QueryExplain, in.Request.Job)
		var where protocol.ExplainReply
		if err == nil {
			err = resp.Get(&where)
		}
		cancel()
		if err != nil {
			return reply
		}
		if known, ok := replyFor(where, in.Request.Attempt); ok {
			return known
		}
	}
	return reply
}

// RequestCheck is what CheckRequest found.
type RequestCheck struct {
	// Known: the allocator has the request waiting.
	Known bool `json:"known"`
	// Resent: it did not, or it had granted it and the job never saw the
	// grant, and the request was sent again.
	Resent bool                   `json:"resent,omitempty"`
	Reply  protocol.CapacityReply `json:"reply"`
}

// CheckRequest asks the allocator whether it has in.Request, and sends it
// again if it does not. A waiting job runs it now and then: an allocator
// that recovered without finding the job (visibility missed it, the job did
// not answer in time) would otherwise never hear of it again, and the job
// would wait for ever. Sending again is harmless: the allocator queues each
// attempt once.
func (a *Activities) CheckRequest(ctx context.Context, in RequestCapacityInput) (RequestCheck, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := a.Client.QueryWorkflow(qctx, protocol.AllocatorWorkflowID(in.Region, in.Allocation), "", protocol.QueryExplain, in.Request.Job)
	cancel()
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		return RequestCheck{}, err // busy or unreachable: ask again next time
	}
	why := "the allocator does not know a waiting job's request; sending it again"
	if err == nil {
		var where protocol.ExplainReply
		if err := resp.Get(&where); err != nil {
			return RequestCheck{}, err
		}
		reply, ok := replyFor(where, in.Request.Attempt)
		if ok && !reply.Granted {
			return RequestCheck{Known: true, Reply: reply}, nil
		}
		if ok {
			// Only a waiting job checks, and it has not seen this grant: it
			// went to a run that a reset replaced, or was dropped. Asked
			// again, the allocator sends it again, or, if it is releasing
			// that attempt, reclaims it and has the job rerun.
			why = "the allocator holds capacity for a waiting job's attempt that the job never took; asking again"
		}
	}
	activity.GetLogger(ctx).Warn(why, "job", in.Request.Job, "attempt", in.Request.Attempt)
	in.Brief = true
	reply, err := a.RequestCapacity(ctx, in)
	return RequestCheck{Resent: true, Reply: reply}, err
}

// replyFor reads the allocator's explain answer for attempt: granted, or
// waiting with its place; ok is false if the allocator has neither.
func replyFor(where protocol.ExplainReply, attempt int) (protocol.CapacityReply, bool) {
	switch {
	case where.Running != nil && where.Running.Attempt == attempt:
		return protocol.CapacityReply{Seq: where.Running.Seq, Granted: true}, true
	case where.Waiting != nil && where.Waiting.Attempt == attempt:
		return protocol.CapacityReply{Seq: where.Waiting.Seq, Position: where.Waiting.Position, Reason: where.Waiting.Reason}, true
	}
	return protocol.CapacityReply{}, false
}

// briefQueryTimeout bounds the one question a brief request asks: an idle
// allocator answers in milliseconds; a busy one is not waited for.
const briefQueryTimeout = 300 * time.Millisecond

// admit refuses a request its workspace's cap could never let start and,
// with nodesKnown, one the allocation's configured nodes could never hold,
// as the allocator's own admission does.
func admit(in protocol.AllocatorInput, req protocol.CapacityRequest, nodesKnown bool) error {
	r, err := req.SchedulerRequest()
	if err != nil {
		return err
	}
	// A workspace's cap could never let it start, whatever the nodes (scheduler.Policy.AdmitCap).
	if err := in.Policy.AdmitCap(r); err != nil || !nodesKnown {
		return err
	}
	pool, err := scheduler.NewPool(in.Nodes, in.Policy)
	if err != nil {
		return err
	}
	return pool.Admit(r)
}

// describeConcurrency bounds the DescribeWorkflowExecution calls that one
// leak check makes at once: an allocator may hold thousands of jobs.
const describeConcurrency = 16

// FindVanishedJobs returns the jobs among jobs whose workflow is no longer
// running (terminated, timed out, or gone), in the order given. The
// allocator reclaims their capacity.
//
// An allocator may hold tens of thousands of jobs, and the check has a
// minute: visibility lists, a few queries for them all, which of the jobs
// are running job workflows, and only the others are described, one call
// each. Visibility alone never reports a job: one it leaves out (it lags)
// is reported only when its workflow's own record says it is not running.
// One it lists as running that has just ended is found at the next check.
func (a *Activities) FindVanishedJobs(ctx context.Context, jobs []string) ([]string, error) {
	listed, err := a.listedRunning(ctx, jobs)
	if err != nil {
		return nil, err
	}
	var unlisted []string
	for _, job := range jobs {
		if !listed[job] {
			unlisted = append(unlisted, job)
		}
	}
	gone, err := a.describeEach(ctx, unlisted, func(desc *workflowservice.DescribeWorkflowExecutionResponse, i int) bool { return false })
	if err != nil {
		return nil, err
	}
	var out []string
	for i, job := range unlisted {
		if gone[i] {
			out = append(out, job)
		}
	}
	return out, nil
}

// describeEach describes the workflow of each job, describeConcurrency at a
// time, heartbeating as it goes. A job is marked when its workflow is gone
// or no longer running, or when marked says so of a running one.
func (a *Activities) describeEach(ctx context.Context, jobs []string,
	marked func(desc *workflowservice.DescribeWorkflowExecutionResponse, i int) bool) ([]bool, error) {
	out := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	slots := make(chan struct{}, describeConcurrency)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			desc, err := a.Client.DescribeWorkflow(ctx, job, "")
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				out[i] = true
			case err != nil:
				errs[i] = err
			case desc.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				out[i] = true
			default:
				out[i] = marked(desc.RawResponse, i)
			}
		}()
		activity.RecordHeartbeat(ctx, i)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// RendezvousInput names an attempt.
type RendezvousInput struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
}

// Rendezvous is where the workers of an attempt meet (MASTER_ADDR, MASTER_PORT).
type Rendezvous struct {
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// Rendezvous picks the attempt's master address on the node of worker 0.
// A backend that answers with this machine's loopback address (the local
// backend) is overridden by the node's address from the config, so that
// workers on other hosts reach worker 0.
func (a *Activities) Rendezvous(ctx context.Context, in RendezvousInput) (Rendezvous, error) {
	addr, port, err := a.rendezvous(ctx, in.Job, in.Attempt)
	return Rendezvous{Addr: addr, Port: port}, err
}

// rendezvous picks the attempt's master address on this node: the node's
// configured address where the backend answers with a loopback one.
func (a *Activities) rendezvous(ctx context.Context, job string, attempt int) (string, int, error) {
	addr, port, err := a.Backend.Rendezvous(ctx, job, attempt)
	if ip := net.ParseIP(addr); err == nil && ip != nil && ip.IsLoopback() {
		if node, nerr := thisNode(ctx); nerr == nil && a.Config.NodeAddress(node) != "" {
			addr = a.Config.NodeAddress(node)
		}
	}
	return addr, port, err
}

// StartWorker starts one worker. It is idempotent per job, attempt and worker.
// A spec without a rendezvous (a one-worker attempt) gets one picked here, on
// the worker's own node: one activity instead of two before it runs.
func (a *Activities) StartWorker(ctx context.Context, spec cluster.WorkerSpec) (cluster.WorkerStatus, error) {
	// A start can wait for a while (a pod to be scheduled and run); the
	// heartbeat tells the job at once when this agent dies meanwhile.
	defer heartbeatEvery(ctx, "starting "+spec.ID.String())()
	if spec.MasterAddr == "" && spec.MasterPort == 0 {
		addr, port, err := a.rendezvous(ctx, spec.ID.Job, spec.ID.Attempt)
		if err != nil {
			return cluster.WorkerStatus{}, fmt.Errorf("pick a rendezvous address: %w", err)
		}
		spec.MasterAddr, spec.MasterPort = addr, port
	}
	st, err := a.Backend.Start(ctx, spec)
	var busy *cluster.GPUsBusy
	if errors.As(err, &busy) {
		activity.GetLogger(ctx).Warn("refused to start a worker on GPUs a live worker uses", "worker", spec.ID.String(),
			"node", busy.Node, "gpus", busy.GPUs, "holder", busy.Holder.String())
		return st, temporal.NewNonRetryableApplicationError(busy.Error(), ErrTypeGPUsBusy, err)
	}
	return st, err
}

// releaseEarly tells the allocator, on behalf of the job, that a worker's
// processes are gone, a workflow task before the job itself can, and says
// whether the allocator has the report. The job reports the release itself
// when this one failed (the allocator applies a release once), so a failure
// here is logged and nothing more.
func (a *Activities) releaseEarly(ctx context.Context, allocator string, id cluster.WorkerID, run string) bool {
	if allocator == "" || a.Client == nil {
		return false
	}
	s := protocol.ReleaseSignal{Job: id.Job, Attempt: id.Attempt, Workers: []int{id.Worker}, Stopping: true}
	if err := SendRelease(ctx, a.Client, allocator, s, run); err != nil {
		activity.GetLogger(ctx).Warn("could not report a stopped worker to the allocator; the job will", "worker", id.String(), "error", err)
		return false
	}
	return true
}

// releaseTimeout bounds how long SendRelease tries: past it the job reports
// the release itself.
const releaseTimeout = 10 * time.Second

// SendRelease reports a release to the allocator as an update
// (protocol.UpdateRelease: see sendUpdate), for the reason requests are sent
// so: a burst of releases sent as signals (a sweep of short trials ending
// together) can get the allocator's task force-closed. It returns once the
// allocator has accepted the release, or with an error after releaseTimeout.
// run is the job's workflow run that sends it ("": an older job's, see
// releaseUpdate).
func SendRelease(ctx context.Context, c client.Client, allocator string, s protocol.ReleaseSignal, run string) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	return sendUpdate(ctx, c, releaseUpdate(allocator, s, run), nil, func(ctx context.Context) error {
		return c.SignalWorkflow(ctx, allocator, "", protocol.SignalRelease, s)
	})
}

// releaseUpdate is the update that reports s to allocator. One ID per
// report, so that a report sent again (an activity retried) is the same
// update within the allocator's run, not one more. The ID names the job's
// run: a job reset to before an attempt runs that attempt again under a new
// run, and its release must not be taken for the first one's (the server
// would answer it with the old outcome and apply nothing, and the allocator
// would hold the attempt's GPUs for ever).
func releaseUpdate(allocator string, s protocol.ReleaseSignal, run string) client.UpdateWorkflowOptions {
	id := fmt.Sprintf("release/%s/%d/%v", s.Job, s.Attempt, s.Workers)
	if run != "" {
		id = fmt.Sprintf("release/%s/%s/%d/%v", s.Job, run, s.Attempt, s.Workers)
	}
	return client.UpdateWorkflowOptions{
		WorkflowID: allocator,
		UpdateID:   id,
		UpdateName: protocol.UpdateRelease,
		Args:       []any{s},
	}
}

// ReportWithdrawal tries its update for up to withdrawalTimeout, in each of
// withdrawalUpdateTries tries of the activity, before it sends the signal.
const (
	withdrawalTimeout     = 30 * time.Second
	withdrawalUpdateTries = 3
)

// ReportWithdrawalInput is the withdrawal of a job cancelled while it waited.
type ReportWithdrawalInput struct {
	Allocator  string
	Withdrawal protocol.WithdrawSignal
	// Run is the job's workflow run (see releaseUpdate); "": an older job's.
	Run string `json:",omitempty"`
}

// ReportWithdrawal sends the withdrawal of a job cancelled while it waited
// to its allocator as an update (protocol.UpdateWithdraw: see sendUpdate),
// so that many jobs cancelled at once (a sweep stopped) are no burst of
// signals that can get the allocator's task force-closed. An update not
// taken in time fails the activity, which the job retries (a retry holds no
// workflow task and writes no history). The withdrawal goes as a signal,
// which the current run, if any, takes whenever it runs, at the last try,
// or at once when the allocator's tasks are failing (WorkflowNotReady) or
// its run is not found (a reset or a restart may have just replaced it):
// the job must not wait on its allocator to end. An allocator that does not
// exist is owed nothing (the next one recovers from the jobs).
func (a *Activities) ReportWithdrawal(ctx context.Context, in ReportWithdrawalInput) error {
	uctx, cancel := context.WithTimeout(ctx, withdrawalTimeout)
	defer cancel()
	err := SendWithdrawal(uctx, a.Client, in.Allocator, in.Withdrawal, in.Run)
	var notReady *serviceerror.WorkflowNotReady
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notReady), errors.As(err, &notFound), activity.GetInfo(ctx).Attempt >= withdrawalUpdateTries:
		activity.GetLogger(ctx).Warn("the allocator did not take the withdrawal as an update; signalling it", "job", in.Withdrawal.Job, "error", err)
		err := signalWithdrawal(ctx, a.Client, in.Allocator, in.Withdrawal)
		if errors.As(err, &notFound) {
			return nil
		}
		return err
	default:
		return err
	}
}

// SendWithdrawal sends w to allocator as an update (see sendUpdate), and
// returns once the allocator has accepted it, or with ctx's error. Its ID
// names the job's run, as a release's does (releaseUpdate).
func SendWithdrawal(ctx context.Context, c client.Client, allocator string, w protocol.WithdrawSignal, run string) error {
	id := fmt.Sprintf("withdraw/%s/%d", w.Job, w.Attempt)
	if run != "" {
		id = fmt.Sprintf("withdraw/%s/%s/%d", w.Job, run, w.Attempt)
	}
	return sendUpdate(ctx, c, client.UpdateWorkflowOptions{
		WorkflowID: allocator,
		UpdateID:   id,
		UpdateName: protocol.UpdateWithdraw,
		Args:       []any{w},
	}, nil, func(ctx context.Context) error { return signalWithdrawal(ctx, c, allocator, w) })
}

func signalWithdrawal(ctx context.Context, c client.Client, allocator string, w protocol.WithdrawSignal) error {
	return c.SignalWorkflow(ctx, allocator, "", protocol.SignalWithdraw, w)
}

// Error types of the node activities.
const (
	// ErrTypeWorkerNotFound: the worker was never started on the node (or
	// the node lost its state). Not retryable.
	ErrTypeWorkerNotFound = "WorkerNotFound"
	// ErrTypeWorkerStuck: WatchWorker saw the worker's log stay silent for
	// its LogPeriod (health_params.log_period). Not retryable. The worker is
	// left running: the workflow decides what to do (health_params.action).
	ErrTypeWorkerStuck = "WorkerStuck"
	// ErrTypeNotNodeQueue: a node activity ran on a task queue that is not a
	// node's (protocol.NodeTaskQueue). Not retryable.
	ErrTypeNotNodeQueue = "NotNodeQueue"
	// ErrTypeNodeLost: the worker's node lost track of it (see
	// cluster.ErrNodeLost); the attempt ends as a node loss.
	ErrTypeNodeLost = "NodeLost"
	// ErrTypeGPUsBusy: StartWorker found a GPU of the worker still used by
	// a live worker of another job or attempt (cluster.GPUsBusy) and started
	// nothing. Not retryable: the job gives the grant back and has the node
	// fenced, so that the allocator learns who really holds it.
	ErrTypeGPUsBusy = "GPUsBusy"
	// ErrTypeUnsupported: the cluster backend cannot do what was asked.
	// Not retryable.
	ErrTypeUnsupported = "Unsupported"
)

// WatchWorkerInput names the worker to watch. WorkerID is embedded so that
// the input of an older workflow, a bare cluster.WorkerID
// ({"job", "attempt", "worker"}), decodes as this type with LogPeriod 0.
type WatchWorkerInput struct {
	cluster.WorkerID
	// LogPeriod > 0 turns on stuck detection: the watch fails with
	// ErrTypeWorkerStuck once the worker's log has not changed for LogPeriod.
	LogPeriod time.Duration `json:"log_period,omitempty"`
	// Workers, when > 1, widens stuck detection to the whole attempt: the
	// job is silent only while none of workers 0..Workers-1 writes (often
	// only rank 0 logs). Set on worker 0's watch alone. Only the workers the
	// node's backend can see count (the local backend sees every worker that
	// shares its data dir); the others are skipped, with a warning.
	Workers int `json:"workers,omitempty"`
	// ReleaseTo, when set, is the allocator workflow to report the
	// worker's exit to as soon as it is seen (see releaseEarly), and Run the
	// job's workflow run that asks (see releaseUpdate).
	ReleaseTo string `json:"release_to,omitempty"`
	Run       string `json:"run,omitempty"`
}

// stuckCheckInterval is how often WatchWorker looks at a worker's log:
// a tenth of the period, between 200ms and 2s.
func stuckCheckInterval(period time.Duration) time.Duration {
	return min(max(period/10, 200*time.Millisecond), 2*time.Second)
}

// WatchWorker waits for a worker to exit, heartbeating while it runs. After a
// worker-process restart, the retried activity re-attaches to the process.
//
// With in.LogPeriod > 0 it also ends, with a non-retryable ErrTypeWorkerStuck
// error, when the worker has been silent for LogPeriod: no change to its log
// since max(last log write, worker start); with in.Workers > 1, no change to
// the log of any of the attempt's workers 0..Workers-1 since the latest of
// their writes and starts. All of it comes from the backend's durable state,
// so a retried watch measures the same silence as the first one, not the
// time since it started. A worker that is being stopped is not checked. A
// backend without cluster.OutputClock watches without detection (and logs a
// warning). The worker is left running either way.
func (a *Activities) WatchWorker(ctx context.Context, in WatchWorkerInput) (cluster.WorkerStatus, error) {
	id := in.WorkerID
	heartbeat := func(s cluster.WorkerStatus) { activity.RecordHeartbeat(ctx, s.Phase) }
	clock, canDetect := a.Backend.(cluster.OutputClock)
	if in.LogPeriod > 0 && !canDetect {
		activity.GetLogger(ctx).Warn("stuck-job detection is off: the cluster backend cannot tell when a worker last wrote its log",
			"worker", id.String(), "log_period", in.LogPeriod)
	}
	if in.LogPeriod <= 0 || !canDetect {
		st, err := a.Backend.Wait(ctx, id, heartbeat)
		return a.watchResult(ctx, in, st, err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		st  cluster.WorkerStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := a.Backend.Wait(wctx, id, heartbeat)
		done <- result{st, err}
	}()
	ticker := time.NewTicker(stuckCheckInterval(in.LogPeriod))
	defer ticker.Stop()
	s := silence{a: a, clock: clock, in: in}
	for {
		select {
		case r := <-done:
			return a.watchResult(ctx, in, r.st, r.err)
		case <-ticker.C:
		}
		st, err := a.Backend.Status(ctx, id)
		if err != nil || st.Phase != cluster.PhaseRunning || st.StopRequested {
			continue // Wait reports exits and persistent errors
		}
		ref, err := s.lastSign(ctx, st)
		if err != nil {
			activity.GetLogger(ctx).Warn("cannot tell when the worker last wrote its log", "worker", id.String(), "error", err)
			continue
		}
		if time.Since(ref) < in.LogPeriod {
			continue
		}
		// Stuck, unless it exited meanwhile: then report the exit.
		cancel()
		r := <-done
		if !errors.Is(r.err, context.Canceled) {
			return a.watchResult(ctx, in, r.st, r.err) // it ended meanwhile
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if now, err := a.Backend.Status(ctx, id); err == nil && now.Phase == cluster.PhaseExited {
			return a.watchResult(ctx, in, now, nil)
		}
		who := fmt.Sprintf("worker %d", id.Worker)
		if in.Workers > 1 {
			who = fmt.Sprintf("workers 0-%d", in.Workers-1)
		}
		msg := fmt.Sprintf("%s wrote no log line for %v (health_params.log_period)", who, in.LogPeriod)
		return st, temporal.NewNonRetryableApplicationError(msg, ErrTypeWorkerStuck, nil, st)
	}
}

// silence tracks when the watched worker, or with Workers > 1 its attempt,
// last showed life.
type silence struct {
	a         *Activities
	clock     cluster.OutputClock
	in        WatchWorkerInput
	firstSeen time.Time    // fallback if the backend records no time at all
	unseen    map[int]bool // other workers the backend does not know, warned about
}

// lastSign returns the latest log write or start among the watched workers;
// st is the watched worker's current status.
func (s *silence) lastSign(ctx context.Context, st cluster.WorkerStatus) (time.Time, error) {
	id := s.in.WorkerID
	ref, err := s.clock.LastOutput(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	if st.StartedAt.After(ref) {
		ref = st.StartedAt
	}
	for w := range s.in.Workers {
		if w == id.Worker {
			continue
		}
		other := cluster.WorkerID{Job: id.Job, Attempt: id.Attempt, Worker: w}
		ost, err := s.a.Backend.Status(ctx, other)
		if err != nil {
			return time.Time{}, err
		}
		last, err := s.clock.LastOutput(ctx, other)
		if ost.Phase == cluster.PhaseNotFound || errors.Is(err, cluster.ErrNotFound) {
			if s.unseen == nil {
				s.unseen = map[int]bool{}
			}
			if !s.unseen[w] {
				s.unseen[w] = true
				activity.GetLogger(ctx).Warn("stuck-job detection cannot see this worker from here; judging the attempt without it",
					"worker", other.String())
			}
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		ref = latest(ref, last, ost.StartedAt)
	}
	if ref.IsZero() {
		if s.firstSeen.IsZero() {
			s.firstSeen = time.Now()
		}
		ref = s.firstSeen
	}
	return ref, nil
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// watchResult turns a missing worker into a non-retryable WorkerNotFound,
// and reports an exit to the allocator (in.ReleaseTo).
func (a *Activities) watchResult(ctx context.Context, in WatchWorkerInput, st cluster.WorkerStatus, err error) (cluster.WorkerStatus, error) {
	id := in.WorkerID
	if errors.Is(err, cluster.ErrNotFound) || (err == nil && st.Phase == cluster.PhaseNotFound) {
		return st, temporal.NewNonRetryableApplicationError(fmt.Sprintf("worker %d of %s attempt %d was never started on this node", id.Worker, id.Job, id.Attempt), ErrTypeWorkerNotFound, nil)
	}
	if errors.Is(err, cluster.ErrNodeLost) {
		return st, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNodeLost, nil)
	}
	if err == nil && st.Phase == cluster.PhaseExited {
		// The report may wait its turn at a busy allocator (SendRelease):
		// the watch's heartbeat must not lapse meanwhile.
		stop := heartbeatEvery(ctx, st)
		st.ReleaseReported = a.releaseEarly(ctx, in.ReleaseTo, id, in.Run)
		stop()
	}
	return st, err
}

// StopWorkerInput says which worker to stop and how long it may take.
type StopWorkerInput struct {
	ID    cluster.WorkerID `json:"id"`
	Grace time.Duration    `json:"grace"`
	// ReleaseTo, when set, is the allocator workflow to report the stop to
	// once the worker is gone (see releaseEarly), and Run the job's
	// workflow run that asks (see releaseUpdate).
	ReleaseTo string `json:"release_to,omitempty"`
	Run       string `json:"run,omitempty"`
}

// heartbeatInterval is how often activities that wait on processes
// (StopWorker, FenceNode) heartbeat.
const heartbeatInterval = 2 * time.Second

// heartbeatEvery records a heartbeat with details every heartbeatInterval
// until the returned function is called.
func heartbeatEvery(ctx context.Context, details any) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(heartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, details)
			}
		}
	}()
	return func() { close(done) }
}

// StopWorker stops a worker gracefully (SIGTERM, then SIGKILL after the grace
// period) and returns once none of its processes is left.
func (a *Activities) StopWorker(ctx context.Context, in StopWorkerInput) (cluster.WorkerStatus, error) {
	defer heartbeatEvery(ctx, "stopping")()
	st, err := a.Backend.Stop(ctx, in.ID, in.Grace)
	if err == nil {
		st.ReleaseReported = a.releaseEarly(ctx, in.ReleaseTo, in.ID, in.Run)
	}
	return st, err
}

// NodeOfTaskQueue returns the node whose agent serves taskQueue
// (protocol.NodeTaskQueue), or a non-retryable ErrTypeNotNodeQueue error if
// taskQueue is not a node's task queue.
func NodeOfTaskQueue(taskQueue string) (string, error) {
	node, ok := strings.CutPrefix(taskQueue, protocol.NodeTaskQueuePrefix)
	if !ok || node == "" {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("task queue %q is not a node's task queue (%s<node>): node activities must run on the queue of the node they touch",
				taskQueue, protocol.NodeTaskQueuePrefix), ErrTypeNotNodeQueue, nil)
	}
	return node, nil
}

// thisNode is the node of the task queue the activity runs on.
func thisNode(ctx context.Context) (string, error) {
	return NodeOfTaskQueue(activity.GetInfo(ctx).TaskQueue)
}

func (a *Activities) inventory() (cluster.Inventory, error) {
	inv, ok := a.Backend.(cluster.Inventory)
	if !ok {
		return nil, temporal.NewNonRetryableApplicationError(cluster.ErrNoInventory.Error(), ErrTypeUnsupported, nil)
	}
	return inv, nil
}

// NodeInventoryReply lists the live workers of a node.
type NodeInventoryReply struct {
	Node    string                 `json:"node"`
	Workers []cluster.PlacedWorker `json:"workers"` // see cluster.Inventory
}

// NodeInventory reports the workers whose processes are alive on the node
// of the task queue it runs on (protocol.NodeTaskQueue), with the GPUs each
// was started with. It runs on the node's agent, so it answers only if that
// agent is up.
func (a *Activities) NodeInventory(ctx context.Context) (NodeInventoryReply, error) {
	node, err := thisNode(ctx)
	if err != nil {
		return NodeInventoryReply{}, err
	}
	inv, err := a.inventory()
	if err != nil {
		return NodeInventoryReply{Node: node}, err
	}
	workers, err := inv.LiveWorkers(ctx, node)
	return NodeInventoryReply{Node: node, Workers: workers}, err
}

// FenceNodeInput lists the workers that may stay on the node; every other
// live worker is stopped, each with Grace between SIGTERM and SIGKILL.
type FenceNodeInput struct {
	Keep  []cluster.WorkerID `json:"keep,omitempty"`
	Grace time.Duration      `json:"grace"`
}

// FenceNodeReply says what FenceNode stopped and what is live on the node
// afterwards (normally exactly the live workers of Keep).
type FenceNodeReply struct {
	Node    string                 `json:"node"`
	Stopped []cluster.PlacedWorker `json:"stopped"` // status after stopping
	Live    []cluster.PlacedWorker `json:"live"`
}

// FenceNode stops, on the node of the task queue it runs on, every live
// worker not in in.Keep (see cluster.Fence): all at once, each gracefully,
// heartbeating every 2s while it waits. It returns only when none of those
// workers has a process left, and is idempotent. Success confirms that no
// worker outside Keep is live on the node; a worker that appeared meanwhile
// makes it fail (retryable), and the next call stops that one too. An
// allocator calls it when a lost node's agent is back, before it uses the
// node's capacity again.
func (a *Activities) FenceNode(ctx context.Context, in FenceNodeInput) (FenceNodeReply, error) {
	node, err := thisNode(ctx)
	if err != nil {
		return FenceNodeReply{}, err
	}
	if _, err := a.inventory(); err != nil {
		return FenceNodeReply{Node: node}, err
	}
	defer heartbeatEvery(ctx, "fencing "+node)()
	stopped, live, err := cluster.Fence(ctx, a.Backend, node, in.Keep, in.Grace)
	return FenceNodeReply{Node: node, Stopped: stopped, Live: live}, err
}
