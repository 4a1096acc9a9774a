package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// The worked example of docs/configuration.md's preemption notice section,
// examples/train_on_notice.py, and what it prints.
var (
	exampleStart   = regexp.MustCompile(`(?m)^attempt 1: starting from scratch, (\d+) steps to go$`)
	exampleNotice  = regexp.MustCompile(`(?m)^notice: (\w+) by a (\w+) (\w+), deadline (\S+) \(`)
	exampleSaved   = regexp.MustCompile(`(?m)^saved checkpoint at step (\d+) \(notice\) to (\S+)$`)
	exampleExit    = regexp.MustCompile(`(?m)^exiting at step (\d+), (-?[\d.]+)s before the deadline`)
	exampleResumed = regexp.MustCompile(`(?m)^attempt 2: resumed at step (\d+) \(saved by attempt 1 on notice\)$`)
	exampleDone    = regexp.MustCompile(`(?m)^training done at step (\d+):`)
)

func examplePath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "examples", "train_on_notice.py"))
	require.NoError(t, err)
	return p
}

// attemptLog is what `trainq logs --attempt n` prints for the job.
func attemptLog(t *testing.T, job string, n int) string {
	t.Helper()
	out, errOut, code := trainq(t, "logs", job, "--attempt", strconv.Itoa(n))
	require.Equal(t, 0, code, errOut)
	return out
}

// submatch is re's first match in s and its groups; when there is none it
// fails the test and returns empty strings, so that the checks after it
// still say what they can.
func submatch(t *testing.T, re *regexp.Regexp, s, what string) []string {
	t.Helper()
	m := re.FindStringSubmatch(s)
	if m == nil {
		assert.Fail(t, what, "no line matching %s in the log:\n%s", re, s)
		return make([]string, re.NumSubexp()+1)
	}
	return m
}

// cancelIfFailed cancels the jobs when the test fails, so that what is left
// of them cannot disturb the next test on the same allocation.
func cancelIfFailed(t *testing.T, jobs ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, j := range jobs {
			_ = tqclient.New(env.client, nil).Cancel(ctx, j)
		}
	})
}

