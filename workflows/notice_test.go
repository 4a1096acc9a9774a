package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The job's own stops (a cancel, its time limit, stuck) give the workers a
// notice when the grant carries the allocation's notice for the job's class,
// as a preemption does.

// grantWithNoticeAt grants attempt with a notice (and notice signal) on
// workers workers.
//
//nolint:unparam // the call names when and which attempt is granted, as grantAt's does; the tests all use 1 minute and attempt 1 today
func (h *jobHarness) grantWithNoticeAt(d time.Duration, attempt, workers int, notice time.Duration, signal string) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Attempt: attempt, Placement: placement(workers),
			StopGracePeriod: 5 * time.Second, Notice: notice, NoticeSignal: signal})
	}, d)
}

// stopsOf are the times the attempt's workers were stopped (SIGTERM).
//
//nolint:unparam // the call names the attempt; the tests all look at attempt 1 today
func (h *jobHarness) stopsOf(attempt int) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var at []time.Time
	for i, s := range h.stops {
		if s.ID.Attempt == attempt {
			at = append(at, h.stopAt[i])
		}
	}
	return at
}

// TestCancelWithNoticeThenExit: a cancelled job's workers are told
// (reason cancelled, no preemptor) and exit; they are not stopped, and the
// job ends Stopped, not rerun.
func TestCancelWithNoticeThenExit(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 2, time.Minute, "SIGUSR1")
	h.watch(1, -1, 19*time.Minute+10*time.Second, 143) // both exit 10 s after the cancel
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", Workers: 2, MaxRetry: 3}.Spec())

	var canceled *temporal.CanceledError
	require.True(t, errors.As(h.env.GetWorkflowError(), &canceled), "got %v", h.env.GetWorkflowError())
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, 1, st.Attempt, "a cancelled job is not rerun, whatever its workers' exit code")
	require.Len(t, st.Attempts, 1)
	a := st.Attempts[0]
	assert.Equal(t, protocol.NoticeReasonCancelled, a.NoticeReason)
	require.NotNil(t, a.NoticedAt)
	require.NotNil(t, a.NoticeDeadline)
	assert.Equal(t, testStart.Add(20*time.Minute), a.NoticedAt.UTC())
	assert.Equal(t, testStart.Add(21*time.Minute), a.NoticeDeadline.UTC())
	require.NotNil(t, a.ExitedOnNoticeAt)
	assert.Equal(t, testStart.Add(20*time.Minute+10*time.Second), a.ExitedOnNoticeAt.UTC())
	assert.Contains(t, a.EndReason, "stopped by the user; its workers exited on the notice, 50s before the deadline")
	require.Len(t, *notices, 2)
	for _, n := range *notices {
		assert.Equal(t, protocol.NoticeReasonCancelled, n.Notice.Reason)
		assert.Nil(t, n.Notice.By, "a cancel has no preemptor")
		assert.Equal(t, "SIGUSR1", n.Signal, "the allocation's notice_signal goes with the notice")
	}
	assert.Empty(t, h.stopsOf(1), "workers that exited on their notice are not stopped")
}

// TestCancelWithNoticeIgnored: workers that do not exit on a cancel's
// notice are stopped at its deadline, not before.
func TestCancelWithNoticeIgnored(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, 2*time.Minute, "")
	h.watch(1, -1, forever, 0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", MaxRetry: 3}.Spec())

	assert.Equal(t, protocol.StateStopped, h.status().State)
	require.Len(t, *notices, 1)
	assert.Empty(t, (*notices)[0].Signal)
	stops := h.stopsOf(1)
	require.Len(t, stops, 1)
	assert.Equal(t, testStart.Add(22*time.Minute), stops[0].UTC(), "SIGTERM at the deadline")
	assert.Nil(t, h.status().Attempts[0].ExitedOnNoticeAt)
}

// TestCancelWithoutNoticeStopsAtOnce: a grant without a notice (the
// allocation sets none, or the job is a Jupyter server) is cancelled as
// before: no notice, SIGTERM at once.
func TestCancelWithoutNoticeStopsAtOnce(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, 0, "SIGUSR1")
	h.watch(1, -1, forever, 0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute)
	h.run(fixture.Job{Class: "medium", MaxRetry: 3}.Spec())

	assert.Empty(t, *notices)
	stops := h.stopsOf(1)
	require.Len(t, stops, 1)
	assert.Equal(t, testStart.Add(20*time.Minute), stops[0].UTC())
	assert.Empty(t, h.status().Attempts[0].NoticeReason)
}

