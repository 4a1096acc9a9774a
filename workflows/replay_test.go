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
// `temporal workflow show --output json`.
const historiesDir = "testdata/histories"

// TestReplayRecordedHistories replays every recorded history against the
// current workflow code: a change that would break running workflows (a
// non-deterministic change) fails here. Histories are committed, so the test
// refuses to pass on an empty directory.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	require.NoError(t, err)
	if len(files) == 0 {
		t.Fatalf("no workflow histories under workflows/%s: run make histories (needs the dev server) and commit them", historiesDir)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			require.NoError(t, replayHistoryFile(file))
		})
	}
}

// replayHistoryFile replays one JSON history with both trainq workflows registered.
func replayHistoryFile(file string) error {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: protocol.JobWorkflowName})
	r.RegisterWorkflowWithOptions(AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(nil, file)
}
