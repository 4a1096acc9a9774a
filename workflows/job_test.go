package workflows

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The job tests run JobWorkflow alone: the allocator is a mocked external
// workflow (its signals are recorded) and grants and preemptions are sent by
// the test with env.SignalWorkflow. Node activities are mocked; WatchWorker
// blocks with .After(forever) rather than on ctx.Done(): the test env does
// not cancel a cancelled activity's context, and a mock blocked on
// ctx.Done() counts as running, which stops the env from skipping time.

const (
	testJob       = "lm-mpi-job-00000000-0000-0000-0000-000000000001"
	testAllocator = "allocator/T/basic"
	forever       = 1000 * time.Hour
)

var testStart = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

func workflowOpts(name string) workflow.RegisterOptions { return workflow.RegisterOptions{Name: name} }

// sentSignal is one signal the job sent to its allocator.
type sentSignal struct {
	name string
	arg  any
}

type jobHarness struct {
	t    *testing.T
	env  *testsuite.TestWorkflowEnvironment
	acts *activities.Activities

	mu         sync.Mutex
	requests   []protocol.CapacityRequest
	signals    []sentSignal
	starts     []cluster.WorkerSpec
	startQueue []string
	stops      []activities.StopWorkerInput
	stopAt     []time.Time
	stopQueue  []string
	watches    []cluster.WorkerID
	// seq is the Seq the mocked allocator hands out on a first request.
	seq int64
	// refuse, when set, makes every capacity request fail with it.
	refuse error
	// watchRuns are the job runs the watches named (WatchWorkerInput.Run).
	watchRuns []string
	// unexplained: the capacity reply does not say where or why the attempt waits (the
	// allocator did not answer the query in time).
	unexplained bool
	// refuseReleases is how many releases the server refuses (an
	// allocator run that has taken its limit of signals, or one too busy to
	// take updates), refuseWithdrawals how many withdrawals.
	refuseReleases, refuseWithdrawals int
	// busyStarts are the workers whose start finds their GPUs in use.
	busyStarts map[cluster.WorkerID]bool
	// estimate is what a capacity request that asks learns (nil: too few
	// jobs like it); estimates are what the requests asked to learn.
	estimate  *protocol.RuntimeEstimate
	estimates []protocol.EstimateRuntimeInput
	// duringRequest, when set, runs inside each capacity request, while
	// its local activity is in flight.
	duringRequest func(activities.RequestCapacityInput)
}

func newJobHarness(t *testing.T) *jobHarness { return newJobHarnessStopDelay(t, 0) }

// newJobHarnessStopDelay lets each StopWorker take stopDelay (on the test
// clock), so that a test can see how many run at once.
func newJobHarnessStopDelay(t *testing.T, stopDelay time.Duration, setup ...func(*testsuite.WorkflowTestSuite)) *jobHarness {
	var s testsuite.WorkflowTestSuite
	for _, f := range setup {
		f(&s)
	}
	h := &jobHarness{t: t, env: testenv.NewWorkflowEnv(&s), acts: &activities.Activities{}, seq: 7}
	h.env.SetStartTime(testStart)
	h.env.RegisterWorkflowWithOptions(JobWorkflow, workflowOpts(protocol.JobWorkflowName))
	h.env.RegisterActivity(h.acts)
	h.env.OnActivity(h.acts.RequestCapacity, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RequestCapacityInput) (protocol.CapacityReply, error) {
			if h.duringRequest != nil {
				h.duringRequest(in)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			var learned *protocol.RuntimeEstimate
			if in.Learn != nil {
				h.estimates = append(h.estimates, *in.Learn)
				if learned = h.estimate; learned != nil {
					in.Request.RunEstimate = learned.Runtime
				}
			}
			h.requests = append(h.requests, in.Request)
			if h.refuse != nil {
				return protocol.CapacityReply{}, h.refuse
			}
			seq := in.Request.Seq
			if seq == 0 {
				seq = h.seq
			}
			if h.unexplained {
				return protocol.CapacityReply{Seq: seq, Estimate: learned}, nil
			}
			return protocol.CapacityReply{Seq: seq, Position: 1, Reason: "waiting for capacity", Estimate: learned}, nil
		}).Maybe()
	h.env.OnActivity(h.acts.Rendezvous, mock.Anything, mock.Anything).Return(activities.Rendezvous{Addr: "127.0.0.1", Port: 29500}, nil).Maybe()
	h.env.OnActivity(h.acts.StartWorker, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, spec cluster.WorkerSpec) (cluster.WorkerStatus, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.starts = append(h.starts, spec)
			h.startQueue = append(h.startQueue, activity.GetInfo(ctx).TaskQueue)
			if h.busyStarts[spec.ID] {
				busy := &cluster.GPUsBusy{Node: spec.Node, GPUs: spec.GPUs, Holder: cluster.WorkerID{Job: "other", Attempt: 1}}
				return cluster.WorkerStatus{ID: spec.ID}, temporal.NewNonRetryableApplicationError(busy.Error(), activities.ErrTypeGPUsBusy, busy)
			}
			return cluster.WorkerStatus{ID: spec.ID, Phase: cluster.PhaseRunning, PID: 100 + spec.ID.Worker}, nil
		}).Maybe()
	h.env.OnActivity(h.acts.StopWorker, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.StopWorkerInput) (cluster.WorkerStatus, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.stops = append(h.stops, in)
			h.stopAt = append(h.stopAt, h.env.Now())
			h.stopQueue = append(h.stopQueue, activity.GetInfo(ctx).TaskQueue)
			return cluster.WorkerStatus{ID: in.ID, Phase: cluster.PhaseExited, ExitCode: 143, Signaled: true}, nil
		}).After(stopDelay).Maybe()
	h.env.OnSignalExternalWorkflow(mock.Anything, testAllocator, "", mock.Anything, mock.Anything).Return(
		func(_, _, _, name string, arg any) error {
			var refusals *int
			if name == protocol.SignalRelease {
				refusals = &h.refuseReleases
			}
			return h.toAllocator(name, arg, errors.New("unable to signal external workflow for unknown cause: SignalCountLimitExceeded"), refusals)
		}).Maybe()
	// A withdrawal goes as an update, from an activity.
	h.env.OnActivity(h.acts.ReportWithdrawal, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ReportWithdrawalInput) error {
			assert.Equal(h.t, testAllocator, in.Allocator) // an activity's goroutine: no FailNow
			return h.toAllocator(withdrawByUpdate, in.Withdrawal, errRefusedUpdate, &h.refuseWithdrawals)
		}).Maybe()
	return h
}

