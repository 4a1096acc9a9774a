package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The scale test drives one allocation's real allocator (run by trainq-worker) through a queue
// of 20,000 waiting jobs. A job workflow costs dozens of events and a node agent; here each job
// is a stub workflow that speaks the job's side of the protocol and nothing else: the test sends
// its capacity request as the job's RequestCapacity activity does (a request signal to the
// allocator), the stub waits for its grant, then releases every worker and ends.
const (
	scaleTaskQueue  = "trainq-scale-stubs"
	scaleAllocation = "scale"
	scaleNodes      = 50 // 8 GPUs each
	// scaleUpdatesPerRun is the allocator's continue-as-new threshold in the test: a run hands
	// over after this many messages (requests and releases), so 20,000 jobs take about a dozen
	// runs ($TRAINQ_SCALE_UPDATES changes it).
	scaleUpdatesPerRun = 4000
)

// scaleStubInput tells a stub whom to release to, and whether to hold its grant until told.
type scaleStubInput struct {
	Allocator string `json:"allocator"`
	Hold      bool   `json:"hold,omitempty"`
}

// scaleStub is a job that runs nothing: granted, it releases every worker (after a "finish"
// signal if it holds), and returns its grant.
func scaleStub(ctx workflow.Context, in scaleStubInput) (protocol.GrantSignal, error) {
	var g protocol.GrantSignal
	workflow.GetSignalChannel(ctx, protocol.SignalGrant).Receive(ctx, &g)
	if in.Hold {
		workflow.GetSignalChannel(ctx, "finish").Receive(ctx, nil)
	}
	workers := make([]int, len(g.Placement))
	for i, p := range g.Placement {
		workers[i] = p.Worker
	}
	job := workflow.GetInfo(ctx).WorkflowExecution.ID
	release := protocol.ReleaseSignal{Job: job, Attempt: g.Attempt, Workers: workers, Stopping: true}
	err := workflow.SignalExternalWorkflow(ctx, in.Allocator, "", protocol.SignalRelease, release).Get(ctx, nil)
	return g, err
}

// scaleJob is one stub and the request it sends.
type scaleJob struct {
	name string
	hold bool
	gpus int // per worker: 1 or 2
	run  client.WorkflowRun
}