// TestCancelDuringAPreemptionNotice: a job cancelled while its workers act
// on a preemption notice ends Stopped (not rerun), at the same deadline.
func TestCancelDuringAPreemptionNotice(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, time.Minute, "")
	h.watch(1, -1, forever, 0)
	h.preemptWithNoticeAt(20*time.Minute, 1, time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute+30*time.Second)
	h.run(fixture.Job{Class: "low", MaxRetry: 3}.Spec())

	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, 0, st.Restarts)
	require.Len(t, *notices, 1, "one notice: the cancel does not give a second")
	assert.Equal(t, protocol.NoticeReasonPreempted, (*notices)[0].Notice.Reason)
	stops := h.stopsOf(1)
	require.Len(t, stops, 1)
	assert.Equal(t, testStart.Add(21*time.Minute), stops[0].UTC(), "the preemption notice's deadline stands")
	assert.Equal(t, "stopped by the user", st.Attempts[0].EndReason)
}

// TestTimeLimitWithNotice: at its stop_timer a job's workers are told
// (reason time_limit) and stopped at the deadline; the job ends Stopped.
func TestTimeLimitWithNotice(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, 2*time.Minute, "")
	h.watch(1, -1, forever, 0)
	spec := fixture.Job{Class: "medium", MaxRetry: 3}.Spec()
	spec.TimeLimit = 30 * time.Minute
	h.run(spec)

	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	require.Len(t, *notices, 1)
	n := (*notices)[0].Notice
	assert.Equal(t, protocol.NoticeReasonTimeLimit, n.Reason)
	started := *st.Attempts[0].StartedAt
	assert.Equal(t, started.Add(32*time.Minute), n.Deadline, "the notice comes at the limit, the stop at its deadline")
	stops := h.stopsOf(1)
	require.Len(t, stops, 1)
	assert.Equal(t, n.Deadline.UTC(), stops[0].UTC())
	assert.Contains(t, st.Attempts[0].EndReason, "stop_timer")
}

// TestStuckWithNotice: a stuck job's workers are told (reason stuck); the
// worker whose watch found it stuck is watched again for its exit, so that
// workers exiting on the notice end the attempt early; it reruns.
func TestStuckWithNotice(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, time.Minute, "")
	var watched []activities.WatchWorkerInput
	h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
		return in.Attempt == 1
	})).Return(func(ctx context.Context, in activities.WatchWorkerInput) (cluster.WorkerStatus, error) {
		h.mu.Lock()
		watched = append(watched, in)
		h.mu.Unlock()
		if in.LogPeriod > 0 {
			return cluster.WorkerStatus{}, temporal.NewNonRetryableApplicationError("silent", activities.ErrTypeWorkerStuck, nil)
		}
		return cluster.WorkerStatus{ID: in.WorkerID, Phase: cluster.PhaseExited, ExitCode: 143}, nil
	})
	h.grantAt(10*time.Minute, 2, 1)
	h.watch(2, -1, time.Minute, 0)
	spec := fixture.Job{Class: "medium", MaxRetry: 1}.Spec()
	spec.Health = &protocol.JobHealth{LogPeriod: 10 * time.Minute, Action: protocol.HealthActionRestart}
	h.run(spec)
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 1, st.Restarts, "stuck reruns, counting against max_retry")
	require.Len(t, *notices, 1)
	assert.Equal(t, protocol.NoticeReasonStuck, (*notices)[0].Notice.Reason)
	require.Len(t, watched, 2, "the judging watch, then one for the exit only")
	assert.Zero(t, watched[1].LogPeriod)
	assert.Empty(t, h.stopsOf(1), "the worker exited on its notice")
	assert.Contains(t, st.Attempts[0].EndReason, "stuck")
	assert.Contains(t, st.Attempts[0].EndReason, "exited on the notice")
}

// TestCheckpointWithinTheNoticeHonoursIt: a checkpoint the allocator
// recorded reaches the attempt's record; one between the notice and its
// deadline honours the notice.
func TestCheckpointWithinTheNoticeHonoursIt(t *testing.T) {
	h := newJobHarness(t)
	h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, time.Minute, "")
	h.watch(1, -1, 19*time.Minute+20*time.Second, 0)
	h.preemptWithNoticeAt(20*time.Minute, 1, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalCheckpointed, protocol.CheckpointReply{Job: testJob, Attempt: 1, At: testStart.Add(10 * time.Minute)})
	}, 10*time.Minute)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalCheckpointed, protocol.CheckpointReply{Job: testJob, Attempt: 1, At: testStart.Add(20*time.Minute + 10*time.Second)})
	}, 20*time.Minute+10*time.Second)
	h.grantAt(time.Hour, 2, 1)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "low", MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	require.Len(t, st.Attempts, 2)
	first := st.Attempts[0]
	require.NotNil(t, first.CheckpointAt)
	assert.Equal(t, testStart.Add(20*time.Minute+10*time.Second), first.CheckpointAt.UTC(), "the last checkpoint")
	assert.True(t, first.HonouredNotice())
	assert.False(t, st.Attempts[1].HonouredNotice(), "no notice, nothing to honour")
}

