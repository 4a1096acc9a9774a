package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
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

// The allocator tests drive AllocatorWorkflow alone: jobs are mocked external
// workflows whose grant and preempt signals are recorded; requests arrive as
// updates and releases as signals, each at a chosen time on the test clock.
// The allocator never ends by itself, so each test cancels it at the end
// (runAllocator) and then queries its final state.

func allocNodes(n, gpus int) []scheduler.Node {
	var out []scheduler.Node
	for i := 1; i <= n; i++ {
		out = append(out, scheduler.Node{Name: fmt.Sprintf("n%d", i), Family: "a100", GPUs: gpus, CPU: 16, RAMGB: 128})
	}
	return out
}

func allocInput(nodes []scheduler.Node) protocol.AllocatorInput {
	return protocol.AllocatorInput{Region: "T", Allocation: "basic", Nodes: nodes,
		StopGracePeriod: 5 * time.Second, ReclaimInterval: 30 * time.Second}
}

type sentTo struct {
	job string
	arg any
}

type updateOutcome struct {
	rejected error
	reply    protocol.CapacityReply
	err      error
	done     bool
}

type allocHarness struct {
	t    *testing.T
	env  *testsuite.TestWorkflowEnvironment
	acts *activities.Activities

	mu       sync.Mutex
	grants   []sentTo // GrantSignal
	grantAt  []time.Time
	preempts []sentTo // PreemptSignal
	refusals []sentTo // RefuseSignal
	updates  map[string]*updateOutcome
	// gone are job workflows that no longer exist: signals to them fail.
	gone map[string]bool
	// vanished is what FindVanishedJobs reports.
	vanished  []string
	findCalls int
	stops     []activities.StopWorkerInput
	stopQueue []string
	// holds is what the jobs answer a recovery's register update.
	holds []protocol.JobHold
	// unlisted are jobs visibility does not list: they answer only when
	// asked by name; silent jobs never answer.
	unlisted []protocol.JobHold
	silent   map[string]bool
	// answered are answers jobs gave to a registration by name that is
	// still waiting for the others' (the activity returns them all at
	// once): it returns these, whatever the jobs do meanwhile.
	answered map[string]protocol.JobHold
	// attempts are the attempts the jobs' workflows are at (CurrentAttempts).
	attempts map[string]int
	// live are the workers each node's agent reports live (NodeInventory).
	live          map[string][]cluster.WorkerID
	registerCalls []activities.RegisterJobsInput
	// deadNodes are nodes whose agent never picks up an activity.
	deadNodes map[string]bool
	fences    []fenceCall
	// ghosts are waiting requests FindGhostRequests reports.
	ghosts    []protocol.WithdrawSignal
	stopDelay time.Duration
	// stopsFail: every StopWorker times out, as on a dead node, though the
	// node's agent answers everything else.
	stopsFail bool
	// listingDelay and namedDelay: see the RegisterJobs mocks.
	listingDelay, namedDelay time.Duration
	// agents counts the node agents' activities (NodeInventory, FenceNode)
	// running at once; each takes agentWork of real time when it is set.
	agents agentCalls
}

// agentCalls counts the node agents' activities that run at once.
type agentCalls struct {
	mu                   sync.Mutex
	running, most, calls int
	// Each activity works until crowd of them run at once, or for work of
	// real time at most: activities the workflow scheduled together then
	// overlap, and more than crowd at once are seen however slow the machine.
	crowd int
	work  time.Duration
}

// run counts one activity of a node's agent while it works.
func (c *agentCalls) run() {
	c.mu.Lock()
	c.running++
	c.calls++
	c.most = max(c.most, c.running)
	c.mu.Unlock()
	for deadline := time.Now().Add(c.work); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		crowded := c.running >= c.crowd
		c.mu.Unlock()
		if crowded {
			break
		}
	}
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
}

// harnessOpts are the delays, on the test clock, with which the mocked jobs
// and node agents answer.
type harnessOpts struct {
	// registerDelay: the jobs answer a recovery's register update.
	registerDelay time.Duration
	// fenceDelay: a node's agent answers a fence (an agent that comes back
	// while the fence waits for it).
	fenceDelay time.Duration
	// signalDelay: the server delivers a signal to a job.
	signalDelay time.Duration
}

type fenceCall struct {
	node string
	keep []cluster.WorkerID
}

func newAllocHarness(t *testing.T) *allocHarness { return newAllocHarnessWith(t, 0) }

// newAllocHarnessWith lets the jobs take registerDelay (on the test clock) to
// answer a recovery's register update, so that a test can act meanwhile.
func newAllocHarnessWith(t *testing.T, registerDelay time.Duration) *allocHarness {
	return newAllocHarnessOpts(t, harnessOpts{registerDelay: registerDelay})
}

