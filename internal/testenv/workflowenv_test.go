package testenv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// slowTaskWorkflow stands for a large workflow task on a busy machine: it
// runs past the SDK's default one-second deadlock limit without yielding.
func slowTaskWorkflow(workflow.Context) error {
	//workflowcheck:ignore a test of the wall-clock limit itself
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
	}
	return nil
}

// TestWorkflowEnvToleratesASlowTask: a task that runs 1.5s without yielding
// fails in the SDK's own test environment and passes in NewWorkflowEnv's.
func TestWorkflowEnvToleratesASlowTask(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	plain := s.NewTestWorkflowEnvironment()
	plain.ExecuteWorkflow(slowTaskWorkflow)
	require.ErrorContains(t, plain.GetWorkflowError(), "deadlock", "the SDK's default limit, which a busy machine trips")

	env := NewWorkflowEnv(&s)
	env.ExecuteWorkflow(slowTaskWorkflow)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
}
