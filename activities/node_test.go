package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// The test binary doubles as the local backend's worker supervisor. This is
// an init, not a TestMain, so that other test files of the package stay free
// to have one.
func init() {
	if os.Getenv("TRAINQ_TEST_SUPERVISE") == "1" {
		os.Exit(local.Supervise(os.Args[len(os.Args)-1]))
	}
}

func newLocal(t *testing.T) *local.Backend {
	t.Helper()
	b, err := local.New(local.Options{
		DataDir:        t.TempDir(),
		SupervisorArgv: []string{"/usr/bin/env", "TRAINQ_TEST_SUPERVISE=1", os.Args[0]},
		PollInterval:   20 * time.Millisecond,
	})
	require.NoError(t, err)
	return b
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func workerSpec(job string, attempt, worker int, node string, gpus []int, script string) cluster.WorkerSpec {
	return cluster.WorkerSpec{
		ID:      cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker},
		Workers: 2, Node: node, GPUs: gpus, Type: cluster.TypeBinary, Script: script, ProcessesPerWorker: 1,
	}
}

// start starts a worker and stops it when the test ends.
func start(t *testing.T, b cluster.Backend, spec cluster.WorkerSpec) cluster.WorkerStatus {
	t.Helper()
	t.Cleanup(func() { _, _ = b.Stop(context.Background(), spec.ID, 0) })
	st, err := b.Start(testCtx(t), spec)
	require.NoError(t, err)
	return st
}

// waitForFile polls for a file the worker writes once it is ready.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", path)
}

func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "not an application error: %v", err)
	return appErr
}

// Workflows started before LogPeriod existed send a bare WorkerID; a retry
// of their WatchWorker must decode it.
func TestWatchWorkerInputDecodesOldPayload(t *testing.T) {
	var in WatchWorkerInput
	require.NoError(t, json.Unmarshal([]byte(`{"job":"lm-job","attempt":2,"worker":1}`), &in))
	assert.Equal(t, WatchWorkerInput{WorkerID: cluster.WorkerID{Job: "lm-job", Attempt: 2, Worker: 1}}, in)

	dc := converter.GetDefaultDataConverter()
	old, err := dc.ToPayloads(cluster.WorkerID{Job: "lm-job", Attempt: 3, Worker: 0})
	require.NoError(t, err)
	in = WatchWorkerInput{}
	require.NoError(t, dc.FromPayloads(old, &in))
	assert.Equal(t, cluster.WorkerID{Job: "lm-job", Attempt: 3, Worker: 0}, in.WorkerID)
	assert.Zero(t, in.LogPeriod)

	raw, err := json.Marshal(WatchWorkerInput{WorkerID: cluster.WorkerID{Job: "j", Attempt: 1, Worker: 2}, LogPeriod: time.Minute})
	require.NoError(t, err)
	assert.JSONEq(t, `{"job":"j","attempt":1,"worker":2,"log_period":60000000000}`, string(raw))
}

// An old workflow's payload runs the new activity end to end (the name
// skips the SDK's argument type check, as a payload from history does).
func TestWatchWorkerOldPayloadRuns(t *testing.T) {
	b := newLocal(t)
	spec := workerSpec("old-payload", 1, 0, "node-a", nil, "exit 4")
	start(t, b, spec)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: b})
	val, err := env.ExecuteActivity("WatchWorker", spec.ID)
	require.NoError(t, err)
	var st cluster.WorkerStatus
	require.NoError(t, val.Get(&st))
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 4, st.ExitCode)
}

func TestWatchWorkerNotFound(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: newLocal(t)})
	_, err := env.ExecuteActivity((&Activities{}).WatchWorker, WatchWorkerInput{WorkerID: cluster.WorkerID{Job: "never", Attempt: 1}})
	appErr := appError(t, err)
	assert.Equal(t, ErrTypeWorkerNotFound, appErr.Type())
	assert.True(t, appErr.NonRetryable())
}

