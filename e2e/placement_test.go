package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestIncludeExcludeAndQueueNodesBindPlacement, with real processes, on
// allocation placed (three 2-GPU nodes; queue pair has placed-2 and
// placed-3): include_nodes, exclude_nodes and a queue's nodes decide where a
// job runs; a job whose allowed nodes are busy waits, saying so, while
// another node is free, and starts there once they free.
func TestIncludeExcludeAndQueueNodesBindPlacement(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	hold := gate(filepath.Join(dir, "hold"))
	spec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: "placed"}.Spec()
	}
	nodeOf := func(st protocol.JobStatus) string {
		require.NotEmpty(t, st.Attempts)
		require.Len(t, st.Attempts[len(st.Attempts)-1].Placement, 1)
		return st.Attempts[len(st.Attempts)-1].Placement[0].Node
	}

	s := spec(hold.waitFor())
	s.IncludeNodes = []string{"placed-3"}
	included := submit(t, s)
	assert.Equal(t, "placed-3", nodeOf(waitState(t, included, protocol.StateRunning, long)), "include_nodes")

	s = spec("true")
	s.ExcludeNodes = []string{"placed-1"}
	excluded := submit(t, s)
	assert.Equal(t, "placed-2", nodeOf(waitState(t, excluded, protocol.StateCompleted, long)), "exclude_nodes: placed-3 is busy")

	s = spec("true")
	s.QueueName = "pair"
	queued := submit(t, s)
	assert.Contains(t, []string{"placed-2", "placed-3"}, nodeOf(waitState(t, queued, protocol.StateCompleted, long)), "the queue's nodes")

	// placed-1 and placed-2 are free; a job bound to placed-3 waits for it.
	s = spec("true")
	s.IncludeNodes = []string{"placed-3"}
	waiting := submit(t, s)
	eventually(t, long, "the bound job to wait with a reason", func() bool {
		st := status(t, waiting)
		return st.State == protocol.StatePending && st.Reason != ""
	})
	st := status(t, waiting)
	t.Logf("the bound job waits: %s", st.Reason)
	assert.True(t, strings.Contains(st.Reason, "include_nodes") || strings.Contains(st.Reason, "allowed"), "the reason names its node constraint: %q", st.Reason)
	hold.open(t)
	assert.Equal(t, "placed-3", nodeOf(waitState(t, waiting, protocol.StateCompleted, long)))
	waitState(t, included, protocol.StateCompleted, long)
}

// TestElasticGangStartsWithWhatFits, with real processes, on allocation placed
// (three 2-GPU nodes): a pytorch_elastic job of 3 workers, elastic down to 1,
// starts with the 2 nodes that are free while a job holds the third, rather
// than wait for it; each worker's launcher sees a world of 2 and torchrun's
// --nnodes range 1:3.
func TestElasticGangStartsWithWhatFits(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	hold := gate(filepath.Join(dir, "hold"))
	holder := submit(t, protocol.JobSpec{Script: hold.waitFor(), InstanceType: "a100.2gpu", Region: "T", AllocationName: "placed",
		PriorityClass: "high", NWorkers: 1, Type: "binary", IncludeNodes: []string{"placed-1"}})
	waitState(t, holder, protocol.StateRunning, long)

	script := filepath.Join(dir, "world.py")
	require.NoError(t, os.WriteFile(script, []byte(`import os, sys
e = os.environ
with open(os.path.join(sys.argv[1], "worker-%s" % e["TRAINQ_WORKER"]), "w") as f:
    f.write("%s %s %s" % (e["WORLD_SIZE"], e["TRAINQ_WORKERS"], e["PET_NNODES"]))
`), 0o644))
	elastic := submit(t, protocol.JobSpec{Script: script + " " + dir, InstanceType: "a100.2gpu", Region: "T", AllocationName: "placed",
		PriorityClass: "medium", NWorkers: 3, ProcessesPerWorker: 1, Type: "pytorch_elastic", ElasticMinWorkers: 1, ElasticMaxWorkers: 3, ElasticMaxRestarts: 1})
	st := waitState(t, elastic, protocol.StateCompleted, long)
	require.NotEmpty(t, st.Attempts)
	placement := st.Attempts[len(st.Attempts)-1].Placement
	var nodes []string
	for _, w := range placement {
		nodes = append(nodes, w.Node)
	}
	assert.ElementsMatch(t, []string{"placed-2", "placed-3"}, nodes, "it started with the two free nodes while placed-1 was held")
	assert.Equal(t, protocol.StateRunning, status(t, holder).State, "the holder was not preempted (it is high)")
	for w := range 2 {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("worker-%d", w)))
		require.NoError(t, err, "worker %d ran", w)
		assert.Equal(t, "2 2 1:3", string(got), "worker %d: WORLD_SIZE, TRAINQ_WORKERS, PET_NNODES", w)
	}
	_, err := os.Stat(filepath.Join(dir, "worker-2"))
	assert.True(t, os.IsNotExist(err), "no third worker ran")
	hold.open(t)
	waitState(t, holder, protocol.StateCompleted, long)
}
