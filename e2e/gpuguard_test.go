package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/protocol"
)

// TestNodeRefusesGPUsAStrayWorkerHolds: when the allocator believes free
// GPUs that a live worker uses (a worker it never knew of here; a reset
// allocator's stale pool is the same case), the node's agent refuses to start
// the granted worker there, the job gives the grant back and has the node
// fenced, the fence stops the stray, and the job runs on its next attempt:
// no GPU ever has two holders, and the job spends no max_retry.
func TestNodeRefusesGPUsAStrayWorkerHolds(t *testing.T) {
	const allocation, node = "guard", "guard-1"
	startWorker(t)
	records := filepath.Join(t.TempDir(), "records")
	data := filepath.Join(env.dir, "data")
	backend, err := local.New(local.Options{DataDir: data, SupervisorArgv: []string{filepath.Join(env.binDir, "trainq-supervise")}})
	require.NoError(t, err)

	// The allocator's first recovery fences the node (and would stop the
	// stray): start it once that is over.
	eventually(t, long, "the allocator to recover at its start and fence its node", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(time.Time{}) && len(queue(t, allocation).Fenced) == 0
	})
	// A worker nobody in trainq holds, on both of the node's GPUs.
	stray := cluster.WorkerSpec{
		ID: cluster.WorkerID{Job: "stray-guard", Attempt: 1, Worker: 0}, Workers: 1, Node: node, GPUs: []int{0, 1},
		Type: cluster.TypeBinary, Script: recordingScript(records, "sleep 600"), ProcessesPerWorker: 1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = backend.Start(ctx, stray)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = backend.Stop(context.Background(), stray.ID, 0) })
	eventually(t, long, "the stray to run", func() bool {
		st, err := backend.Status(ctx, stray.ID)
		return err == nil && st.Phase == cluster.PhaseRunning
	})

	job := submit(t, protocol.JobSpec{Script: recordingScript(records, "sleep 0.2"), InstanceType: "a100.2gpu", Region: "T",
		AllocationName: allocation, PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	st := waitState(t, job, protocol.StateCompleted, long)

	require.GreaterOrEqual(t, len(st.Attempts), 2, "the first attempt gave its grant back")
	assert.Contains(t, st.Attempts[0].EndReason, "GPUs [0 1] on guard-1 are still used by a live worker of another job or attempt")
	assert.Equal(t, 0, st.Restarts, "busy GPUs are not the job's fault")
	assert.Equal(t, 1, st.NodeLosses)
	gone, err := backend.Status(ctx, stray.ID)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, gone.Phase, "the node's fence stopped the stray")
	assert.Empty(t, queue(t, allocation).Fenced, "the node is back")
	rep := checkNoDoubleHolds(t, records, data)
	t.Logf("hold report: %+v", rep)
}
