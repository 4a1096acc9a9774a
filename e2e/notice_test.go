package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
)

// TestPreemptionNoticeLetsTheVictimSaveAndExit, with real processes: on
// allocation notice (preemption_notice 30s) a low job waits for its notice
// (`trainq notice --wait`), saves a checkpoint and exits; the high job that preempted it
// starts before the notice's deadline; the low job's rerun resumes from the
// checkpoint; the exit counts as a preemption, not a failure.
func TestPreemptionNoticeLetsTheVictimSaveAndExit(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	victimScript := `if [ -e ` + dir + `/checkpoint ]; then echo resumed > ` + dir + `/resumed; exit 0; fi; ` +
		filepath.Join(env.binDir, "trainq") + ` notice --wait -o json > ` + dir + `/notice.json; ` +
		`echo step-42 > ` + dir + `/checkpoint; exit 0`
	victim := submit(t, protocol.JobSpec{Script: victimScript, InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "low", NWorkers: 1, Type: "binary", MaxRetry: 1})
	waitState(t, victim, protocol.StateRunning, long)
	high := submit(t, protocol.JobSpec{Script: "sleep 0.5", InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	hs := waitState(t, high, protocol.StateCompleted, long)
	vs := waitState(t, victim, protocol.StateCompleted, long)

	n := readWorkerNotice(t, filepath.Join(dir, "notice.json"))
	assert.Equal(t, protocol.NoticeReasonPreempted, n.Reason)
	require.NotNil(t, n.By)
	assert.Equal(t, "high", n.By.Class)
	assert.Equal(t, victim, n.Job)
	assert.Equal(t, 1, n.Attempt)
	require.NotNil(t, hs.RunningAt)
	assert.True(t, hs.RunningAt.Before(n.Deadline), "the preemptor started at %s, before the notice's deadline %s", hs.RunningAt, n.Deadline)

	assert.Equal(t, 1, vs.Restarts, "exiting on the notice is a preemption")
	require.Len(t, vs.Attempts, 2)
	first := vs.Attempts[0]
	require.NotNil(t, first.NoticeDeadline)
	assert.WithinDuration(t, n.Deadline, *first.NoticeDeadline, time.Millisecond)
	assert.Contains(t, first.EndReason, "its workers exited on the notice")
	require.NotNil(t, first.Preemptor)
	assert.Equal(t, high, first.Preemptor.Job)
	_, err := os.Stat(filepath.Join(dir, "resumed"))
	assert.NoError(t, err, "the rerun found the checkpoint")
}

// TestCancelGivesANoticeThenTheJobStops, with real processes: on
// allocation notice a cancelled job's worker is told (reason cancelled, no
// preemptor), saves and exits before the deadline; the job ends Stopped
// without a rerun, and its attempt shows how early it let go.
func TestCancelGivesANoticeThenTheJobStops(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	script := filepath.Join(env.binDir, "trainq") + ` notice --wait -o json > ` + dir + `/notice.json; echo saved > ` + dir + `/saved; exit 0`
	job := submit(t, protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "medium", NWorkers: 1, Type: "binary", MaxRetry: 2})
	waitState(t, job, protocol.StateRunning, long)
	trainq(t, "cancel", job)
	st := waitState(t, job, protocol.StateStopped, long)

	n := readWorkerNotice(t, filepath.Join(dir, "notice.json"))
	assert.Equal(t, protocol.NoticeReasonCancelled, n.Reason)
	assert.Nil(t, n.By, "a cancel has no preemptor")
	require.Len(t, st.Attempts, 1, "a cancelled job is not rerun")
	a := st.Attempts[0]
	assert.Equal(t, protocol.NoticeReasonCancelled, a.NoticeReason)
	require.NotNil(t, a.NoticeDeadline)
	assert.WithinDuration(t, n.Deadline, *a.NoticeDeadline, time.Millisecond)
	require.NotNil(t, a.ExitedOnNoticeAt, "the worker exited on its notice")
	assert.True(t, a.ExitedOnNoticeAt.Before(n.Deadline))
	assert.Contains(t, a.EndReason, "stopped by the user; its workers exited on the notice")
	_, err := os.Stat(filepath.Join(dir, "saved"))
	assert.NoError(t, err, "the worker saved before it exited")

	out, _, _ := trainq(t, "status", job)
	assert.Contains(t, out, "cancelled, exited")
}

// TestTimeLimitNoticeComesWithTheSignal, with real processes: on
// allocation signal (notice 30s, 20s for medium, notice_signal SIGUSR1) a
// medium job that reaches its time limit gets SIGUSR1 with its notice
// already in place (reason time_limit, medium's 20 s), saves and exits; the
// job ends Stopped by its time limit.
func TestTimeLimitNoticeComesWithTheSignal(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	script := `trap 'cat "$TRAINQ_NOTICE_FILE" > ` + dir + `/notice.json; exit 0' USR1; ` +
		`while true; do sleep 0.1; done`
	job := submit(t, protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "signal",
		PriorityClass: "medium", NWorkers: 1, Type: "binary", TimeLimit: 3 * time.Second})
	st := waitState(t, job, protocol.StateStopped, long)

	n := readWorkerNotice(t, filepath.Join(dir, "notice.json"))
	assert.Equal(t, protocol.NoticeReasonTimeLimit, n.Reason)
	require.Len(t, st.Attempts, 1)
	a := st.Attempts[0]
	require.NotNil(t, a.NoticedAt)
	assert.Equal(t, 20*time.Second, n.Deadline.Sub(*a.NoticedAt).Round(time.Millisecond), "medium's own notice")
	require.NotNil(t, a.ExitedOnNoticeAt, "the signal's handler exited")
	assert.True(t, a.ExitedOnNoticeAt.Before(n.Deadline))
	assert.Contains(t, a.EndReason, "stop_timer")
}

func readWorkerNotice(t *testing.T, path string) protocol.WorkerNotice {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "the worker read its notice")
	var n protocol.WorkerNotice
	require.NoError(t, json.Unmarshal(data, &n), string(data))
	return n
}