// withdrawByUpdate names a withdrawal sent as an update among the signals
// recorded.
const withdrawByUpdate = "update " + protocol.UpdateWithdraw

// errRefusedUpdate is what a report returns when the allocator refused its
// update for as long as it tried.
var errRefusedUpdate = errors.New("context deadline exceeded: the allocator refused the update (ResourceExhausted)")

// toAllocator records a message the job sent its allocator, or, while
// *refusals lasts (if refusals is not nil), refuses it with refused.
func (h *jobHarness) toAllocator(name string, arg any, refused error, refusals *int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if refusals != nil && *refusals > 0 {
		*refusals--
		return refused
	}
	h.signals = append(h.signals, sentSignal{name: name, arg: arg})
	return nil
}

// watch mocks WatchWorker for the attempts matched by attempt: it returns
// exit code code after d (forever = until the workflow cancels it).
func (h *jobHarness) watch(attempt, worker int, d time.Duration, code int) {
	h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
		return in.Attempt == attempt && (worker < 0 || in.Worker == worker)
	})).After(d).Return(func(_ context.Context, in activities.WatchWorkerInput) (cluster.WorkerStatus, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		id := in.WorkerID
		h.watches = append(h.watches, id)
		h.watchRuns = append(h.watchRuns, in.Run)
		return cluster.WorkerStatus{ID: id, Phase: cluster.PhaseExited, ExitCode: code}, nil
	})
}

// placement puts worker i on node basic-<i+1>, GPUs 0 and 1.
func placement(workers int) []scheduler.WorkerPlacement {
	var p []scheduler.WorkerPlacement
	for i := 0; i < workers; i++ {
		p = append(p, scheduler.WorkerPlacement{Worker: i, Node: "basic-" + string(rune('1'+i)), GPUs: []int{0, 1}})
	}
	return p
}

func (h *jobHarness) grantAt(d time.Duration, attempt, workers int) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Attempt: attempt, Placement: placement(workers), StopGracePeriod: 5 * time.Second})
	}, d)
}

func (h *jobHarness) preemptAt(d time.Duration, attempt int, by string) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalPreempt, protocol.PreemptSignal{Attempt: attempt,
			Preemptor: scheduler.Preemptor{Job: by, Class: scheduler.High, Kind: scheduler.KindJob},
			Reason:    "a high job needs the capacity"})
	}, d)
}

func (h *jobHarness) run(spec protocol.JobSpec) {
	h.env.ExecuteWorkflow(protocol.JobWorkflowName, protocol.JobInput{Name: testJob, Spec: spec})
	require.True(h.t, h.env.IsWorkflowCompleted())
}

func (h *jobHarness) status() protocol.JobStatus {
	h.t.Helper()
	return query[protocol.JobStatus](h.t, h.env, protocol.QueryStatus)
}

// releases returns the release signals sent for attempt, in order.
func (h *jobHarness) releases(attempt int) []protocol.ReleaseSignal {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.ReleaseSignal
	for _, s := range h.signals {
		if r, ok := s.arg.(protocol.ReleaseSignal); ok && s.name == protocol.SignalRelease && r.Attempt == attempt {
			out = append(out, r)
		}
	}
	return out
}

// releasedWorkers checks that exactly one release of an attempt marks the job
// stopping, that every other names one worker (the stopping one may name none)
// and returns the workers in the order the releases were recorded. The test
// environment records signals sent at the same moment in any order, as the
// server may deliver them: the allocator takes them in any order.
func releasedWorkers(t *testing.T, rs []protocol.ReleaseSignal) []int {
	t.Helper()
	var out []int
	stopping := 0
	for _, r := range rs {
		assert.Equal(t, testJob, r.Job)
		if r.Stopping {
			stopping++
			if len(r.Workers) == 0 {
				continue
			}
		}
		// The test environment runs the workflow after each activity
		// completion apart, so no two releases share a task (and a signal).
		require.Len(t, r.Workers, 1, "releases go worker by worker here: %+v", r)
		out = append(out, r.Workers[0])
	}
	if len(rs) > 0 {
		assert.Equal(t, 1, stopping, "one release of an attempt marks the job stopping: %+v", rs)
	}
	return out
}