func newAllocHarnessOpts(t *testing.T, o harnessOpts) *allocHarness {
	registerDelay := o.registerDelay
	var s testsuite.WorkflowTestSuite
	h := &allocHarness{t: t, env: testenv.NewWorkflowEnv(&s), acts: &activities.Activities{},
		updates: map[string]*updateOutcome{}, gone: map[string]bool{}, deadNodes: map[string]bool{},
		silent: map[string]bool{}, answered: map[string]protocol.JobHold{}, live: map[string][]cluster.WorkerID{}, attempts: map[string]int{}}
	h.env.SetStartTime(testStart)
	h.env.RegisterWorkflowWithOptions(AllocatorWorkflow, workflowOpts(protocol.AllocatorWorkflowName))
	h.env.RegisterActivity(h.acts)
	h.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).Return(
		func(_, job, _, name string, arg any) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.gone[job] {
				return errors.New("unknown external workflow execution")
			}
			switch name {
			case protocol.SignalGrant:
				h.grants = append(h.grants, sentTo{job, arg})
				h.grantAt = append(h.grantAt, h.env.Now())
			case protocol.SignalPreempt:
				h.preempts = append(h.preempts, sentTo{job, arg})
			case protocol.SignalRefuse:
				h.refusals = append(h.refusals, sentTo{job, arg})
			default:
				h.t.Errorf("unexpected signal %s to %s", name, job)
			}
			return nil
		}).After(o.signalDelay).Maybe()
	h.env.OnActivity(h.acts.FindVanishedJobs, mock.Anything, mock.Anything).Return(
		func(_ context.Context, jobs []string) ([]string, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.findCalls++
			var out []string
			for _, v := range h.vanished {
				for _, j := range jobs {
					if j == v {
						out = append(out, v)
					}
				}
			}
			return out, nil
		}).Maybe()
	register := func(_ context.Context, in activities.RegisterJobsInput) (activities.RegisterJobsReply, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.registerCalls = append(h.registerCalls, in)
		if in.Jobs == nil {
			reply := activities.RegisterJobsReply{Listed: len(h.holds)}
			for _, hold := range h.holds {
				if h.silent[hold.Job] {
					reply.Unanswered = append(reply.Unanswered, hold.Job)
					continue
				}
				reply.Holds = append(reply.Holds, hold)
			}
			return reply, nil
		}
		reply := activities.RegisterJobsReply{Listed: len(in.Jobs)}
		for _, job := range in.Jobs {
			if h.silent[job] {
				reply.Unanswered = append(reply.Unanswered, job)
				continue
			}
			if hold, ok := h.answered[job]; ok {
				reply.Holds = append(reply.Holds, hold)
				continue
			}
			for _, hold := range append(slices.Clone(h.holds), h.unlisted...) {
				if hold.Job == job {
					reply.Holds = append(reply.Holds, hold)
				}
			}
		}
		return reply, nil
	}
	// A recovery's listing and a named registration may take their own time
	// (listingDelay, namedDelay, read when each is sent) beside registerDelay.
	h.env.OnActivity(h.acts.RegisterJobs, mock.Anything, mock.MatchedBy(func(in activities.RegisterJobsInput) bool { return in.Jobs == nil })).
		Return(register).AfterFn(func() time.Duration { h.mu.Lock(); defer h.mu.Unlock(); return registerDelay + h.listingDelay }).Maybe()
	h.env.OnActivity(h.acts.RegisterJobs, mock.Anything, mock.MatchedBy(func(in activities.RegisterJobsInput) bool { return in.Jobs != nil })).
		Return(register).AfterFn(func() time.Duration { h.mu.Lock(); defer h.mu.Unlock(); return registerDelay + h.namedDelay }).Maybe()
	h.env.OnActivity(h.acts.CurrentAttempts, mock.Anything, mock.Anything).Return(
		func(_ context.Context, jobs []string) ([]int, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			out := make([]int, len(jobs))
			for i, j := range jobs {
				out[i] = h.attempts[j]
			}
			return out, nil
		}).Maybe()
	h.env.OnActivity(h.acts.NodeInventory, mock.Anything).Return(
		func(ctx context.Context) (activities.NodeInventoryReply, error) {
			h.agents.run()
			h.mu.Lock()
			defer h.mu.Unlock()
			node := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, protocol.NodeTaskQueuePrefix)
			if h.deadNodes[node] {
				return activities.NodeInventoryReply{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
			}
			reply := activities.NodeInventoryReply{Node: node}
			for _, id := range h.live[node] {
				reply.Workers = append(reply.Workers, cluster.PlacedWorker{WorkerStatus: cluster.WorkerStatus{ID: id, Phase: cluster.PhaseRunning}, Node: node})
			}
			return reply, nil
		}).Maybe()
	h.env.OnActivity(h.acts.FenceNode, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.FenceNodeInput) (activities.FenceNodeReply, error) {
			h.agents.run()
			h.mu.Lock()
			defer h.mu.Unlock()
			node := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, protocol.NodeTaskQueuePrefix)
			if h.deadNodes[node] {
				return activities.FenceNodeReply{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
			}
			h.fences = append(h.fences, fenceCall{node: node, keep: in.Keep})
			return activities.FenceNodeReply{Node: node}, nil
		}).After(o.fenceDelay).Maybe()
	h.env.OnActivity(h.acts.FindGhostRequests, mock.Anything, mock.Anything).Return(
		func(_ context.Context, reqs []protocol.WithdrawSignal) ([]protocol.WithdrawSignal, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			var out []protocol.WithdrawSignal
			for _, r := range reqs {
				if slices.Contains(h.ghosts, r) {
					out = append(out, r)
				}
			}
			return out, nil
		}).Maybe()
	h.env.OnActivity(h.acts.StopWorker, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.StopWorkerInput) (cluster.WorkerStatus, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if node := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, protocol.NodeTaskQueuePrefix); h.deadNodes[node] || h.stopsFail {
				return cluster.WorkerStatus{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
			}
			h.stops = append(h.stops, in)
			h.stopQueue = append(h.stopQueue, activity.GetInfo(ctx).TaskQueue)
			return cluster.WorkerStatus{ID: in.ID, Phase: cluster.PhaseExited, Signaled: true}, nil
		}).AfterFn(func() time.Duration { return h.stopDelay }).Maybe()
	return h
}

// request sends a capacity request at d (on the test clock).
func (h *allocHarness) request(d time.Duration, req protocol.CapacityRequest) {
	h.env.RegisterDelayedCallback(func() { h.sendRequest(req) }, d)
}

// requestByUpdate sends a capacity request at d as trainq-worker does
// (protocol.UpdateRequest; request sends the older request-capacity update).
func (h *allocHarness) requestByUpdate(d time.Duration, req protocol.CapacityRequest) {
	h.env.RegisterDelayedCallback(func() { h.sendRequestAs(protocol.UpdateRequest, req) }, d)
}

func (h *allocHarness) sendRequest(req protocol.CapacityRequest) {
	h.sendRequestAs(protocol.UpdateRequestCapacity, req)
}

func (h *allocHarness) sendRequestAs(update string, req protocol.CapacityRequest) {
	id := fmt.Sprintf("request/%s/%d", req.Job, req.Attempt)
	out := &updateOutcome{}
	h.mu.Lock()
	h.updates[id] = out
	h.mu.Unlock()
	h.env.UpdateWorkflow(update, id, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { out.rejected, out.done = err, true },
		OnComplete: func(v any, err error) {
			out.err, out.done = err, true
			if err == nil {
				out.reply = decodeUpdateResult[protocol.CapacityReply](h.t, v)
			}
		},
	}, req)
}

// decodeUpdateResult reads an update's result, whichever form the test
// environment hands it over in.
func decodeUpdateResult[T any](t *testing.T, v any) T {
	var out T
	switch r := v.(type) {
	case T:
		return r
	case *T:
		return *r
	case *commonpb.Payloads:
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(r, &out))
		return out
	case converter.EncodedValue:
		require.NoError(t, r.Get(&out))
		return out
	}
	t.Fatalf("unexpected update result %T", v)
	return out
}

// query runs a query on the test environment's workflow and decodes its answer.
func query[T any](t *testing.T, env *testsuite.TestWorkflowEnvironment, name string, args ...any) T {
	t.Helper()
	v, err := env.QueryWorkflow(name, args...)
	require.NoError(t, err)
	var out T
	require.NoError(t, v.Get(&out))
	return out
}

func (h *allocHarness) outcome(job string, attempt int) *updateOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.updates[fmt.Sprintf("request/%s/%d", job, attempt)]
	require.NotNil(h.t, out, "no request from %s attempt %d", job, attempt)
	require.True(h.t, out.done, "the request of %s attempt %d never finished", job, attempt)
	return out
}

// releaseByUpdate reports a release at d as node agents do
// (protocol.UpdateRelease); release sends the job's own signal.
func (h *allocHarness) releaseByUpdate(d time.Duration, s protocol.ReleaseSignal) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(protocol.UpdateRelease, fmt.Sprintf("release/%s/%d/%v", s.Job, s.Attempt, s.Workers), &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { h.t.Errorf("release rejected: %v", err) },
			OnComplete: func(_ any, err error) { assert.NoError(h.t, err) },
		}, s)
	}, d)
}

// withdraw withdraws a request at d, as an update (protocol.UpdateWithdraw)
// or as a signal.
func (h *allocHarness) withdraw(d time.Duration, w protocol.WithdrawSignal, byUpdate bool) {
	h.env.RegisterDelayedCallback(func() {
		if !byUpdate {
			h.env.SignalWorkflow(protocol.SignalWithdraw, w)
			return
		}
		h.env.UpdateWorkflow(protocol.UpdateWithdraw, fmt.Sprintf("withdraw/%s/%d", w.Job, w.Attempt), &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { h.t.Errorf("withdrawal rejected: %v", err) },
			OnComplete: func(_ any, err error) { assert.NoError(h.t, err) },
		}, w)
	}, d)
}

func (h *allocHarness) release(d time.Duration, s protocol.ReleaseSignal) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(protocol.SignalRelease, s) }, d)
}

