package e2e

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestSeedWorkedExample plays the worked example of the priorities page with
// real worker processes on an 8-GPU allocation of four 2-GPU nodes. Each
// worker blocks on a gate file, so the test decides when each one stops:
// Job 1's workers finish one at a time, and Job 0's workers, preempted, take
// their time to shut down. The allocator continues as new every four
// messages, so the example plays across several of its runs, as it would on
// a busy allocation.
func TestSeedWorkedExample(t *testing.T) {
	startShortRunAllocator(t, env.cfg, "seed", 4)
	startWorker(t)
	dir := t.TempDir()
	g := func(name string) gate { return gate(filepath.Join(dir, name)) }
	// Worker N of a job waits for the gate <job>-w<N>.
	untilGate := func(job string) string {
		return "while [ ! -e " + dir + "/" + job + "-w$NODE_RANK ]; do sleep 0.05; done"
	}
	// Job 0's workers run until SIGTERM, then shut down when their gate opens.
	slowToStop := "trap '" + untilGate("job0") + "; exit 143' TERM; while true; do sleep 0.05; done"

	job0 := submit(t, fixture.Job{Allocation: "seed", Class: "low", Workers: 2, Script: slowToStop}.Spec())
	waitState(t, job0, protocol.StateRunning, long)
	job1 := submit(t, fixture.Job{Allocation: "seed", Class: "high", Workers: 2, Script: untilGate("job1")}.Spec())
	waitState(t, job1, protocol.StateRunning, long)
	job2 := submit(t, fixture.Job{Allocation: "seed", Class: "low", Script: "echo job 2 ran"}.Spec())
	names := map[string]string{job0: "Job 0", job1: "Job 1", job2: "Job 2"}
	eventually(t, long, "Job 2 to wait with a reason", func() bool { return status(t, job2).Reason != "" })

	// Job 3 (medium) claims the capacity of Job 0 (low), which stops slowly.
	job3 := submit(t, fixture.Job{Allocation: "seed", Class: "medium", Workers: 2, Script: untilGate("job3")}.Spec())
	names[job3] = "Job 3"
	eventually(t, long, "Job 3 to wait on Job 0's releasing capacity", func() bool {
		st := status(t, job3)
		return st.State == protocol.StatePending && slices.Contains(st.WaitingFor, job0)
	})
	// The allocator decides first; Job 0's workflow records the preemptor
	// when the preemption signal reaches it.
	eventually(t, long, "Job 0 to record that Job 3 preempted it", func() bool {
		st0 := status(t, job0)
		return len(st0.Attempts) > 0 && st0.Attempts[0].Preemptor != nil
	})
	assert.Equal(t, job3, status(t, job0).Attempts[0].Preemptor.Job)

	// Job 4 (high) arrives; nothing is free, and Job 1 is not preemptible by it.
	job4 := submit(t, fixture.Job{Allocation: "seed", Class: "high", Script: untilGate("job4")}.Spec())
	names[job4] = "Job 4"
	eventually(t, long, "Job 4 to wait with a reason", func() bool { return status(t, job4).Reason != "" })
	assert.Equal(t, protocol.StatePending, status(t, job2).State)

	// Job 1 finishes, but not all its workers stop at once: Job 4 starts on
	// the partially freed capacity, before Job 3.
	g("job1-w0").open(t)
	waitState(t, job4, protocol.StateRunning, long)
	assert.Equal(t, protocol.StatePending, status(t, job3).State, "Job 3 needs two whole nodes")
	assert.Equal(t, protocol.StatePending, status(t, job2).State, "Job 2 must wait behind Job 3")

	// Job 0's workers finally stop: Job 3 gets their two nodes.
	g("job0-w0").open(t)
	g("job0-w1").open(t)
	waitState(t, job3, protocol.StateRunning, long)
	assert.Equal(t, protocol.StatePending, status(t, job2).State, "Job 2 must wait behind Job 3 and Job 4")

	g("job1-w1").open(t)
	waitState(t, job2, protocol.StateCompleted, long)
	g("job3-w0").open(t)
	g("job3-w1").open(t)
	g("job4-w0").open(t)
	waitState(t, job0, protocol.StatePreempted, long)
	for _, j := range []string{job1, job3, job4} {
		waitState(t, j, protocol.StateCompleted, long)
	}

	grants := checkAllocatorHistory(t, "seed")
	first := fetchHistory(t, protocol.AllocatorWorkflowID("T", "seed"))[0]
	require.NotEmpty(t, first.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId(),
		"the example should have played across more than one allocator run")
	require.Equal(t, []string{"Job 0#1", "Job 1#1", "Job 4#1", "Job 3#1", "Job 2#1"}, grantOrder(grants, names))
	// Job 4 started on the first capacity that was fully free: the node of
	// Job 1's first worker.
	require.Equal(t, grants[1].Grant.Placement[0].Node, grants[2].Grant.Placement[0].Node)

	eventually(t, long, "the seed allocation to be free", func() bool { return allFree(t, "seed") })
}
