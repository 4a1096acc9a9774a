package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// long is how long a test waits for what should happen in seconds. It bounds
// a wait that would otherwise hang, never a speed: on a busy 2-core machine
// (the tests' own builds, another job beside them) a status query alone has
// taken 30 s, and a 90 s bound failed a test that was right.
const long = 3 * time.Minute

// victimScript runs until SIGTERM on its first attempt, recording that it
// was asked to stop gracefully; later attempts finish at once. Once its trap
// is set it creates dir/ready (see waitVictimReady): a SIGTERM that comes
// before would end it without a record.
func victimScript(dir string) string {
	return `if [ "$TRAINQ_ATTEMPT" = 1 ]; then trap 'echo term >> ` + dir + `/terms; exit 143' TERM; touch ` + dir + `/ready; ` +
		`while true; do sleep 0.05; done; fi; echo "attempt $TRAINQ_ATTEMPT done"`
}

// waitVictimReady waits until a victimScript has set its SIGTERM trap.
func waitVictimReady(t *testing.T, dir string) {
	t.Helper()
	eventually(t, long, "the victim to set its SIGTERM trap", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
}

func TestPreemptedJobRerunsAndCompletes(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	low := submit(t, fixture.Job{Allocation: "preempt", Class: "low", MaxRetry: 1, Script: victimScript(dir)}.Spec())
	waitState(t, low, protocol.StateRunning, long)
	waitVictimReady(t, dir)

	gateHigh := gate(filepath.Join(dir, "high"))
	high := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: gateHigh.waitFor()}.Spec())
	waitState(t, high, protocol.StateRunning, long)
	st := waitState(t, low, protocol.StatePending, long)
	require.Equal(t, 2, st.Attempt)
	require.Equal(t, "term\n", readFile(t, filepath.Join(dir, "terms")), "the victim must get SIGTERM first")

	gateHigh.open(t)
	waitState(t, high, protocol.StateCompleted, long)
	st = waitState(t, low, protocol.StateCompleted, long)
	require.Len(t, st.Attempts, 2)
	require.NotNil(t, st.Attempts[0].Preemptor)
	assert.Equal(t, high, st.Attempts[0].Preemptor.Job)
	assert.Equal(t, "high", st.Attempts[0].Preemptor.Class.String())
	assert.Equal(t, 1, st.Restarts)
	assert.Contains(t, st.Attempts[0].EndReason, "preempted by "+high)
	checkAllocatorHistory(t, "preempt")
}

func TestPreemptedJobWithoutRetriesEndsPreempted(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	low := submit(t, fixture.Job{Allocation: "preempt", Class: "low", Script: victimScript(dir)}.Spec())
	waitState(t, low, protocol.StateRunning, long)
	waitVictimReady(t, dir)
	gateHigh := gate(filepath.Join(dir, "high"))
	high := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: gateHigh.waitFor()}.Spec())

	st := waitState(t, low, protocol.StatePreempted, long)
	require.Len(t, st.Preemptors, 1)
	assert.Equal(t, high, st.Preemptors[0].Job)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(waitResult(t, low), &appErr))
	assert.Equal(t, "JobPreempted", appErr.Type())

	// The CLI says who preempted the job.
	out, _, code := trainq(t, "status", low)
	require.Equal(t, 0, code)
	assert.Contains(t, out, high)

	gateHigh.open(t)
	waitState(t, high, protocol.StateCompleted, long)
	checkAllocatorHistory(t, "preempt")
}

func TestEqualClassNeverPreempts(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	g1, g2 := gate(filepath.Join(dir, "a")), gate(filepath.Join(dir, "b"))
	first := submit(t, fixture.Job{Allocation: "preempt", Class: "medium", Script: g1.waitFor()}.Spec())
	waitState(t, first, protocol.StateRunning, long)
	second := submit(t, fixture.Job{Allocation: "preempt", Class: "medium", Script: g2.waitFor()}.Spec())
	eventually(t, long, "the second job to wait with a reason", func() bool {
		st := status(t, second)
		return st.State == protocol.StatePending && st.Reason != ""
	})
	assert.Equal(t, protocol.StateRunning, status(t, first).State)
	g1.open(t)
	g2.open(t)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, second, protocol.StateCompleted, long)
}

// pidOf reads the pid a script wrote.
func pidOf(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, long, "the job to write its pid", func() bool {
		p, err := strconv.Atoi(strings.TrimSpace(readFile(t, path)))
		pid = p
		return err == nil
	})
	return pid
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func allFree(t *testing.T, allocation string) bool {
	v := queue(t, allocation)
	for _, n := range v.Nodes {
		if n.FreeGPUs != n.GPUs {
			return false
		}
	}
	return len(v.Running) == 0
}

