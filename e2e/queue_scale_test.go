package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
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

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The scale test drives one allocation's real allocator (run by trainq-worker) through a queue
// of 20,000 waiting jobs. A job workflow costs dozens of events, activities and a node agent, and
// this machine's dev server has one history shard; so each job here is an idle stub workflow (no
// worker polls its task queue: it only exists, as a job's workflow does, to take its grant
// signal), and the test plays the job's part of the protocol with the client: it sends each
// request signal as the job's RequestCapacity activity does, watches the allocator's running jobs,
// and releases every worker of each job it sees granted, as a job does when its workers end.
const (
	scaleTaskQueue  = "trainq-scale-idle" // nothing polls it
	scaleStubType   = "ScaleStub"
	scaleAllocation = "scale"
	scaleNodes      = 50 // 8 GPUs each
	// scaleUpdatesPerRun is the allocator's continue-as-new threshold in the test: a run hands
	// over after this many messages (requests and releases), so 20,000 jobs take about a dozen
	// runs ($TRAINQ_SCALE_UPDATES changes it).
	scaleUpdatesPerRun = 4000
)

// scaleJob is one job: its stub and what it asks for.
type scaleJob struct {
	name string
	gpus int // per worker: 1 or 2
}

// TestQueueAtScale fills one allocation with 20,000 waiting jobs behind 400 that hold every GPU,
// then lets them all run (each is released as soon as it is seen granted) while 2,000 more
// arrive. The allocator continues as new every scaleUpdatesPerRun messages. It checks that
// nothing was lost: every job is granted exactly once, for its first attempt, and its grant
// reaches its workflow; the allocator counts every grant; at the end no GPU is held and nothing
// waits. It prints the number of runs, the time taken and the sizes of the state each run was
// handed.
func TestQueueAtScale(t *testing.T) {
	if os.Getenv("TRAINQ_SCALE") == "" {
		t.Skip("set TRAINQ_SCALE=1 (make scale) to run the 20,000-job continue-as-new test (many minutes)")
	}
	waiting, updatesPerRun := envInt("TRAINQ_SCALE_JOBS", 20000), envInt("TRAINQ_SCALE_UPDATES", scaleUpdatesPerRun)
	const holders, late = scaleNodes * 8, 2000
	startWorker(t)
	allocator := startScaleAllocator(t, updatesPerRun)
	rel := newReleaser(t, allocator)
	begin := time.Now()

	// 1. 400 one-GPU jobs take every GPU and hold it.
	first := makeScaleJobs(holders, 0)
	submitScaleJobs(t, allocator, first)
	eventually(t, 10*time.Minute, "the holders to run", func() bool { return len(queue(t, scaleAllocation).Running) == holders })

	// 2. 20,000 jobs queue behind them.
	queued := makeScaleJobs(waiting, 1)
	submitScaleJobs(t, allocator, queued)
	var full protocol.QueueView
	eventually(t, 30*time.Minute, fmt.Sprintf("%d jobs to wait", waiting), func() bool {
		full = queue(t, scaleAllocation)
		return full.WaitingTotal == waiting
	})
	filled := time.Since(begin)
	require.Len(t, full.Running, holders, "nothing is granted while the holders hold every GPU")
	require.Len(t, full.Waiting, protocol.DefaultQueuePageLimit)

	// 3. Jobs end as soon as they run; the queue drains while 2,000 more jobs arrive.
	stop := rel.start()
	more := makeScaleJobs(late, 2)
	submitScaleJobs(t, allocator, more)
	all := append(append(first, queued...), more...)
	eventually(t, 60*time.Minute, "every job to run and end", func() bool { return rel.count() == len(all) })
	stop()
	drained := time.Since(begin)

	// 4. Nothing was lost.
	var end protocol.QueueView
	eventually(t, 2*time.Minute, "the allocator to hold nothing", func() bool {
		end = queue(t, scaleAllocation)
		return end.WaitingTotal == 0 && len(end.Running) == 0
	})
	rel.checkEachGrantedOnce(t, all)
	assert.Equal(t, int64(len(all)), end.Counters.Grants, "the allocator counted every grant once, across all its runs")
	assert.Zero(t, end.Counters.Preemptions)
	for _, n := range end.Nodes {
		assert.Equal(t, n.GPUs, n.FreeGPUs, "node %s still has GPUs held", n.Name)
	}
	checkGrantsDelivered(t, all)
	runs := scaleAllocatorRuns(t, allocator)
	logScaleFigures(t, runs, len(all), filled, drained)
	require.Greater(t, len(runs), 3, "the allocator continued as new several times")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// releaser plays the jobs' ends: it watches the allocator's running jobs and releases every
// worker of each one it sees for the first time, as a job does when its workers exit.
type releaser struct {
	t         *testing.T
	allocator string
	mu        sync.Mutex
	seen      map[string]int // job -> times seen granted (attempt 1, placement)
	placed    map[string]int // job -> GPUs per worker it was granted
}

func newReleaser(t *testing.T, allocator string) *releaser {
	return &releaser{t: t, allocator: allocator, seen: map[string]int{}, placed: map[string]int{}}
}

// start releases running jobs until the returned stop is called.
func (r *releaser) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		released := map[string]bool{}
		for ctx.Err() == nil {
			v, err := tqclient.New(env.client, nil).Queue(ctx, "T", scaleAllocation)
			if err != nil {
				time.Sleep(200 * time.Millisecond) // the allocator is between runs or busy: ask again
				continue
			}
			var fresh []scheduler.RunningInfo
			for _, ri := range v.Running {
				if !ri.Releasing && !released[ri.Job] {
					fresh = append(fresh, ri)
				}
			}
			parallel(len(fresh), 16, func(i int) { r.release(ctx, fresh[i]) })
			for _, ri := range fresh {
				released[ri.Job] = true
			}
			if len(fresh) == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (r *releaser) release(ctx context.Context, ri scheduler.RunningInfo) {
	workers := make([]int, len(ri.Placement))
	for i, p := range ri.Placement {
		workers[i] = p.Worker
	}
	sig := protocol.ReleaseSignal{Job: ri.Job, Attempt: ri.Attempt, Workers: workers, Stopping: true}
	for ctx.Err() == nil {
		if err := env.client.SignalWorkflow(ctx, r.allocator, "", protocol.SignalRelease, sig); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // a run is handing over: the signal goes to the next one
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[ri.Job]++
	if ri.Attempt != 1 {
		r.seen[ri.Job] += 1000 // counted as an error below
	}
	r.placed[ri.Job] = len(ri.Placement[0].GPUs)
}

func (r *releaser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// checkEachGrantedOnce checks that every job was seen running once, for attempt 1, with the GPUs
// it asked for.
func (r *releaser) checkEachGrantedOnce(t *testing.T, jobs []*scaleJob) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	bad := 0
	for _, j := range jobs {
		if r.seen[j.name] != 1 || r.placed[j.name] != j.gpus {
			if bad++; bad <= 5 {
				t.Errorf("%s: seen running %d times with %d GPUs, want once with %d", j.name, r.seen[j.name], r.placed[j.name], j.gpus)
			}
		}
	}
	require.Zero(t, bad, "jobs not granted exactly once")
	require.Len(t, r.seen, len(jobs), "only these jobs ran")
}

// checkGrantsDelivered reads the history of a sample of the stubs: each comes to hold exactly
// one grant, for attempt 1. The allocator counts a grant as sent once the server has it; the
// stub's history shows it when the server has delivered it, which on a busy dev server comes
// later than the test's release.
func checkGrantsDelivered(t *testing.T, jobs []*scaleJob) {
	t.Helper()
	step := max(len(jobs)/200, 1)
	for i := 0; i < len(jobs); i += step {
		var grants []protocol.GrantSignal
		eventually(t, 3*time.Minute, jobs[i].name+" to hold its grant", func() bool {
			grants = stubGrants(t, jobs[i].name)
			return len(grants) > 0
		})
		require.Len(t, grants, 1, "%s received %d grants", jobs[i].name, len(grants))
		require.Equal(t, 1, grants[0].Attempt)
	}
}

// stubGrants are the grant signals in a stub's history.
func stubGrants(t *testing.T, job string) []protocol.GrantSignal {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := env.client.GetWorkflowHistory(ctx, job, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []protocol.GrantSignal
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == protocol.SignalGrant {
			var g protocol.GrantSignal
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &g))
			out = append(out, g)
		}
	}
	return out
}

// startScaleAllocator starts the allocator of T/scale with a low continue-as-new threshold. It
// starts from an empty carried-over state, as after a continue-as-new, so that it does not look
// for node agents of nodes that only this test knows.
func startScaleAllocator(t *testing.T, updatesPerRun int) string {
	t.Helper()
	return startStubAllocator(t, scaleAllocation, scaleNodes, updatesPerRun)
}

// startStubAllocator starts the allocator of T/<allocation> with n nodes of 8
// GPUs that only the test knows (see startScaleAllocator).
func startStubAllocator(t *testing.T, allocation string, n, updatesPerRun int) string {
	t.Helper()
	nodes := make([]scheduler.Node, n)
	for i := range nodes {
		nodes[i] = scheduler.Node{Name: fmt.Sprintf("%s-%02d", allocation, i+1), Family: "a100", GPUs: 8, CPU: 96, RAMGB: 768}
	}
	pool, err := scheduler.NewPool(nodes, scheduler.Policy{})
	require.NoError(t, err)
	in := protocol.AllocatorInput{Region: "T", Allocation: allocation, Nodes: nodes, StopGracePeriod: time.Second,
		ReclaimInterval: 10 * time.Second, MaxUpdatesPerRun: updatesPerRun,
		State: &protocol.AllocatorState{Pool: pool.Snapshot(), NextSeq: 1, Epoch: "scale-test"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := protocol.AllocatorStartOptions("T", allocation)
	_, err = env.client.ExecuteWorkflow(ctx, opts, protocol.AllocatorWorkflowName, in)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.client.TerminateWorkflow(ctx, opts.ID, "", "scale test over")
	})
	return opts.ID
}

// makeScaleJobs names n jobs as trainq does; every third asks for 2 GPUs per worker (none of
// the first batch, which fills the GPUs one by one).
func makeScaleJobs(n, batch int) []*scaleJob {
	jobs := make([]*scaleJob, n)
	for i := range jobs {
		jobs[i] = &scaleJob{name: protocol.JobNamePrefix + uuid.NewString(), gpus: 1}
		if batch > 0 && (i+batch)%3 == 0 {
			jobs[i].gpus = 2
		}
	}
	return jobs
}

// scaleRetries counts the request signals the server refused and the test sent again.
var scaleRetries atomic.Int64

// submitScaleJobs starts each job's idle stub, then sends its request to the allocator, as a job
// does.
func submitScaleJobs(t *testing.T, allocator string, jobs []*scaleJob) {
	t.Helper()
	submitScaleJobsAtOnce(t, allocator, jobs, 16)
}

// submitScaleJobsAtOnce is submitScaleJobs with at most n submissions at once.
func submitScaleJobsAtOnce(t *testing.T, allocator string, jobs []*scaleJob, n int) {
	t.Helper()
	var failed atomic.Int64
	var firstErr atomic.Value
	parallel(len(jobs), n, func(i int) {
		j := jobs[i]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: j.name, TaskQueue: scaleTaskQueue,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE}, scaleStubType)
		if err == nil {
			req := protocol.CapacityRequest{Job: j.name, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Medium,
				InstanceType: fmt.Sprintf("a100.%dgpu", j.gpus), Workers: 1, SubmittedAt: time.Now()}
			// The job's RequestCapacity activity is retried when the server refuses the signal
			// (a run that has taken its limit of signals while it hands over): so is this.
			for err = env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalRequest, req); err != nil && ctx.Err() == nil; {
				scaleRetries.Add(1)
				time.Sleep(time.Second)
				err = env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalRequest, req)
			}
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", j.name, err))
		}
	})
	require.Zero(t, failed.Load(), "submissions failed: %v", firstErr.Load())
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
	t.Logf("%d jobs through %d allocator runs (%d continue-as-new); queue filled in %s, all ended after %s; %d request signals refused and sent again",
		jobs, len(runs), len(runs)-1, filled.Round(time.Second), drained.Round(time.Second), scaleRetries.Load())
	t.Logf("largest state handed over: %d bytes packed with %d waiting, beside %d bytes of JSON input",
		largest.packedBytes, largest.waiting, largest.inputBytes)
	for _, r := range runs {
		t.Logf("run %s: %d events, handed %d waiting in %d packed bytes", r.runID, r.events, r.waiting, r.packedBytes)
	}
}