func sorted(v []int) []int {
	out := append([]int(nil), v...)
	sort.Ints(out)
	return out
}

func appErrType(t *testing.T, err error) string {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want an application error, got %v", err)
	return appErr.Type()
}

func TestJobGrantRunComplete(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 1, st.Attempt)
	assert.Equal(t, 0, st.Restarts)
	assert.Equal(t, 4, st.GPUs)
	assert.Equal(t, testStart, st.CreatedAt.UTC())
	require.NotNil(t, st.PendingAt)
	require.NotNil(t, st.RunningAt)
	require.NotNil(t, st.CompletedAt)
	assert.Equal(t, testStart, st.PendingAt.UTC())
	assert.Equal(t, testStart.Add(time.Minute), st.RunningAt.UTC())
	assert.True(t, !st.CompletedAt.Before(testStart.Add(11*time.Minute)), "completed at %s", st.CompletedAt)
	require.Len(t, st.Attempts, 1)
	a := st.Attempts[0]
	assert.Equal(t, 1, a.Number)
	assert.Equal(t, testStart, a.QueuedAt.UTC())
	require.NotNil(t, a.StartedAt)
	require.NotNil(t, a.EndedAt)
	require.NotNil(t, a.ExitCode)
	assert.Equal(t, 0, *a.ExitCode)
	assert.Nil(t, a.Preemptor)
	assert.Len(t, a.Placement, 2)

	// One request, attempt 1, Seq 0 (first request), class medium.
	require.Len(t, h.requests, 1)
	assert.Equal(t, protocol.CapacityRequest{Job: testJob, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Medium,
		InstanceType: "a100.2gpu", Workers: 2, Seq: 0, SubmittedAt: h.requests[0].SubmittedAt,
		Demand: &scheduler.Demand{Family: "a100", GPUs: 2}}, h.requests[0])
	assert.Equal(t, testStart, h.requests[0].SubmittedAt.UTC())
	// Workers start on their nodes' queues, with the rendezvous address.
	require.Len(t, h.starts, 2)
	assert.ElementsMatch(t, []string{"trainq-node-basic-1", "trainq-node-basic-2"}, h.startQueue)
	for _, s := range h.starts {
		assert.Equal(t, "127.0.0.1", s.MasterAddr)
		assert.Equal(t, 29500, s.MasterPort)
		assert.Equal(t, 2, s.Workers)
	}
	// Both workers exited by themselves: nothing to stop, each released once.
	assert.Empty(t, h.stops)
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, h.releases(1))))
	assert.Len(t, h.releases(1), 2)
}

// A one-worker attempt starts with one node activity (StartWorker picks its
// rendezvous on the node), and the node activities that see a worker gone
// report its release to the allocator themselves; the job reports it too.
func TestOneWorkerAttemptStartsInOneStepAndNodesReportReleases(t *testing.T) {
	h := newJobHarness(t)
	var watched []activities.WatchWorkerInput
	h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(_ context.Context, in activities.WatchWorkerInput) (cluster.WorkerStatus, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			watched = append(watched, in)
			return cluster.WorkerStatus{ID: in.WorkerID, Phase: cluster.PhaseExited}, nil
		})
	h.grantAt(time.Minute, 1, 1)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	require.Len(t, h.starts, 1)
	assert.Empty(t, h.starts[0].MasterAddr, "a one-worker attempt has no Rendezvous activity")
	assert.Zero(t, h.starts[0].MasterPort)
	require.Len(t, watched, 1)
	assert.Equal(t, testAllocator, watched[0].ReleaseTo)
	assert.Equal(t, []int{0}, releasedWorkers(t, h.releases(1)))
}

// The capacity request is a local activity, so a grant can come before the
// job's first workflow task completes; when that task fails (a worker
// killed, the server down), the retried task finds the grant in the same
// history as the start. It must still count.
func TestGrantInTheFirstTaskCounts(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(0, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateCompleted, h.status().State)
}

// preemptedThenRerun sets a two-worker low job's story: granted at 1 minute,
// preempted by a high job at preemptAfter, granted again at 2 hours, and
// done 10 minutes later. It returns the job's spec, for run.
func (h *jobHarness) preemptedThenRerun(preemptAfter time.Duration) protocol.JobSpec {
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, forever, 0)
	h.preemptAt(preemptAfter, 1, "lm-mpi-job-high")
	h.grantAt(2*time.Hour, 2, 2)
	h.watch(2, -1, 10*time.Minute, 0)
	return fixture.Job{Class: "low", Workers: 2, MaxRetry: 1}.Spec()
}

