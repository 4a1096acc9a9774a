package testenv

import (
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// The SDK's test workflow environment has two wall-clock limits: a workflow
// task that runs one second without yielding is reported as a deadlock, and a
// workflow blocked three seconds with nothing to do fails the test. Both are
// sized for a quiet machine: a 10,000-event task under the race detector, or
// a mocked activity beside another package's build, takes longer on a busy
// two-core one. The test clock, not these, is what the tests measure; the
// limits only catch a test that hangs, which they still do.
const (
	// WorkflowDeadlockTimeout is how long a workflow task may run without
	// yielding in a test environment before the SDK calls it a deadlock.
	WorkflowDeadlockTimeout = 2 * time.Minute
	// WorkflowIdleTimeout is how long a test workflow may wait, in wall
	// time, with no timer to fire and no callback to run.
	WorkflowIdleTimeout = 2 * time.Minute
)

// NewWorkflowEnv is s.NewTestWorkflowEnvironment with the wall-clock limits
// above. Every workflow test environment in this module is made here.
func NewWorkflowEnv(s *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: WorkflowDeadlockTimeout})
	env.SetTestTimeout(WorkflowIdleTimeout)
	return env
}

// NewReplayer is a workflow replayer without the SDK's one-second deadlock
// detector: a replay checks that the code makes the recorded decisions, and a
// large task's replay beside another package's build may take longer than a
// second without being stuck.
func NewReplayer() worker.WorkflowReplayer {
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DisableDeadlockDetection: true})
	if err != nil {
		panic(err) // (only invalid options fail, and these are fixed)
	}
	return r
}
