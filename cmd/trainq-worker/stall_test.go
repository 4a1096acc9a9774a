package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// slowTaskWorkflow's one workflow task runs 1.5 s without yielding: longer
// than the SDK's default deadlock limit (1 s), shorter than the allocator's
// task timeout (2 s), as a large continue-as-new on a busy host did. Its
// task timeout in the test is a job's (5 s), so that the server accepts it
// however busy the machine.
func slowTaskWorkflow(workflow.Context) error {
	time.Sleep(1500 * time.Millisecond)
	return nil
}

// On a real dev server, a worker with trainq's options completes a workflow
// task the server would accept, however long it ran without yielding, rather
// than failing it as a deadlock: with the SDK's default limit the task fails
// at one second and every retry fails the same way.
func TestAWorkflowTaskTheServerAcceptsIsNotFailedAsADeadlock(t *testing.T) {
	require.Greater(t, WorkflowStallLimit, protocol.AllocatorTaskTimeout)
	require.Greater(t, WorkflowStallLimit, protocol.JobTaskTimeout)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin, skip, err := testenv.TemporalCLI(root)
	require.NoError(t, err)
	if skip != "" {
		t.Skip(testenv.SkipMessage("cmd/trainq-worker", skip))
	}
	srv, err := testenv.StartDevServer(bin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()

	for name, opts := range map[string]worker.Options{"main": mainWorkerOptions(""), "allocators": allocatorWorkerOptions("")} {
		t.Run(name, func(t *testing.T) {
			queue := "stall-" + name
			w := worker.New(c, queue, opts)
			w.RegisterWorkflow(slowTaskWorkflow)
			require.NoError(t, w.Start())
			t.Cleanup(w.Stop)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "stall-" + uuid.NewString(), TaskQueue: queue,
				WorkflowTaskTimeout: protocol.JobTaskTimeout, WorkflowExecutionTimeout: 30 * time.Second}, slowTaskWorkflow)
			require.NoError(t, err)
			require.NoError(t, run.Get(ctx, nil), "the workflow completes")
			it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				e, err := it.Next()
				require.NoError(t, err)
				assert.NotEqual(t, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, e.GetEventType(), "event %d: %v", e.GetEventId(), e.GetWorkflowTaskFailedEventAttributes())
			}
		})
	}
}
