package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestWorkspaceAtItsHighCapWaits, with real processes, on allocation limited
// (two 2-GPU nodes; every workspace may hold 2 high GPUs): team-a's second
// high job waits with the cap's reason while a node is free and team-b's
// high job starts there; it starts once team-a's first job ends.
func TestWorkspaceAtItsHighCapWaits(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	first := submit(t, fixture.Job{Allocation: "limited", Class: "high", Workspace: "team-a", Script: hold.waitFor()}.Spec())
	running := waitState(t, first, protocol.StateRunning, long)
	// Best fit takes limited-1 once both nodes serve; a fresh allocator serves them in the
	// order their agents answer its recovery, so the free node is whichever first left.
	free := "limited-2"
	if running.Attempts[0].Placement[0].Node == free {
		free = "limited-1"
	}

	second := submit(t, fixture.Job{Allocation: "limited", Class: "high", Workspace: "team-a", Script: "true"}.Spec())
	want := "team-a holds 2 of its 2 high GPUs (limit high.max_gpus)"
	eventually(t, long, "team-a's second high job to wait for its cap", func() bool {
		st := status(t, second)
		return st.State == protocol.StatePending && strings.Contains(st.Reason, want)
	})
	// trainq submit --test-only asks the allocator, and starts nothing.
	out, _, code := trainq(t, "submit", "--test-only", "--allocation", "limited", "--region", "T", "--workspace", "team-a",
		"--priority-class", "high", "--instance-type", "a100.2gpu", "--script", "true")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "would wait in T/limited at position 2: "+want, "team-a's third high job would wait for its cap too")
	out, _, code = trainq(t, "submit", "--test-only", "--allocation", "limited", "--region", "T", "--workspace", "team-b",
		"--priority-class", "high", "--instance-type", "a100.2gpu", "--script", "true")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "would start now in T/limited on "+free+" (GPUs 0,1) (test only, nothing started)")
	assert.Equal(t, 1, queue(t, "limited").WaitingTotal, "the test runs queued nothing")

	other := submit(t, fixture.Job{Allocation: "limited", Class: "high", Workspace: "team-b", Script: "true"}.Spec())
	waitState(t, other, protocol.StateCompleted, long)
	st := status(t, second)
	assert.Equal(t, protocol.StatePending, st.State, "team-b's job started on the free node; team-a's still waits: %s", st.Reason)
	assert.Contains(t, st.Reason, want)

	hold.open(t)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, second, protocol.StateCompleted, long)
}
