package workflows

import (
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
)

// Stops that come together during a notice: the notice's end stands.

// drainAt drains the node of attempt's worker 0 with a notice.
func (h *jobHarness) drainAt(d time.Duration, attempt int, notice time.Duration) {
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(protocol.SignalPreempt, protocol.PreemptSignal{Attempt: attempt, Drain: "basic-1",
			Reason: "node basic-1 is drained (disk swap)", Notice: notice})
	}, d)
}

// TestStuckDuringANoticeKeepsItsEnd: a worker that writes no log line while
// it saves on its notice (a preemption, a drain, a cancel) is not stuck: the
// notice's deadline stands and the attempt ends as the notice said. Stuck
// there would stop the workers before the deadline, and with health_params
// action delete fail a job that was only preempted or moved.
func TestStuckDuringANoticeKeepsItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name        string
		grantNotice time.Duration // the grant's (0: only the preemption gives one)
		interrupt   func(h *jobHarness)
		cancel      bool
		want        protocol.JobState
		reason      string
	}{
		{name: "preempted, grant with a notice", grantNotice: 10 * time.Minute,
			interrupt: func(h *jobHarness) { h.preemptWithNoticeAt(20*time.Minute, 1, 10*time.Minute) },
			want:      protocol.StateCompleted, reason: "preempted by"},
		{name: "preempted, grant without a notice",
			interrupt: func(h *jobHarness) { h.preemptWithNoticeAt(20*time.Minute, 1, 10*time.Minute) },
			want:      protocol.StateCompleted, reason: "preempted by"},
		{name: "drained", grantNotice: 10 * time.Minute,
			interrupt: func(h *jobHarness) { h.drainAt(20*time.Minute, 1, 10*time.Minute) },
			want:      protocol.StateCompleted, reason: "moved: node basic-1 is drained"},
		{name: "cancelled", grantNotice: 10 * time.Minute,
			interrupt: func(h *jobHarness) { h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 20*time.Minute) },
			cancel:    true, want: protocol.StateStopped, reason: "stopped by the user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newJobHarness(t)
			h.notices()
			h.grantWithNoticeAt(time.Minute, 1, 1, tc.grantNotice, "")
			// Worker 0's judging watch finds the attempt silent at 26 min,
			// in the notice (20 min to 30 min); the worker runs on.
			h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
				return in.Attempt == 1 && in.LogPeriod > 0
			})).After(25*time.Minute).Return(cluster.WorkerStatus{},
				temporal.NewNonRetryableApplicationError("silent", activities.ErrTypeWorkerStuck, nil))
			h.env.OnActivity(h.acts.WatchWorker, mock.Anything, mock.MatchedBy(func(in activities.WatchWorkerInput) bool {
				return in.Attempt == 1 && in.LogPeriod == 0
			})).After(forever).Return(cluster.WorkerStatus{Phase: cluster.PhaseExited}, nil).Maybe()
			tc.interrupt(h)
			h.grantAt(time.Hour, 2, 1)
			h.watch(2, -1, time.Minute, 0)
			spec := fixture.Job{Class: "low", MaxRetry: 1}.Spec()
			spec.Health = &protocol.JobHealth{LogPeriod: 10 * time.Minute, Action: protocol.HealthActionDelete}
			h.run(spec)

			st := h.status()
			assert.Equal(t, tc.want, st.State, "%s", st.Message)
			assert.Contains(t, st.Attempts[0].EndReason, tc.reason)
			assert.NotContains(t, st.Attempts[0].EndReason, "stuck")
			stops := h.stopsOf(1)
			require.Len(t, stops, 1)
			assert.Equal(t, testStart.Add(30*time.Minute), stops[0].UTC(), "SIGTERM at the notice's deadline, not when found silent")
		})
	}
}

// TestTimeLimitDuringANoticeEndsTheJob: a job that reaches its time limit
// while its workers act on a preemption's or a drain's notice ends Stopped
// at that notice's deadline, as a cancel during a preemption notice makes
// the end a cancel. Rerunning it would queue a job that has no time left
// (it may preempt others for it), start it, and stop it again at once.
func TestTimeLimitDuringANoticeEndsTheJob(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interrupt func(h *jobHarness)
	}{
		{"preempted", func(h *jobHarness) { h.preemptWithNoticeAt(29*time.Minute, 1, 5*time.Minute) }},
		{"drained", func(h *jobHarness) { h.drainAt(29*time.Minute, 1, 5*time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newJobHarness(t)
			h.notices()
			h.grantWithNoticeAt(time.Minute, 1, 1, 5*time.Minute, "")
			h.watch(1, -1, forever, 0)
			tc.interrupt(h) // notice 29 min to 34 min; the time limit at 31 min
			h.grantAt(2*time.Hour, 2, 1)
			h.watch(2, -1, forever, 0)
			spec := fixture.Job{Class: "low", MaxRetry: 3}.Spec()
			spec.TimeLimit = 30 * time.Minute
			h.run(spec)

			st := h.status()
			assert.Equal(t, protocol.StateStopped, st.State)
			assert.Len(t, st.Attempts, 1, "not rerun past its time limit")
			assert.Contains(t, st.Attempts[0].EndReason, "stop_timer")
			stops := h.stopsOf(1)
			require.Len(t, stops, 1)
			assert.Equal(t, testStart.Add(34*time.Minute), stops[0].UTC(), "the first notice's deadline stands")
		})
	}
}

// TestASlowNoticeDoesNotPutOffTheDeadline: a notice that takes long to give
// (a slow node agent, a Kubernetes API under load) does not put off the
// stop of the attempt's workers at the deadline, nor the preemptor with it.
// The stops wait for notices in flight only where both together could pass
// the pending-activities budget (wide attempts).
func TestASlowNoticeDoesNotPutOffTheDeadline(t *testing.T) {
	h := newJobHarness(t)
	h.env.OnActivity(h.acts.NoticeWorker, mock.Anything, mock.Anything).After(25 * time.Second).Return(nil)
	h.grantAt(time.Minute, 1, 2)
	h.watch(1, -1, forever, 0)
	h.preemptWithNoticeAt(20*time.Minute, 1, 10*time.Second)
	h.run(fixture.Job{Class: "low", Workers: 2}.Spec())

	stops := h.stopsOf(1)
	require.Len(t, stops, 2)
	for _, at := range stops {
		assert.Equal(t, testStart.Add(20*time.Minute+10*time.Second), at.UTC(), "SIGTERM at the deadline")
	}
}