// TestNoticeExampleSavesExitsAndResumes plays docs/configuration.md's worked example with
// real processes on allocation notice (preemption_notice 30s): the example
// runs as a low job, checkpointing every 50 steps; a high job preempts it;
// the example reads its notice (reason preempted, the deadline the attempt
// records), saves, reports the checkpoint and exits at once; the preemptor
// starts long before the deadline; the first attempt is a preemption ended
// "on the notice"; the rerun resumes at exactly the step the notice's save
// wrote, not at an earlier periodic one, and trains to the end.
func TestNoticeExampleSavesExitsAndResumes(t *testing.T) {
	startWorker(t)
	const total = 600
	victim := submit(t, protocol.JobSpec{Script: examplePath(t), InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "low", NWorkers: 1, Type: "pytorch2", MaxRetry: 1,
		Flags: map[string]string{"epochs": "4", "steps-per-epoch": "150", "step-seconds": "0.02", "checkpoint-every": "50"},
		// client_lib reads the notice here; TestNoticeExampleStandalone runs the standard-library path too.
		EnvVariables: map[string]string{"TRAINQ_CLI": filepath.Join(env.binDir, "trainq"),
			"PYTHONPATH": filepath.Join(filepath.Dir(filepath.Dir(examplePath(t))), "python", "client_lib")}})
	cancelIfFailed(t, victim)
	waitState(t, victim, protocol.StateRunning, long)
	// The first periodic checkpoint is saved and reported: the victim trains.
	eventually(t, long, "the example's first periodic checkpoint", func() bool {
		out, _, _ := trainq(t, "logs", victim)
		return strings.Contains(out, "saved checkpoint at step 50 (every 50 steps)") && strings.Contains(out, "trainq checkpoint: Checkpoint of "+victim)
	})
	high := submit(t, protocol.JobSpec{Script: "sleep 0.5", InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	cancelIfFailed(t, high)
	hs := waitState(t, high, protocol.StateCompleted, long)
	vs := waitState(t, victim, protocol.StateCompleted, long)

	// What trainq recorded.
	require.Len(t, vs.Attempts, 2)
	a1 := vs.Attempts[0]
	require.NotNil(t, a1.NoticeDeadline, "the first attempt records its notice's deadline")
	deadline := *a1.NoticeDeadline
	require.NotNil(t, hs.RunningAt)
	assert.True(t, hs.RunningAt.Before(deadline.Add(-20*time.Second)),
		"the preemptor started at %s: on the victim's exit, not at the notice's deadline %s", hs.RunningAt, deadline)
	require.NotNil(t, a1.EndedAt)
	assert.True(t, a1.EndedAt.Before(deadline.Add(-20*time.Second)), "the first attempt ended at %s, not well before the deadline %s", a1.EndedAt, deadline)
	assert.Contains(t, a1.EndReason, "preempted by "+high)
	assert.Contains(t, a1.EndReason, "its workers exited on the notice")
	require.NotNil(t, a1.Preemptor)
	assert.Equal(t, high, a1.Preemptor.Job)
	assert.Equal(t, 1, vs.Restarts, "exiting on the notice is a preemption, and the job reran")

	// What the example printed: its first attempt read the notice, saved and exited...
	first := attemptLog(t, victim, 1)
	assert.Equal(t, strconv.Itoa(total), submatch(t, exampleStart, first, "the first attempt starts from scratch")[1])
	assert.Contains(t, first, "watching for a notice at $TRAINQ_NOTICE_FILE with client_lib.preemption_notice()")
	n := submatch(t, exampleNotice, first, "the example printed its notice")
	assert.Equal(t, []string{protocol.NoticeReasonPreempted, "high", "job"}, n[1:4], "reason, the preemptor's class and kind")
	printedDeadline, err := time.Parse(time.RFC3339Nano, n[4])
	assert.NoError(t, err)
	assert.WithinDuration(t, deadline, printedDeadline, time.Millisecond, "the example read the deadline trainq set")
	saved := submatch(t, exampleSaved, first, "the example saved on the notice")[1]
	step, _ := strconv.Atoi(saved)
	assert.Greater(t, step, 50, "the notice came after the first periodic checkpoint")
	assert.Less(t, step, total, "the notice came before the training ended")
	exit := submatch(t, exampleExit, first, "the example exited on the notice")
	assert.Equal(t, saved, exit[1], "it exited at the step it saved")
	left, _ := strconv.ParseFloat(exit[2], 64)
	assert.Greater(t, left, 20.0, "the example exited well before the 30s deadline")

	// ... and its rerun resumed at that step.
	second := attemptLog(t, victim, 2)
	resumed := submatch(t, exampleResumed, second, "the rerun resumed from the notice's checkpoint")
	assert.Equal(t, saved, resumed[1], "the rerun resumed at the step the first attempt saved on its notice")
	assert.NotContains(t, second, "starting from scratch")
	assert.Equal(t, strconv.Itoa(total), submatch(t, exampleDone, second, "the rerun trained to the end")[1])
}

// TestNoticeIgnoredStopsTheWorkerAtTheDeadline: a worker that does not read
// its notice (it sleeps, and records when SIGTERM comes) is stopped at the
// notice's deadline as without a notice: SIGTERM comes at the deadline, not
// before, the preemptor starts only after it, and the attempt is a
// preemption (not "exited on the notice") after which the job reruns.
func TestNoticeIgnoredStopsTheWorkerAtTheDeadline(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	started, sigterm, noticeCopy := filepath.Join(dir, "started"), filepath.Join(dir, "sigterm"), filepath.Join(dir, "notice.json")
	script := fmt.Sprintf(`if [ "$TRAINQ_ATTEMPT" != 1 ]; then echo rerun; exit 0; fi
trap 'date +%%s%%N > %[1]q; cp "$TRAINQ_NOTICE_FILE" %[2]q; exit 0' TERM
touch %[3]q
sleep 600 & wait`, sigterm, noticeCopy, started)
	victim := submit(t, protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "low", NWorkers: 1, Type: "binary", MaxRetry: 1})
	cancelIfFailed(t, victim)
	waitState(t, victim, protocol.StateRunning, long)
	eventually(t, long, "the victim's script to set its SIGTERM trap", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	high := submit(t, protocol.JobSpec{Script: "sleep 0.5", InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	cancelIfFailed(t, high)
	hs := waitState(t, high, protocol.StateCompleted, long)
	vs := waitState(t, victim, protocol.StateCompleted, long)

	require.Len(t, vs.Attempts, 2)
	a1 := vs.Attempts[0]
	require.NotNil(t, a1.NoticeDeadline, "the first attempt was given a notice")
	deadline := *a1.NoticeDeadline

	// What trainq recorded: a preemption, stopped at the deadline, then a rerun.
	require.NotNil(t, a1.EndedAt)
	assert.False(t, a1.EndedAt.Before(deadline), "the first attempt ended at %s, before the deadline %s", a1.EndedAt, deadline)
	require.NotNil(t, hs.RunningAt)
	assert.False(t, hs.RunningAt.Before(deadline), "the preemptor started at %s, before the deadline %s", hs.RunningAt, deadline)
	assert.Contains(t, a1.EndReason, "preempted by "+high)
	assert.NotContains(t, a1.EndReason, "on the notice", "the worker did not exit on its notice")
	require.NotNil(t, a1.Preemptor)
	assert.Equal(t, high, a1.Preemptor.Job)
	assert.Equal(t, 1, vs.Restarts, "the stop at the deadline is a preemption, and the job reran")
	assert.Regexp(t, `(?m)^rerun$`, attemptLog(t, victim, 2))

	// What the worker saw: its notice, then SIGTERM at the deadline, and only then did the preemptor start.
	data, err := os.ReadFile(noticeCopy)
	if assert.NoError(t, err, "the notice file was there when SIGTERM came") {
		var n protocol.WorkerNotice
		require.NoError(t, json.Unmarshal(data, &n), string(data))
		assert.Equal(t, protocol.NoticeReasonPreempted, n.Reason)
		assert.WithinDuration(t, deadline, n.Deadline, time.Millisecond)
	}
	raw := strings.TrimSpace(readFile(t, sigterm))
	ns, err := strconv.ParseInt(raw, 10, 64)
	require.NoError(t, err, "the trap recorded when SIGTERM came: %q", raw)
	termAt := time.Unix(0, ns)
	assert.False(t, termAt.Before(deadline), "SIGTERM came at %s, before the notice's deadline %s", termAt, deadline)
	assert.Less(t, termAt.Sub(deadline), 10*time.Second, "SIGTERM came at %s, long after the deadline %s", termAt, deadline)
	assert.True(t, hs.RunningAt.After(termAt), "the preemptor started at %s, before the victim was stopped at %s", hs.RunningAt, termAt)
}

// TestNoticeExampleStandalone runs examples/train_on_notice.py as a process,
// outside trainq, with both of its notice readers (client_lib and the
// standard library): a notice file as trainq writes it (Go's JSON, a
// nanosecond deadline) makes it save and exit 0 at once; the next run
// resumes at that step; SIGTERM makes it save before it exits.
func TestNoticeExampleStandalone(t *testing.T) {
	clientLib, err := filepath.Abs(filepath.Join("..", "python", "client_lib"))
	require.NoError(t, err)
	for _, reader := range []struct{ name, pythonPath, says string }{
		{"stdlib", "", "the standard library"},
		{"client_lib", clientLib, "client_lib.preemption_notice()"},
	} {
		t.Run(reader.name, func(t *testing.T) {
			dir := t.TempDir()
			noticeFile := filepath.Join(dir, "notice.json")
			run := func(attempt int, extra ...string) *exec.Cmd {
				cmd := exec.Command("python3", append([]string{examplePath(t), "--epochs", "2", "--steps-per-epoch", "1000", "--step-seconds", "0.01", "--checkpoint-every", "0"}, extra...)...)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+reader.pythonPath, "TRAINQ_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"),
					"TRAINQ_NOTICE_FILE="+noticeFile, "TRAINQ_ATTEMPT="+strconv.Itoa(attempt), "TRAINQ_JOB_NAME=") // no trainq to report to
				return cmd
			}
			deadline := time.Now().Add(30 * time.Second)
			data, err := json.Marshal(protocol.WorkerNotice{Reason: protocol.NoticeReasonPreempted, Deadline: deadline, Job: "j", Attempt: 1,
				By: &protocol.NoticeBy{Class: "high", Kind: "job"}})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(noticeFile, data, 0o644))

			out, errOut, code := runCommand(t, run(1))
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, out, "watching for a notice at $TRAINQ_NOTICE_FILE with "+reader.says)
			n := submatch(t, exampleNotice, out, "the notice")
			printed, err := time.Parse(time.RFC3339Nano, n[4])
			require.NoError(t, err)
			assert.WithinDuration(t, deadline, printed, time.Microsecond)
			assert.Equal(t, "0", submatch(t, exampleSaved, out, "the save on the notice")[1], "a notice before the first step")

			// Without the notice it resumes and trains; SIGTERM makes it save and exit.
			require.NoError(t, os.Remove(noticeFile))
			logPath := filepath.Join(dir, "attempt-2.log")
			logf, err := os.Create(logPath)
			require.NoError(t, err)
			defer logf.Close()
			cmd := run(2)
			cmd.Stdout, cmd.Stderr = logf, logf
			require.NoError(t, cmd.Start())
			eventually(t, 20*time.Second, "the example to resume and train", func() bool { return strings.Contains(readFile(t, logPath), "step 1/2000") })
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, cmd.Wait(), "exit 0 after SIGTERM:\n%s", readFile(t, logPath))
			out = readFile(t, logPath)
			assert.Contains(t, out, "attempt 2: resumed at step 0 (saved by attempt 1 on notice)")
			term := submatch(t, regexp.MustCompile(`(?m)^SIGTERM at step (\d+): saving as a last chance\n`+
				`saved checkpoint at step (\d+) \(SIGTERM\)`), out, "the save on SIGTERM")
			assert.Equal(t, term[1], term[2])

			out, errOut, code = runCommand(t, run(3, "--step-seconds", "0"))
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, out, "attempt 3: resumed at step "+term[1]+" (saved by attempt 2 on SIGTERM)")
			assert.Equal(t, "2000", submatch(t, exampleDone, out, "the last run trains to the end")[1])
		})
	}
}
