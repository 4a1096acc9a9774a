package workflows

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func TestMergeReleases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given []protocol.ReleaseSignal
		want  []protocol.ReleaseSignal
	}{
		{"one release stays as it is",
			[]protocol.ReleaseSignal{{Job: "j", Attempt: 1, Workers: []int{3}, Stopping: true}},
			[]protocol.ReleaseSignal{{Job: "j", Attempt: 1, Workers: []int{3}, Stopping: true}}},
		{"one attempt's releases become one, in order, stopping if any was",
			[]protocol.ReleaseSignal{
				{Job: "j", Attempt: 1, Workers: []int{2}, Stopping: true},
				{Job: "j", Attempt: 1, Workers: []int{0}},
				{Job: "j", Attempt: 1, Workers: []int{5}}},
			[]protocol.ReleaseSignal{{Job: "j", Attempt: 1, Workers: []int{2, 0, 5}, Stopping: true}}},
		{"lost and busy nodes are kept, once each",
			[]protocol.ReleaseSignal{
				{Job: "j", Attempt: 1, Workers: []int{0}, LostNodes: []string{"n1"}, GPUsBusy: []string{"n1"}},
				{Job: "j", Attempt: 1, Workers: []int{1}, LostNodes: []string{"n1"}},
				{Job: "j", Attempt: 1, Workers: []int{2}, LostNodes: []string{"n2"}}},
			[]protocol.ReleaseSignal{{Job: "j", Attempt: 1, Workers: []int{0, 1, 2}, LostNodes: []string{"n1", "n2"}, GPUsBusy: []string{"n1"}}}},
		{"stopping if a later release marks it",
			[]protocol.ReleaseSignal{
				{Job: "j", Attempt: 1, Workers: []int{0}},
				{Job: "j", Attempt: 1, Workers: []int{1}, Stopping: true}},
			[]protocol.ReleaseSignal{{Job: "j", Attempt: 1, Workers: []int{0, 1}, Stopping: true}}},
		{"attempts stay apart: a release counts only for its own",
			[]protocol.ReleaseSignal{
				{Job: "j", Attempt: 1, Workers: []int{0}},
				{Job: "j", Attempt: 2, Workers: []int{0}, Stopping: true},
				{Job: "j", Attempt: 1, Workers: []int{1}}},
			[]protocol.ReleaseSignal{
				{Job: "j", Attempt: 1, Workers: []int{0, 1}},
				{Job: "j", Attempt: 2, Workers: []int{0}, Stopping: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var given []protocol.ReleaseSignal
			for _, r := range tc.given {
				r.Workers, r.LostNodes, r.GPUsBusy = slices.Clone(r.Workers), slices.Clone(r.LostNodes), slices.Clone(r.GPUsBusy)
				given = append(given, r)
			}
			assert.Equal(t, tc.want, mergeReleases(tc.given))
			assert.Equal(t, given, tc.given, "the releases merged are not changed")
		})
	}
}

// TestReleasesOfOneTaskGoAsOneSignal: the releases a job makes itself within
// one workflow task (a gang whose agents could not report, ending at once)
// reach the allocator as one signal per attempt, not one per worker: a
// signal each would come in as a burst that can get the allocator's task
// force-closed. Releases made in a later task go in a signal of their own.
func TestReleasesOfOneTaskGoAsOneSignal(t *testing.T) {
	const gang = 200
	var s testsuite.WorkflowTestSuite
	env := testenv.NewWorkflowEnv(&s)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		j := &job{name: testJob, alloc: allocatorLink{id: testAllocator}, cur: newAttemptRun()}
		for w := range gang - 1 {
			j.release(ctx, 1, w)
		}
		// A timer on the test clock: what follows runs in a later workflow task.
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return err
		}
		j.releaseLost(ctx, 1, []int{gang - 1}, "n9")
		_ = workflow.Await(ctx, func() bool { return len(j.cur.unsent) == 0 })
		for _, r := range j.cur.signals {
			j.deliverRelease(ctx, r)
		}
		return nil
	}, workflow.RegisterOptions{Name: "releases"})
	var sent []protocol.ReleaseSignal
	env.OnSignalExternalWorkflow(mock.Anything, testAllocator, "", protocol.SignalRelease, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			sent = append(sent, arg.(protocol.ReleaseSignal))
			return nil
		})
	env.ExecuteWorkflow("releases")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	require.Len(t, sent, 2, "one signal for the first task's %d releases, one for the next task's", gang-1)
	assert.Len(t, sent[0].Workers, gang-1)
	assert.True(t, sent[0].Stopping, "the first release marks the job stopping")
	assert.Empty(t, sent[0].LostNodes)
	assert.Equal(t, protocol.ReleaseSignal{Job: testJob, Attempt: 1, Workers: []int{gang - 1}, LostNodes: []string{"n9"}}, sent[1])
}

// TestAttemptEndSendsAndDeliversQueuedReleases: an attempt whose nodes were
// all lost releases its workers as one signal when it ends, sends it again
// when the server refuses it, and ends with nothing left queued.
func TestAttemptEndSendsAndDeliversQueuedReleases(t *testing.T) {
	const gang = 8
	var s testsuite.WorkflowTestSuite
	env := testenv.NewWorkflowEnv(&s)
	left := -1
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		j := &job{name: testJob, alloc: allocatorLink{id: testAllocator}, cur: newAttemptRun()}
		var g protocol.GrantSignal
		for w := range gang {
			node := string(rune('a'+w)) + "-node"
			g.Placement = append(g.Placement, scheduler.WorkerPlacement{Worker: w, Node: node, GPUs: []int{0}})
			j.cur.lostNodes[node] = true
		}
		j.stopAndRelease(ctx, 1, g)
		left = len(j.cur.unsent)
		return nil
	}, workflow.RegisterOptions{Name: "stop"})
	var sent []protocol.ReleaseSignal
	refuse := 1
	env.OnSignalExternalWorkflow(mock.Anything, testAllocator, "", protocol.SignalRelease, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			if refuse > 0 {
				refuse--
				return errors.New("unable to signal external workflow for unknown cause: SignalCountLimitExceeded")
			}
			sent = append(sent, arg.(protocol.ReleaseSignal))
			return nil
		})
	env.ExecuteWorkflow("stop")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	assert.Zero(t, left, "nothing is left queued when the attempt ends")
	assert.Zero(t, refuse, "the server refused the first signal")
	require.Len(t, sent, 1, "one signal for the whole gang, sent again once refused: %+v", sent)
	assert.Len(t, sent[0].Workers, gang)
	assert.Len(t, sent[0].LostNodes, gang)
	assert.True(t, sent[0].Stopping)
}