func TestJobPreemptedAndRerun(t *testing.T) {
	h := newJobHarness(t)
	h.run(h.preemptedThenRerun(30 * time.Minute))
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 2, st.Attempt)
	assert.Equal(t, 1, st.Restarts)
	require.Len(t, st.Attempts, 2)
	first := st.Attempts[0]
	require.NotNil(t, first.Preemptor)
	assert.Equal(t, "lm-mpi-job-high", first.Preemptor.Job)
	assert.Equal(t, scheduler.High, first.Preemptor.Class)
	assert.Contains(t, first.EndReason, "preempted by lm-mpi-job-high")
	require.Len(t, st.Preemptors, 1)
	assert.Nil(t, st.Attempts[1].Preemptor)
	assert.Equal(t, testStart.Add(time.Minute), st.RunningAt.UTC(), "running_at is the first start")

	// Attempt 2 keeps the Seq the allocator gave attempt 1.
	require.Len(t, h.requests, 2)
	assert.Equal(t, int64(0), h.requests[0].Seq)
	assert.Equal(t, 2, h.requests[1].Attempt)
	assert.Equal(t, h.seq, h.requests[1].Seq)
	assert.Equal(t, scheduler.Low, h.requests[1].Class)
	// It also carries how often the job was preempted, for the policy's limit.
	assert.Equal(t, 0, h.requests[0].Preemptions)
	assert.Equal(t, 1, h.requests[1].Preemptions)

	// Attempt 1: a stopping notice, then both workers stopped gracefully
	// on their nodes and released one by one.
	rs := h.releases(1)
	require.Len(t, rs, 3)
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, rs)))
	var stopped []int
	for i, s := range h.stops {
		if s.ID.Attempt == 1 {
			stopped = append(stopped, s.ID.Worker)
			assert.Equal(t, 5*time.Second, s.Grace)
			assert.Equal(t, "trainq-node-basic-"+string(rune('1'+s.ID.Worker)), h.stopQueue[i])
			assert.Equal(t, testAllocator, s.ReleaseTo, "the node reports the stop to the allocator")
		}
	}
	assert.Equal(t, []int{0, 1}, sorted(stopped))
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, h.releases(2))))
}

func TestJobPreemptedRetriesExhausted(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.preemptAt(30*time.Minute, 1, "lm-mpi-job-high")
	h.grantAt(2*time.Hour, 2, 1)
	h.watch(2, -1, forever, 0)
	h.preemptAt(3*time.Hour, 2, "lm-mpi-job-high2")
	h.run(fixture.Job{Class: "low", MaxRetry: 1}.Spec())

	assert.Equal(t, ErrTypeJobPreempted, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StatePreempted, st.State)
	assert.Equal(t, 2, st.Attempt)
	assert.Equal(t, 1, st.Restarts)
	require.Len(t, st.Preemptors, 2)
	assert.Equal(t, "lm-mpi-job-high2", st.Preemptors[1].Job)
	assert.Contains(t, st.Message, "no retries left")
	require.NotNil(t, st.CompletedAt)
	require.Len(t, h.requests, 2)
	assert.Len(t, h.stops, 2)
	assert.Equal(t, []int{0}, releasedWorkers(t, h.releases(2)))
}

func TestJobPreemptedWithoutRetries(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.preemptAt(30*time.Minute, 1, "lm-mpi-job-high")
	h.run(fixture.Job{Class: "low"}.Spec())
	assert.Equal(t, ErrTypeJobPreempted, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StatePreempted, st.State)
	require.NotNil(t, st.Attempts[0].Preemptor)
	assert.Len(t, h.requests, 1)
}

func TestJobWorkerFailureRerunsThenSucceeds(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, 0, 5*time.Minute, 3) // worker 0 fails
	h.watch(1, 1, forever, 0)       // worker 1 still runs: it must be stopped
	h.grantAt(time.Hour, 2, 2)
	h.watch(2, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 2}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 2, st.Attempt)
	assert.Equal(t, 1, st.Restarts)
	require.Len(t, st.Attempts, 2)
	require.NotNil(t, st.Attempts[0].ExitCode)
	assert.Equal(t, 3, *st.Attempts[0].ExitCode)
	assert.Contains(t, st.Attempts[0].EndReason, "exited with code 3")
	assert.Nil(t, st.Attempts[0].Preemptor)

	// Worker 0 is released as it exits; only worker 1 is stopped.
	rs := h.releases(1)
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, rs)), "the two releases may reach the allocator in either order (neighbour run 43 saw 1 before 0)")
	require.Len(t, rs, 2)
	var stopped []int
	for _, s := range h.stops {
		stopped = append(stopped, s.ID.Worker)
		assert.Equal(t, 1, s.ID.Attempt)
	}
	assert.Equal(t, []int{1}, stopped)
	require.Len(t, h.requests, 2)
	assert.Equal(t, h.seq, h.requests[1].Seq)
}

func TestJobFailureWithoutRetriesFails(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, 5*time.Minute, 3)
	h.run(fixture.Job{Class: "medium"}.Spec())
	assert.Equal(t, ErrTypeJobFailed, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StateFailed, st.State)
	assert.Equal(t, 1, st.Attempt)
	assert.Contains(t, st.Message, "exited with code 3")
	require.NotNil(t, st.CompletedAt)
	assert.Len(t, h.requests, 1)
	assert.Empty(t, h.stops)
	assert.Equal(t, []int{0}, releasedWorkers(t, h.releases(1)))
}

