package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
)

// register sends the register update at d and keeps its answer in *hold.
func (h *jobHarness) register(d time.Duration, epoch string, hold *protocol.JobHold) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(protocol.UpdateRegister, "register/"+epoch, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { h.t.Errorf("register rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(h.t, err)
				*hold = decodeUpdateResult[protocol.JobHold](h.t, v)
			},
		}, protocol.RegisterRequest{Epoch: epoch})
	}, d)
}

func (h *jobHarness) grantFrom(d time.Duration, epoch string, attempt, workers int) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Epoch: epoch, Attempt: attempt, Placement: placement(workers),
			StopGracePeriod: 5 * time.Second, NodeTimeout: time.Minute})
	}, d)
}

// lostWatch makes the watch of worker of attempt fail as if its node's agent
// never picked it up.
func (h *jobHarness) lostWatch(attempt, worker int, d time.Duration) {
	h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
		return in.Attempt == attempt && in.Worker == worker
	})).After(d).Return(cluster.WorkerStatus{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
}

func TestJobRegisterAnswersWhatItWaitsForAndHolds(t *testing.T) {
	h := newJobHarness(t)
	var waiting, held protocol.JobHold
	h.register(time.Minute, "e1", &waiting)
	h.grantFrom(2*time.Minute, "e1", 1, 2)
	h.watch(1, 0, 5*time.Minute, 0)
	h.watch(1, 1, forever, 0)
	h.register(10*time.Minute, "e2", &held)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 3}.Spec())

	assert.Equal(t, protocol.HoldWaiting, waiting.Phase)
	assert.Equal(t, 1, waiting.Request.Attempt)
	assert.Equal(t, int64(7), waiting.Request.Seq, "the request carries the allocator's sequence")
	assert.Equal(t, 2, waiting.Request.Workers)
	assert.Equal(t, protocol.HoldHolding, held.Phase)
	assert.Equal(t, placement(2), held.Placement)
	assert.Equal(t, []int{0}, held.Released, "worker 0 exited and was released")
	assert.True(t, held.Releasing)
	assert.Equal(t, testStart.Add(2*time.Minute), held.StartedAt.UTC())
}

func TestJobIgnoresGrantOfReplacedAllocator(t *testing.T) {
	h := newJobHarness(t)
	var hold protocol.JobHold
	// The old allocator's grant is delivered after the new one registered
	// the job: the new one does not know of it, so using it would double-book.
	h.register(time.Minute, "new", &hold)
	h.grantFrom(2*time.Minute, "old", 1, 1)
	h.grantFrom(5*time.Minute, "new", 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	require.NotNil(t, st.RunningAt)
	assert.Equal(t, testStart.Add(5*time.Minute), st.RunningAt.UTC(), "the job started on the new allocator's grant")
	assert.Equal(t, protocol.HoldWaiting, hold.Phase)
}

func TestJobNodeLossRerunsWithoutSpendingRetries(t *testing.T) {
	h := newJobHarness(t)
	h.grantFrom(time.Minute, "e", 1, 2)
	h.watch(1, 0, forever, 0)
	h.lostWatch(1, 1, 2*time.Minute)
	h.grantFrom(10*time.Minute, "e", 2, 2)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 0, st.Restarts, "a node loss does not count against max_retry")
	assert.Equal(t, 1, st.NodeLosses)
	assert.Equal(t, "node basic-2 lost: its agent did not answer for 1m0s", st.Attempts[0].EndReason)
	// Worker 1's node is gone: it is released as lost, without a stop that
	// could never be picked up; worker 0 is stopped as usual.
	var lost []protocol.ReleaseSignal
	for _, r := range h.releases(1) {
		if len(r.LostNodes) > 0 {
			lost = append(lost, r)
		}
	}
	require.Len(t, lost, 1)
	assert.Equal(t, []string{"basic-2"}, lost[0].LostNodes)
	assert.Equal(t, []int{1}, lost[0].Workers)
	require.Len(t, h.stops, 1)
	assert.Equal(t, 0, h.stops[0].ID.Worker)
}

