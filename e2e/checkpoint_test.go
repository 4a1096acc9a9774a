package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// checkpointingScript reports a checkpoint from inside the worker with a bare
// `trainq checkpoint` (the job and attempt come from the worker's
// environment) once the gate `ckpt` opens, then waits for the gate `done`.
func checkpointingScript(dir string) string {
	cli := filepath.Join(env.binDir, "trainq")
	ckpt, done := gate(filepath.Join(dir, "ckpt")), gate(filepath.Join(dir, "done"))
	return fmt.Sprintf(`%s; %q checkpoint --output json > %q 2>&1; touch %q; %s`,
		ckpt.waitFor(), cli, filepath.Join(dir, "reply.json"), filepath.Join(dir, "reported"), done.waitFor())
}

// waitCheckpointReply opens the job's `ckpt` gate and returns what its
// `trainq checkpoint` printed.
func waitCheckpointReply(t *testing.T, dir string) protocol.CheckpointReply {
	t.Helper()
	gate(filepath.Join(dir, "ckpt")).open(t)
	eventually(t, long, "the worker to report its checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(dir, "reported"))
		return err == nil
	})
	out := readFile(t, filepath.Join(dir, "reply.json"))
	var reply protocol.CheckpointReply
	require.NoError(t, json.Unmarshal([]byte(out), &reply), "trainq checkpoint printed %q", out)
	return reply
}

// A worker reports a checkpoint; the allocator books it on the running attempt
// with its own clock, and refuses reports for another attempt or a job that
// no longer runs, in plain sentences.
func TestCheckpointReportedFromTheWorker(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	job := submit(t, protocol.JobSpec{Script: checkpointingScript(dir), InstanceType: "a100.1gpu", Region: "T",
		AllocationName: "basic", NWorkers: 1, Type: "binary"})
	waitState(t, job, protocol.StateRunning, long)

	reply := waitCheckpointReply(t, dir)
	assert.Equal(t, job, reply.Job)
	assert.Equal(t, 1, reply.Attempt)
	require.False(t, reply.At.IsZero())
	var booked bool
	for _, r := range queue(t, "basic").Running {
		if r.Job == job {
			booked = r.CheckpointAt.Equal(reply.At)
		}
	}
	assert.True(t, booked, "the queue must show the checkpoint on the running job")

	_, stderr, code := trainq(t, "checkpoint", job, "--attempt", "5")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, fmt.Sprintf("job %s runs attempt 1, not attempt 5", job))

	gate(filepath.Join(dir, "done")).open(t)
	waitState(t, job, protocol.StateCompleted, long)
	_, stderr, code = trainq(t, "checkpoint", job)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is Completed, not running")
}

// Of two equal-class victims, the one that checkpointed after the other
// started loses less work and is preempted, although it started first.
func TestCheckpointedJobIsTheCheaperVictim(t *testing.T) {
	startWorker(t)
	older, newer := t.TempDir(), t.TempDir()
	lowSpec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: "preempt", Class: "low", GPUs: 1}.Spec()
	}
	first := submit(t, lowSpec(checkpointingScript(older)))
	st := waitState(t, first, protocol.StateRunning, long)
	waitPast(*st.RunningAt, 2*time.Second)
	second := submit(t, lowSpec(gate(filepath.Join(newer, "done")).waitFor()))
	st = waitState(t, second, protocol.StateRunning, long)
	waitPast(*st.RunningAt, 2*time.Second)
	waitCheckpointReply(t, older)

	high := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.1gpu", Region: "T", AllocationName: "preempt",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	st = waitState(t, first, protocol.StatePreempted, long)
	require.NotNil(t, st.Attempts[0].Preemptor)
	assert.Equal(t, high, st.Attempts[0].Preemptor.Job)
	waitState(t, high, protocol.StateCompleted, long)
	assert.Equal(t, protocol.StateRunning, status(t, second).State, "the job without a checkpoint must keep running")
	gate(filepath.Join(newer, "done")).open(t)
	waitState(t, second, protocol.StateCompleted, long)
}

// waitPast lets the clock pass at+d. Work lost is counted in whole seconds, so
// two jobs started in the same second tie, and the job id would decide: the
// test needs real time between the starts and the checkpoint.
func waitPast(at time.Time, d time.Duration) {
	time.Sleep(time.Until(at.Add(d)))
}