func TestCancelRunningJobStopsProcessesAndFreesGPUs(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	job := submit(t, fixture.Job{GPUs: 1, Script: "echo $$ > " + dir + "/pid; while true; do sleep 0.05; done"}.Spec())
	waitState(t, job, protocol.StateRunning, long)
	pid := pidOf(t, filepath.Join(dir, "pid"))

	out, errOut, code := trainq(t, "cancel", job)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, job)
	waitState(t, job, protocol.StateStopped, long)
	assert.True(t, processGone(pid), "the job's process must be gone")
	// The Web UI and `trainq list` see the final state too.
	eventually(t, long, "the Stopped state in the search attributes", func() bool {
		return describe(t, job).TypedSearchAttributes.GetUntypedValues()[protocol.KeyState] == "Stopped"
	})
	eventually(t, long, "the basic allocation to be free", func() bool { return allFree(t, "basic") })

	// Cancelling again is harmless.
	_, errOut, code = trainq(t, "cancel", job)
	assert.Equal(t, 0, code, errOut)
}

// TestCancelWaitingJobWithdrawsItsRequest: a job cancelled while it waits
// leaves the allocator's queue (its withdrawal comes as an update) and the
// capacity it waited for goes to the job behind it.
func TestCancelWaitingJobWithdrawsItsRequest(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	g := gate(filepath.Join(dir, "go"))
	blocker := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: g.waitFor()}.Spec())
	waitState(t, blocker, protocol.StateRunning, long)
	cancelled := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: "echo never"}.Spec())
	next := submit(t, fixture.Job{Allocation: "preempt", Class: "medium", Script: "echo next ran"}.Spec())
	eventually(t, long, "both jobs to wait", func() bool { return len(waitingJobs(queue(t, "preempt"))) == 2 })

	_, errOut, code := trainq(t, "cancel", cancelled)
	require.Equal(t, 0, code, errOut)
	waitState(t, cancelled, protocol.StateStopped, long)
	eventually(t, long, "the cancelled job to leave the queue", func() bool {
		return !slices.Contains(waitingJobs(queue(t, "preempt")), cancelled)
	})
	withdrawn := false
	updates := updateInputs{}
	for _, e := range fetchChainHistory(t, protocol.AllocatorWorkflowID("T", "preempt")) {
		updates.admitted(e)
		if in := updates.accepted(e); in.GetName() == protocol.UpdateWithdraw {
			var w protocol.WithdrawSignal
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(in.GetArgs(), &w))
			withdrawn = withdrawn || w.Job == cancelled
		}
	}
	assert.True(t, withdrawn, "the withdrawal should have come as an update")

	g.open(t)
	waitState(t, next, protocol.StateCompleted, long)
	assert.Empty(t, status(t, cancelled).Attempts[0].StartedAt, "a job cancelled while it waited starts nothing")
	checkAllocatorHistory(t, "preempt")
}

func TestWorkerRestartMidJob(t *testing.T) {
	w := startWorker(t)
	dir := t.TempDir()
	g := gate(filepath.Join(dir, "go"))
	job := submit(t, fixture.Job{GPUs: 1, Script: "echo started >> " + dir + "/starts; echo $$ > " + dir + "/pid; " + g.waitFor() + "; echo finished"}.Spec())
	waitState(t, job, protocol.StateRunning, long)
	pid := pidOf(t, filepath.Join(dir, "pid"))

	w.Kill()
	require.False(t, processGone(pid), "the job must outlive a crashed trainq-worker")
	g.open(t) // the job finishes while no worker watches it
	eventually(t, long, "the job's process to end", func() bool { return processGone(pid) })

	startWorker(t)
	waitState(t, job, protocol.StateCompleted, 2*long)
	assert.Equal(t, "started\n", readFile(t, filepath.Join(dir, "starts")), "the job must have run exactly once")
	eventually(t, long, "the basic allocation to be free", func() bool { return allFree(t, "basic") })
}

func TestTerminatedJobIsReclaimed(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	job := submit(t, fixture.Job{GPUs: 1, Script: "echo $$ > " + dir + "/pid; while true; do sleep 0.05; done"}.Spec())
	waitState(t, job, protocol.StateRunning, long)
	pid := pidOf(t, filepath.Join(dir, "pid"))
	before := queue(t, "basic").Counters.Reclaimed

	cmd := exec.Command(os.Getenv("TRAINQ_TEMPORAL_BIN_RESOLVED"), "workflow", "terminate", "--address", env.hostPort,
		"--workflow-id", job, "--reason", "test: terminated from the CLI")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))

	// The node agent may report the stopped worker's exit (and so free its
	// GPUs) before the reclaim's own stop activity returns and is counted:
	// wait for both.
	eventually(t, long, "the terminated job's GPUs to be reclaimed", func() bool {
		return allFree(t, "basic") && queue(t, "basic").Counters.Reclaimed >= before+1
	})
	assert.True(t, processGone(pid), "the terminated job's process must be stopped")
	assert.Equal(t, before+1, queue(t, "basic").Counters.Reclaimed, "one reclaim, counted once")
}
