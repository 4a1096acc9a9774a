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

	data, err := os.ReadFile(filepath.Join(dir, "notice.json"))
	require.NoError(t, err, "the victim read its notice")
	var n protocol.WorkerNotice
	require.NoError(t, json.Unmarshal(data, &n), string(data))
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
	_, err = os.Stat(filepath.Join(dir, "resumed"))
	assert.NoError(t, err, "the rerun found the checkpoint")
}
