package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
)

// historiesDir holds workflow histories recorded on a real dev server by
// `make histories` (e2e.TestRecordHistories), in the JSON form of
// `temporal workflow show --output json`, one directory per release
// (histories/<release>/*.json). A release's histories are never
// re-recorded: they stand for the workflows that release left running, which
// every later release must still replay.
const historiesDir = "testdata/histories"

// TestReplayRecordedHistories replays every release's recorded histories
// against the current workflow code: a change that would break running
// workflows (a non-deterministic change) fails here. Histories are
// committed, so the test refuses to pass on an empty directory.
func TestReplayRecordedHistories(t *testing.T) {
	releases, err := filepath.Glob(filepath.Join(historiesDir, "*"))
	require.NoError(t, err)
	loose, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	require.NoError(t, err)
	require.Empty(t, loose, "histories belong in a release directory: workflows/%s/<release>/", historiesDir)
	total := 0
	for _, release := range releases {
		files, err := filepath.Glob(filepath.Join(release, "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "release directory %s has no histories", release)
		for _, file := range files {
			total++
			t.Run(filepath.Base(release)+"/"+filepath.Base(file), func(t *testing.T) {
				require.NoError(t, replayHistoryFile(file))
			})
		}
	}
	if total == 0 {
		t.Fatalf("no workflow histories under workflows/%s: run make histories RELEASE=... (needs the dev server) and commit them", historiesDir)
	}
}

// replayHistoryFile replays one JSON history with both trainq workflows registered.
func replayHistoryFile(file string) error {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: protocol.JobWorkflowName})
	r.RegisterWorkflowWithOptions(AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(nil, file)
}