// at runs f at d, e.g. to look at the queue mid-test.
func (h *allocHarness) at(d time.Duration, f func()) { h.env.RegisterDelayedCallback(f, d) }

// runAllocator runs the allocator until end on the test clock, then cancels it.
func (h *allocHarness) runAllocator(in protocol.AllocatorInput, end time.Duration) {
	h.runAllocatorFrom(carriedState{in: in}, end)
}

// runAllocatorFrom runs the allocator from what a run continued as new with.
func (h *allocHarness) runAllocatorFrom(c carriedState, end time.Duration) {
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, end)
	h.env.ExecuteWorkflow(protocol.AllocatorWorkflowName, c.in, c.packed)
	require.True(h.t, h.env.IsWorkflowCompleted())
}

// carriedState is what an allocator run continued as new with: its input,
// and its pool packed beside it.
type carriedState struct {
	in     protocol.AllocatorInput
	packed []byte
	pool   scheduler.Snapshot // packed, unpacked
}

// continuedWith decodes the continue-as-new an allocator run ended with.
func continuedWith(t *testing.T, err error) carriedState {
	t.Helper()
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(err, &can), "want continue-as-new, got %v", err)
	require.Equal(t, protocol.AllocatorWorkflowName, can.WorkflowType.Name)
	var c carriedState
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &c.in, &c.packed))
	require.NotNil(t, c.in.State)
	require.Zero(t, c.in.State.Pool.Version, "the pool travels packed, not in the input's JSON")
	pool, unpackErr := scheduler.UnpackSnapshot(c.packed)
	require.NoError(t, unpackErr)
	c.pool = pool
	return c
}

func (h *allocHarness) queue() protocol.QueueView {
	h.t.Helper()
	return query[protocol.QueueView](h.t, h.env, protocol.QueryQueue)
}

func (h *allocHarness) grantsTo(job string) []protocol.GrantSignal {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.GrantSignal
	for _, g := range h.grants {
		if g.job == job {
			out = append(out, g.arg.(protocol.GrantSignal))
		}
	}
	return out
}

func (h *allocHarness) preemptsTo(job string) []protocol.PreemptSignal {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.PreemptSignal
	for _, p := range h.preempts {
		if p.job == job {
			out = append(out, p.arg.(protocol.PreemptSignal))
		}
	}
	return out
}

func waitingJobs(v protocol.QueueView) []string {
	var out []string
	for _, w := range v.Waiting {
		out = append(out, w.Job)
	}
	return out
}

func runningJobs(v protocol.QueueView) []string {
	var out []string
	for _, r := range v.Running {
		out = append(out, r.Job)
	}
	return out
}

func freeGPUs(v protocol.QueueView) int {
	n := 0
	for _, node := range v.Nodes {
		n += node.FreeGPUs
	}
	return n
}

func TestAllocatorGrantsQueuesAndReleases(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "job-b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(3*time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity()) // a retried request is a no-op
	var mid protocol.QueueView
	h.at(4*time.Minute, func() { mid = h.queue() })
	// job-a stops: worker 0 first (job-b fits there), then worker 1.
	h.release(10*time.Minute, protocol.ReleaseSignal{Job: "job-a", Attempt: 1, Workers: []int{0}, Stopping: true})
	var afterFirst protocol.QueueView
	h.at(11*time.Minute, func() { afterFirst = h.queue() })
	h.release(12*time.Minute, protocol.ReleaseSignal{Job: "job-a", Attempt: 1, Workers: []int{1}})
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	a := h.outcome("job-a", 1)
	require.NoError(t, a.rejected)
	assert.True(t, a.reply.Granted)
	assert.Equal(t, int64(1), a.reply.Seq)
	b := h.outcome("job-b", 1)
	require.NoError(t, b.rejected)
	assert.False(t, b.reply.Granted)
	assert.Equal(t, int64(2), b.reply.Seq)
	assert.Equal(t, 1, b.reply.Position)
	assert.NotEmpty(t, b.reply.Reason)

	ga := h.grantsTo("job-a")
	require.Len(t, ga, 1, "one grant, even for a retried request")
	assert.Equal(t, 1, ga[0].Attempt)
	assert.Equal(t, 5*time.Second, ga[0].StopGracePeriod)
	require.Len(t, ga[0].Placement, 2)
	assert.NotEqual(t, ga[0].Placement[0].Node, ga[0].Placement[1].Node)

	// The queue query mid-way: job-a runs on everything, job-b waits.
	assert.Equal(t, "T", mid.Region)
	assert.Equal(t, "basic", mid.Allocation)
	assert.Equal(t, []string{"job-a"}, runningJobs(mid))
	assert.Equal(t, []string{"job-b"}, waitingJobs(mid))
	assert.Equal(t, 0, freeGPUs(mid))
	assert.NotEmpty(t, mid.Waiting[0].Reason)
	assert.Equal(t, int64(1), mid.Counters.Grants)

	// Worker 0's release frees its node: job-b gets it while job-a's
	// worker 1 is still releasing.
	gb := h.grantsTo("job-b")
	require.Len(t, gb, 1)
	assert.Equal(t, ga[0].Placement[0].Node, gb[0].Placement[0].Node)
	assert.Equal(t, []string{"job-a", "job-b"}, runningJobs(afterFirst))
	for _, r := range afterFirst.Running {
		if r.Job == "job-a" {
			assert.True(t, r.Releasing)
			assert.Equal(t, []int{0}, r.Released)
		}
	}
	rel := 0
	for _, n := range afterFirst.Nodes {
		rel += n.ReleasingGPUs
	}
	assert.Equal(t, 2, rel, "job-a's worker 1 still holds its GPUs as releasing")

	end := h.queue()
	assert.Equal(t, []string{"job-b"}, runningJobs(end))
	assert.Empty(t, end.Waiting)
	assert.Equal(t, 2, freeGPUs(end))
	assert.Equal(t, int64(2), end.Counters.Grants)
	assert.Empty(t, h.preempts)
}

