package workflows

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// historiesDir holds workflow histories recorded on a real dev server by
// `make histories` (e2e.TestRecordHistories), in the JSON form of
// `temporal workflow show --output json`, one directory per release
// (histories/<release>/*.json), for the releases of the upgrade window (see
// ReplayWindow). A release's histories are never re-recorded: they stand for
// the workflows that release left running, which every release of its window
// must still replay. Older releases' histories are in archivedDir, kept to
// look at, not replayed: the gates that let this code replay them are retired.
const (
	historiesDir = "testdata/histories"
	archivedDir  = "testdata/archived-histories"
)

// recordedReleases lists the release directories under dir.
func recordedReleases(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var releases []string
	for _, e := range entries {
		require.True(t, e.IsDir(), "%s/%s: histories belong in a release directory", dir, e.Name())
		releases = append(releases, e.Name())
	}
	return releases
}

// TestReplayRecordedHistories replays the recorded histories of every release
// in the upgrade window against the current workflow code: a change that
// would break running workflows (a non-deterministic change) fails here. It
// refuses a directory of a release outside the window, and a window without
// the histories of the releases before this one.
func TestReplayRecordedHistories(t *testing.T) {
	recorded := recordedReleases(t, historiesDir)
	window, err := releaseWindow(append(recorded, recordedReleases(t, archivedDir)...))
	require.NoError(t, err)
	for _, r := range recorded {
		require.Contains(t, window, r, "release %s is outside the upgrade window %v: move workflows/%s/%s to workflows/%s/", r, window, historiesDir, r, archivedDir)
	}
	for _, r := range window[:len(window)-1] {
		require.Contains(t, recorded, r, "the window %v needs release %s's histories in workflows/%s", window, r, historiesDir)
	}
	total := 0
	for _, release := range recorded {
		files, err := filepath.Glob(filepath.Join(historiesDir, release, "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "release directory %s has no histories", release)
		for _, file := range files {
			total++
			t.Run(release+"/"+filepath.Base(file), func(t *testing.T) {
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
	r := testenv.NewReplayer()
	r.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: protocol.JobWorkflowName})
	r.RegisterWorkflowWithOptions(AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(nil, file)
}
