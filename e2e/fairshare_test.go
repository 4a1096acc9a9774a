package e2e

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestFairShareServesTheLighterWorkspaceFirst, with real processes, on allocation fair (one
// 2-GPU node, ordering fair-share ranked every second): team-a's job runs, then team-a and
// team-b queue a job each, team-a's first. team-b has used nothing, so its job goes first in
// the queue and takes the node when team-a's job ends; the usage that decided it survives an
// operator's recovery of the allocator, and the queue view shows it.
func TestFairShareServesTheLighterWorkspaceFirst(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	runGate, nextGate := gate(filepath.Join(dir, "run")), gate(filepath.Join(dir, "next"))
	first := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-a", Author: "ann", Script: runGate.waitFor()}.Spec())
	waitState(t, first, protocol.StateRunning, long)
	heavier := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-a", Author: "ann", Script: "true"}.Spec())
	eventually(t, long, "team-a's second job to be queued", func() bool { return queue(t, "fair").WaitingTotal == 1 })
	lighter := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-b", Author: "bob", Script: nextGate.waitFor()}.Spec())
	eventually(t, long, "team-b's job to be queued", func() bool { return queue(t, "fair").WaitingTotal == 2 })

	order := func() []string {
		var jobs []string
		for _, w := range queue(t, "fair").Waiting {
			jobs = append(jobs, w.Job)
		}
		return jobs
	}
	eventually(t, long, "team-b's job to go first in the queue once usage is ranked", func() bool {
		o := order()
		return len(o) == 2 && o[0] == lighter && o[1] == heavier
	})
	v := queue(t, "fair")
	require.NotEmpty(t, v.FairShare, "the queue view shows each workspace's usage")
	assert.Equal(t, "team-b", v.FairShare[0].Workspace, "the least-used workspace is listed first: %+v", v.FairShare)
	assert.Equal(t, "team-a", v.FairShare[len(v.FairShare)-1].Workspace)
	assert.Greater(t, v.FairShare[len(v.FairShare)-1].GPUHours, 0.0, "team-a's running job counts")
	out, _, code := trainq(t, "queue", "fair", "--region", "T")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Fair share (within a class, the least-used workspace's jobs go first")

	// An operator rebuilds the allocator's state from the jobs: the usage is carried over, so
	// the order stays.
	out, errOut, code := trainq(t, "allocator", "recover", "fair", "--region", "T")
	require.Equal(t, 0, code, "recover: %s %s", out, errOut)
	// At once: a pool rebuilt without it would rank team-a's usage as none until the next
	// ranking, and put team-a's job first again.
	assert.Equal(t, []string{lighter, heavier}, order(), "the recovered queue keeps team-b first")

	runGate.open(t)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, lighter, protocol.StateRunning, long)
	st := status(t, heavier)
	assert.Equal(t, protocol.StatePending, st.State, "team-a's job waits behind team-b's: %s", st.Reason)
	nextGate.open(t)
	waitState(t, lighter, protocol.StateCompleted, long)
	waitState(t, heavier, protocol.StateCompleted, long)
}
