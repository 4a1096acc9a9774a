package activities

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/cluster"
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
	accepted := &mocks.WorkflowUpdateHandle{}
	accepted.On("Get", mock.Anything, mock.Anything).Return(nil)
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		o := args.Get(1).(client.UpdateWorkflowOptions)
		require.Equal(t, allocator, o.WorkflowID)
		require.Equal(t, protocol.UpdateRelease, o.UpdateName)
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, o.Args[0].(protocol.ReleaseSignal))
	}).Return(accepted, nil)
	acts := &Activities{Backend: b, Client: c}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)

	// The result says whether the allocator has the report: the job then
	// sends none of its own.
	reported := func(v interface{ Get(any) error }) bool {
		var st cluster.WorkerStatus
		require.NoError(t, v.Get(&st))
		return st.ReleaseReported
	}
	exited := workerSpec("early", 1, 0, "node-a", nil, "exit 0")
	start(t, b, exited)
	v, err := env.ExecuteActivity(acts.WatchWorker, WatchWorkerInput{WorkerID: exited.ID, ReleaseTo: allocator})
	require.NoError(t, err)
	assert.True(t, reported(v), "WatchWorker reported the release")

	stopped := workerSpec("early", 1, 1, "node-a", nil, "sleep 60")
	start(t, b, stopped)
	v, err = env.ExecuteActivity(acts.StopWorker, StopWorkerInput{ID: stopped.ID, Grace: time.Second, ReleaseTo: allocator})
	require.NoError(t, err)
	assert.True(t, reported(v), "StopWorker reported the release")

	silent := workerSpec("early-silent", 1, 0, "node-a", nil, "exit 0")
	start(t, b, silent)
	v, err = env.ExecuteActivity(acts.WatchWorker, WatchWorkerInput{WorkerID: silent.ID})
	require.NoError(t, err)
	assert.False(t, reported(v), "without ReleaseTo nothing is reported")

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []protocol.ReleaseSignal{
		{Job: "early", Attempt: 1, Workers: []int{0}, Stopping: true},
		{Job: "early", Attempt: 1, Workers: []int{1}, Stopping: true},
	}, sent)
}

// A report the server refused is not claimed: the job then reports the
// release itself.
func TestFailedReleaseReportIsNotClaimed(t *testing.T) {
	const allocator = "allocator/T/refused"
	b := newLocal(t)
	c := &mocks.Client{}
	c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, errors.New("workflow not found"))
	acts := &Activities{Backend: b, Client: c}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)

	exited := workerSpec("refused", 1, 0, "node-a", nil, "exit 0")
	start(t, b, exited)
	v, err := env.ExecuteActivity(acts.WatchWorker, WatchWorkerInput{WorkerID: exited.ID, ReleaseTo: allocator})
	require.NoError(t, err)
	var st cluster.WorkerStatus
	require.NoError(t, v.Get(&st))
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.False(t, st.ReleaseReported)
	c.AssertNumberOfCalls(t, "UpdateWorkflow", 1)
}
