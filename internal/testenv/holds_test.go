package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is t0 plus s seconds, as a record's unix-nanos field.
func at(s float64) string {
	return strconv.FormatInt(t0.Add(time.Duration(s*float64(time.Second))).UnixNano(), 10)
}

func records(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func check(t *testing.T, text string, exit ExitTime, end float64) HoldReport {
	t.Helper()
	evs, anomalies, err := ParseHoldRecords(strings.NewReader(text))
	require.NoError(t, err)
	if exit == nil {
		exit = func(WorkerKey) (time.Time, bool) { return time.Time{}, false }
	}
	rep := CheckHolds(evs, exit, t0.Add(time.Duration(end*float64(time.Second))))
	rep.Anomalies = append(anomalies, rep.Anomalies...)
	return rep
}

func TestCheckHoldsCleanRecords(t *testing.T) {
	rep := check(t, records(
		"start j1 1 0 n1 0,1 "+at(0),
		"start j1 1 1 n2 0 "+at(0.1),
		"end j1 1 0 n1 0,1 "+at(5),
		"end j1 1 1 n2 0 "+at(5),
		// The next holder of GPU 1 of n1 starts right when j1 ended: no overlap.
		"start j2 1 0 n1 1,2 "+at(5),
		"end j2 1 0 n1 1,2 "+at(7),
		// A rerun of j1 on the same GPUs after its first attempt ended.
		"start j1 2 0 n1 0,1 "+at(8),
		"end j1 2 0 n1 0,1 "+at(9),
	), nil, 100)
	assert.Len(t, rep.Holds, 4)
	assert.Empty(t, rep.Overlaps)
	assert.Empty(t, rep.Duplicates)
	assert.Empty(t, rep.Unended)
	assert.Empty(t, rep.Anomalies)
}

func TestCheckHoldsFindsOverlaps(t *testing.T) {
	rep := check(t, records(
		"start a 1 0 n1 0,1,2 "+at(0),
		"start b 1 0 n1 2,3 "+at(3), // GPU 2 is still a's
		"start c 1 0 n2 2 "+at(3),   // another node: no overlap
		"start d 1 0 n1 3 "+at(9),   // GPU 3 is still b's
		"end a 1 0 n1 0,1,2 "+at(4),
		"end c 1 0 n2 2 "+at(5),
		"end b 1 0 n1 2,3 "+at(10),
		"end d 1 0 n1 3 "+at(11),
	), nil, 100)
	require.Len(t, rep.Overlaps, 2)
	o := rep.Overlaps[0]
	assert.Equal(t, "n1", o.Node)
	assert.Equal(t, []int{2}, o.GPUs)
	assert.Equal(t, "a", o.A.Key.Job)
	assert.Equal(t, "b", o.B.Key.Job)
	assert.Equal(t, time.Second, overlapLength(o.A, o.B))
	assert.Equal(t, "b", rep.Overlaps[1].A.Key.Job)
	assert.Equal(t, "d", rep.Overlaps[1].B.Key.Job)
	assert.Contains(t, o.String(), "n1 GPU [2]: a attempt 1 worker 0")
	assert.Empty(t, rep.Duplicates)
}

func TestCheckHoldsOverlapOnSeveralGPUsIsOnePair(t *testing.T) {
	rep := check(t, records(
		"start a 1 0 n1 0,1,2,3 "+at(0),
		"start b 1 0 n1 0,1 "+at(1),
		"end b 1 0 n1 0,1 "+at(2),
		"end a 1 0 n1 0,1,2,3 "+at(3),
	), nil, 100)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, []int{0, 1}, rep.Overlaps[0].GPUs)
}

func TestCheckHoldsFindsDuplicateAttempts(t *testing.T) {
	rep := check(t, records(
		"start j 2 1 n1 0 "+at(0),
		"end j 2 1 n1 0 "+at(1),
		"start j 2 1 n3 1 "+at(2), // the same worker of the same attempt again
		"end j 2 1 n3 1 "+at(3),
		"start j 3 1 n1 0 "+at(4), // another attempt: fine
		"end j 3 1 n1 0 "+at(5),
	), nil, 100)
	require.Len(t, rep.Duplicates, 1)
	d := rep.Duplicates[0]
	assert.Equal(t, WorkerKey{Job: "j", Attempt: 2, Worker: 1}, d.Key)
	assert.Len(t, d.Starts, 2)
	assert.Contains(t, d.String(), "j attempt 2 worker 1 started 2 times")
	assert.Len(t, rep.Holds, 3, "both runs are holds")
	assert.Empty(t, rep.Overlaps)
	assert.Empty(t, rep.Anomalies)
}

