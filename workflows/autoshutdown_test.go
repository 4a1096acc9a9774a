package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

var idleRule = &protocol.NotebookShutdown{IdleTimeout: 30 * time.Minute, IdleRule: "allocation basic"}

// idleWatch mocks WatchNotebookIdle once for a watch warned (or not): it
// answers verdict after d.
func (h *jobHarness) idleWatch(warned bool, d time.Duration, verdict string, queues *[]string) {
	h.env.OnActivity(h.acts.WatchNotebookIdle, mock.Anything, mock.MatchedBy(func(in activities.WatchNotebookIdleInput) bool {
		return (in.Warned != nil) == warned
	})).After(d).Return(func(ctx context.Context, in activities.WatchNotebookIdleInput) (activities.NotebookIdleReply, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		*queues = append(*queues, activity.GetInfo(ctx).TaskQueue)
		last := testStart.Add(time.Minute)
		r := activities.NotebookIdleReply{Verdict: verdict, LastActivity: last, At: h.env.Now(), IdleFor: h.env.Now().Sub(last)}
		r.Left = max(in.IdleTimeout-r.IdleFor, 0)
		return r, nil
	}).Once()
}

// TestIdleNotebookIsStoppedAfterAWarning: a Jupyter server whose idle watch
// warns at 25 minutes idle and then finds it idle for its 30 minutes is
// stopped gracefully, ends Stopped with the rule's reason, and its
// capacity is released; the warning was in its status meanwhile and stays
// in the attempt's record.
func TestIdleNotebookIsStoppedAfterAWarning(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	var queues []string
	h.idleWatch(false, 25*time.Minute, activities.IdleWarn, &queues)
	h.idleWatch(true, 5*time.Minute, activities.IdleStop, &queues)
	var during protocol.JobStatus
	h.env.RegisterDelayedCallback(func() { during = h.status() }, 28*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 48*time.Hour)
	h.run(fixture.Job{Class: "high", Kind: scheduler.KindNotebook, Autoshutdown: idleRule}.Spec())
	require.NoError(t, h.env.GetWorkflowError(), "an idle stop ends the job without error")

	assert.Equal(t, protocol.StateRunning, during.State)
	assert.Contains(t, during.Warning, "idle since 09:01:00 UTC: this Jupyter server will be stopped in 5m0s, at about 09:31:00 UTC, unless it is used (idle_timeout 30m0s of allocation basic)")
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, "stopped: idle for 30m0s (idle_timeout of allocation basic)", st.Message)
	assert.Empty(t, st.Warning, "the warning is over once the attempt ends")
	require.Len(t, st.Attempts, 1)
	a := st.Attempts[0]
	assert.Equal(t, st.Message, a.EndReason)
	require.NotNil(t, a.WarnedAt)
	assert.Equal(t, testStart.Add(26*time.Minute), a.WarnedAt.UTC())
	assert.Equal(t, during.Warning, a.Warning)
	assert.Equal(t, []string{"trainq-node-basic-1", "trainq-node-basic-1"}, queues, "the watch runs on the server's node")
	require.Len(t, h.stops, 1, "the server got its graceful stop")
	assert.Equal(t, 5*time.Second, h.stops[0].Grace)
	assert.Equal(t, testStart.Add(31*time.Minute), h.stopAt[0].UTC())
	assert.Equal(t, []int{0}, releasedWorkers(t, h.releases(1)), "its GPUs go back to the allocator")
}