// TestQueueAtScale fills one allocation with 20,000 waiting jobs behind 400 that hold every GPU,
// then lets them all run (each releases as soon as it is granted) while 2,000 more arrive. The
// allocator continues as new every scaleUpdatesPerRun messages. It checks that nothing was lost:
// every job is granted exactly once and ends, the allocator counts every grant, and at the end no
// GPU is held and nothing waits. It prints the number of runs, the time taken and the sizes of
// the state each run was handed.
func TestQueueAtScale(t *testing.T) {
	if os.Getenv("TRAINQ_SCALE") == "" {
		t.Skip("set TRAINQ_SCALE=1 (make scale) to run the 20,000-job continue-as-new test (several minutes)")
	}
	waiting := 20000
	if v, err := strconv.Atoi(os.Getenv("TRAINQ_SCALE_JOBS")); err == nil && v > 0 {
		waiting = v
	}
	updatesPerRun := scaleUpdatesPerRun
	if v, err := strconv.Atoi(os.Getenv("TRAINQ_SCALE_UPDATES")); err == nil && v > 0 {
		updatesPerRun = v
	}
	const holders, late = scaleNodes * 8, 2000
	startWorker(t)
	stubs := worker.New(env.client, scaleTaskQueue, worker.Options{MaxConcurrentWorkflowTaskPollers: 8})
	stubs.RegisterWorkflow(scaleStub)
	require.NoError(t, stubs.Start())
	t.Cleanup(stubs.Stop)
	allocator := startScaleAllocator(t, updatesPerRun)
	begin := time.Now()

	// 1. 400 one-GPU jobs take every GPU and hold it.
	first := makeScaleJobs(holders, true, 0)
	submitScaleJobs(t, allocator, first, 0)
	eventually(t, 5*time.Minute, "the holders to run", func() bool { return len(queue(t, scaleAllocation).Running) == holders })

	// 2. 20,000 jobs queue behind them.
	queued := makeScaleJobs(waiting, false, 1)
	submitScaleJobs(t, allocator, queued, holders)
	var full protocol.QueueView
	eventually(t, 20*time.Minute, fmt.Sprintf("%d jobs to wait", waiting), func() bool {
		full = queue(t, scaleAllocation)
		return full.WaitingTotal == waiting
	})
	filled := time.Since(begin)
	require.Len(t, full.Running, holders, "nothing is granted while the holders hold every GPU")
	require.Len(t, full.Waiting, protocol.DefaultQueuePageLimit)

	// 3. The holders finish; the queue drains while 2,000 more jobs arrive.
	parallel(len(first), 16, func(i int) {
		require.NoError(t, env.client.SignalWorkflow(context.Background(), first[i].name, "", "finish", nil))
	})
	more := makeScaleJobs(late, false, 2)
	submitScaleJobs(t, allocator, more, holders+waiting)

	// 4. Every job ends with its grant; the allocator holds and queues nothing.
	all := append(append(first, queued...), more...)
	checkEveryJobGranted(t, all)
	drained := time.Since(begin)
	var end protocol.QueueView
	eventually(t, 2*time.Minute, "the allocator to hold nothing", func() bool {
		end = queue(t, scaleAllocation)
		return end.WaitingTotal == 0 && len(end.Running) == 0
	})
	assert.Equal(t, int64(len(all)), end.Counters.Grants, "the allocator counted every grant once, across all its runs")
	assert.Zero(t, end.Counters.Preemptions)
	for _, n := range end.Nodes {
		assert.Equal(t, n.GPUs, n.FreeGPUs, "node %s still has GPUs held", n.Name)
	}
	runs := scaleAllocatorRuns(t, allocator)
	logScaleFigures(t, runs, len(all), filled, drained)
	require.Greater(t, len(runs), 3, "the allocator continued as new several times")
}

// startScaleAllocator starts the allocator of T/scale with a low continue-as-new threshold. It
// starts from an empty carried-over state, as after a continue-as-new, so that it does not look
// for node agents of nodes that only this test knows.
func startScaleAllocator(t *testing.T, updatesPerRun int) string {
	t.Helper()
	nodes := make([]scheduler.Node, scaleNodes)
	for i := range nodes {
		nodes[i] = scheduler.Node{Name: fmt.Sprintf("scale-%02d", i+1), Family: "a100", GPUs: 8, CPU: 96, RAMGB: 768}
	}
	pool, err := scheduler.NewPool(nodes, scheduler.Policy{})
	require.NoError(t, err)
	in := protocol.AllocatorInput{Region: "T", Allocation: scaleAllocation, Nodes: nodes, StopGracePeriod: time.Second,
		ReclaimInterval: 10 * time.Second, MaxUpdatesPerRun: updatesPerRun,
		State: &protocol.AllocatorState{Pool: pool.Snapshot(), NextSeq: 1, Epoch: "scale-test"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := tqclient.AllocatorStartOptions("T", scaleAllocation)
	_, err = env.client.ExecuteWorkflow(ctx, opts, protocol.AllocatorWorkflowName, in)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.client.TerminateWorkflow(ctx, opts.ID, "", "scale test over")
	})
	return opts.ID
}

// makeScaleJobs names n jobs as trainq does; every third asks for 2 GPUs per worker.
func makeScaleJobs(n int, hold bool, kind int) []*scaleJob {
	jobs := make([]*scaleJob, n)
	for i := range jobs {
		jobs[i] = &scaleJob{name: protocol.JobNamePrefix + uuid.NewString(), hold: hold, gpus: 1}
		if !hold && (i+kind)%3 == 0 {
			jobs[i].gpus = 2
		}
	}
	return jobs
}