// TestDrainMovesTheJobWithANotice: a drain of the job's node gives its
// workers a notice (reason node_drain, no preemptor); the job reruns without
// spending max_retry (it has none) and completes on its next grant.
func TestDrainMovesTheJobWithANotice(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.grantWithNoticeAt(time.Minute, 1, 1, time.Minute, "")
	h.watch(1, -1, 19*time.Minute+5*time.Second, 0)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalPreempt, protocol.PreemptSignal{Attempt: 1, Drain: "basic-1",
			Reason: "node basic-1 is drained (disk swap)", Notice: 30 * time.Second})
	}, 20*time.Minute)
	h.grantAt(time.Hour, 2, 1)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "medium"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 0, st.Restarts, "a drain does not spend max_retry")
	assert.Equal(t, 0, st.NodeLosses, "nor is it a node loss")
	require.Len(t, st.Attempts, 2)
	first := st.Attempts[0]
	assert.Equal(t, protocol.NoticeReasonNodeDrain, first.NoticeReason)
	assert.Nil(t, first.Preemptor)
	assert.Contains(t, first.EndReason, "moved: node basic-1 is drained (disk swap); its workers exited on the notice, 25s before the deadline")
	require.Len(t, *notices, 1)
	assert.Equal(t, protocol.NoticeReasonNodeDrain, (*notices)[0].Notice.Reason)
	assert.Nil(t, (*notices)[0].Notice.By)
}

// TestRerunSaysItHonoursItsNotices: a job that saved within its notice's
// window and exited before the deadline asks again saying HonorsNotice; one
// that exited without a checkpoint does not.
func TestRerunSaysItHonoursItsNotices(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkpoint bool
		want       bool
	}{{"saved and exited", true, true}, {"exited without saving", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newJobHarness(t)
			h.notices()
			h.grantWithNoticeAt(time.Minute, 1, 1, time.Minute, "")
			h.watch(1, -1, 19*time.Minute+20*time.Second, 0)
			h.preemptWithNoticeAt(20*time.Minute, 1, time.Minute)
			if tc.checkpoint {
				h.env.RegisterDelayedCallback(func() {
					h.env.SignalWorkflow(protocol.SignalCheckpointed, protocol.CheckpointReply{Job: testJob, Attempt: 1, At: testStart.Add(20*time.Minute + 10*time.Second)})
				}, 20*time.Minute+10*time.Second)
			}
			h.grantAt(time.Hour, 2, 1)
			h.watch(2, -1, time.Minute, 0)
			h.run(fixture.Job{Class: "low", MaxRetry: 1}.Spec())
			require.NoError(t, h.env.GetWorkflowError())
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Len(t, h.requests, 2)
			assert.False(t, h.requests[0].HonorsNotice, "the first attempt has no notice behind it")
			assert.Equal(t, tc.want, h.requests[1].HonorsNotice)
		})
	}
}

// TestLoanYieldRerunsWithoutSpendingARetry: an attempt granted on loan says
// so in its record; when its loan is up it gets the allocation's notice
// (reason loan_due, naming the reserved job's class) and reruns without
// spending max_retry (it has none).
func TestLoanYieldRerunsWithoutSpendingARetry(t *testing.T) {
	h := newJobHarness(t)
	notices := h.notices()
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalGrant, protocol.GrantSignal{Attempt: 1, Placement: placement(1),
			StopGracePeriod: 5 * time.Second, Notice: time.Minute, OnLoan: true})
	}, time.Minute)
	h.watch(1, -1, 19*time.Minute+5*time.Second, 0)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalPreempt, protocol.PreemptSignal{Attempt: 1, Loan: true,
			Preemptor: scheduler.Preemptor{Job: "big", Class: scheduler.Medium, Kind: scheduler.KindJob},
			Reason:    "its time on loan is up", Notice: 30 * time.Second})
	}, 20*time.Minute)
	h.grantAt(time.Hour, 2, 1)
	h.watch(2, -1, time.Minute, 0)
	h.run(fixture.Job{Class: "high"}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, protocol.StateCompleted, st.State)
	assert.Equal(t, 0, st.Restarts, "a yield does not spend max_retry")
	require.Len(t, st.Attempts, 2)
	first := st.Attempts[0]
	assert.True(t, first.OnLoan, "the first attempt ran on loan")
	assert.False(t, st.Attempts[1].OnLoan)
	assert.Equal(t, protocol.NoticeReasonLoanDue, first.NoticeReason)
	require.NotNil(t, first.Preemptor)
	assert.Equal(t, "big", first.Preemptor.Job)
	assert.Contains(t, first.EndReason, "yielded its loan to big (medium job): its time on loan is up")
	require.Len(t, *notices, 1)
	assert.Equal(t, protocol.NoticeReasonLoanDue, (*notices)[0].Notice.Reason)
}