func TestJobCancelWhileRunning(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, forever, 0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 3}.Spec())

	var canceled *temporal.CanceledError
	require.True(t, errors.As(h.env.GetWorkflowError(), &canceled), "got %v", h.env.GetWorkflowError())
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, 1, st.Attempt, "a cancelled job is not rerun")
	assert.Equal(t, 0, st.Restarts)
	require.NotNil(t, st.CompletedAt)
	assert.Equal(t, "stopped by the user", st.Attempts[0].EndReason)

	var stopped []int
	for _, s := range h.stops {
		stopped = append(stopped, s.ID.Worker)
	}
	assert.Equal(t, []int{0, 1}, sorted(stopped))
	rs := h.releases(1)
	require.Len(t, rs, 3, "a stopping notice, then one release per worker: %+v", rs)
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, rs)))
	assert.Len(t, h.requests, 1)
}

func TestJobCancelWhilePending(t *testing.T) {
	h := newJobHarness(t)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 3}.Spec())

	var canceled *temporal.CanceledError
	require.True(t, errors.As(h.env.GetWorkflowError(), &canceled), "got %v", h.env.GetWorkflowError())
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Nil(t, st.RunningAt)
	assert.Contains(t, st.Attempts[0].EndReason, "pending")
	assert.Empty(t, h.starts, "a job cancelled while pending starts nothing")
	assert.Empty(t, h.stops)
	require.Len(t, h.signals, 1)
	assert.Equal(t, withdrawByUpdate, h.signals[0].name)
	assert.Equal(t, protocol.WithdrawSignal{Job: testJob, Attempt: 1}, h.signals[0].arg)
}

// A withdrawal the allocator does not take in time (too busy to take
// updates) is sent again until it has it: a request it kept would hold its
// place, and perhaps a reservation, for a job that has gone. (The activity
// sends the signal at its last try: see activities.ReportWithdrawal.)
func TestRefusedWithdrawalIsSentAgain(t *testing.T) {
	h := newJobHarness(t)
	h.refuseWithdrawals = 2
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	var during protocol.JobState
	h.env.RegisterDelayedCallback(func() { during = h.status().State }, 20*time.Minute+500*time.Millisecond)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())

	var canceled *temporal.CanceledError
	require.True(t, errors.As(h.env.GetWorkflowError(), &canceled), "got %v", h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateStopping, during, "the job says it stops while its withdrawal is on its way")
	assert.Equal(t, protocol.StateStopped, h.status().State)
	assert.Zero(t, h.refuseWithdrawals, "the allocator refused two withdrawals")
	require.Len(t, h.signals, 1, "%+v", h.signals)
	assert.Equal(t, withdrawByUpdate, h.signals[0].name)
	assert.Equal(t, protocol.WithdrawSignal{Job: testJob, Attempt: 1}, h.signals[0].arg)
}

// A job whose history began before withdrawals went as updates (an older
// build's) signals its withdrawal, as it did then.
func TestWithdrawalOfAnOlderHistoryIsASignal(t *testing.T) {
	h := newJobHarness(t)
	h.env.OnGetVersion(versionWithdrawByUpdate, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())

	assert.Equal(t, protocol.StateStopped, h.status().State)
	require.Len(t, h.signals, 1, "%+v", h.signals)
	assert.Equal(t, protocol.SignalWithdraw, h.signals[0].name)
}

func TestJobCapacityRefusedFailsAtOnce(t *testing.T) {
	h := newJobHarness(t)
	h.refuse = temporal.NewNonRetryableApplicationError("allocation T/basic cannot run it: the job needs 9 workers",
		activities.ErrTypeCapacityRefused, nil)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 5}.Spec())

	assert.Equal(t, ErrTypeJobFailed, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StateFailed, st.State)
	assert.Equal(t, 1, st.Attempt, "a refusal is not retried")
	assert.Len(t, h.requests, 1, "a refused request is not retried")
	assert.Contains(t, st.Message, "needs 9 workers")
	assert.Empty(t, h.starts)
	assert.Empty(t, h.signals)
}

func TestNotebookIsHighClass(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 48*time.Hour)
	spec := fixture.Job{Class: "low"}.Spec()
	spec.Kind = scheduler.KindNotebook
	h.run(spec)

	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State, "a notebook runs until stopped")
	assert.Equal(t, "high", st.Priority)
	require.Len(t, h.requests, 1)
	assert.Equal(t, scheduler.High, h.requests[0].Class)
	assert.Equal(t, scheduler.KindNotebook, h.requests[0].Kind)
}

func TestJobBadSpecFails(t *testing.T) {
	h := newJobHarness(t)
	spec := fixture.Job{Class: "urgent"}.Spec()
	h.run(spec)
	assert.Equal(t, ErrTypeBadJob, appErrType(t, h.env.GetWorkflowError()))
	assert.Empty(t, h.requests)
}