func TestCheckHoldsMissingEndLine(t *testing.T) {
	// k1 was killed (no end line) but the backend recorded its exit at 4s;
	// k2 has neither, so it holds until the end of the test (60s) and the
	// later holder of its GPU overlaps it.
	exits := map[WorkerKey]time.Time{{Job: "k1", Attempt: 1, Worker: 0}: t0.Add(4 * time.Second)}
	exit := func(k WorkerKey) (time.Time, bool) { e, ok := exits[k]; return e, ok }
	rep := check(t, records(
		"start k1 1 0 n1 0 "+at(0),
		"start next1 1 0 n1 0 "+at(5), // after k1's recorded exit: fine
		"end next1 1 0 n1 0 "+at(6),
		"start k2 1 0 n2 0 "+at(0),
		"start next2 1 0 n2 0 "+at(30),
		"end next2 1 0 n2 0 "+at(31),
	), exit, 60)
	require.Len(t, rep.Unended, 2)
	srcs := map[string]string{}
	for _, h := range rep.Unended {
		srcs[h.Key.Job] = h.EndSource
	}
	assert.Equal(t, map[string]string{"k1": EndExitFile, "k2": EndTestEnd}, srcs)
	require.Len(t, rep.Overlaps, 1)
	assert.Equal(t, "k2", rep.Overlaps[0].A.Key.Job)
	assert.Equal(t, "next2", rep.Overlaps[0].B.Key.Job)
}

func TestCheckHoldsAnomalies(t *testing.T) {
	rep := check(t, records(
		"start x 1 0 n1 0",           // too few fields
		"begin x 1 0 n1 0 "+at(0),    // unknown kind
		"start x one 0 n1 0 "+at(0),  // bad attempt
		"start x 1 0 n1 a,b "+at(0),  // bad GPU list
		"end orphan 1 0 n1 0 "+at(1), // end without start
		"start y 1 0 n1 1 "+at(2),    //
		"end y 1 0 n2 1 "+at(3),      // ended on another node
		"start z 1 0 n1 2 "+at(5),    //
		"end z 1 0 n1 2 "+at(4),      // end before start...
		"end z 1 0 n1 2 "+at(6),      // ...then the real end
		"",                           // blank lines are ignored
	), nil, 100)
	joined := strings.Join(rep.Anomalies, "\n")
	assert.Len(t, rep.Anomalies, 8, joined)
	for _, want := range []string{"want 7 fields", `kind "begin"`, `"one"`, `GPU index "a"`,
		"orphan attempt 1 worker 0 ended without a start line", "ended on n2 GPUs [1] but started on n1",
		"z attempt 1 worker 0 has 2 end lines for 1 start lines", "z attempt 1 worker 0 ended before it started"} {
		assert.Contains(t, joined, want)
	}
	assert.Empty(t, rep.Unended, "z pairs with its later end line")
}

func TestExitTimesReadsTheBackendsExitRecord(t *testing.T) {
	dataDir := t.TempDir()
	k := WorkerKey{Job: "j", Attempt: 2, Worker: 1}
	dir := WorkerDir(dataDir, k)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ended := t0.Add(90 * time.Second)
	b, _ := json.Marshal(map[string]any{"exit_code": 137, "ended_at": ended, "killed": true})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exit.json"), b, 0o644))
	got, ok := ExitTimes(dataDir)(k)
	require.True(t, ok)
	assert.True(t, got.Equal(ended))
	_, ok = ExitTimes(dataDir)(WorkerKey{Job: "j", Attempt: 1, Worker: 1})
	assert.False(t, ok)
}

func TestLiveWorkersSeesALeftoverProcessGroup(t *testing.T) {
	dataDir := t.TempDir()
	k := WorkerKey{Job: "j", Attempt: 1, Worker: 0}
	dir := WorkerDir(dataDir, k)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	// A group leader that exits at once, leaving a child in its group: the
	// group is alive though its leader is gone.
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprintf("%d\n", pgid)), 0o644))

	live, err := LiveWorkers(dataDir)
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.Equal(t, k, live[0].Key)
	assert.Equal(t, []int{child}, live[0].PIDs)

	KillWorkerGroups(live)
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, err = LiveWorkers(dataDir)
		require.NoError(t, err)
		if len(live) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Empty(t, live)
}
