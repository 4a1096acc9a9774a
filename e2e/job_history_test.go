package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// TestJobHistoryThroughFiftyAttempts runs a real job whose worker fails 49 times, on a real
// worker, with the history threshold lowered as in TestJobContinuesAsNewThroughFiftyAttempts (150
// events): the job hands its history over between attempts, and every run stays small. It prints
// the events of each run and the events per attempt. Part of make scale.
func TestJobHistoryThroughFiftyAttempts(t *testing.T) {
	if envInt("TRAINQ_SCALE", 0) == 0 {
		t.Skip("set TRAINQ_SCALE=1 (make scale) to run a job through 50 attempts")
	}
	const attempts, maxEvents = 50, 150
	startWorker(t)
	spec := protocol.JobSpec{Script: "exit 1", InstanceType: "a100.1gpu", Region: "T", AllocationName: "basic",
		PriorityClass: "medium", NWorkers: 1, Type: "binary", MaxRetry: attempts - 1}
	_, err := tqclient.Check(env.cfg, &spec)
	require.NoError(t, err)
	name := tqclient.NewJobName(spec.Kind)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, err = env.client.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: name, TaskQueue: protocol.TaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			protocol.KeyState.ValueSet(string(protocol.StatePending)), protocol.KeyAllocation.ValueSet(spec.AllocationName),
			protocol.KeyRegion.ValueSet(spec.Region), protocol.KeyAttempt.ValueSet(1))},
		protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec, MaxEventsPerRun: maxEvents})
	require.NoError(t, err)
	st := waitState(t, name, protocol.StateFailed, 15*time.Minute)
	require.Equal(t, attempts, st.Attempt)
	require.Len(t, st.Attempts, attempts, "the attempts table spans every run")

	resp, err := env.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", name), PageSize: 1000})
	require.NoError(t, err)
	runs, total, largest := len(resp.Executions), int64(0), int64(0)
	for _, e := range resp.Executions {
		total += e.HistoryLength
		largest = max(largest, e.HistoryLength)
	}
	assert.Greater(t, runs, 5, "the job continued as new between attempts")
	t.Logf("%d attempts in %d runs: %d events in all, %.1f per attempt; the largest run has %d events (threshold %d)",
		attempts, runs, total, float64(total)/attempts, largest, maxEvents)
}
