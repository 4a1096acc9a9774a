package activities

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/protocol"
)

// A node activity that sees its worker gone reports the release to the
// allocator named in ReleaseTo, a workflow task before the job can; without
// ReleaseTo (older workflows, the allocator's own reclaims) it reports
// nothing.
func TestNodeActivitiesReportReleases(t *testing.T) {
	const allocator = "allocator/T/early"
	b := newLocal(t)
	c := &mocks.Client{}
	var mu sync.Mutex
	var sent []protocol.ReleaseSignal
	c.On("SignalWorkflow", mock.Anything, allocator, "", protocol.SignalRelease, mock.Anything).Run(func(args mock.Arguments) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, args.Get(4).(protocol.ReleaseSignal))
	}).Return(nil)
	acts := &Activities{Backend: b, Client: c}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)

	exited := workerSpec("early", 1, 0, "node-a", nil, "exit 0")
	start(t, b, exited)
	_, err := env.ExecuteActivity(acts.WatchWorker, WatchWorkerInput{WorkerID: exited.ID, ReleaseTo: allocator})
	require.NoError(t, err)

	stopped := workerSpec("early", 1, 1, "node-a", nil, "sleep 60")
	start(t, b, stopped)
	_, err = env.ExecuteActivity(acts.StopWorker, StopWorkerInput{ID: stopped.ID, Grace: time.Second, ReleaseTo: allocator})
	require.NoError(t, err)

	silent := workerSpec("early-silent", 1, 0, "node-a", nil, "exit 0")
	start(t, b, silent)
	_, err = env.ExecuteActivity(acts.WatchWorker, WatchWorkerInput{WorkerID: silent.ID})
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []protocol.ReleaseSignal{
		{Job: "early", Attempt: 1, Workers: []int{0}, Stopping: true},
		{Job: "early", Attempt: 1, Workers: []int{1}, Stopping: true},
	}, sent)
}
