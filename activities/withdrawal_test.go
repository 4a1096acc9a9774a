package activities

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
)

// ReportWithdrawal sends the update, and the signal only where the update
// cannot be taken: at once when the allocator's tasks fail or its run is
// not found, and at the last try when the allocator never took it in time;
// an allocator that does not exist is owed nothing.
func TestReportWithdrawal(t *testing.T) {
	const allocator = "allocator/T/w"
	w := protocol.WithdrawSignal{Job: "job", Attempt: 2}
	for _, tc := range []struct {
		name      string
		update    error // what UpdateWorkflow answers (nil: accepted)
		signal    error // what SignalWorkflow answers
		wantTries int   // activity tries
		wantSent  bool  // the signal was sent
		wantErr   bool  // the job sees the withdrawal fail
	}{
		{"accepted: no signal", nil, nil, 1, false, false},
		{"the allocator's tasks fail: the signal at once", serviceerror.NewWorkflowNotReady("workflow task failing"), nil, 1, true, false},
		{"no run found: the signal, which a run just started takes", serviceerror.NewNotFound("workflow not found"), nil, 1, true, false},
		{"no allocator at all: nothing owed", serviceerror.NewNotFound("workflow not found"), serviceerror.NewNotFound("workflow not found"), 1, true, false},
		{"never taken in time: the signal at the last try", context.DeadlineExceeded, nil, withdrawalUpdateTries, true, false},
		{"the signal refused too: tried again", context.DeadlineExceeded, errors.New("signal refused"), 5, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &mocks.Client{}
			var mu sync.Mutex
			updates, signals := 0, 0
			c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(
				func(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
					// An activity's goroutine: assert, not require (no FailNow).
					assert.Equal(t, allocator, o.WorkflowID)
					assert.Equal(t, protocol.UpdateWithdraw, o.UpdateName)
					assert.Equal(t, "withdraw/job/2", o.UpdateID, "one update ID for every try")
					mu.Lock()
					defer mu.Unlock()
					updates++
					if tc.update != nil {
						return nil, tc.update
					}
					h := &mocks.WorkflowUpdateHandle{}
					h.On("Get", mock.Anything, mock.Anything).Return(nil)
					return h, nil
				})
			c.On("SignalWorkflow", mock.Anything, allocator, "", protocol.SignalWithdraw, w).Return(
				func(context.Context, string, string, string, any) error {
					mu.Lock()
					defer mu.Unlock()
					signals++
					return tc.signal
				})
			acts := &Activities{Client: c}
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterActivity(acts)
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					StartToCloseTimeout: time.Minute,
					RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
				})
				return workflow.ExecuteActivity(ctx, acts.ReportWithdrawal, ReportWithdrawalInput{Allocator: allocator, Withdrawal: w}).Get(ctx, nil)
			}, workflow.RegisterOptions{Name: "withdraw"})
			env.ExecuteWorkflow("withdraw")
			require.True(t, env.IsWorkflowCompleted())

			assert.Equal(t, tc.wantErr, env.GetWorkflowError() != nil, "%v", env.GetWorkflowError())
			assert.Equal(t, tc.wantTries, updates, "tries of the update")
			assert.Equal(t, tc.wantSent, signals > 0, "the signal sent")
		})
	}
}

// TestUpdateIDsNameTheJobsRun: a job reset to before an attempt runs it
// again under a new run, and its release and withdrawal of that attempt are
// new updates; a retry within one run is the same update (the server
// answers it once). Without the run in the ID, the reset run's release was
// answered with the first run's outcome and never applied: the allocator
// held the attempt's GPUs for ever (chaos campaign, seed 8).
func TestUpdateIDsNameTheJobsRun(t *testing.T) {
	s := protocol.ReleaseSignal{Job: "job", Attempt: 1, Workers: []int{0}, Stopping: true}
	assert.Equal(t, "release/job/1/[0]", releaseUpdate("allocator/a/b", s, "").UpdateID, "an older job's")
	first, again, reset := releaseUpdate("allocator/a/b", s, "run-1"), releaseUpdate("allocator/a/b", s, "run-1"), releaseUpdate("allocator/a/b", s, "run-2")
	assert.Equal(t, first.UpdateID, again.UpdateID)
	assert.NotEqual(t, first.UpdateID, reset.UpdateID)

	ids := map[string]string{}
	c := &mocks.Client{}
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(
		func(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
			ids[o.Args[0].(protocol.WithdrawSignal).Job] = o.UpdateID
			h := &mocks.WorkflowUpdateHandle{}
			h.On("Get", mock.Anything, mock.Anything).Return(nil)
			return h, nil
		})
	require.NoError(t, SendWithdrawal(context.Background(), c, "allocator/a/b", protocol.WithdrawSignal{Job: "old", Attempt: 1}, ""))
	require.NoError(t, SendWithdrawal(context.Background(), c, "allocator/a/b", protocol.WithdrawSignal{Job: "new", Attempt: 1}, "run-2"))
	assert.Equal(t, map[string]string{"old": "withdraw/old/1", "new": "withdraw/new/run-2/1"}, ids)
}
