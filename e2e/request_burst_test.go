package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestABurstOfRequestsCannotForceCloseTheAllocatorsTask: 150 jobs send their
// capacity requests, node agents 150 releases, or 150 jobs cancelled while
// they wait their withdrawals, while one workflow task of their allocator
// runs (the test holds the task, as a busy or slow worker would). Sent as
// trainq-worker sends them (activities.SendRequest, SendRelease and
// SendWithdrawal: an update each), the
// server admits protocol.TemporalInFlightUpdates and refuses the rest until
// they may come in, and the task is not failed. Sent as signals, as they
// were, every one is an event that comes in during the task, and past
// protocol.TemporalBufferedEventsLimit of them the server force-closes it
// (ForceCloseCommand); the worker then replays the whole run, during which
// as many may come in again.
func TestABurstOfRequestsCannotForceCloseTheAllocatorsTask(t *testing.T) {
	const burst = 150
	require.Greater(t, burst, protocol.TemporalBufferedEventsLimit)
	for _, tc := range []struct {
		name      string
		send      func(ctx context.Context, allocator string, req protocol.CapacityRequest) error
		wantFails bool
	}{
		{"as updates, as trainq-worker sends them", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			_, err := activities.SendRequest(ctx, env.client, allocator, req, func(context.Context) error {
				return errors.New("the allocator is running: no signal-with-start")
			})
			return err
		}, false},
		{"as signals", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			return env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalRequest, req)
		}, true},
		{"releases, as node agents send them", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			return activities.SendRelease(ctx, env.client, allocator, protocol.ReleaseSignal{Job: req.Job, Attempt: 1, Workers: []int{0}, Stopping: true}, "")
		}, false},
		{"releases, as signals", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			return env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalRelease, protocol.ReleaseSignal{Job: req.Job, Attempt: 1, Workers: []int{0}, Stopping: true})
		}, true},
		{"withdrawals, as jobs send them", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			return activities.SendWithdrawal(ctx, env.client, allocator, protocol.WithdrawSignal{Job: req.Job, Attempt: 1}, "")
		}, false},
		{"withdrawals, as signals", func(ctx context.Context, allocator string, req protocol.CapacityRequest) error {
			return env.client.SignalWorkflow(ctx, allocator, "", protocol.SignalWithdraw, protocol.WithdrawSignal{Job: req.Job, Attempt: 1})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An allocator run whose task queue no worker polls but the test.
			queue := "held-" + uuid.NewString()
			allocator := protocol.AllocatorWorkflowID("T", "held-"+uuid.NewString()[:8])
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: allocator, TaskQueue: queue,
				WorkflowTaskTimeout: time.Minute}, protocol.AllocatorWorkflowName)
			require.NoError(t, err)
			t.Cleanup(func() { _ = env.client.TerminateWorkflow(context.Background(), allocator, "", "e2e: done") })
			task, err := env.client.WorkflowService().PollWorkflowTaskQueue(ctx, &workflowservice.PollWorkflowTaskQueueRequest{
				Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}, Identity: "e2e: a busy worker"})
			require.NoError(t, err)
			require.NotEmpty(t, task.GetTaskToken(), "the allocator's first task")

			// The burst, while the task is held. Each update's sender gives
			// up after a while: an update that the held task never takes in
			// cannot complete. A signal is taken at once; its deadline only
			// has to outlast a busy machine, within the held task's minute.
			wait := 10 * time.Second
			if tc.wantFails {
				wait = 45 * time.Second
			}
			var wg sync.WaitGroup
			var sent atomic.Int32
			for i := range burst {
				wg.Go(func() {
					sctx, scancel := context.WithTimeout(ctx, wait)
					defer scancel()
					req := protocol.CapacityRequest{Job: fmt.Sprintf("burst-%03d", i), Attempt: 1, Kind: scheduler.KindJob,
						Class: scheduler.Medium, Workers: 1, SubmittedAt: time.Now()}
					if tc.send(sctx, allocator, req) == nil {
						sent.Add(1)
					}
				})
			}
			wg.Wait()

			failed := 0
			for _, e := range fetchHistory(t, allocator) {
				if a := e.GetWorkflowTaskFailedEventAttributes(); a != nil {
					failed++
					assert.Equal(t, enumspb.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND, a.GetCause())
				}
			}
			t.Logf("%s: %d of %d sent, %d workflow tasks failed", tc.name, sent.Load(), burst, failed)
			if tc.wantFails {
				assert.Equal(t, int32(burst), sent.Load(), "every signal is taken")
				assert.Positive(t, failed, "more than %d signals came in during one task: the server should have failed it", protocol.TemporalBufferedEventsLimit)
				return
			}
			assert.Zero(t, failed, "no workflow task may fail, whatever comes in during it")
			assert.Less(t, sent.Load(), int32(burst), "the held task takes in no update: none of those the server refused can have been accepted")
		})
	}
}