// TestRequestUpdate: a request sent as trainq-worker sends it (the request
// update) is taken by the rules of the request signal and answered with its
// epoch and queue sequence; the pass that grants it runs with the rest, and
// the grant comes as a signal. A request the allocation cannot run is refused
// with a signal, not by rejecting the update, and its answer has no sequence.
// The release that lets job-b start comes as node agents send it (the release
// update).
func TestRequestUpdate(t *testing.T) {
	h := newAllocHarness(t)
	h.requestByUpdate(time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.requestByUpdate(2*time.Minute, fixture.Request{Job: "job-b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	bad := fixture.Request{Job: "job-c", Attempt: 1, Class: scheduler.Medium, Workers: 9, SubmittedAt: testStart}.Capacity()
	h.requestByUpdate(4*time.Minute, bad)
	h.releaseByUpdate(10*time.Minute, protocol.ReleaseSignal{Job: "job-a", Attempt: 1, Workers: []int{0, 1}})
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	a := h.outcome("job-a", 1)
	require.NoError(t, a.rejected)
	require.NoError(t, a.err)
	assert.False(t, a.reply.Granted, "the update runs no pass: job-a waits when it answers")
	assert.Equal(t, int64(1), a.reply.Seq)
	assert.NotEmpty(t, a.reply.Epoch)
	require.Len(t, h.grantsTo("job-a"), 1, "the pass after the update grants job-a")

	b := h.outcome("job-b", 1)
	require.NoError(t, b.rejected)
	assert.False(t, b.reply.Granted)
	assert.Equal(t, int64(2), b.reply.Seq)
	assert.Zero(t, b.reply.Position, "its place costs a dry-run pass: the sender asks for it by query")
	require.Len(t, h.grantsTo("job-b"), 1, "job-b is granted once job-a released")

	c := h.outcome("job-c", 1)
	require.NoError(t, c.rejected, "a request the allocation cannot run is refused by signal, as the signal's")
	assert.Zero(t, c.reply.Seq)
	assert.False(t, c.reply.Granted)
	require.Len(t, h.refusalsTo("job-c"), 1)
	assert.Empty(t, h.grantsTo("job-c"))
}

func TestAllocatorRejectsImpossibleRequests(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "too-many", Attempt: 1, Class: scheduler.Medium, Workers: 3, SubmittedAt: testStart}.Capacity())
	unknown := fixture.Request{Job: "unknown-family", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity()
	unknown.InstanceType = "h100.1gpu"
	h.request(2*time.Minute, unknown)
	bad := fixture.Request{Job: "bad-type", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity()
	bad.InstanceType = "a100"
	h.request(3*time.Minute, bad)
	h.request(4*time.Minute, fixture.Request{Job: "", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	for _, job := range []string{"too-many", "unknown-family", "bad-type", ""} {
		out := h.outcome(job, 1)
		require.Error(t, out.rejected, "%q must be rejected by the validator", job)
	}
	assert.Contains(t, h.outcome("too-many", 1).rejected.Error(), "3 workers")
	assert.Contains(t, h.outcome("unknown-family", 1).rejected.Error(), "h100")
	v := h.queue()
	assert.Empty(t, v.Waiting)
	assert.Empty(t, v.Running)
	assert.Empty(t, h.grants)
}

func TestAllocatorPreemptsLowerClassForHigh(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "low", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "high", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	var mid protocol.QueueView
	h.at(3*time.Minute, func() { mid = h.queue() })
	// The victim stops, releases, and comes back with its Seq.
	h.release(5*time.Minute, protocol.ReleaseSignal{Job: "low", Attempt: 1, Stopping: true})
	h.release(6*time.Minute, protocol.ReleaseSignal{Job: "low", Attempt: 1, Workers: []int{0}})
	h.request(7*time.Minute, fixture.Request{Job: "low", Attempt: 2, Class: scheduler.Low, Seq: 1,
		SubmittedAt: testStart}.Capacity())
	h.request(8*time.Minute, fixture.Request{Job: "low-later", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	var end protocol.QueueView
	h.at(9*time.Minute, func() { end = h.queue() })
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	p := h.preemptsTo("low")
	require.Len(t, p, 1)
	assert.Equal(t, 1, p[0].Attempt)
	assert.Equal(t, scheduler.Preemptor{Job: "high", Class: scheduler.High, Kind: scheduler.KindJob}, p[0].Preemptor)
	assert.NotEmpty(t, p[0].Reason)
	assert.Len(t, h.preempts, 1, "only the low job is preempted")

	// Until the victim has released, high waits on the releasing capacity.
	assert.Equal(t, []string{"high"}, waitingJobs(mid))
	require.Len(t, mid.Running, 1)
	assert.True(t, mid.Running[0].Releasing)
	require.NotNil(t, mid.Running[0].PreemptedBy)
	assert.Equal(t, "high", mid.Running[0].PreemptedBy.Job)

	require.Len(t, h.grantsTo("high"), 1)
	assert.Equal(t, []string{"high"}, runningJobs(end))
	// The re-queued attempt keeps Seq 1 and so waits ahead of a later low job.
	assert.Equal(t, int64(1), h.outcome("low", 2).reply.Seq)
	assert.Equal(t, []string{"low", "low-later"}, waitingJobs(end))
	assert.Equal(t, 2, end.Waiting[0].Attempt)
	assert.Equal(t, int64(1), end.Counters.Preemptions)
}

// TestAllocatorStarvingJobPreemptsAProtectedVictim plays starvation_after
// through the allocator workflow: a low job that min_runtime_before_preemption
// protects holds the only node; the medium job behind it may preempt it only
// once it has been first of its class for StarvationAfter, and never without
// the bound. Nothing but the allocator's own wake-up timer makes the pass at
// that moment.
func TestAllocatorStarvingJobPreemptsAProtectedVictim(t *testing.T) {
	for _, tc := range []struct {
		name            string
		starvationAfter time.Duration
		preempted       bool
	}{
		{name: "with the bound, after it", starvationAfter: time.Hour, preempted: true},
		{name: "without the bound, never", starvationAfter: 0, preempted: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newAllocHarness(t)
			h.request(time.Minute, fixture.Request{Job: "protected", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
			h.request(2*time.Minute, fixture.Request{Job: "medium", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
			var before protocol.QueueView
			preemptedBefore := -1
			h.at(61*time.Minute, func() { before = h.queue(); preemptedBefore = len(h.preemptsTo("protected")) })
			in := allocInput(allocNodes(1, 2))
			in.Policy = scheduler.Policy{MinRuntimeBeforePreemption: 100 * time.Hour, StarvationAfter: tc.starvationAfter}
			h.runAllocator(in, 3*time.Hour)

			assert.Equal(t, 0, preemptedBefore, "not before the medium job has been first of its class for an hour")
			assert.Equal(t, []string{"medium"}, waitingJobs(before))
			p := h.preemptsTo("protected")
			if !tc.preempted {
				assert.Empty(t, p, "min_runtime_before_preemption protects the low job")
				return
			}
			require.Len(t, p, 1)
			assert.Equal(t, "medium", p[0].Preemptor.Job)
		})
	}
}

func TestAllocatorNeverPreemptsNotebooks(t *testing.T) {
	h := newAllocHarness(t)
	nb := fixture.Request{Job: "jupyter-1", Attempt: 1, Kind: scheduler.KindNotebook, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity() // a notebook is high whatever it asks
	h.request(time.Minute, nb)
	h.request(2*time.Minute, fixture.Request{Job: "high-1", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	require.Len(t, h.grantsTo("jupyter-1"), 1)
	assert.Empty(t, h.preempts, "a notebook is never preempted, not even by a high job")
	v := h.queue()
	require.Len(t, v.Running, 1)
	assert.Equal(t, scheduler.High, v.Running[0].Class)
	assert.Equal(t, scheduler.KindNotebook, v.Running[0].Kind)
	assert.Equal(t, []string{"high-1"}, waitingJobs(v))
}

func TestAllocatorEqualClassWaits(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "first", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "second", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)
	assert.Empty(t, h.preempts)
	assert.Empty(t, h.grantsTo("second"))
	v := h.queue()
	assert.Equal(t, []string{"second"}, waitingJobs(v))
	assert.Equal(t, []string{"first"}, runningJobs(v))
}

// TestAllocatorWithdraw: a withdrawn request leaves the queue, whether the
// withdrawal came as an update (jobs of this build: ReportWithdrawal) or as
// a signal (older builds).
func TestAllocatorWithdraw(t *testing.T) {
	for _, byUpdate := range []bool{true, false} {
		t.Run(fmt.Sprintf("by update %v", byUpdate), func(t *testing.T) {
			h := newAllocHarness(t)
			h.request(time.Minute, fixture.Request{Job: "first", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
			h.request(2*time.Minute, fixture.Request{Job: "second", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
			h.request(3*time.Minute, fixture.Request{Job: "third", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
			h.withdraw(4*time.Minute, protocol.WithdrawSignal{Job: "second", Attempt: 1}, byUpdate)
			h.release(5*time.Minute, protocol.ReleaseSignal{Job: "first", Attempt: 1, Workers: []int{0}, Stopping: true})
			h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)
			assert.Empty(t, h.grantsTo("second"))
			require.Len(t, h.grantsTo("third"), 1)
			v := h.queue()
			assert.Empty(t, v.Waiting)
			assert.Equal(t, []string{"third"}, runningJobs(v))
		})
	}
}

func TestAllocatorGrantToVanishedJobReturnsCapacity(t *testing.T) {
	h := newAllocHarness(t)
	h.gone["ghost"] = true
	h.request(time.Minute, fixture.Request{Job: "ghost", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Low, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	assert.True(t, h.outcome("ghost", 1).reply.Granted)
	require.Len(t, h.grantsTo("next"), 1, "the capacity of the failed grant goes to the next job")
	v := h.queue()
	assert.Equal(t, []string{"next"}, runningJobs(v))
	assert.Empty(t, v.Waiting)
	assert.Equal(t, int64(2), v.Counters.Grants)
}

func TestAllocatorGrantSignalFailureFreesCapacity(t *testing.T) {
	h := newAllocHarness(t)
	h.gone["ghost"] = true
	h.request(time.Minute, fixture.Request{Job: "ghost", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)
	v := h.queue()
	assert.Empty(t, v.Running)
	assert.Empty(t, v.Waiting)
	assert.Equal(t, 4, freeGPUs(v))
}

func TestAllocatorReclaimsVanishedJob(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(2, 2))
	h.request(time.Minute, fixture.Request{Job: "victim", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "waiter", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	var before protocol.QueueView
	h.at(10*time.Minute, func() {
		before = h.queue()
		h.mu.Lock()
		h.vanished = []string{"victim"} // terminated from the CLI
		h.mu.Unlock()
	})
	var after protocol.QueueView
	h.at(10*time.Minute+2*in.ReclaimInterval, func() { after = h.queue() })
	h.runAllocator(in, time.Hour)

	assert.Equal(t, []string{"victim"}, runningJobs(before))
	assert.Equal(t, 0, freeGPUs(before))
	assert.Greater(t, h.findCalls, 1)

	// Each worker of the vanished job is stopped on its node's queue.
	g := h.grantsTo("victim")
	require.Len(t, g, 1)
	require.Len(t, h.stops, 2)
	want := map[int]string{}
	for _, p := range g[0].Placement {
		want[p.Worker] = protocol.NodeTaskQueue(p.Node)
	}
	for i, s := range h.stops {
		assert.Equal(t, "victim", s.ID.Job)
		assert.Equal(t, 1, s.ID.Attempt)
		assert.Equal(t, in.StopGracePeriod, s.Grace)
		assert.Equal(t, want[s.ID.Worker], h.stopQueue[i])
		delete(want, s.ID.Worker)
	}
	assert.Empty(t, want, "every worker is stopped once")

	// Within two reclaim intervals its capacity went to the waiting job.
	assert.Equal(t, []string{"waiter"}, runningJobs(after))
	assert.Empty(t, after.Waiting)
	assert.Equal(t, int64(1), after.Counters.Reclaimed)
	require.Len(t, h.grantsTo("waiter"), 1)
	end := h.queue()
	assert.Equal(t, int64(1), end.Counters.Reclaimed)
}

// TestAllocatorContinuesAsNewAtMaxEventsPerRun: a run whose history reaches
// maxEventsPerRun events hands over although the server has not suggested it
// (one set to suggest later than its default 4Ki events): a worker that does
// not have the run cached replays all of it in one workflow task. One event
// short of it, the run goes on.
func TestAllocatorContinuesAsNewAtMaxEventsPerRun(t *testing.T) {
	for _, events := range []int{maxEventsPerRun - 1, maxEventsPerRun} {
		t.Run(fmt.Sprint(events), func(t *testing.T) {
			h := newAllocHarness(t)
			h.signalRequest(time.Minute, fixture.Request{Job: "j", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
			h.at(2*time.Minute, func() { h.env.SetCurrentHistoryLength(events) })
			h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)
			if events < maxEventsPerRun {
				require.ErrorContains(t, h.env.GetWorkflowError(), "canceled", "the run went on until the test cancelled it")
				return
			}
			carried := continuedWith(t, h.env.GetWorkflowError())
			require.Len(t, carried.pool.Running, 1, "the run handed over with j granted")
		})
	}
}

// TestAllocatorContinuesAsNewWithWaitingJobs drives the allocator past
// maxUpdatesPerRun with jobs that must all wait, checks the input it
// continues with, and starts a fresh run from that input.
func TestAllocatorContinuesAsNewWithWaitingJobs(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	h.request(time.Second, fixture.Request{Job: "holder", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	classes := []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High}
	// holder's request and n others make maxUpdatesPerRun updates: the run
	// hands over right after the last one.
	n := maxUpdatesPerRun - 1
	h.at(2*time.Second, func() {
		for i := 0; i < n; i++ {
			h.sendRequest(fixture.Request{Job: fmt.Sprintf("lm-mpi-job-%05d", i), Attempt: 1, Class: classes[i%3], Workers: 1, SubmittedAt: testStart}.Capacity())
		}
	})
	h.env.ExecuteWorkflow(protocol.AllocatorWorkflowName, in)
	require.True(t, h.env.IsWorkflowCompleted())

	carried := continuedWith(t, h.env.GetWorkflowError())
	next := carried.in
	assert.Equal(t, int64(n+2), next.State.NextSeq, "holder got Seq 1, the others 2..n+1")
	assert.Equal(t, int64(1), next.State.Counters.Grants)
	assert.Len(t, carried.pool.Waiting.Job, n)
	assert.Equal(t, in.Nodes, next.Nodes)
	assert.Equal(t, in.ReclaimInterval, next.ReclaimInterval)
	for i := 0; i < n; i++ {
		out := h.outcome(fmt.Sprintf("lm-mpi-job-%05d", i), 1)
		require.NoError(t, out.rejected)
		require.NoError(t, out.err)
	}
	last := h.queue() // the final state of the run that continued as new
	require.Equal(t, n, last.WaitingTotal)
	require.Len(t, last.Waiting, min(n, protocol.DefaultQueuePageLimit), "the query lists only the head of a long queue")
	assert.Equal(t, []string{"holder"}, runningJobs(last))

	// A fresh run from that input shows the same queue, in the same order.
	h2 := newAllocHarness(t)
	var resumed protocol.QueueView
	h2.at(time.Second, func() { resumed = h2.queue() })
	h2.runAllocatorFrom(carried, time.Minute)
	require.Equal(t, n, resumed.WaitingTotal)
	assert.Equal(t, last.WaitingByClass, resumed.WaitingByClass)
	assert.Equal(t, waitingJobs(last), waitingJobs(resumed))
	for i := range last.Waiting {
		assert.Equal(t, last.Waiting[i].Seq, resumed.Waiting[i].Seq)
		assert.Equal(t, last.Waiting[i].Class, resumed.Waiting[i].Class)
		assert.Equal(t, last.Waiting[i].Position, resumed.Waiting[i].Position)
	}
	assert.Equal(t, []string{"holder"}, runningJobs(resumed))
	assert.Equal(t, int64(1), resumed.Counters.Grants)
	assert.Empty(t, h2.grants, "nothing new may be granted: the holder still runs")
	// The queue is in launch order: class first, then Seq.
	assert.Equal(t, scheduler.High, resumed.Waiting[0].Class)
	for i := 1; i < len(resumed.Waiting); i++ {
		assert.GreaterOrEqual(t, resumed.Waiting[i-1].Class, resumed.Waiting[i].Class, "class order at %d", i)
	}
	assert.Equal(t, n/3, resumed.WaitingByClass[scheduler.Low.String()])

	// The resumed run keeps counting Seqs where the old one stopped.
	h3 := newAllocHarness(t)
	h3.request(time.Second, fixture.Request{Job: "newcomer", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	h3.runAllocatorFrom(carried, time.Minute)
	assert.Equal(t, int64(n+2), h3.outcome("newcomer", 1).reply.Seq)
	assert.Equal(t, n+1, h3.outcome("newcomer", 1).reply.Position)
}

// TestAllocatorRestoresTenThousandWaitingJobs starts an allocator from a
// carried-over state with 10,000 waiting jobs (as after continue-as-new) and
// checks that it keeps their order and grants the head of the queue first.
func TestAllocatorRestoresTenThousandWaitingJobs(t *testing.T) {
	const n = 10000
	in := allocInput(allocNodes(1, 2))
	pool, err := scheduler.NewPool(in.Nodes, in.Policy)
	require.NoError(t, err)
	require.NoError(t, pool.Enqueue(fixture.Request{Job: "holder", Class: scheduler.High, Seq: 1, SubmittedAt: testStart}.Scheduler()))
	require.Len(t, pool.Schedule(testStart).Grants, 1)
	classes := []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High}
	for i := 0; i < n; i++ {
		job := fmt.Sprintf("lm-mpi-job-%08d-0000-0000-0000-000000000000", i)
		require.NoError(t, pool.Enqueue(fixture.Request{Job: job, Class: classes[i%3], Seq: int64(i + 2), SubmittedAt: testStart}.Scheduler()))
	}
	require.Empty(t, pool.Schedule(testStart).Preemptions, "nothing preempts a high job")
	in.State = &protocol.AllocatorState{Pool: pool.Snapshot(), NextSeq: n + 2}
	want := pool.View()

	h := newAllocHarness(t)
	var before, deep protocol.QueueView
	var badLimit, badOffset error
	h.at(time.Minute, func() {
		before = h.queue()
		deep = query[protocol.QueueView](t, h.env, protocol.QueryQueue, protocol.QueuePage{Limit: 5, Offset: n - 2})
		_, badLimit = h.env.QueryWorkflow(protocol.QueryQueue, protocol.QueuePage{Limit: protocol.MaxQueuePageLimit + 1})
		_, badOffset = h.env.QueryWorkflow(protocol.QueryQueue, protocol.QueuePage{Offset: -1})
	})
	h.release(2*time.Minute, protocol.ReleaseSignal{Job: "holder", Attempt: 1, Workers: []int{0}, Stopping: true})
	h.request(3*time.Minute, fixture.Request{Job: "newcomer", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	start := time.Now()
	h.runAllocator(in, 10*time.Minute)
	t.Logf("10,000 waiting jobs: %s", time.Since(start))

	require.Equal(t, n, before.WaitingTotal)
	require.Len(t, before.Waiting, protocol.DefaultQueuePageLimit, "a query without a page lists the first page")
	assert.Equal(t, waitingJobs(protocol.QueueView{View: want})[:protocol.DefaultQueuePageLimit], waitingJobs(before))
	assert.Equal(t, map[string]int{"high": n / 3, "medium": n / 3, "low": n - 2*(n/3)}, before.WaitingByClass)
	// A page deep in the queue: its last 2 jobs, with their positions and reasons, and the totals.
	assert.Equal(t, n, deep.WaitingTotal)
	assert.Equal(t, before.WaitingByClass, deep.WaitingByClass)
	assert.Equal(t, n-2, deep.Offset)
	assert.Equal(t, 5, deep.Limit)
	require.Len(t, deep.Waiting, 2)
	for i, w := range deep.Waiting {
		assert.Equal(t, want.Waiting[n-2+i], w)
	}
	assert.Len(t, deep.Nodes, len(want.Nodes))
	require.Error(t, badLimit)
	assert.Contains(t, badLimit.Error(), "limit: must be between 1 and 1000, got 1001")
	require.Error(t, badOffset)
	assert.Contains(t, badOffset.Error(), "offset: must be 0 or more, got -1")
	head := want.Waiting[0].Job
	assert.Equal(t, scheduler.High, want.Waiting[0].Class)
	require.Len(t, h.grants, 1)
	assert.Equal(t, head, h.grants[0].job, "the head of the queue starts first")
	assert.Equal(t, int64(n+2), h.outcome("newcomer", 1).reply.Seq)
	end := h.queue()
	assert.Equal(t, n, end.WaitingTotal)
	explained := query[protocol.ExplainReply](t, h.env, protocol.QueryExplain, "newcomer")
	require.NotNil(t, explained.Waiting)
	assert.Equal(t, n/3, explained.Waiting.Position, "a new high job queues behind the older high ones")
}

type reconfigureOutcome struct {
	rejected error
	reply    protocol.ReconfigureReply
	err      error
	done     bool
}

// reconfigure sends the reconfigure update with in at d (on the test clock).
func (h *allocHarness) reconfigure(d time.Duration, in protocol.AllocatorInput) *reconfigureOutcome {
	out := &reconfigureOutcome{}
	h.at(d, func() {
		h.env.UpdateWorkflow(protocol.UpdateReconfigure, "reconfigure/"+d.String(), &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { out.rejected, out.done = err, true },
			OnComplete: func(v any, err error) {
				out.err, out.done = err, true
				if err == nil {
					out.reply = decodeUpdateResult[protocol.ReconfigureReply](h.t, v)
				}
			},
		}, in)
	})
	return out
}

func (h *allocHarness) refusalsTo(job string) []protocol.RefuseSignal {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.RefuseSignal
	for _, r := range h.refusals {
		if r.job == job {
			out = append(out, r.arg.(protocol.RefuseSignal))
		}
	}
	return out
}

// A node added to the config serves the waiting job at once, and the new
// settings are carried through continue-as-new.
func TestAllocatorReconfigureAddsNode(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	in.MaxUpdatesPerRun = 4 // two requests, the reconfigure and a late request: then continue as new
	h.request(time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "job-b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var before protocol.QueueView
	h.at(3*time.Minute, func() { before = h.queue() })
	next := in
	next.Nodes = allocNodes(2, 2)
	next.Policy = scheduler.Policy{Queueing: scheduler.StrictFIFO, MinRuntimeBeforePreemption: time.Minute}
	next.StopGracePeriod, next.ReclaimInterval = 9*time.Second, time.Minute
	next.MaxUpdatesPerRun = 0 // ignored: not part of the config
	out := h.reconfigure(4*time.Minute, next)
	// n2 is fenced until its agent answers (at once here); then job-b runs
	// there, and job-c waits.
	h.request(5*time.Minute, fixture.Request{Job: "job-c", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.env.ExecuteWorkflow(protocol.AllocatorWorkflowName, in)
	require.True(t, h.env.IsWorkflowCompleted())

	require.True(t, out.done)
	require.NoError(t, out.rejected)
	require.NoError(t, out.err)
	assert.True(t, out.reply.Changed)
	assert.Contains(t, out.reply.Summary, "added node(s) n2")
	assert.Contains(t, out.reply.Summary, "stop_grace_period 5s -> 9s")
	assert.Contains(t, out.reply.Summary, "queueing best-effort-fifo -> strict-fifo")
	assert.Empty(t, out.reply.Refused)

	assert.Equal(t, []string{"job-b"}, waitingJobs(before))
	assert.Len(t, before.Nodes, 1)
	after := h.queue() // the final state of the run that continued as new
	assert.Equal(t, []string{"job-a", "job-b"}, runningJobs(after))
	assert.Len(t, after.Nodes, 2)
	gb := h.grantsTo("job-b")
	require.Len(t, gb, 1)
	assert.Equal(t, "n2", gb[0].Placement[0].Node)
	assert.Equal(t, 9*time.Second, gb[0].StopGracePeriod, "grants use the new stop grace period")
	fencedN2 := false
	for _, f := range h.fences {
		fencedN2 = fencedN2 || f.node == "n2"
	}
	assert.True(t, fencedN2, "the added node was fenced before it was granted")

	carried := continuedWith(t, h.env.GetWorkflowError())
	assert.Equal(t, next.Nodes, carried.in.Nodes)
	assert.Equal(t, next.Policy, carried.in.Policy)
	assert.Equal(t, 9*time.Second, carried.in.StopGracePeriod)
	assert.Equal(t, time.Minute, carried.in.ReclaimInterval)
	assert.Equal(t, 4, carried.in.MaxUpdatesPerRun)
	assert.Equal(t, next.Nodes, carried.pool.Nodes)
	assert.Equal(t, next.Policy, carried.pool.Policy)
}

// A config that changes only reserve_after and the preemption limits takes
// effect and says so; spelling out the default limits is no change.
func TestAllocatorReconfigurePolicyKnobs(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	defaults := in
	defaults.Policy.MaxPreemptions = scheduler.DefaultMaxPreemptions
	defaults.Policy.MaxLossGPUHours = scheduler.DefaultMaxLossGPUHours
	same := h.reconfigure(time.Minute, defaults)
	next := in
	next.Policy.ReserveAfter = time.Hour
	next.Policy.MaxPreemptions = 5
	next.Policy.MaxLossGPUHours = -1
	out := h.reconfigure(2*time.Minute, next)
	h.runAllocator(in, time.Hour)

	require.True(t, same.done)
	require.NoError(t, same.err)
	assert.False(t, same.reply.Changed, "the default limits spelled out are no change")
	require.True(t, out.done)
	require.NoError(t, out.rejected)
	require.NoError(t, out.err)
	assert.True(t, out.reply.Changed)
	assert.Equal(t, "reserve_after 0s -> 1h0m0s; max_preemptions 3 -> 5; max_loss_gpu_hours 24 -> no limit", out.reply.Summary)
}

// A config that removes a busy node is refused by the validator, with the
// reason, and changes nothing.
func TestAllocatorReconfigureRefusedChangesNothing(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(2, 2))
	h.request(time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var before, after protocol.QueueView
	h.at(2*time.Minute, func() { before = h.queue() })
	bad := in
	bad.Nodes = allocNodes(2, 2)[1:] // drops n1, where job-a runs
	bad.StopGracePeriod = time.Hour
	out := h.reconfigure(3*time.Minute, bad)
	same := h.reconfigure(4*time.Minute, in)
	h.at(5*time.Minute, func() { after = h.queue() })
	h.request(6*time.Minute, fixture.Request{Job: "job-b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(in, time.Hour)

	require.True(t, out.done)
	require.Error(t, out.rejected)
	assert.Contains(t, out.rejected.Error(), "node n1 cannot be removed: job-a holds GPUs 0,1 on it; stop it first")
	assert.Equal(t, before.Nodes, after.Nodes)
	assert.Equal(t, runningJobs(before), runningJobs(after))

	require.True(t, same.done)
	require.NoError(t, same.rejected)
	assert.False(t, same.reply.Changed, "the config in effect is a no-op")

	gb := h.grantsTo("job-b")
	require.Len(t, gb, 1)
	assert.Equal(t, in.StopGracePeriod, gb[0].StopGracePeriod, "the refused config's grace period was not taken")
}

// Waiting jobs that can no longer fit are dropped and told so.
func TestAllocatorReconfigureRefusesJobsThatNoLongerFit(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(2, 2))
	h.request(time.Minute, fixture.Request{Job: "job-a", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "wide", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	smaller := in
	smaller.Nodes = allocNodes(1, 2) // n2 is idle
	out := h.reconfigure(3*time.Minute, smaller)
	h.runAllocator(in, time.Hour)

	require.True(t, out.done)
	require.NoError(t, out.rejected)
	require.NoError(t, out.err)
	assert.Equal(t, []string{"wide"}, out.reply.Refused)
	r := h.refusalsTo("wide")
	require.Len(t, r, 1)
	assert.Equal(t, 1, r[0].Attempt)
	assert.Contains(t, r[0].Reason, "allocation T/basic was reconfigured and can no longer run this job")
	assert.Contains(t, r[0].Reason, "2 workers")
	assert.Empty(t, h.refusalsTo("job-a"))
	v := h.queue()
	assert.Empty(t, v.Waiting)
	assert.Equal(t, []string{"job-a"}, runningJobs(v))
	assert.Len(t, v.Nodes, 1)
}

// TestAllocatorReconfigureRefusesJobsOverALoweredCap: a reconfigure that
// lowers a workspace's cap below what a waiting job needs ends that job with
// the cap's name and value, instead of leaving it waiting for ever; a job the
// cap still lets start waits on.
func TestAllocatorReconfigureRefusesJobsOverALoweredCap(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	h.request(time.Minute, fixture.Request{Job: "holder", Attempt: 1, Class: scheduler.Medium, GPUs: 2, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "wide", Attempt: 1, Class: scheduler.High, GPUs: 2, Workspace: "team-a", SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "narrow", Attempt: 1, Class: scheduler.Low, GPUs: 1, Workspace: "team-a", SubmittedAt: testStart}.Capacity())
	capped := in
	capped.Policy.Limits = []scheduler.Limit{{Workspace: "team-a", Class: scheduler.High, MaxGPUs: 1}, {Workspace: "team-a", Class: scheduler.Low, MaxGPUs: 1}}
	out := h.reconfigure(3*time.Minute, capped)
	h.runAllocator(in, time.Hour)

	require.True(t, out.done)
	require.NoError(t, out.rejected)
	require.NoError(t, out.err)
	assert.Equal(t, []string{"wide"}, out.reply.Refused)
	r := h.refusalsTo("wide")
	require.Len(t, r, 1)
	assert.Contains(t, r[0].Reason, "allocation T/basic was reconfigured and can no longer run this job")
	assert.Contains(t, r[0].Reason, "limit high.max_gpus")
	assert.Empty(t, h.refusalsTo("narrow"))
	v := h.queue()
	assert.Equal(t, []string{"narrow"}, waitingJobs(v))
	assert.Equal(t, []string{"holder"}, runningJobs(v))
}

// TestAllocatorRefusesARequestOverALoweredCap: a request the edge let
// through under the old config (sent before the reconfigure, or queued again
// after it) reaches the allocator once the cap is lowered under it: it is
// refused with the cap, not queued for ever.
func TestAllocatorRefusesARequestOverALoweredCap(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	h.request(time.Minute, fixture.Request{Job: "holder", Attempt: 1, Class: scheduler.Medium, GPUs: 2, SubmittedAt: testStart}.Capacity())
	capped := in
	capped.Policy.Limits = []scheduler.Limit{{Workspace: "team-a", Class: scheduler.High, MaxGPUs: 1}}
	out := h.reconfigure(3*time.Minute, capped)
	h.request(4*time.Minute, fixture.Request{Job: "wide", Attempt: 1, Class: scheduler.High, GPUs: 2, Workspace: "team-a", SubmittedAt: testStart}.Capacity())
	h.signalRequest(5*time.Minute, fixture.Request{Job: "wide-signal", Attempt: 1, Class: scheduler.High, GPUs: 2, Workspace: "team-a", SubmittedAt: testStart}.Capacity())
	h.runAllocator(in, time.Hour)

	require.True(t, out.done)
	update := h.outcome("wide", 1)
	require.Error(t, update.rejected, "the request-capacity update of older clients is rejected")
	assert.Contains(t, update.rejected.Error(), "limit high.max_gpus")
	r := h.refusalsTo("wide-signal")
	require.Len(t, r, 1, "the signalled request is refused")
	assert.Contains(t, r[0].Reason, "limit high.max_gpus")
	assert.Empty(t, waitingJobs(h.queue()))
}

// TestAllocatorSendsABurstOfGrantsWithinTheSignalBudget: one release frees
// capacity for 3,000 waiting jobs. Temporal fails a workflow task that would
// leave more than 2,000 signals undelivered, or during which more than 100
// events came in, so the grants go out at most AllocatorSignalsInFlight at a
// time, the next ones as earlier ones are delivered, and none is lost; and a
// pass grants no more than the budget has room for, so that the run never
// has more decided than it can deliver.
func TestAllocatorSendsABurstOfGrantsWithinTheSignalBudget(t *testing.T) {
	const nodes, waiting = 375, 3000 // 8 GPUs a node: the holder takes all 3,000
	h := newAllocHarnessOpts(t, harnessOpts{signalDelay: time.Second})
	holder := fixture.Request{Job: "holder", Attempt: 1, Class: scheduler.Medium, Workers: nodes, GPUs: 8, SubmittedAt: testStart}.Capacity()
	h.signalRequest(time.Minute, holder)
	// The test environment queues at most 1,000 callbacks and signals: send
	// the requests in slices, each slice from one callback.
	const slice = 100
	for first := 0; first < waiting; first += slice {
		h.at(2*time.Minute+time.Duration(first)*10*time.Millisecond, func() {
			for i := first; i < min(first+slice, waiting); i++ {
				r := fixture.Request{Job: fmt.Sprintf("small-%04d", i), Attempt: 1, Class: scheduler.Medium, Workers: 1, GPUs: 1, SubmittedAt: testStart}
				h.env.SignalWorkflow(protocol.SignalRequest, r.Capacity())
			}
		})
	}
	all := make([]int, nodes)
	for i := range all {
		all[i] = i
	}
	h.release(3*time.Minute, protocol.ReleaseSignal{Job: "holder", Attempt: 1, Workers: all, Stopping: true})
	// While the burst goes out, every 100 ms: the grants decided and not yet
	// delivered (the mock records a signal once its delay has passed).
	mostUndelivered := 0
	for d := 3 * time.Minute; d < 3*time.Minute+20*time.Second; d += 100 * time.Millisecond {
		h.at(d, func() {
			decided := h.queue().Counters.Grants
			h.mu.Lock()
			defer h.mu.Unlock()
			mostUndelivered = max(mostUndelivered, int(decided)-len(h.grants))
		})
	}
	in := allocInput(allocNodes(nodes, 8))
	in.MaxUpdatesPerRun = 2 * waiting // one run takes the whole burst
	h.runAllocator(in, time.Hour)

	h.mu.Lock()
	defer h.mu.Unlock()
	sentAt := map[time.Time]int{}
	granted := map[string]int{}
	for i, g := range h.grants {
		granted[g.job]++
		sentAt[h.grantAt[i]]++
	}
	assert.Len(t, granted, waiting+1, "the holder and every small job were granted")
	for job, n := range granted {
		assert.Equal(t, 1, n, "%s was granted %d times", job, n)
	}
	most := 0
	for _, n := range sentAt {
		most = max(most, n)
	}
	assert.LessOrEqual(t, most, protocol.AllocatorSignalsInFlight, "signals sent while earlier ones were undelivered")
	assert.GreaterOrEqual(t, len(sentAt), waiting/protocol.AllocatorSignalsInFlight, "the burst went out in waves")
	// A pass grants no more than the budget can send: what the run has
	// decided and not delivered, which it must deliver before it can hand
	// over, stays within it.
	assert.LessOrEqual(t, mostUndelivered, protocol.AllocatorSignalsInFlight, "grants decided and not yet delivered")
}

// TestJobResetToAnEarlierAttemptIsServed: a job whose workflow was reset to
// before its attempt 2 asks again for attempt 1. Attempt 2's workers belong
// to a run that is gone: the allocator stops them, frees their GPUs, and then
// serves the request, instead of dropping it and leaving the job waiting
// while the abandoned workers keep their GPUs.
func TestJobResetToAnEarlierAttemptIsServed(t *testing.T) {
	h := newAllocHarness(t)
	h.signalRequest(time.Minute, fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(2*time.Minute, fixture.Request{Job: "other", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	reset := fixture.Request{Job: "j", Attempt: 1, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity() // the place its first grant gave it, which the reset run carries
	h.at(3*time.Minute, func() {
		h.mu.Lock()
		h.attempts["j"] = 1 // the workflow was reset
		h.mu.Unlock()
		h.env.SignalWorkflow(protocol.SignalRequest, reset)
	})
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	g := h.grantsTo("j")
	require.Len(t, g, 2, "attempt 2, then attempt 1 after the reset")
	assert.Equal(t, 2, g[0].Attempt)
	assert.Equal(t, 1, g[1].Attempt)
	require.Len(t, h.stops, 1, "the abandoned attempt's worker was stopped")
	assert.Equal(t, cluster.WorkerID{Job: "j", Attempt: 2, Worker: 0}, h.stops[0].ID)
	v := h.queue()
	require.Len(t, v.Running, 1)
	assert.Equal(t, "j", v.Running[0].Job)
	assert.Equal(t, 1, v.Running[0].Attempt)
	assert.Equal(t, []string{"other"}, waitingJobs(v), "the reset job kept its place ahead of the later job")
	assert.Empty(t, h.refusals)
}

// TestLateDuplicateOfAnOldRequestIsDropped: a request for attempt 1 that
// arrives while attempt 2 runs, from a job that was not reset (a signal
// delayed in the network past its retry), is dropped: attempt 2 keeps its
// workers and its GPUs.
func TestLateDuplicateOfAnOldRequestIsDropped(t *testing.T) {
	h := newAllocHarness(t)
	h.attempts["j"] = 2
	h.signalRequest(time.Minute, fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(3*time.Minute, fixture.Request{Job: "j", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	require.Len(t, h.grantsTo("j"), 1)
	assert.Empty(t, h.stops, "attempt 2's worker was not stopped")
	v := h.queue()
	require.Len(t, v.Running, 1)
	assert.Equal(t, 2, v.Running[0].Attempt)
	assert.Empty(t, v.Waiting)
}