// TestJobWhoseGPUsAreBusyHasTheNodeFencedAndRuns: a start that finds its
// granted GPUs used by a live worker the allocator did not know of (a reset
// allocator's stale grant) starts nothing there; the job gives the grant
// back with the node reported, so that the allocator fences it and learns
// who runs there, and reruns without spending max_retry.
func TestJobWhoseGPUsAreBusyHasTheNodeFencedAndRuns(t *testing.T) {
	h := newJobHarness(t)
	h.busyStarts = map[cluster.WorkerID]bool{{Job: testJob, Attempt: 1, Worker: 1}: true}
	h.grantFrom(time.Minute, "e", 1, 2)
	h.grantFrom(10*time.Minute, "e", 2, 2)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium", Workers: 2}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 0, st.Restarts, "busy GPUs are not the job's fault")
	assert.Equal(t, 1, st.NodeLosses)
	assert.Contains(t, st.Attempts[0].EndReason, "GPUs [0 1] on basic-2 are still used by a live worker of another job or attempt")
	var fenced []protocol.ReleaseSignal
	for _, r := range h.releases(1) {
		if len(r.LostNodes) > 0 {
			fenced = append(fenced, r)
		}
	}
	require.Len(t, fenced, 1, "the busy node is reported once")
	assert.Equal(t, []string{"basic-2"}, fenced[0].LostNodes)
	assert.Equal(t, []string{"basic-2"}, fenced[0].GPUsBusy)
	assert.Equal(t, []int{1}, fenced[0].Workers)
}

func TestJobLosingNodesTooOftenFails(t *testing.T) {
	h := newJobHarness(t)
	for attempt := 1; attempt <= attempts.MaxNodeLossReruns+1; attempt++ {
		h.grantFrom(time.Duration(attempt)*10*time.Minute, "e", attempt, 1)
		h.lostWatch(attempt, 0, time.Minute)
	}
	h.run(fixture.Job{Class: "medium", MaxRetry: 5}.Spec())
	assert.Equal(t, ErrTypeJobFailed, appErrType(t, h.env.GetWorkflowError()))
	st := h.status()
	assert.Equal(t, protocol.StateFailed, st.State)
	assert.Equal(t, attempts.MaxNodeLossReruns+1, st.NodeLosses)
	assert.Equal(t, 0, st.Restarts)
	assert.Contains(t, st.Message, "lost a node 4 times")
}

func TestJobStuckRestartsThenDeletes(t *testing.T) {
	for _, tc := range []struct {
		action   string
		notify   bool
		state    protocol.JobState
		attempts int
	}{
		{protocol.HealthActionRestart, false, protocol.StateCompleted, 2},
		{protocol.HealthActionDelete, false, protocol.StateFailed, 1},
		{protocol.HealthActionRestart, true, protocol.StateCompleted, 2},
	} {
		t.Run(fmt.Sprintf("%s notify=%v", tc.action, tc.notify), func(t *testing.T) {
			counts := &countingMetrics{counts: map[string]int64{}}
			h := newJobHarnessStopDelay(t, 0, func(s *testsuite.WorkflowTestSuite) { s.SetMetricsHandler(counts) })
			var judged []activities.WatchWorkerInput
			h.grantFrom(time.Minute, "e", 1, 2)
			h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
				return in.Attempt == 1 && in.Worker == 0
			})).After(2 * time.Minute).Return(func(_ context.Context, in activities.WatchWorkerInput) (cluster.WorkerStatus, error) {
				h.mu.Lock()
				judged = append(judged, in)
				h.mu.Unlock()
				return cluster.WorkerStatus{}, temporal.NewNonRetryableApplicationError("silent", activities.ErrTypeWorkerStuck, nil)
			})
			h.watch(1, 1, forever, 0)
			h.grantFrom(10*time.Minute, "e", 2, 2)
			h.watch(2, -1, time.Minute, 0)
			spec := fixture.Job{Class: "medium", Workers: 2, MaxRetry: 1}.Spec()
			spec.Health = &protocol.JobHealth{LogPeriod: 10 * time.Minute, Action: tc.action, Notify: tc.notify}
			h.run(spec)
			stuck := int64(0)
			if tc.notify {
				stuck = 1
			}
			assert.Equal(t, stuck, counts.get(metrics.JobsStuckInstrument), "sub_actions [notify] counts the stuck job")

			st := h.status()
			assert.Equal(t, tc.state, st.State)
			assert.Len(t, st.Attempts, tc.attempts)
			assert.Contains(t, st.Attempts[0].EndReason, "no worker wrote a log line for 10m0s")
			assert.Contains(t, st.Attempts[0].EndReason, "health_params.action is "+tc.action)
			require.Len(t, judged, 1)
			assert.Equal(t, 10*time.Minute, judged[0].LogPeriod)
			assert.Equal(t, 2, judged[0].Workers, "worker 0's watch judges the whole attempt")
		})
	}
}