// submitScaleJobs starts each stub, then sends its request to the allocator, as a job does.
func submitScaleJobs(t *testing.T, allocator string, jobs []*scaleJob, seqBase int) {
	t.Helper()
	var failed atomic.Int64
	var firstErr atomic.Value
	parallel(len(jobs), 32, func(i int) {
		j := jobs[i]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: j.name, TaskQueue: scaleTaskQueue,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE}, scaleStub, scaleStubInput{Allocator: allocator, Hold: j.hold})
		if err == nil {
			j.run = run
			req := protocol.CapacityRequest{Job: j.name, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Medium,
				InstanceType: fmt.Sprintf("a100.%dgpu", j.gpus), Workers: 1, SubmittedAt: time.Now()}
			err = env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalRequest, req)
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Errorf("job %d: %w", seqBase+i, err))
		}
	})
	require.Zero(t, failed.Load(), "submissions failed: %v", firstErr.Load())
}

// checkEveryJobGranted waits for every stub and checks that each got one grant for attempt 1.
func checkEveryJobGranted(t *testing.T, jobs []*scaleJob) {
	t.Helper()
	var failed atomic.Int64
	var firstErr atomic.Value
	parallel(len(jobs), 32, func(i int) {
		j := jobs[i]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		var g protocol.GrantSignal
		err := j.run.Get(ctx, &g)
		switch {
		case err != nil:
		case g.Attempt != 1 || len(g.Placement) != 1 || len(g.Placement[0].GPUs) != j.gpus:
			err = fmt.Errorf("granted %+v", g)
		case g.Epoch != "scale-test":
			err = fmt.Errorf("granted by epoch %q", g.Epoch)
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", j.name, err))
		}
	})
	require.Zero(t, failed.Load(), "jobs without their grant: %v", firstErr.Load())
}

// scaleAllocatorRun is one run of the allocator and the state it was handed.
type scaleAllocatorRun struct {
	runID       string
	inputBytes  int // the input's JSON (config and small state)
	packedBytes int // the packed pool
	waiting     int
	events      int64
}

// scaleAllocatorRuns lists the allocator's runs, oldest first, with what each was handed.
func scaleAllocatorRuns(t *testing.T, id string) []scaleAllocatorRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var runs []scaleAllocatorRun
	var token []byte
	for {
		resp, err := env.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %q", id), NextPageToken: token})
		require.NoError(t, err)
		for _, e := range resp.Executions {
			runs = append(runs, describeScaleRun(t, ctx, id, e.Execution.RunId, e.HistoryLength))
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	return runs
}

// describeScaleRun reads the run's input: the JSON input and the packed pool beside it.
func describeScaleRun(t *testing.T, ctx context.Context, id, runID string, events int64) scaleAllocatorRun {
	t.Helper()
	it := env.client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	require.True(t, it.HasNext())
	ev, err := it.Next()
	require.NoError(t, err)
	payloads := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	require.NotEmpty(t, payloads)
	r := scaleAllocatorRun{runID: runID, inputBytes: len(payloads[0].GetData()), events: events}
	if len(payloads) > 1 {
		var packed []byte
		require.NoError(t, converter.GetDefaultDataConverter().FromPayload(payloads[1], &packed))
		r.packedBytes = len(packed)
		if len(packed) > 0 {
			s, err := scheduler.UnpackSnapshot(packed)
			require.NoError(t, err)
			r.waiting = len(s.Waiting.Job)
		}
	}
	return r
}

func logScaleFigures(t *testing.T, runs []scaleAllocatorRun, jobs int, filled, drained time.Duration) {
	t.Helper()
	largest := scaleAllocatorRun{}
	for _, r := range runs {
		if r.packedBytes > largest.packedBytes {
			largest = r
		}
	}
	t.Logf("%d jobs through %d allocator runs (%d continue-as-new); queue filled in %s, all ended after %s",
		jobs, len(runs), len(runs)-1, filled.Round(time.Second), drained.Round(time.Second))
	t.Logf("largest state handed over: %d bytes packed with %d waiting, beside %d bytes of JSON input",
		largest.packedBytes, largest.waiting, largest.inputBytes)
	for _, r := range runs {
		t.Logf("run %s: %d events, handed %d waiting in %d packed bytes", r.runID, r.events, r.waiting, r.packedBytes)
	}
}