func TestWatchWorkerStuck(t *testing.T) {
	b := newLocal(t)
	work := t.TempDir()
	spec := workerSpec("stuck-job", 1, 1, "node-a", []int{0}, fmt.Sprintf(`echo hello; touch %s/ready; exec sleep 1000`, work))
	began := time.Now()
	start(t, b, spec)
	waitForFile(t, filepath.Join(work, "ready"))

	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: b})
	var mu sync.Mutex
	beats := 0
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { mu.Lock(); beats++; mu.Unlock() })
	const period = 2 * time.Second
	in := WatchWorkerInput{WorkerID: spec.ID, LogPeriod: period}

	_, err := env.ExecuteActivity((&Activities{}).WatchWorker, in)
	silent := time.Since(began)
	appErr := appError(t, err)
	assert.Equal(t, ErrTypeWorkerStuck, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, err.Error(), "worker 1 wrote no log line for 2s (health_params.log_period)")
	// Coarse file-system timestamps may put the write a tick early.
	assert.GreaterOrEqual(t, silent, period-50*time.Millisecond, "reported stuck before the period")
	var st cluster.WorkerStatus
	require.True(t, appErr.HasDetails())
	require.NoError(t, appErr.Details(&st))
	assert.Equal(t, spec.ID, st.ID)
	mu.Lock()
	assert.Positive(t, beats, "heartbeats while watching")
	mu.Unlock()

	// The watch leaves the worker running: what happens next is the
	// workflow's decision.
	now, err := b.Status(testCtx(t), spec.ID)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseRunning, now.Phase)

	// A retried watch (say, after trainq-worker restarted) measures the
	// silence from the worker's state on disk, not from its own start: it
	// reports at its first check, well within another period.
	again := time.Now()
	_, err = env.ExecuteActivity((&Activities{}).WatchWorker, in)
	assert.Equal(t, ErrTypeWorkerStuck, appError(t, err).Type())
	assert.Less(t, time.Since(again), period*3/4)

	// A new log line resets the clock.
	log, err := b.LogPath(spec.ID)
	require.NoError(t, err)
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("progress\n")
	require.NoError(t, f.Close())
	require.NoError(t, err)
	wrote := time.Now()
	_, err = env.ExecuteActivity((&Activities{}).WatchWorker, in)
	assert.Equal(t, ErrTypeWorkerStuck, appError(t, err).Type())
	assert.GreaterOrEqual(t, time.Since(wrote), period-50*time.Millisecond)
}

// With Workers set (worker 0's watch), the attempt is stuck only when none
// of its workers writes; workers this node cannot see are skipped.
func TestWatchWorkerStuckJudgesTheAttempt(t *testing.T) {
	b := newLocal(t)
	work := t.TempDir()
	quiet := workerSpec("gang-job", 1, 0, "node-a", nil, fmt.Sprintf(`echo hello; touch %s/ready; exec sleep 1000`, work))
	quiet.Workers = 3
	chatty := workerSpec("gang-job", 1, 1, "node-b", nil, `i=0; while [ $i -lt 15 ]; do echo step $i; i=$((i+1)); sleep 0.1; done; exec sleep 1000`)
	chatty.Workers = 3
	began := time.Now()
	start(t, b, quiet)
	start(t, b, chatty)
	waitForFile(t, filepath.Join(work, "ready"))
	// Worker 2 runs on a node whose state this backend does not hold.

	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: b})
	const period = 2 * time.Second
	_, err := env.ExecuteActivity((&Activities{}).WatchWorker, WatchWorkerInput{WorkerID: quiet.ID, LogPeriod: period, Workers: 3})
	ended := time.Now()
	appErr := appError(t, err)
	assert.Equal(t, ErrTypeWorkerStuck, appErr.Type())
	assert.Contains(t, err.Error(), "workers 0-2 wrote no log line for 2s (health_params.log_period)")
	// Not at worker 0's silence alone: only a period after worker 1's last line.
	lastChat, err := b.LastOutput(testCtx(t), chatty.ID)
	require.NoError(t, err)
	assert.True(t, lastChat.After(began.Add(time.Second)), "worker 1 wrote for about 1.5s")
	assert.GreaterOrEqual(t, ended.Sub(lastChat), period-50*time.Millisecond)
}