// A refuse signal ends a waiting attempt as a final failure.
func TestJobRefusedWhileWaitingFails(t *testing.T) {
	h := newJobHarness(t)
	h.env.RegisterDelayedCallback(func() {
		// A stale refusal for another attempt is ignored.
		h.env.SignalWorkflow(protocol.SignalRefuse, protocol.RefuseSignal{Attempt: 7, Reason: "stale"})
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalRefuse, protocol.RefuseSignal{Attempt: 1,
			Reason: "allocation T/basic was reconfigured and can no longer run this job: the job needs 2 workers"})
	}, 10*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 5}.Spec())

	assert.Equal(t, ErrTypeJobFailed, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StateFailed, st.State)
	assert.Equal(t, 1, st.Attempt, "a refusal is not retried")
	assert.Equal(t, 0, st.Restarts)
	assert.Contains(t, st.Message, "was reconfigured and can no longer run this job")
	assert.NotContains(t, st.Message, "stale")
	require.Len(t, st.Attempts, 1)
	assert.Contains(t, st.Attempts[0].EndReason, "reconfigured")
	assert.Equal(t, testStart.Add(10*time.Minute), *st.CompletedAt)
	assert.Len(t, h.requests, 1)
	assert.Empty(t, h.starts)
	assert.Empty(t, h.signals, "the allocator already dropped the request: nothing to withdraw")
}

// A refusal that says rerun (the allocator gave up an attempt the job no
// longer knew it held, see allocation.State.ForgottenAnswered) ends the waiting
// attempt without spending max_retry: the job asks again as its next attempt.
func TestJobToldToRerunWhileWaitingRerunsFree(t *testing.T) {
	h := newJobHarness(t)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalRefuse, protocol.RefuseSignal{Attempt: 1, Rerun: true,
			Reason: "the job asked again for attempt 1 while the allocation was releasing it (was its workflow reset?)"})
	}, time.Minute)
	h.grantAt(2*time.Minute, 2, 1)
	h.watch(2, 0, time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 1, MaxRetry: 0}.Spec())

	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 2, st.Attempt)
	assert.Equal(t, 0, st.Restarts, "the allocator's giving up spends no retry")
	require.Len(t, st.Attempts, 2)
	assert.Contains(t, st.Attempts[0].EndReason, "was its workflow reset?")
	require.Len(t, h.requests, 2)
	assert.Equal(t, 2, h.requests[1].Attempt)
	assert.Len(t, h.starts, 1, "nothing was started for the attempt given up")
}

// watchReported mocks WatchWorker for worker of attempt: it exits 0 after d,
// and the node activity says it reported the release to the allocator.
func (h *jobHarness) watchReported(attempt, worker int, d time.Duration) {
	h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
		return in.Attempt == attempt && in.Worker == worker
	})).After(d).Return(func(_ context.Context, in activities.WatchWorkerInput) (cluster.WorkerStatus, error) {
		return cluster.WorkerStatus{ID: in.WorkerID, Phase: cluster.PhaseExited, ReleaseReported: in.ReleaseTo != ""}, nil
	})
}

// releaseSignals returns every release signal the job sent.
func (h *jobHarness) releaseSignals() []protocol.ReleaseSignal {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.ReleaseSignal
	for _, s := range h.signals {
		if r, ok := s.arg.(protocol.ReleaseSignal); ok && s.name == protocol.SignalRelease {
			out = append(out, r)
		}
	}
	return out
}

// A release the node activity reported is not sent again by the job: the
// job ends without a signal of its own.
func TestReleaseTheNodeReportedIsNotSentAgain(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watchReported(1, 0, 5*time.Minute)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateCompleted, h.status().State)
	assert.Empty(t, h.releaseSignals())
}

// A recovering allocator that registered the job while a node activity ran
// was told the worker still held its capacity, and the node's report may
// have gone to the allocator it replaced: the job reports the release
// itself. A register answer after the node's report lists the worker as
// released, and the job sends nothing for it.
func TestReleaseAfterARegisterIsSentByTheJob(t *testing.T) {
	h := newJobHarness(t)
	var during, after protocol.JobHold
	h.grantAt(time.Minute, 1, 2)
	h.watchReported(1, 0, 5*time.Minute)
	h.watch(1, 1, forever, 0)
	h.register(3*time.Minute, "e1", &during)
	h.register(7*time.Minute, "e2", &after)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())

	assert.Empty(t, during.Released, "worker 0 still ran at the first register")
	assert.Equal(t, []int{0}, after.Released, "the node's report counts in the register answer")
	assert.Equal(t, []int{0, 1}, releasedWorkers(t, h.releases(1)),
		"worker 0's release is sent again (a register came during its watch); worker 1's stop was not reported by its node")
}

// Without a register during the watch, only the release the node did not
// report is sent.
func TestOnlyUnreportedReleasesAreSent(t *testing.T) {
	h := newJobHarness(t)
	var after protocol.JobHold
	h.grantAt(time.Minute, 1, 2)
	h.watchReported(1, 0, 5*time.Minute)
	h.watch(1, 1, forever, 0)
	h.register(7*time.Minute, "e1", &after)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())

	assert.Equal(t, []int{0}, after.Released)
	rs := h.releaseSignals()
	require.Len(t, rs, 1, "%+v", rs)
	assert.Equal(t, []int{1}, rs[0].Workers, "worker 1 was stopped by StopWorker, which reported nothing")
	assert.False(t, rs[0].Stopping, "the node's report already marked the job stopping")
}