// TestJobContinuesAsNewThroughFiftyAttempts runs a job whose worker fails 49
// times: with a low threshold its history is handed over between attempts
// again and again, and the last run still knows the whole job.
func TestJobContinuesAsNewThroughFiftyAttempts(t *testing.T) {
	const attempts = 50
	spec := fixture.Job{Class: "medium", MaxRetry: attempts}.Spec()
	in := protocol.JobInput{Name: testJob, Spec: spec, MaxEventsPerRun: 150}
	runs, longest := 0, 0
	var final protocol.JobStatus
	for {
		runs++
		require.Less(t, runs, attempts, "the job never finished")
		h := newJobHarness(t)
		first := 1
		if in.Carry != nil {
			first = in.Carry.Status.Attempt + 1
		}
		for a := first; a <= attempts; a++ {
			h.grantFrom(time.Duration(a)*time.Minute, "e", a, 1)
			code := 1
			if a == attempts {
				code = 0
			}
			h.watch(a, -1, 10*time.Second, code)
		}
		h.env.ExecuteWorkflow(protocol.JobWorkflowName, in)
		require.True(t, h.env.IsWorkflowCompleted())
		var can *workflow.ContinueAsNewError
		if err := h.env.GetWorkflowError(); errors.As(err, &can) {
			var next protocol.JobInput
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
			require.NotNil(t, next.Carry)
			assert.Equal(t, int64(7), next.Carry.Seq, "the job keeps its queue sequence")
			assert.Len(t, next.Carry.Status.Attempts, next.Carry.Status.Attempt)
			longest = max(longest, len(h.requests))
			in = next
			continue
		} else {
			require.NoError(t, err)
		}
		final = h.status()
		break
	}
	assert.Greater(t, runs, 5, "a low threshold hands the job over many times")
	assert.Equal(t, protocol.StateCompleted, final.State)
	assert.Equal(t, attempts, final.Attempt)
	assert.Equal(t, attempts-1, final.Restarts)
	require.Len(t, final.Attempts, attempts, "the attempts table spans every run")
	for i, a := range final.Attempts {
		assert.Equal(t, i+1, a.Number)
		assert.NotNil(t, a.EndedAt)
	}
	assert.Equal(t, testStart, final.CreatedAt.UTC(), "created_at is the first run's")
	t.Logf("%d attempts in %d runs; at most %d attempts in one run", attempts, runs, longest)
}

func TestJobRerunKeepsTheSeqItsGrantNamed(t *testing.T) {
	h := newJobHarness(t)
	h.seq = 0 // requests travel as signals: the activity's reply carries no Seq
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Epoch: "e", Seq: 9, Attempt: 1, Placement: placement(1), StopGracePeriod: time.Second})
	}, time.Minute)
	h.watch(1, -1, time.Minute, 1)
	h.grantFrom(10*time.Minute, "e", 2, 1)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium", MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, h.requests, 2)
	assert.Equal(t, int64(0), h.requests[0].Seq)
	assert.Equal(t, int64(9), h.requests[1].Seq, "the rerun asks with the Seq of its first grant")
}