// A worker that keeps writing is never stuck, and its exit is reported as
// usual.
func TestWatchWorkerNotStuckWhileWriting(t *testing.T) {
	b := newLocal(t)
	spec := workerSpec("busy-job", 1, 0, "node-a", nil, `i=0; while [ $i -lt 25 ]; do echo step $i; i=$((i+1)); sleep 0.1; done; exit 3`)
	start(t, b, spec)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: b})
	val, err := env.ExecuteActivity((&Activities{}).WatchWorker, WatchWorkerInput{WorkerID: spec.ID, LogPeriod: time.Second})
	require.NoError(t, err)
	var st cluster.WorkerStatus
	require.NoError(t, val.Get(&st))
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 3, st.ExitCode)
}

// A backend that cannot tell when a worker wrote watches without detection.
func TestWatchWorkerWithoutOutputClock(t *testing.T) {
	var plain struct{ cluster.Backend }
	plain.Backend = newLocal(t)
	spec := workerSpec("plain-job", 1, 0, "node-a", nil, `sleep 0.5; exit 0`)
	start(t, plain, spec)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: plain})
	val, err := env.ExecuteActivity((&Activities{}).WatchWorker, WatchWorkerInput{WorkerID: spec.ID, LogPeriod: 100 * time.Millisecond})
	require.NoError(t, err)
	var st cluster.WorkerStatus
	require.NoError(t, val.Get(&st))
	assert.Equal(t, 0, st.ExitCode)
}

func TestNodeOfTaskQueue(t *testing.T) {
	node, err := NodeOfTaskQueue(protocol.NodeTaskQueue("sr006-a100plus-1"))
	require.NoError(t, err)
	assert.Equal(t, "sr006-a100plus-1", node)
	for _, q := range []string{protocol.TaskQueue, protocol.NodeTaskQueuePrefix, "", "node-a", "x" + protocol.NodeTaskQueue("a")} {
		_, err := NodeOfTaskQueue(q)
		appErr := appError(t, err)
		assert.Equal(t, ErrTypeNotNodeQueue, appErr.Type(), q)
		assert.True(t, appErr.NonRetryable(), q)
		assert.Contains(t, err.Error(), fmt.Sprintf("task queue %q is not a node's task queue", q))
	}
}

// The activity environment runs activities on a fixed, non-node task queue:
// the node activities refuse it.
func TestNodeActivitiesRefuseOtherQueues(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: newLocal(t)})
	_, err := env.ExecuteActivity((&Activities{}).NodeInventory)
	assert.Equal(t, ErrTypeNotNodeQueue, appError(t, err).Type())
	_, err = env.ExecuteActivity((&Activities{}).FenceNode, FenceNodeInput{})
	assert.Equal(t, ErrTypeNotNodeQueue, appError(t, err).Type())
}

type fenceResult struct {
	Before NodeInventoryReply
	Fence  FenceNodeReply
	Again  FenceNodeReply
	After  NodeInventoryReply
}

// fenceWorkflow runs the node activities on the node's task queue, as an
// allocator does: inventory, fence, fence again, inventory.
func fenceWorkflow(ctx workflow.Context, node string, in FenceNodeInput) (fenceResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: protocol.NodeTaskQueue(node), StartToCloseTimeout: time.Minute,
	})
	var r fenceResult
	var a *Activities
	if err := workflow.ExecuteActivity(ctx, a.NodeInventory).Get(ctx, &r.Before); err != nil {
		return r, err
	}
	if err := workflow.ExecuteActivity(ctx, a.FenceNode, in).Get(ctx, &r.Fence); err != nil {
		return r, err
	}
	if err := workflow.ExecuteActivity(ctx, a.FenceNode, in).Get(ctx, &r.Again); err != nil {
		return r, err
	}
	err := workflow.ExecuteActivity(ctx, a.NodeInventory).Get(ctx, &r.After)
	return r, err
}