// A release the server refuses (the allocator's run took its limit of
// signals while it recovered) is sent again until the allocator has it:
// dropped, it would leave the attempt's GPUs held for ever.
func TestRefusedReleaseIsSentAgain(t *testing.T) {
	h := newJobHarness(t)
	h.refuseReleases = 3
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateCompleted, h.status().State)
	assert.Zero(t, h.refuseReleases, "the server refused three releases")
	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, h.releases(1))), "every worker's release reached the allocator")
}

// TestLargestJobStopsWithinThePendingActivitiesLimit: a preempted attempt
// has its watches pending (cancelled, not yet acknowledged) while its workers
// stop; with MaxNWorkers workers and a StopWorker for every worker at once the
// job would pass Temporal's 2,000 pending activities, and its workflow task
// would fail on every retry. The stops in flight stay within what the
// budget leaves, and every worker is stopped. The budget is scaled down with
// the job (1,024 mocked workers take the test environment over its 1 s
// deadlock limit per task): 80 workers under a budget of 100.
func TestLargestJobStopsWithinThePendingActivitiesLimit(t *testing.T) {
	const workers, budget = 80, 100
	saved := jobActivityBudget
	jobActivityBudget = budget
	t.Cleanup(func() { jobActivityBudget = saved })
	h := newJobHarnessStopDelay(t, 10*time.Second)
	h.grantAt(time.Minute, 1, workers)
	h.watch(1, -1, forever, 0)
	h.preemptAt(30*time.Minute, 1, "lm-mpi-job-high")
	h.run(fixture.Job{Class: "low", Workers: workers}.Spec())
	require.Error(t, h.env.GetWorkflowError(), "preempted with no retries left")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.stops, workers, "every worker was stopped")
	startedAt := map[time.Time]int{}
	for _, at := range h.stopAt {
		startedAt[at]++
	}
	most := 0
	for _, n := range startedAt {
		most = max(most, n)
	}
	assert.LessOrEqual(t, workers+most, budget, "watches and stops pending at once")
	assert.Greater(t, len(startedAt), 1, "the stops went out in waves")
}

// TestStopTimerStopsTheJobAfterItsRunningTime: a job with stop_timer 30
// minutes runs 20 minutes in its first attempt (preempted), then 10 in its
// second, and is stopped then: its workers get their graceful stop and it
// ends Stopped, with a reason that names the limit.
func TestStopTimerStopsTheJobAfterItsRunningTime(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.preemptAt(21*time.Minute, 1, "lm-mpi-job-high")
	h.grantAt(2*time.Hour, 2, 1)
	h.watch(2, -1, forever, 0)
	spec := fixture.Job{Class: "low", MaxRetry: 3}.Spec()
	spec.TimeLimit = 30 * time.Minute
	h.run(spec)
	require.NoError(t, h.env.GetWorkflowError(), "a job its stop_timer stopped ends without error")

	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, "stopped by its stop_timer after 30 minutes of running", st.Message)
	require.Len(t, st.Attempts, 2)
	second := st.Attempts[1]
	require.NotNil(t, second.StartedAt)
	require.NotNil(t, second.EndedAt)
	ran := st.Attempts[0].EndedAt.Sub(*st.Attempts[0].StartedAt) + second.EndedAt.Sub(*second.StartedAt)
	assert.InDelta(t, (30 * time.Minute).Seconds(), ran.Seconds(), 10, "the attempts ran 30 minutes in all (the stops take a few seconds)")
	var stopped int
	for _, s := range h.stops {
		if s.ID.Attempt == 2 {
			stopped++
		}
	}
	assert.Equal(t, 1, stopped, "the second attempt's worker got its graceful stop")
}

// TestWorkersGetTheRequestsMLSpaceSettings: conda_env, shm_size_class,
// internet and the elastic range reach every worker's start.
func TestWorkersGetTheRequestsMLSpaceSettings(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, time.Minute, 0)
	spec := fixture.Job{Class: "medium", Workers: 2}.Spec()
	no := false
	spec.Type, spec.CondaEnv, spec.ShmSizeClass, spec.Internet = "pytorch_elastic", "torch", "large", &no
	spec.ElasticMinWorkers, spec.ElasticMaxWorkers, spec.ElasticMaxRestarts = 1, 2, 5
	h.run(spec)
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, h.starts, 2)
	for _, s := range h.starts {
		assert.Equal(t, "torch", s.CondaEnv)
		assert.Equal(t, 128, s.ShmGB, "large: 64 GB for each of the worker's 2 GPUs")
		assert.True(t, s.NoInternet)
		assert.Equal(t, []int{1, 2, 5}, []int{s.ElasticMinWorkers, s.ElasticMaxWorkers, s.ElasticMaxRestarts})
	}
}

//nolint:unparam // the call names the attempt preempted, as the signal does; the tests all use attempt 1 today
func (h *jobHarness) preemptWithNoticeAt(d time.Duration, attempt int, notice time.Duration) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalPreempt, protocol.PreemptSignal{Attempt: attempt,
			Preemptor: scheduler.Preemptor{Job: "lm-mpi-job-high", Class: scheduler.High, Kind: scheduler.KindJob},
			Reason:    "a high job needs the capacity", Notice: notice})
	}, d)
}