// TestUsedNotebookIsNotStopped: warned, the user comes back; the warning is
// lifted and the server runs on (here until it is cancelled).
func TestUsedNotebookIsNotStopped(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	var queues []string
	h.idleWatch(false, 25*time.Minute, activities.IdleWarn, &queues)
	h.idleWatch(true, 2*time.Minute, activities.IdleActive, &queues)
	h.idleWatch(false, forever, activities.IdleWarn, &queues)
	var warned, used protocol.JobStatus
	h.env.RegisterDelayedCallback(func() { warned = h.status() }, 27*time.Minute)
	h.env.RegisterDelayedCallback(func() { used = h.status() }, 29*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Hour)
	h.run(fixture.Job{Class: "high", Kind: scheduler.KindNotebook, Autoshutdown: idleRule}.Spec())

	assert.NotEmpty(t, warned.Warning)
	assert.Equal(t, protocol.StateRunning, used.State)
	assert.Empty(t, used.Warning, "used again: no warning")
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, "stopped by the user", st.Message, "never stopped for idleness")
	require.Len(t, h.stops, 1)
	assert.Equal(t, testStart.Add(10*time.Hour), h.stopAt[0].UTC())
}

// TestNotebookIdleWatchThatCannotReadRunsOn: a backend that cannot read a
// Jupyter server's status does not stop it.
func TestNotebookIdleWatchThatCannotReadRunsOn(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.env.OnActivity(h.acts.WatchNotebookIdle, mock.Anything, mock.Anything).Return(activities.NotebookIdleReply{},
		temporal.NewNonRetryableApplicationError("the cluster backend cannot read a Jupyter server's status", activities.ErrTypeUnsupported, nil)).Once()
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 10*time.Hour)
	h.run(fixture.Job{Class: "high", Kind: scheduler.KindNotebook, Autoshutdown: idleRule}.Spec())
	assert.Equal(t, "stopped by the user", h.status().Message)
}

// TestNotebookShutdownIn: shutdown_in 3600 stops the server after an hour
// of running, warned 5 minutes before; no idle watch without idle_timeout.
func TestNotebookShutdownIn(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	var warned protocol.JobStatus
	h.env.RegisterDelayedCallback(func() { warned = h.status() }, 57*time.Minute)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 48*time.Hour)
	secs := int64(3600)
	h.run(fixture.Job{Class: "high", Kind: scheduler.KindNotebook, Autoshutdown: &protocol.NotebookShutdown{ShutdownIn: &secs}}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	assert.Equal(t, "this Jupyter server will be stopped at 10:01:00 UTC, in 5m0s (shutdown_in 3600s)", warned.Warning)
	st := h.status()
	assert.Equal(t, protocol.StateStopped, st.State)
	assert.Equal(t, "stopped: ran for 1h0m0s (shutdown_in 3600s)", st.Message)
	require.NotNil(t, st.Attempts[0].WarnedAt)
	assert.Equal(t, testStart.Add(56*time.Minute), st.Attempts[0].WarnedAt.UTC())
	require.Len(t, h.stops, 1)
	assert.Equal(t, testStart.Add(61*time.Minute), h.stopAt[0].UTC())
	assert.Equal(t, []int{0}, releasedWorkers(t, h.releases(1)))
}

// TestNotebookShutdownAt: shutdown_at "30 9 * * *" stops a server that
// began running at 09:01 UTC at 09:30, warned at 09:25.
func TestNotebookShutdownAt(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 48*time.Hour)
	h.run(fixture.Job{Class: "high", Kind: scheduler.KindNotebook, Autoshutdown: &protocol.NotebookShutdown{ShutdownAt: "30 9 * * *"}}.Spec())
	require.NoError(t, h.env.GetWorkflowError())

	st := h.status()
	assert.Equal(t, `stopped: shutdown_at "30 9 * * *" came at 2025-03-01 09:30 UTC`, st.Message)
	assert.Equal(t, `this Jupyter server will be stopped at 09:30:00 UTC, in 5m0s (shutdown_at "30 9 * * *" (UTC))`, st.Attempts[0].Warning)
	assert.Equal(t, testStart.Add(25*time.Minute), st.Attempts[0].WarnedAt.UTC())
	require.Len(t, h.stops, 1)
	assert.Equal(t, testStart.Add(30*time.Minute), h.stopAt[0].UTC())
}