// TestJobTakesAGrantOfANewerEpoch: a job answers to the epoch e1; the
// allocator recovers as e2 and the job's grant of e2 comes before anything
// told the job of e2 (its capacity reply, a register update). A newer epoch's
// allocator grants only requests it has, so the grant counts, while a late
// grant of an older epoch still does not.
func TestJobTakesAGrantOfANewerEpoch(t *testing.T) {
	t0 := testStart
	e0, e1, e2 := protocol.NewEpoch(t0, "a"), protocol.NewEpoch(t0.Add(time.Minute), "b"), protocol.NewEpoch(t0.Add(2*time.Minute), "c")
	h := newJobHarness(t)
	var hold protocol.JobHold
	h.register(time.Minute, e1, &hold)
	h.grantFrom(2*time.Minute, e0, 1, 1)
	h.grantFrom(3*time.Minute, e2, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	require.NotNil(t, st.RunningAt)
	assert.Equal(t, testStart.Add(3*time.Minute), st.RunningAt.UTC(), "the job started on the newer epoch's grant, not the older one's")
}

// TestJobIgnoresARegisterOfAnOlderEpoch: a terminated allocator run's
// recovery activity can outlive the run and register the job after its
// successor did. The job keeps answering to the newer epoch: the older
// epoch's late grant is ignored, the newer one's counts.
func TestJobIgnoresARegisterOfAnOlderEpoch(t *testing.T) {
	older, newer := protocol.NewEpoch(testStart, "a"), protocol.NewEpoch(testStart.Add(time.Minute), "b")
	h := newJobHarness(t)
	var first, late protocol.JobHold
	h.register(time.Minute, newer, &first)
	h.register(2*time.Minute, older, &late)
	h.grantFrom(3*time.Minute, older, 1, 1)
	h.grantFrom(4*time.Minute, newer, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	require.NotNil(t, st.RunningAt)
	assert.Equal(t, testStart.Add(4*time.Minute), st.RunningAt.UTC(), "the job started on the newer epoch's grant")
}

// TestWaitingJobSendsItsRequestAgainWhenTheAllocatorLostIt: a job waits; an
// allocator that recovered without finding it (its listing missed the job)
// does not have its request. After requestCheckInterval the job asks, finds
// its request unknown, sends it again (the activity does), and is granted.
func TestWaitingJobSendsItsRequestAgainWhenTheAllocatorLostIt(t *testing.T) {
	h := newJobHarness(t)
	var checks []activities.RequestCapacityInput
	h.env.OnActivity(h.acts.CheckRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RequestCapacityInput) (activities.RequestCheck, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			checks = append(checks, in)
			return activities.RequestCheck{Resent: true}, nil
		})
	h.grantAt(requestCheckInterval+time.Minute, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateCompleted, h.status().State)
	require.Len(t, checks, 1, "one check, after requestCheckInterval")
	assert.Equal(t, 1, checks[0].Request.Attempt)
	assert.Equal(t, testJob, checks[0].Request.Job)
}

// TestRequestCheckIntervalFromInput: a job whose input sets
// RequestCheckInterval (tests with scaled-down timeouts) checks its request
// after that, not after requestCheckInterval: three checks before a grant at
// 35 s with a 10 s interval.
func TestRequestCheckIntervalFromInput(t *testing.T) {
	h := newJobHarness(t)
	var checks int
	h.env.OnActivity(h.acts.CheckRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RequestCapacityInput) (activities.RequestCheck, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			checks++
			return activities.RequestCheck{Known: true}, nil
		})
	h.grantAt(35*time.Second, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.env.ExecuteWorkflow(protocol.JobWorkflowName, protocol.JobInput{Name: testJob, Spec: fixture.Job{Class: "medium"}.Spec(),
		RequestCheckInterval: 10 * time.Second})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Equal(t, protocol.StateCompleted, h.status().State)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, 3, checks, "checks at 10, 20 and 30 s")
}

// TestJobResetBeforeItsGrantIsGrantedAgain: a job reset to before it took its
// grant asks again for the same attempt; the allocator, which holds that
// attempt's GPUs, sends the grant again, and the job runs instead of waiting
// for ever. A second copy of a grant for the attempt it already holds changes
// nothing.
func TestJobResetBeforeItsGrantIsGrantedAgain(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.grantAt(2*time.Minute, 1, 1) // the copy a repeated request gets
	h.watch(1, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	require.Len(t, st.Attempts, 1, "the copy started nothing more")
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Len(t, h.starts, 1, "one start of the one worker")
}

// countingMetrics is a metrics handler that adds up counters by name.
type countingMetrics struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (m *countingMetrics) WithTags(map[string]string) client.MetricsHandler { return m }
func (m *countingMetrics) Counter(name string) client.MetricsCounter {
	return countingCounter{m: m, name: name}
}
func (m *countingMetrics) Gauge(string) client.MetricsGauge {
	return client.MetricsNopHandler.Gauge("")
}
func (m *countingMetrics) Timer(string) client.MetricsTimer {
	return client.MetricsNopHandler.Timer("")
}
func (m *countingMetrics) get(name string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[name]
}

type countingCounter struct {
	m    *countingMetrics
	name string
}

func (c countingCounter) Inc(n int64) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.counts[c.name] += n
}