// notices records the notices given.
func (h *jobHarness) notices() *[]activities.NoticeWorkerInput {
	var got []activities.NoticeWorkerInput
	h.env.OnActivity(h.acts.NoticeWorker, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.NoticeWorkerInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		got = append(got, in)
		return nil
	}).Maybe()
	return &got
}

// TestPreemptionNoticeThenExit: with a notice, the victim's workers are
// told why, by whom (class and kind, not the name) and by when; a worker
// that exits then, whatever its code, is a preemption (it reruns), and it is
// not stopped: its capacity is released as it exits, before the deadline.
func TestPreemptionNoticeThenExit(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, 29*time.Minute+10*time.Second, 3) // both exit 10 s after the notice, code 3
	h.preemptWithNoticeAt(30*time.Minute, 1, time.Minute)
	h.grantAt(2*time.Hour, 2, 2)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "low", Workers: 2, MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 1, st.Restarts, "the exit after the notice is a preemption, not a failure")
	first := st.Attempts[0]
	require.NotNil(t, first.NoticeDeadline)
	assert.Equal(t, testStart.Add(31*time.Minute), first.NoticeDeadline.UTC())
	assert.Contains(t, first.EndReason, "its workers exited on the notice, 50s before the deadline")
	require.Len(t, *notices, 2)
	for _, n := range *notices {
		assert.Equal(t, protocol.NoticeReasonPreempted, n.Notice.Reason)
		assert.Equal(t, &protocol.NoticeBy{Class: "high", Kind: scheduler.KindJob}, n.Notice.By, "the preemptor's class and kind, never its name")
		assert.Equal(t, testStart.Add(31*time.Minute), n.Notice.Deadline.UTC())
	}
	for _, s := range h.stops {
		assert.NotEqual(t, 1, s.ID.Attempt, "a worker that exited on its notice is not stopped")
	}
}

// TestPreemptionNoticeIgnored: a worker that does not exit on its notice is
// stopped at the deadline, as a preempted worker is without one.
func TestPreemptionNoticeIgnored(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.preemptWithNoticeAt(30*time.Minute, 1, time.Minute)
	h.grantAt(2*time.Hour, 2, 1)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "low", MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, *notices, 1)
	var stopAt []time.Time
	for i, s := range h.stops {
		if s.ID.Attempt == 1 {
			stopAt = append(stopAt, h.stopAt[i])
		}
	}
	require.Len(t, stopAt, 1)
	assert.Equal(t, testStart.Add(31*time.Minute), stopAt[0].UTC(), "SIGTERM at the deadline")
	assert.Equal(t, 1, h.status().Restarts)
}

// TestNoticesStayWithinThePendingActivitiesLimit: the notices of a wide job
// go out in waves beside its watches, and its stops wait for them, so no
// task has more pending activities than the budget.
func TestNoticesStayWithinThePendingActivitiesLimit(t *testing.T) {
	const workers, budget = 12, 20
	saved := jobActivityBudget
	jobActivityBudget = budget
	t.Cleanup(func() { jobActivityBudget = saved })
	h := newJobHarness(t)
	var noticeAt []time.Time
	h.env.OnActivity(h.acts.NoticeWorker, mock.Anything, mock.Anything).After(5 * time.Second).Return(func(_ context.Context, _ activities.NoticeWorkerInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		noticeAt = append(noticeAt, h.env.Now())
		return nil
	})
	h.grantAt(time.Minute, 1, workers)
	h.watch(1, -1, forever, 0)
	h.preemptWithNoticeAt(30*time.Minute, 1, time.Minute)
	h.run(fixture.Job{Class: "low", Workers: workers}.Spec())
	require.Error(t, h.env.GetWorkflowError(), "preempted with no retries left")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, noticeAt, workers, "every worker got its notice")
	waves := map[time.Time]int{}
	for _, at := range noticeAt {
		waves[at]++
	}
	most := 0
	for _, n := range waves {
		most = max(most, n)
	}
	assert.LessOrEqual(t, workers+most, budget, "watches and notices pending at once")
	assert.Greater(t, len(waves), 1, "the notices went out in waves")
	require.Len(t, h.stops, workers)
	for _, at := range h.stopAt {
		assert.False(t, at.Before(noticeAt[len(noticeAt)-1]), "no stop is pending beside a notice")
	}
}

// The job parses its spec once, and its capacity requests carry the demand
// parsed there, for every attempt, so that neither its admission nor the
// allocator parses the instance type again.
func TestRequestsCarryTheParsedDemand(t *testing.T) {
	h := newJobHarness(t)
	spec := h.preemptedThenRerun(30 * time.Minute)
	h.run(spec)
	require.NoError(t, h.env.GetWorkflowError())

	want, err := scheduler.ParseInstanceType(spec.InstanceType)
	require.NoError(t, err)
	require.Len(t, h.requests, 2)
	for _, r := range h.requests {
		require.NotNil(t, r.Demand, "attempt %d", r.Attempt)
		assert.Equal(t, want, *r.Demand, "attempt %d", r.Attempt)
	}
}