func placedIDs(ws []cluster.PlacedWorker) []cluster.WorkerID {
	out := make([]cluster.WorkerID, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func TestNodeInventoryAndFenceNode(t *testing.T) {
	b := newLocal(t)
	work := t.TempDir()
	hold := func(name string) string {
		return fmt.Sprintf(`trap 'touch %[1]s/%[2]s.term; exit 0' TERM; touch %[1]s/%[2]s.ready; while :; do sleep 0.02; done`, work, name)
	}
	keep := workerSpec("fence-job", 2, 0, "node-a", []int{0, 1}, hold("keep"))
	// The previous attempt's worker ignores SIGTERM: FenceNode waits out the
	// grace, heartbeating, then kills it.
	stale := workerSpec("fence-job", 1, 0, "node-a", []int{2, 3},
		fmt.Sprintf(`trap '' TERM; touch %s/stale.ready; while :; do sleep 0.02; done`, work))
	other := workerSpec("fence-job", 2, 1, "node-b", []int{0, 1}, hold("other"))
	for _, sp := range []cluster.WorkerSpec{keep, stale, other} {
		start(t, b, sp)
	}
	for _, name := range []string{"keep", "stale", "other"} {
		waitForFile(t, filepath.Join(work, name+".ready"))
	}

	var s testsuite.WorkflowTestSuite
	env := testenv.NewWorkflowEnv(&s)
	env.RegisterWorkflow(fenceWorkflow)
	env.RegisterActivity(&Activities{Backend: b})
	var mu sync.Mutex
	fenceBeats := 0
	env.SetOnActivityHeartbeatListener(func(info *activity.Info, _ converter.EncodedValues) {
		mu.Lock()
		defer mu.Unlock()
		if info.ActivityType.Name == "FenceNode" {
			fenceBeats++
		}
	})
	grace := heartbeatInterval + 500*time.Millisecond
	env.ExecuteWorkflow(fenceWorkflow, "node-a", FenceNodeInput{Keep: []cluster.WorkerID{keep.ID}, Grace: grace})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var r fenceResult
	require.NoError(t, env.GetWorkflowResult(&r))

	assert.Equal(t, "node-a", r.Before.Node)
	require.Equal(t, []cluster.WorkerID{stale.ID, keep.ID}, placedIDs(r.Before.Workers))
	assert.Equal(t, []int{2, 3}, r.Before.Workers[0].GPUs)
	assert.Equal(t, []int{0, 1}, r.Before.Workers[1].GPUs)
	assert.Equal(t, "node-a", r.Before.Workers[1].Node)

	assert.Equal(t, "node-a", r.Fence.Node)
	require.Equal(t, []cluster.WorkerID{stale.ID}, placedIDs(r.Fence.Stopped))
	assert.Equal(t, cluster.PhaseExited, r.Fence.Stopped[0].Phase)
	assert.Equal(t, 137, r.Fence.Stopped[0].ExitCode, "killed after the grace")
	assert.Equal(t, []int{2, 3}, r.Fence.Stopped[0].GPUs)
	assert.Equal(t, []cluster.WorkerID{keep.ID}, placedIDs(r.Fence.Live))
	mu.Lock()
	assert.Positive(t, fenceBeats, "FenceNode heartbeats while it waits")
	mu.Unlock()

	// Idempotent: the second fence stops nothing.
	assert.Empty(t, r.Again.Stopped)
	assert.Equal(t, []cluster.WorkerID{keep.ID}, placedIDs(r.Again.Live))
	assert.Equal(t, []cluster.WorkerID{keep.ID}, placedIDs(r.After.Workers))

	// The kept worker and the other node's worker were not signalled.
	for _, sp := range []cluster.WorkerSpec{keep, other} {
		st, err := b.Status(testCtx(t), sp.ID)
		require.NoError(t, err)
		assert.Equal(t, cluster.PhaseRunning, st.Phase, sp.ID)
	}
	for _, name := range []string{"keep", "other"} {
		assert.NoFileExists(t, filepath.Join(work, name+".term"))
	}
}
