package workflows

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The recovery tests start an allocator without state, as after
// `temporal workflow terminate`, with jobs that still hold or wait for
// capacity (their answers to the register update are h.holds).

//nolint:unparam // a builder's call names every field of the hold it builds; the tests all use attempt 1 today
func holding(job string, attempt int, seq int64, p ...scheduler.WorkerPlacement) protocol.JobHold {
	req := fixture.Request{Job: job, Attempt: attempt, Class: scheduler.Medium, Workers: len(p), Seq: seq, SubmittedAt: testStart}.Capacity()
	return protocol.JobHold{Job: job, Phase: protocol.HoldHolding, Request: req, Placement: p, StartedAt: testStart}
}

func waitingHold(job string, class scheduler.Class, seq int64) protocol.JobHold {
	req := fixture.Request{Job: job, Attempt: 1, Class: class, Workers: 1, Seq: seq, SubmittedAt: testStart}.Capacity()
	return protocol.JobHold{Job: job, Phase: protocol.HoldWaiting, Request: req}
}

func on(node string, worker int, gpus ...int) scheduler.WorkerPlacement {
	return scheduler.WorkerPlacement{Worker: worker, Node: node, GPUs: gpus}
}

func TestRecoveryNeverGrantsWhatAJobStillHolds(t *testing.T) {
	h := newAllocHarness(t)
	// held holds all of n1; old-waiter waited (seq 5) before the allocator
	// was lost; newcomer asks the fresh allocator at once.
	h.holds = []protocol.JobHold{
		holding("held", 1, 3, on("n1", 0, 0, 1)),
		waitingHold("old-waiter", scheduler.Medium, 5),
	}
	h.request(0, fixture.Request{Job: "newcomer", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	require.Len(t, h.registerCalls, 1)
	epoch := h.registerCalls[0].Epoch
	require.NotEmpty(t, epoch)
	g := h.grantsTo("old-waiter")
	require.Len(t, g, 1, "the recovered waiting job keeps its place ahead of the newcomer")
	assert.Equal(t, "n2", g[0].Placement[0].Node, "n1 is still held by the recovered job")
	assert.Equal(t, epoch, g[0].Epoch, "grants name the recovered epoch")
	assert.Empty(t, h.grantsTo("newcomer"), "nothing is free for the newcomer")
	assert.Empty(t, h.preempts)
	v := h.queue()
	assert.ElementsMatch(t, []string{"held", "old-waiter"}, runningJobs(v))
	assert.Equal(t, []string{"newcomer"}, waitingJobs(v))
	assert.False(t, v.Recovering)
	assert.Empty(t, v.Fenced, "every agent answered the fence")
	assert.Equal(t, int64(1), v.Counters.Recoveries)
	reply := h.outcome("newcomer", 1).reply
	assert.Equal(t, epoch, reply.Epoch)
	assert.Greater(t, reply.Seq, int64(5), "a new request queues after every recovered one")
	// Each node's agent was told which workers to keep: n1 keeps held's.
	keep := map[string][]cluster.WorkerID{}
	for _, f := range h.fences {
		keep[f.node] = append(keep[f.node], f.keep...)
	}
	assert.Equal(t, []cluster.WorkerID{{Job: "held", Attempt: 1, Worker: 0}}, keep["n1"])
}

func TestRecoveryAppliesReleasesThatArriveMeanwhile(t *testing.T) {
	for _, byUpdate := range []bool{false, true} {
		t.Run(fmt.Sprintf("release by update %v", byUpdate), func(t *testing.T) { testRecoveryAppliesReleasesThatArriveMeanwhile(t, byUpdate) })
	}
}

// testRecoveryAppliesReleasesThatArriveMeanwhile: the release comes as the
// job's signal, or as a node agent's update (answered at once, and taken in
// when the recovery ends).
func testRecoveryAppliesReleasesThatArriveMeanwhile(t *testing.T, byUpdate bool) {
	// The register answers take a while; meanwhile held's worker 1 stops.
	h := newAllocHarnessWith(t, 10*time.Second)
	h.holds = []protocol.JobHold{holding("held", 1, 1, on("n1", 0, 0, 1), on("n2", 1, 0, 1))}
	var during protocol.QueueView
	h.at(6*time.Second, func() { during = h.queue() })
	release := protocol.ReleaseSignal{Job: "held", Attempt: 1, Workers: []int{1}, Stopping: true}
	if byUpdate {
		h.releaseByUpdate(5*time.Second, release)
	} else {
		h.release(5*time.Second, release)
	}
	h.request(6*time.Second, fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	assert.True(t, during.Recovering, "the release and the request came while the allocator recovered")
	g := h.grantsTo("next")
	require.Len(t, g, 1, "the release sent during recovery frees n2")
	assert.Equal(t, "n2", g[0].Placement[0].Node)
	v := h.queue()
	require.Len(t, v.Running, 2)
	for _, r := range v.Running {
		if r.Job == "held" {
			assert.True(t, r.Releasing)
			assert.Equal(t, []int{1}, r.Released)
		}
	}
}

// TestRecoveryAppliesWithdrawalsThatArriveMeanwhile: a job cancelled while
// the allocator recovers withdraws its request by update; the allocator
// keeps the withdrawal for the recovery's end, as it keeps the request, and
// never grants the job that has gone, nor preempts for it, whether the
// recovery's registration found the job still waiting or not.
func TestRecoveryAppliesWithdrawalsThatArriveMeanwhile(t *testing.T) {
	for _, registered := range []bool{false, true} {
		t.Run(fmt.Sprintf("registered waiting %v", registered), func(t *testing.T) {
			h := newAllocHarnessWith(t, 10*time.Second)
			gone := fixture.Request{Job: "gone", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity()
			victim := holding("victim", 1, 2, on("n2", 0, 0, 1))
			victim.Request.Class = scheduler.Low
			h.holds = []protocol.JobHold{holding("held", 1, 1, on("n1", 0, 0, 1)), victim}
			if registered {
				h.holds = append(h.holds, protocol.JobHold{Job: "gone", Phase: protocol.HoldWaiting, Request: gone})
			}
			h.requestByUpdate(5*time.Second, gone)
			h.withdraw(6*time.Second, protocol.WithdrawSignal{Job: "gone", Attempt: 1}, true)
			var during protocol.QueueView
			h.at(7*time.Second, func() { during = h.queue() })
			h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

			assert.True(t, during.Recovering, "the withdrawal came while the allocator recovered")
			assert.Empty(t, h.grantsTo("gone"), "a withdrawn request is never granted")
			assert.Empty(t, h.preempts, "nobody is preempted for a withdrawn request")
			v := h.queue()
			assert.Empty(t, v.Waiting)
			assert.ElementsMatch(t, []string{"held", "victim"}, runningJobs(v))
		})
	}
}

// TestRequestUpdateDuringRecoveryIsAnsweredAtOnce: a request that comes as
// an update while the allocator recovers is answered at once, with nothing
// known yet, and taken in when the recovery ends: an update that waited for
// the recovery would hold one of the server's ten in-flight updates, and ten
// such would shut every other update out until it ended.
func TestRequestUpdateDuringRecoveryIsAnsweredAtOnce(t *testing.T) {
	h := newAllocHarnessWith(t, 10*time.Second)
	h.holds = []protocol.JobHold{holding("held", 1, 1, on("n1", 0, 0, 1))}
	h.requestByUpdate(6*time.Second, fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	var answered bool
	var during protocol.QueueView
	h.at(7*time.Second, func() {
		during = h.queue()
		h.mu.Lock()
		defer h.mu.Unlock()
		answered = h.updates["request/next/1"].done
	})
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	assert.True(t, during.Recovering, "the request came while the allocator recovered")
	assert.True(t, answered, "the update is answered before the recovery ends")
	out := h.outcome("next", 1)
	require.NoError(t, out.rejected)
	assert.Zero(t, out.reply.Seq, "nothing is known of the request until the recovery ends")
	require.Len(t, h.grantsTo("next"), 1, "the request is taken in when the recovery ends")
}

func TestRecoveryReportsConflictingHolds(t *testing.T) {
	h := newAllocHarness(t)
	h.holds = []protocol.JobHold{
		holding("a", 1, 1, on("n1", 0, 0, 1)),
		holding("b", 1, 2, on("n1", 0, 1, 0)), // claims the same GPUs
	}
	reply := h.recoverAt(time.Minute)
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)
	require.Len(t, h.registerCalls, 2, "the start and the operator's recover")
	assert.NotEqual(t, h.registerCalls[0].Epoch, h.registerCalls[1].Epoch, "each recovery draws a new epoch")
	assert.Equal(t, h.registerCalls[1].Epoch, reply.Epoch)
	assert.Equal(t, 1, reply.Running)
	require.Len(t, reply.Conflicts, 1)
	assert.Contains(t, reply.Conflicts[0], "b attempt 1")
}

func TestLostNodeIsFencedUntilItsAgentAnswers(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "victim", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	// victim's node stops answering: the job releases its worker as lost.
	h.at(2*time.Minute, func() {
		h.mu.Lock()
		h.deadNodes["n1"] = true
		h.mu.Unlock()
	})
	h.release(3*time.Minute, protocol.ReleaseSignal{Job: "victim", Attempt: 1, Workers: []int{0}, Stopping: true, LostNodes: []string{"n1"}})
	h.request(4*time.Minute, fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var during protocol.QueueView
	h.at(5*time.Minute, func() { during = h.queue() })
	h.at(6*time.Minute, func() {
		h.mu.Lock()
		delete(h.deadNodes, "n1")
		h.mu.Unlock()
	})
	h.request(7*time.Minute, fixture.Request{Job: "later", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	require.Len(t, during.Fenced, 1)
	assert.Equal(t, "n1", during.Fenced[0].Node)
	assert.Contains(t, during.Fenced[0].Reason, "lost")
	assert.Equal(t, []string{"next"}, waitingJobs(during), "nothing is granted on a fenced node")
	require.Len(t, h.grantsTo("next"), 1, "once its agent answers the fence, the node serves the queue again")
	v := h.queue()
	assert.Empty(t, v.Fenced)
	assert.Equal(t, int64(1), v.Counters.NodesLost)
	assert.Equal(t, []string{"later"}, waitingJobs(v))
}

func TestWithdrawBeforeRequestLeavesNoGhost(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "low", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	// The job was cancelled while its request was on its way: the
	// withdrawal overtakes the request.
	h.withdraw(2*time.Minute, protocol.WithdrawSignal{Job: "ghost", Attempt: 1}, true)
	h.request(3*time.Minute, fixture.Request{Job: "ghost", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)

	out := h.outcome("ghost", 1)
	require.Error(t, out.rejected, "the late request is refused")
	assert.Contains(t, out.rejected.Error(), "withdrew")
	assert.Empty(t, h.preempts, "a ghost never preempts")
	v := h.queue()
	assert.Empty(t, v.Waiting)
	assert.Equal(t, []string{"low"}, runningJobs(v))
}

func TestWithdrawCancelsOnlyItsAttempt(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "job", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	// Attempt 1 stops; worker 0 is gone, worker 1 still stops.
	h.release(2*time.Minute, protocol.ReleaseSignal{Job: "job", Attempt: 1, Workers: []int{0}, Stopping: true})
	h.request(3*time.Minute, fixture.Request{Job: "job", Attempt: 2, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.withdraw(4*time.Minute, protocol.WithdrawSignal{Job: "job", Attempt: 2}, true)
	h.request(5*time.Minute, fixture.Request{Job: "other", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	assert.Empty(t, h.grantsTo("other"), "attempt 1's worker 1 still holds its GPUs")
	v := h.queue()
	require.Len(t, v.Running, 1)
	assert.Equal(t, 1, v.Running[0].Attempt)
	assert.True(t, v.Running[0].Releasing)
	assert.Equal(t, []string{"other"}, waitingJobs(v))
}

func TestGhostRequestsAreDropped(t *testing.T) {
	h := newAllocHarness(t)
	h.request(time.Minute, fixture.Request{Job: "runner", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "ghost", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(3*time.Minute, fixture.Request{Job: "alive", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	// ghost's job ended without a withdrawal reaching the allocator.
	h.ghosts = []protocol.WithdrawSignal{{Job: "ghost", Attempt: 1}}
	h.runAllocator(allocInput(allocNodes(1, 2)), time.Hour)
	v := h.queue()
	assert.Equal(t, []string{"alive"}, waitingJobs(v), "the leak check dropped the ghost, not the living")
}

func TestUnreadableStateFailsTheTaskNotTheAllocator(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	in.State = &protocol.AllocatorState{Pool: scheduler.Snapshot{Version: 99}}
	h.env.ExecuteWorkflow(protocol.AllocatorWorkflowName, in)
	// A panic fails the workflow task, which the server retries until a
	// worker that can read the state runs it; the test environment reports
	// it as a PanicError. An application error would close the workflow
	// and lose the state.
	var panicErr *temporal.PanicError
	require.True(t, errors.As(h.env.GetWorkflowError(), &panicErr), "got %v", h.env.GetWorkflowError())
	assert.Contains(t, panicErr.Error(), "restore allocator state")
}

func TestAllocatorTakesRequestsAsSignals(t *testing.T) {
	h := newAllocHarness(t)
	h.signalRequest(time.Minute, fixture.Request{Job: "first", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity())
	h.signalRequest(time.Minute, fixture.Request{Job: "second", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(time.Minute, fixture.Request{Job: "first", Attempt: 1, Class: scheduler.Medium, Workers: 2, SubmittedAt: testStart}.Capacity()) // a retried activity signals twice
	tooBig := fixture.Request{Job: "too-big", Attempt: 1, Class: scheduler.High, Workers: 3, SubmittedAt: testStart}.Capacity()
	h.signalRequest(2*time.Minute, tooBig)
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	g := h.grantsTo("first")
	require.Len(t, g, 2, "a repeated request of a granted attempt gets the same grant again")
	assert.Equal(t, g[0], g[1])
	assert.Equal(t, int64(1), g[0].Seq, "the grant tells the job its place for reruns")
	assert.Equal(t, int64(1), h.queue().Counters.Grants, "granted once")
	assert.Empty(t, h.grantsTo("second"))
	require.Len(t, h.refusals, 1)
	assert.Equal(t, "too-big", h.refusals[0].job)
	assert.Contains(t, h.refusals[0].arg.(protocol.RefuseSignal).Reason, "3 workers")
	v := h.queue()
	assert.Equal(t, []string{"second"}, waitingJobs(v))
	assert.Equal(t, int64(2), v.Waiting[0].Seq)
}

func TestFullQueueRefusesNewJobsButNotReruns(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	in.MaxWaiting = 2
	h.signalRequest(time.Minute, fixture.Request{Job: "running", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(2*time.Minute, fixture.Request{Job: "w1", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(3*time.Minute, fixture.Request{Job: "w2", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.signalRequest(4*time.Minute, fixture.Request{Job: "w3", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity()) // one too many
	rerun := fixture.Request{Job: "back", Attempt: 2, Class: scheduler.Medium, Workers: 1, Seq: 1, SubmittedAt: testStart}.Capacity()
	h.signalRequest(5*time.Minute, rerun) // a rerun had its place already
	var counts protocol.QueueCounts
	h.at(6*time.Minute, func() { counts = query[protocol.QueueCounts](t, h.env, protocol.QueryCounts) })
	h.runAllocator(in, time.Hour)

	require.Len(t, h.refusals, 1)
	assert.Equal(t, "w3", h.refusals[0].job)
	assert.Equal(t, "allocation T/basic has 2 waiting jobs (max_waiting); try later", h.refusals[0].arg.(protocol.RefuseSignal).Reason)
	assert.Equal(t, protocol.QueueCounts{Waiting: 3, MaxWaiting: 2, Running: 1, RecoveredAt: testStart}, counts, "recovered at its start")
}

// TestAllocatorLosesNothingAcrossContinueAsNew drives one allocation through
// many runs: each run takes a burst of request signals and the releases of
// the jobs granted before, then hands over. Every job must be granted
// exactly once and the last state must hold nothing.
func TestAllocatorLosesNothingAcrossContinueAsNew(t *testing.T) {
	const jobs, perRun = 1500, 300
	in := allocInput(allocNodes(50, 2)) // 50 jobs of a100.2gpu at a time
	in.MaxUpdatesPerRun = perRun
	classes := []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High}
	granted := map[string]int{}
	var unreleased []string
	next, runs := 0, 0
	var packed []byte
	var pool scheduler.Snapshot
	for {
		runs++
		require.Less(t, runs, 200, "the allocation never drained")
		h := newAllocHarness(t)
		releases := unreleased
		unreleased = nil
		batch := min(perRun-len(releases), jobs-next)
		first := next
		h.at(time.Second, func() {
			for _, job := range releases {
				h.env.SignalWorkflow(protocol.SignalRelease, protocol.ReleaseSignal{Job: job, Attempt: 1, Workers: []int{0}, Stopping: true})
			}
			for i := 0; i < batch; i++ {
				h.env.SignalWorkflow(protocol.SignalRequest, fixture.Request{Job: fmt.Sprintf("job-%05d", first+i), Attempt: 1, Class: classes[(first+i)%3], Workers: 1, SubmittedAt: testStart}.Capacity())
			}
			// Releases of nobody's capacity are no-ops that make up the
			// run's messages, so that every run hands over.
			for i := len(releases) + batch; i < perRun; i++ {
				h.env.SignalWorkflow(protocol.SignalRelease, protocol.ReleaseSignal{Job: "nobody", Attempt: 1, Workers: []int{0}})
			}
		})
		next += batch
		h.env.ExecuteWorkflow(protocol.AllocatorWorkflowName, in, packed)
		require.True(t, h.env.IsWorkflowCompleted())
		carried := continuedWith(t, h.env.GetWorkflowError())
		for _, g := range h.grants {
			granted[g.job]++
			unreleased = append(unreleased, g.job)
		}
		in, packed, pool = carried.in, carried.packed, carried.pool
		if next == jobs && len(unreleased) == 0 {
			break
		}
	}
	require.Len(t, granted, jobs, "every job was granted")
	for job, n := range granted {
		require.Equal(t, 1, n, "%s was granted %d times", job, n)
	}
	assert.Empty(t, pool.Waiting.Job, "nothing waits at the end")
	assert.Empty(t, pool.Running, "nothing holds capacity at the end")
	t.Logf("%d jobs through %d allocator runs", jobs, runs)
}

func TestAllocatorWakesWhenMinRuntimePasses(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 2))
	in.Policy.MinRuntimeBeforePreemption = 10 * time.Minute
	h.request(time.Minute, fixture.Request{Job: "low", Attempt: 1, Class: scheduler.Low, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(2*time.Minute, fixture.Request{Job: "high", Attempt: 1, Class: scheduler.High, Workers: 1, SubmittedAt: testStart}.Capacity())
	var early int
	h.at(10*time.Minute, func() {
		h.mu.Lock()
		early = len(h.preempts)
		h.mu.Unlock()
	})
	h.runAllocator(in, time.Hour)
	assert.Zero(t, early, "the low job is protected for its first 10 minutes")
	require.Len(t, h.preemptsTo("low"), 1, "no event comes, yet the high job preempts once the protection ends")
}

func TestRecoverUpdateDuringStartUpRecoveryTakesItsAnswer(t *testing.T) {
	h := newAllocHarnessWith(t, 10*time.Second)
	h.holds = []protocol.JobHold{holding("held", 1, 1, on("n1", 0, 0, 1))}
	reply := h.recoverAt(time.Second)
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)
	require.Len(t, h.registerCalls, 1, "the operator's recover waited for the start-up one and took its answer")
	assert.Equal(t, h.registerCalls[0].Epoch, reply.Epoch)
	assert.Equal(t, 1, reply.Running)
}

// signalRequest sends a capacity request as a signal at d, as the
// RequestCapacity activity does.
func (h *allocHarness) signalRequest(d time.Duration, req protocol.CapacityRequest) {
	h.at(d, func() { h.env.SignalWorkflow(protocol.SignalRequest, req) })
}

// recoverAt sends the operator's recover update at d; the reply is filled in
// once the update completes.
func (h *allocHarness) recoverAt(d time.Duration) *protocol.RecoverReply {
	reply := &protocol.RecoverReply{}
	h.at(d, func() {
		h.env.UpdateWorkflow(protocol.UpdateRecover, "recover-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { h.t.Errorf("recover rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(h.t, err)
				*reply = decodeUpdateResult[protocol.RecoverReply](h.t, v)
			},
		})
	})
	return reply
}

// TestFenceAnswerKeepingAReleasedWorkerDoesNotBringTheNodeBack: two jobs on
// one node lose their watches one after the other while the node's agent is
// away. The first loss starts a fence that keeps b's worker; b's loss comes
// while that fence waits for the agent. When the agent answers the first
// fence, it has kept b's worker running, so the node must stay fenced until a
// fence that keeps nothing has stopped it: otherwise b's GPUs would be granted
// while its worker still runs.
func TestFenceAnswerKeepingAReleasedWorkerDoesNotBringTheNodeBack(t *testing.T) {
	h := newAllocHarnessOpts(t, harnessOpts{fenceDelay: 2 * time.Minute})
	h.request(time.Minute, fixture.Request{Job: "a", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(time.Minute, fixture.Request{Job: "b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.release(3*time.Minute, protocol.ReleaseSignal{Job: "a", Attempt: 1, Workers: []int{0}, Stopping: true, LostNodes: []string{"n1"}})
	h.release(4*time.Minute, protocol.ReleaseSignal{Job: "b", Attempt: 1, Workers: []int{0}, Stopping: true, LostNodes: []string{"n1"}})
	h.request(4*time.Minute+30*time.Second, fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var afterStale protocol.QueueView
	h.at(5*time.Minute+30*time.Second, func() { afterStale = h.queue() })
	h.runAllocator(allocInput(allocNodes(1, 4)), time.Hour)

	require.NotEmpty(t, h.grantsTo("a"))
	require.NotEmpty(t, h.grantsTo("b"))
	// The start's recovery fenced n1 first (keeping nothing: nobody held it).
	require.GreaterOrEqual(t, len(h.fences), 2)
	assert.Equal(t, []cluster.WorkerID{{Job: "b", Attempt: 1, Worker: 0}}, h.fences[1].keep, "a's loss fenced n1 keeping b's worker")
	require.Len(t, afterStale.Fenced, 1, "the answer to the fence that kept b's worker does not bring n1 back")
	assert.Equal(t, []string{"next"}, waitingJobs(afterStale))
	require.GreaterOrEqual(t, len(h.fences), 3, "n1 is fenced again, keeping only what is still held")
	last := h.fences[len(h.fences)-1]
	assert.Empty(t, last.keep, "the fence that brought n1 back kept nothing")
	require.Len(t, h.grantsTo("next"), 1, "once a fence that kept nothing answered, n1 serves again")
	assert.Empty(t, h.queue().Fenced)
}

// TestRecoveryAdoptsAJobVisibilityMissed: recovery lists jobs through
// visibility, which lags. A running job it missed has a live worker on n1;
// the fence asks the node what runs there, asks that job what it holds, and
// adopts it, instead of killing its healthy worker and granting its GPUs.
func TestRecoveryAdoptsAJobVisibilityMissed(t *testing.T) {
	h := newAllocHarness(t)
	h.unlisted = []protocol.JobHold{holding("missed", 1, 3, on("n1", 0, 0, 1))}
	h.live["n1"] = []cluster.WorkerID{{Job: "missed", Attempt: 1, Worker: 0}}
	h.live["n2"] = []cluster.WorkerID{{Job: "ended", Attempt: 2, Worker: 0}} // its job answers nothing: it has ended
	h.request(time.Minute, fixture.Request{Job: "newcomer", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(time.Minute, fixture.Request{Job: "second", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	v := h.queue()
	assert.Empty(t, v.Fenced)
	assert.ElementsMatch(t, []string{"missed", "newcomer"}, runningJobs(v), "the missed job is adopted; the newcomer runs on n2")
	assert.Equal(t, []string{"second"}, waitingJobs(v), "nothing else is free")
	g := h.grantsTo("newcomer")
	require.Len(t, g, 1)
	assert.Equal(t, "n2", g[0].Placement[0].Node)
	keep := map[string][]cluster.WorkerID{}
	for _, f := range h.fences {
		keep[f.node] = f.keep
	}
	assert.Equal(t, []cluster.WorkerID{{Job: "missed", Attempt: 1, Worker: 0}}, keep["n1"], "the fence keeps the missed job's worker")
	assert.Empty(t, keep["n2"], "the ended job's stray worker is fenced away")
}

// TestJobThatDoesNotAnswerKeepsOnlyItsNodeFenced: a job whose workflow
// cannot answer the register update has a worker on n1. Only n1 stays
// fenced, and the rest of the allocation serves the queue; once the job
// answers, it is adopted and n1 comes back.
func TestJobThatDoesNotAnswerKeepsOnlyItsNodeFenced(t *testing.T) {
	h := newAllocHarness(t)
	h.unlisted = []protocol.JobHold{holding("stuck", 1, 3, on("n1", 0, 0, 1))}
	h.silent["stuck"] = true
	h.live["n1"] = []cluster.WorkerID{{Job: "stuck", Attempt: 1, Worker: 0}}
	h.request(time.Minute, fixture.Request{Job: "newcomer", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(time.Minute, fixture.Request{Job: "second", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var during protocol.QueueView
	h.at(5*time.Minute, func() { during = h.queue() })
	h.at(6*time.Minute, func() {
		h.mu.Lock()
		delete(h.silent, "stuck")
		h.mu.Unlock()
	})
	h.runAllocator(allocInput(allocNodes(2, 2)), time.Hour)

	require.Len(t, during.Fenced, 1, "only the node with the silent job's worker stays fenced")
	assert.Equal(t, "n1", during.Fenced[0].Node)
	assert.Equal(t, []string{"newcomer"}, runningJobs(during), "n2 serves the queue meanwhile")
	assert.Equal(t, []string{"second"}, waitingJobs(during))
	v := h.queue()
	assert.Empty(t, v.Fenced, "n1 is back once the job answered")
	assert.ElementsMatch(t, []string{"stuck", "newcomer"}, runningJobs(v))
	assert.Equal(t, []string{"second"}, waitingJobs(v), "the silent job's GPUs were never granted")
	for _, s := range h.stops {
		assert.NotEqual(t, "stuck", s.ID.Job, "the silent job's worker was not stopped")
	}
}

// TestNodeFencedWhenRemovedIsFencedWhenAddedBack: n1 is lost (its agent
// stops answering while victim runs there), removed from the config while
// fenced, and added back while its agent is still away. Its stray workers
// were never confirmed stopped, so it is fenced again, not granted at once.
func TestNodeFencedWhenRemovedIsFencedWhenAddedBack(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(2, 2))
	h.request(time.Minute, fixture.Request{Job: "victim", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.at(2*time.Minute, func() {
		h.mu.Lock()
		h.deadNodes["n1"] = true
		h.mu.Unlock()
	})
	h.release(3*time.Minute, protocol.ReleaseSignal{Job: "victim", Attempt: 1, Workers: []int{0}, Stopping: true, LostNodes: []string{"n1"}})
	without := in
	without.Nodes = allocNodes(2, 2)[1:]
	removed := h.reconfigure(4*time.Minute, without)
	added := h.reconfigure(6*time.Minute, in)
	h.request(7*time.Minute, fixture.Request{Job: "a", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.request(7*time.Minute, fixture.Request{Job: "b", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	var during protocol.QueueView
	h.at(8*time.Minute, func() { during = h.queue() })
	h.runAllocator(in, 10*time.Minute)

	require.Equal(t, "n1", h.grantsTo("victim")[0].Placement[0].Node)
	require.NoError(t, removed.err)
	require.NoError(t, added.err)
	assert.Contains(t, removed.reply.Summary, "removed node(s) n1")
	assert.Contains(t, added.reply.Summary, "added node(s) n1")
	require.Len(t, during.Fenced, 1, "n1 is fenced again when it is added back")
	assert.Equal(t, "n1", during.Fenced[0].Node)
	// The two ask at one instant: either may take n2 (the order in which
	// the test environment hands over two updates and the fence tick due
	// then is no promise of the product's); the other must wait.
	assert.Len(t, waitingJobs(during), 1, "nothing is granted on n1")
	for _, job := range []string{"a", "b"} {
		for _, g := range h.grantsTo(job) {
			assert.Equal(t, "n2", g.Placement[0].Node, "%s is granted n2, not the fenced n1", job)
		}
	}
}

// TestAddedNodesAreFencedWithinTheirShare: a reconfigure that adds 150
// nodes fences them at most AllocatorFenceActivities at a time. Each of a
// node's inventory and fence that closes brings two events into whatever
// workflow task the allocator is running, and 150 agents answering together
// (300 events) got the task force-closed (#37). A reconfigure that the run's
// first workflow task brings runs before the run's own code goes on, and
// must already know the run's gates.
func TestAddedNodesAreFencedWithinTheirShare(t *testing.T) {
	for _, at := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("reconfigured at %s", at), func(t *testing.T) {
			h := newAllocHarness(t)
			h.agents.crowd, h.agents.work = protocol.AllocatorFenceActivities+1, 100*time.Millisecond
			in := allocInput(allocNodes(1, 8))
			pool, err := scheduler.NewPool(in.Nodes, scheduler.Policy{})
			require.NoError(t, err)
			// Carried state: the run starts serving at once, as the e2e test's does.
			in.State = &protocol.AllocatorState{Pool: pool.Snapshot(), NextSeq: 1, Epoch: "carried"}
			added := h.reconfigure(at, allocInput(allocNodes(151, 8)))
			h.runAllocator(in, time.Hour)

			require.NoError(t, added.err)
			assert.Contains(t, added.reply.Summary, "added node(s) n2")
			assert.Empty(t, h.queue().Fenced, "every added node's agent answered")
			assert.GreaterOrEqual(t, h.agents.calls, 2*150, "an inventory and a fence for each added node")
			assert.LessOrEqual(t, h.agents.most, protocol.AllocatorFenceActivities, "agents' activities running at once")
		})
	}
}

// TestFencesOfDeadNodesAreTriedAgainOnTheTick: 150 added nodes whose agents
// never answer are tried again at each reclaim tick, not each on a timer of
// its own: timers due together fire together, 150 events in one batch.
func TestFencesOfDeadNodesAreTriedAgainOnTheTick(t *testing.T) {
	h := newAllocHarness(t)
	in := allocInput(allocNodes(1, 8))
	for _, n := range allocNodes(151, 8)[1:] {
		h.deadNodes[n.Name] = true
	}
	var mu sync.Mutex
	retries := 0 // timers of the reclaim interval: the tick, and before the fix every fence's retry
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		if d == in.ReclaimInterval {
			mu.Lock()
			retries++
			mu.Unlock()
		}
	})
	h.reconfigure(time.Minute, allocInput(allocNodes(151, 8)))
	h.runAllocator(in, 10*time.Minute)

	v := h.queue()
	assert.Len(t, v.Fenced, 150, "the dead nodes stay fenced")
	ticks := int(10 * time.Minute / in.ReclaimInterval)
	assert.LessOrEqual(t, retries, 2*(ticks+1), "timers of the reclaim interval: the reclaim loop's and the fence loop's ticks alone")
	assert.GreaterOrEqual(t, h.agents.calls, 150*(ticks-3), "each dead node is tried at every tick")
}

// TestADeadNodeIsLostOnceATryWaitedNodeTimeout: the first try of a fence
// waits 10 s for the node's agent, so that a dead node holds one of the few
// fence slots briefly, and each try in a row the agent leaves untaken waits
// twice as long, up to node_timeout (1 minute here): 10, 20, 40, 60 s. The
// node counts as lost once a try that waited node_timeout went unanswered,
// as every try did before; tries come at the fence tick (every 30 s).
func TestADeadNodeIsLostOnceATryWaitedNodeTimeout(t *testing.T) {
	h := newAllocHarness(t)
	h.deadNodes["n2"] = true
	var early, late protocol.QueueView
	h.at(75*time.Second, func() { early = h.queue() }) // three tries: 10, 20, 40 s
	h.at(105*time.Second, func() { late = h.queue() }) // the fourth waited 60 s
	h.runAllocator(allocInput(allocNodes(2, 2)), 5*time.Minute)

	require.Len(t, early.Fenced, 1)
	assert.Equal(t, "n2", early.Fenced[0].Node)
	assert.Equal(t, "recovering", early.Fenced[0].Cause, "no try has waited node_timeout yet")
	require.Len(t, late.Fenced, 1)
	assert.Equal(t, "lost", late.Fenced[0].Cause, "a try waited node_timeout")
	assert.Contains(t, late.Fenced[0].Reason, "did not answer for 1m0s")
}

// TestFenceStartedBeforeARecoveryStopsWithIt: a fence of n1 begins (a job's
// release names n1 lost) from a pool in which b waits, while b's worker in
// fact runs on n1 (the pool is stale: the allocator was reset to before b
// started). The fence finds b's worker and asks b, which answers that it
// holds n1; meanwhile an operator asks for a recovery. The old pool cannot
// adopt b (it has it waiting), so a fence that went on would keep none of
// b's workers and stop the running one. It stops with the recovery instead,
// whose own fence keeps b's worker.
func TestFenceStartedBeforeARecoveryStopsWithIt(t *testing.T) {
	h := newAllocHarness(t)
	h.holds = []protocol.JobHold{holding("a", 1, 1, on("n1", 0, 0, 1)), waitingHold("b", scheduler.Medium, 2)}
	bOnN1 := cluster.WorkerID{Job: "b", Attempt: 1, Worker: 0}
	h.at(50*time.Second, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.holds = []protocol.JobHold{holding("b", 1, 2, on("n1", 0, 0, 1))} // a ended; b runs on n1
		h.live["n1"] = []cluster.WorkerID{bOnN1}
		h.namedDelay, h.listingDelay = 30*time.Second, time.Minute
	})
	h.release(time.Minute, protocol.ReleaseSignal{Job: "a", Attempt: 1, Workers: []int{0}, Stopping: true, LostNodes: []string{"n1"}})
	var fencesBefore int
	h.at(time.Minute+5*time.Second, func() {
		h.mu.Lock()
		fencesBefore = len(h.fences)
		h.mu.Unlock()
	})
	reply := h.recoverAt(time.Minute + 10*time.Second)
	h.runAllocator(allocInput(allocNodes(1, 2)), 5*time.Minute)

	assert.Equal(t, 1, reply.Running, "the operator's recovery found b running")
	later := h.fences[fencesBefore:]
	require.NotEmpty(t, later, "n1 was fenced after the recovery")
	for _, f := range later {
		assert.Contains(t, f.keep, bOnN1, "no fence of n1 stops b's running worker: %+v", f)
	}
	v := h.queue()
	assert.Equal(t, []string{"b"}, runningJobs(v), "the recovery took b in, running on n1")
	assert.Empty(t, v.Fenced)
}

// TestFenceStartedDuringARecoveryWaitsForIt: a fence that starts while a
// recovery lists the jobs (a vanished job's stop fails, so its node is
// fenced) would build its keep list from the pool the recovery replaces,
// where b waits although b's worker runs on n1. It waits for the recovery
// instead, which fences n1 again keeping b's worker.
func TestFenceStartedDuringARecoveryWaitsForIt(t *testing.T) {
	h := newAllocHarness(t)
	h.holds = []protocol.JobHold{holding("v", 1, 1, on("n1", 0, 0, 1)), waitingHold("b", scheduler.Medium, 2)}
	h.vanished = []string{"v"}
	h.stopDelay = 40 * time.Second
	bOnN1 := cluster.WorkerID{Job: "b", Attempt: 1, Worker: 0}
	h.at(20*time.Second, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.stopsFail = true
		h.holds = []protocol.JobHold{holding("b", 1, 2, on("n1", 0, 0, 1))} // v ended; b runs on n1
		h.live["n1"] = []cluster.WorkerID{bOnN1}
		h.listingDelay = 2 * time.Minute
	})
	var fencesBefore int
	var during protocol.QueueView
	h.at(55*time.Second, func() {
		h.mu.Lock()
		fencesBefore = len(h.fences)
		h.mu.Unlock()
	})
	reply := h.recoverAt(time.Minute) // the reclaim's stop fails at 70 s, during the recovery
	h.at(90*time.Second, func() { during = h.queue() })
	h.runAllocator(allocInput(allocNodes(1, 2)), 6*time.Minute)

	require.True(t, during.Recovering, "the stop failed during the recovery")
	assert.Equal(t, 1, reply.Running, "the recovery found b running")
	later := h.fences[fencesBefore:]
	require.NotEmpty(t, later, "n1 was fenced after the recovery")
	for _, f := range later {
		assert.Contains(t, f.keep, bOnN1, "no fence of n1 stops b's running worker: %+v", f)
	}
	assert.Equal(t, []string{"b"}, runningJobs(h.queue()))
}

// TestStrangerAnsweredBeforeARecoveryIsNotAdoptedAfterIt: the fence of n1
// finds s's worker there, which the recovery's listing missed, and asks s
// what it holds. s answers at once that it holds n1, but the answer comes
// back only with the other jobs' (two minutes). Meanwhile s ends and an
// operator's recovery rebuilds the pool without it and brings n1 back. The
// old answer must not make s a holder of n1 again in the rebuilt pool: r,
// which needs all of n1, starts as soon as it asks.
func TestStrangerAnsweredBeforeARecoveryIsNotAdoptedAfterIt(t *testing.T) {
	h := newAllocHarness(t)
	sOnN1 := holding("s", 1, 3, on("n1", 0, 0, 1))
	h.unlisted = []protocol.JobHold{sOnN1}
	h.answered["s"] = sOnN1
	h.live["n1"] = []cluster.WorkerID{{Job: "s", Attempt: 1, Worker: 0}}
	h.namedDelay = 2 * time.Minute
	h.at(time.Minute, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.unlisted, h.live["n1"], h.vanished = nil, nil, []string{"s"} // s ends
	})
	reply := h.recoverAt(70 * time.Second)
	var before protocol.QueueView
	h.at(80*time.Second, func() { before = h.queue() })
	var after protocol.QueueView
	h.at(2*time.Minute+time.Second, func() { after = h.queue() })
	h.request(2*time.Minute+2*time.Second, fixture.Request{Job: "r", Attempt: 1, Class: scheduler.Medium, Workers: 1, SubmittedAt: testStart}.Capacity())
	h.runAllocator(allocInput(allocNodes(1, 2)), 5*time.Minute)

	assert.Equal(t, 0, reply.Running, "the operator's recovery found nothing running")
	assert.Empty(t, before.Fenced, "n1 is back once its agent said nothing runs there")
	require.NotEmpty(t, h.registerCalls)
	assert.Empty(t, runningJobs(after), "s's old answer made it no holder of n1")
	require.Len(t, h.grantsTo("r"), 1, "r started")
	for i, g := range h.grants {
		if g.job == "r" {
			assert.Equal(t, 2*time.Minute+2*time.Second, h.grantAt[i].Sub(testStart), "r started as soon as it asked")
		}
	}
}