// A register update answered while a rerun's capacity request is in flight,
// after its grant came (the allocator grants before the request's reply is
// recorded), says the new attempt holds its placement and has released
// nothing: the previous attempt's releases of the same workers are not the
// new one's, and a recovering allocator told otherwise would free GPUs the
// new attempt is about to start on.
func TestRegisterDuringARerunsRequestReportsNothingReleased(t *testing.T) {
	h := newJobHarness(t)
	var hold protocol.JobHold
	answered := make(chan struct{})
	h.duringRequest = func(in activities.RequestCapacityInput) {
		if in.Request.Attempt != 2 {
			return
		}
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Attempt: 2, Placement: placement(2), StopGracePeriod: 5 * time.Second})
		h.env.UpdateWorkflow(protocol.UpdateRegister, "register/e1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { t.Errorf("register rejected: %v", err) },
			OnComplete: func(v any, err error) {
				assert.NoError(t, err)
				hold = decodeUpdateResult[protocol.JobHold](t, v)
				close(answered)
			},
		}, protocol.RegisterRequest{Epoch: "e1"})
		select {
		case <-answered:
		case <-time.After(time.Minute):
			t.Error("the register update was not answered while the request was in flight")
		}
	}
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, forever, 0)
	h.preemptAt(30*time.Minute, 1, "lm-mpi-job-high")
	h.watch(2, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "low", Workers: 2, MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	assert.Equal(t, []int{0, 1}, sorted(releasedWorkers(t, h.releases(1))), "attempt 1 released both workers")
	assert.Equal(t, protocol.HoldHolding, hold.Phase)
	assert.Equal(t, 2, hold.Request.Attempt)
	assert.Len(t, hold.Placement, 2)
	assert.Empty(t, hold.Released, "attempt 2 released nothing yet")
	assert.False(t, hold.Releasing, "attempt 2 is not stopping")
}

// A grant for an attempt that has ended is given back: an allocator whose
// view lagged (a reset, a recovery) can grant an attempt after the job moved
// on, and would hold that capacity for ever while the next attempt waits for
// it. The release names the grant's nodes lost, so that the allocator fences
// them until their agents say what runs there.
func TestAGrantForAnEndedAttemptIsGivenBack(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, forever, 0)
	h.preemptAt(30*time.Minute, 1, "lm-mpi-job-high")
	h.grantAt(time.Hour, 1, 2) // attempt 1 again, while attempt 2 waits
	h.grantAt(2*time.Hour, 2, 2)
	h.watch(2, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "low", Workers: 2, MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	rs := h.releases(1)
	var given []protocol.ReleaseSignal
	for _, r := range rs {
		if len(r.LostNodes) > 0 {
			given = append(given, r)
		}
	}
	require.Len(t, given, 1, "the late grant of attempt 1 is given back once: %+v", rs)
	assert.True(t, given[0].Stopping)
	assert.Equal(t, []int{0, 1}, sorted(given[0].Workers))
	assert.Equal(t, []string{"basic-1", "basic-2"}, given[0].LostNodes)
	assert.Len(t, h.starts, 4, "nothing started for the late grant")
	assert.Equal(t, protocol.StateCompleted, h.status().State)
}

// TestWaitingJobAsksWhyAgain: an attempt queued while its allocator was too
// busy to say where and why it waits asks again 15 s later, and again after
// 30 s more when that ask fails, instead of showing no reason until the
// request check half an hour later. Once told, it asks no more.
func TestWaitingJobAsksWhyAgain(t *testing.T) {
	h := newJobHarness(t)
	h.unexplained = true
	var asked []time.Duration
	h.env.OnActivity(h.acts.CheckRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RequestCapacityInput) (activities.RequestCheck, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			asked = append(asked, h.env.Now().Sub(testStart))
			if len(asked) == 1 {
				return activities.RequestCheck{}, temporal.NewNonRetryableApplicationError("query timed out", "busy", nil)
			}
			return activities.RequestCheck{Known: true, Reply: protocol.CapacityReply{Seq: 7, Position: 2, Reason: "waiting behind job-x"}}, nil
		})
	var before, after protocol.JobStatus
	h.env.RegisterDelayedCallback(func() { before = h.status() }, 20*time.Second)
	h.env.RegisterDelayedCallback(func() { after = h.status() }, 5*time.Minute)
	h.grantAt(10*time.Minute, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	assert.Empty(t, before.Reason, "the first ask failed")
	assert.Equal(t, "waiting behind job-x", after.Reason)
	assert.Equal(t, 2, after.Position)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, []time.Duration{15 * time.Second, 45 * time.Second}, asked, "asked at 15 s, then 30 s later, then no more")
}

// TestWatchesNameTheJobsRun: a worker's watch names the job's run, so that
// the release it reports for a job reset to before that attempt is a new
// update, not the first run's answered again (activities.releaseUpdate).
func TestWatchesNameTheJobsRun(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.watchRuns, 1)
	assert.NotEmpty(t, h.watchRuns[0])
}
