package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// The test binary doubles as the supervisor (TRAINQ_TEST_SUPERVISE=1, the
// worker directory as last argument) and as a short-lived "trainq-worker"
// that starts one worker and exits (TRAINQ_TEST_START=<data dir>, spec JSON
// in TRAINQ_TEST_SPEC), to test re-attaching from another process.
func TestMain(m *testing.M) {
	if os.Getenv("TRAINQ_TEST_SUPERVISE") == "1" {
		os.Exit(Supervise(os.Args[len(os.Args)-1]))
	}
	if dir := os.Getenv("TRAINQ_TEST_START"); dir != "" {
		os.Exit(startHelper(dir, os.Getenv("TRAINQ_TEST_SPEC")))
	}
	os.Exit(m.Run())
}

func startHelper(dataDir, specJSON string) int {
	var spec cluster.WorkerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	b, err := New(testOptions(dataDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := b.Start(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println(st.PID)
	return 0
}

func testOptions(dataDir string) Options {
	return Options{
		DataDir:        dataDir,
		SupervisorArgv: []string{"/usr/bin/env", "TRAINQ_TEST_SUPERVISE=1", os.Args[0]},
		PollInterval:   20 * time.Millisecond,
		SiblingGrace:   2 * time.Second,
	}
}

func newBackend(t *testing.T, dataDir string) *Backend {
	t.Helper()
	b, err := New(testOptions(dataDir))
	require.NoError(t, err)
	return b
}

func binarySpec(job, script string) cluster.WorkerSpec {
	return cluster.WorkerSpec{
		ID:      cluster.WorkerID{Job: job, Attempt: 1, Worker: 0},
		Workers: 1, Node: "node-a", Type: cluster.TypeBinary, Script: script,
		ProcessesPerWorker: 1,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFile polls for a file to exist (with a deadline) and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return string(data)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", path)
	return ""
}

// cleanupWorker makes sure no test process survives a failed test.
func cleanupWorker(t *testing.T, b *Backend, id cluster.WorkerID) {
	t.Cleanup(func() { _, _ = b.Stop(context.Background(), id, 0) })
}

func logOf(t *testing.T, b *Backend, id cluster.WorkerID) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, b.Logs(context.Background(), id, 0, &buf))
	return buf.String()
}

func lines(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		m[l] = true
	}
	return m
}

func TestEnvironmentAndFlags(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	b := newBackend(t, data)
	script := `env | sort; printf 'ARG:%s\n'`
	spec := binarySpec("env-job", script)
	spec.ID.Worker = 1
	spec.Workers = 2
	spec.GPUs = []int{2, 3}
	spec.Env = map[string]string{"FOO": "bar baz", "RANK": "99", "TRAINQ_JOB_NAME": "spoofed"}
	spec.Flags = map[string]string{"lr": "0.1", "name": "it's a test", "a": "$HOME"}
	cleanupWorker(t, b, spec.ID)

	st, err := b.Start(ctx, spec)
	require.NoError(t, err)
	// The script may already have finished by the time Start reads its status.
	assert.Contains(t, []cluster.Phase{cluster.PhaseRunning, cluster.PhaseExited}, st.Phase)
	st, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	require.Equal(t, 0, st.ExitCode, logOf(t, b, spec.ID))

	_, port, err := b.Rendezvous(ctx, "env-job", 1)
	require.NoError(t, err)
	ckpt := filepath.Join(b.DataDir(), "checkpoints", "env-job")
	assert.DirExists(t, ckpt)
	got := lines(logOf(t, b, spec.ID))
	for _, want := range []string{
		"RANK=1", "NODE_RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port),
		"CUDA_VISIBLE_DEVICES=2,3", "TRAINQ_JOB_NAME=env-job", "TRAINQ_ATTEMPT=1",
		"TRAINQ_WORKER=1", "TRAINQ_NODE=node-a", "TRAINQ_CHECKPOINT_DIR=" + ckpt,
		"FOO=bar baz",
		"ARG:--a=$HOME", "ARG:--lr=0.1", "ARG:--name=it's a test",
	} {
		assert.True(t, got[want], "log lacks line %q", want)
	}
	assert.Equal(t, filepath.Join(b.DataDir(), "jobs", "env-job", "attempt-1", "worker-1", "worker.log"), st.LogPath)

	// No GPUs: CUDA_VISIBLE_DEVICES is set, and empty.
	spec2 := binarySpec("env-job", `env | sort`)
	cleanupWorker(t, b, spec2.ID)
	_, err = b.Start(ctx, spec2)
	require.NoError(t, err)
	_, err = b.Wait(ctx, spec2.ID, nil)
	require.NoError(t, err)
	got = lines(logOf(t, b, spec2.ID))
	assert.True(t, got["CUDA_VISIBLE_DEVICES="])
	assert.True(t, got["RANK=0"])
}

func TestExitCodeAndLogs(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	spec := binarySpec("exit-job", `echo one; echo two >&2; echo three; exit 7`)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	beats := 0
	st, err := b.Wait(ctx, spec.ID, func(cluster.WorkerStatus) { beats++ })
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 7, st.ExitCode)
	assert.False(t, st.Signaled)
	assert.False(t, st.EndedAt.IsZero())

	var buf bytes.Buffer
	require.NoError(t, b.Logs(ctx, spec.ID, 3, &buf))
	tail := buf.String()
	assert.True(t, strings.HasPrefix(tail, "three\n"), tail)
	assert.True(t, strings.HasSuffix(tail, "] worker exited with code 7\n"), tail)
	assert.Equal(t, 3, strings.Count(tail, "\n"), tail)
	all := logOf(t, b, spec.ID)
	assert.Contains(t, all, "one\ntwo\nthree\n")

	// Status of an exited worker is stable, and Stop returns it at once.
	st2, err := b.Stop(ctx, spec.ID, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 7, st2.ExitCode)
	assert.False(t, st2.Signaled)
}

func TestTailLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"a\nb\nc\n", 0, "a\nb\nc\n"},
		{"", 3, ""},
		{"\n\n", 1, "\n"},
	} {
		var buf bytes.Buffer
		r := strings.NewReader(tc.in)
		require.NoError(t, tailLines(r, int64(len(tc.in)), tc.n, &buf))
		assert.Equal(t, tc.want, buf.String(), "tail %d of %q", tc.n, tc.in)
	}
	// Longer than one chunk.
	var sb strings.Builder
	for i := range 30000 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	var buf bytes.Buffer
	require.NoError(t, tailLines(strings.NewReader(sb.String()), int64(sb.Len()), 10001, &buf))
	assert.True(t, strings.HasPrefix(buf.String(), "line 19999\n"))
	assert.Equal(t, 10001, strings.Count(buf.String(), "\n"))
}

func TestTailStart(t *testing.T) {
	data := []byte("a\nbb\nccc\n")
	for n, want := range map[int]string{1: "ccc\n", 2: "bb\nccc\n", 3: "a\nbb\nccc\n", 10: "a\nbb\nccc\n"} {
		start, err := TailStart(bytes.NewReader(data), int64(len(data)), n)
		require.NoError(t, err)
		assert.Equal(t, want, string(data[start:]), "n=%d", n)
	}
	data = []byte("a\nbb\npartial")
	start, err := TailStart(bytes.NewReader(data), int64(len(data)), 1)
	require.NoError(t, err)
	assert.Equal(t, "partial", string(data[start:]))
}

func TestStartIsIdempotent(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	work := t.TempDir()
	b1 := newBackend(t, data)
	b2 := newBackend(t, data)
	script := fmt.Sprintf(`echo started >> %[1]s/counter; echo $$ > %[1]s/mypid; while [ ! -f %[1]s/release ]; do sleep 0.02; done`, work)
	spec := binarySpec("idem-job", script)
	cleanupWorker(t, b1, spec.ID)

	var wg sync.WaitGroup
	pids := make([]int, 8)
	errs := make([]error, 8)
	for i := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := b1
			if i%2 == 1 {
				b = b2
			}
			st, err := b.Start(ctx, spec)
			pids[i], errs[i] = st.PID, err
		}()
	}
	wg.Wait()
	for i := range pids {
		require.NoError(t, errs[i])
		assert.Equal(t, pids[0], pids[i])
	}
	waitFile(t, filepath.Join(work, "mypid"))
	st, err := b2.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, pids[0], st.PID)
	assert.Equal(t, cluster.PhaseRunning, st.Phase)

	require.NoError(t, os.WriteFile(filepath.Join(work, "release"), nil, 0o644))
	st, err = b1.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)

	// Start after exit starts nothing either.
	st, err = b2.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	counter, err := os.ReadFile(filepath.Join(work, "counter"))
	require.NoError(t, err)
	assert.Equal(t, "started\n", string(counter))
}

func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	members, ok := groupMembers(pgid)
	if !ok {
		assert.ErrorIs(t, syscall.Kill(-pgid, 0), syscall.ESRCH)
		return
	}
	assert.Empty(t, members, "processes left in group %d", pgid)
}

// eventuallyGroupGone: Wait returns when exit.json is written, which the
// supervisor does just before it exits, so allow it a moment.
func eventuallyGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && pgroupAlive(pgid) {
		time.Sleep(10 * time.Millisecond)
	}
	assertGroupGone(t, pgid)
}

func TestStopSendsTERMFirst(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	work := t.TempDir()
	script := fmt.Sprintf(`trap 'echo handled > %[1]s/marker; exit 0' TERM; echo ready > %[1]s/ready; while :; do sleep 0.02; done`, work)
	spec := binarySpec("term-job", script)
	cleanupWorker(t, b, spec.ID)
	st, err := b.Start(ctx, spec)
	require.NoError(t, err)
	waitFile(t, filepath.Join(work, "ready"))

	start := time.Now()
	st, err = b.Stop(ctx, spec.ID, 20*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 15*time.Second)
	assert.Equal(t, "handled\n", waitFile(t, filepath.Join(work, "marker")))
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 0, st.ExitCode)
	assert.True(t, st.Signaled)
	assert.True(t, st.StopRequested)
	assertGroupGone(t, st.PID)

	// Idempotent.
	st2, err := b.Stop(ctx, spec.ID, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, st, st2)
}

func TestStopKillsAfterGrace(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	work := t.TempDir()
	script := fmt.Sprintf(`trap '' TERM; echo ready > %[1]s/ready; while :; do sleep 0.02; done`, work)
	spec := binarySpec("stubborn-job", script)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	waitFile(t, filepath.Join(work, "ready"))

	grace := 300 * time.Millisecond
	start := time.Now()
	st, err := b.Stop(ctx, spec.ID, grace)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), grace)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 137, st.ExitCode)
	assert.True(t, st.Signaled)
	assertGroupGone(t, st.PID)
}

func TestStopNeverStarted(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	id := cluster.WorkerID{Job: "nothing", Attempt: 1}
	st, err := b.Stop(ctx, id, time.Second)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseNotFound, st.Phase)
	st, err = b.Status(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseNotFound, st.Phase)
	_, err = b.Wait(ctx, id, nil)
	assert.ErrorIs(t, err, cluster.ErrNotFound)
	assert.ErrorIs(t, b.Logs(ctx, id, 0, &bytes.Buffer{}), cluster.ErrNotFound)
}

func TestJobNameValidation(t *testing.T) {
	for _, ok := range []string{"a", "lm-mpi-job-0b6f", "Job_1.2", "9"} {
		assert.NoError(t, cluster.ValidJobName(ok), ok)
	}
	for _, bad := range []string{"", "..", "../x", "a/b", ".hidden", "-x", "a b", "x\x00", strings.Repeat("a", 201)} {
		assert.Error(t, cluster.ValidJobName(bad), bad)
	}
	ctx := ctxT(t)
	data := t.TempDir()
	b := newBackend(t, data)
	_, err := b.Start(ctx, binarySpec("../escape", "true"))
	assert.Error(t, err)
	_, _, err = b.Rendezvous(ctx, "../escape", 1)
	assert.Error(t, err)
	_, err = b.LogPath(cluster.WorkerID{Job: "a/../../b"})
	assert.Error(t, err)
	assert.NoDirExists(t, filepath.Join(filepath.Dir(data), "escape"))
}

func TestRendezvousIsStable(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	b1, b2 := newBackend(t, data), newBackend(t, data)
	addr, port, err := b1.Rendezvous(ctx, "rv-job", 2)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", addr)
	assert.Positive(t, port)
	addr2, port2, err := b2.Rendezvous(ctx, "rv-job", 2)
	require.NoError(t, err)
	assert.Equal(t, addr, addr2)
	assert.Equal(t, port, port2)
	assert.FileExists(t, filepath.Join(data, "jobs", "rv-job", "attempt-2", "rendezvous.json"))
}

// TestReattach starts a worker from another process that then exits (a
// trainq-worker that died), and re-attaches from this one.
func TestReattach(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	work := t.TempDir()
	script := fmt.Sprintf(`echo started >> %[1]s/counter; echo ready > %[1]s/ready; while [ ! -f %[1]s/release ]; do sleep 0.02; done; exit 3`, work)
	spec := binarySpec("reattach-job", script)
	specJSON, err := json.Marshal(spec)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TRAINQ_TEST_START="+data, "TRAINQ_TEST_SPEC="+string(specJSON))
	out, err := cmd.Output()
	require.NoError(t, err, "helper: %s", out)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	waitFile(t, filepath.Join(work, "ready"))

	b := newBackend(t, data) // the "restarted" trainq-worker
	cleanupWorker(t, b, spec.ID)
	st, err := b.Status(ctx, spec.ID)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseRunning, st.Phase)
	assert.Equal(t, pid, st.PID)
	stat, ok := readStat(pid)
	if ok {
		assert.Equal(t, pid, stat.pgrp, "supervisor leads its process group")
	}
	st, err = b.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, pid, st.PID, "no second copy")

	var beats int
	var mu sync.Mutex
	waitDone, beating := make(chan struct{}), make(chan struct{})
	var wst cluster.WorkerStatus
	var werr error
	go func() {
		defer close(waitDone)
		wst, werr = b.Wait(ctx, spec.ID, func(s cluster.WorkerStatus) {
			mu.Lock()
			if beats++; beats == 1 {
				close(beating)
			}
			mu.Unlock()
		})
	}()
	// The worker ends once the watch has beaten: on a busy machine a worker
	// released at once could end before the first beat.
	select {
	case <-beating:
	case <-waitDone:
		t.Fatalf("the watch ended before its first heartbeat: %v", werr)
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "release"), nil, 0o644))
	<-waitDone
	require.NoError(t, werr)
	assert.Equal(t, cluster.PhaseExited, wst.Phase)
	assert.Equal(t, 3, wst.ExitCode)
	assert.False(t, wst.Signaled)
	mu.Lock()
	assert.Positive(t, beats)
	mu.Unlock()
	counter, err := os.ReadFile(filepath.Join(work, "counter"))
	require.NoError(t, err)
	assert.Equal(t, "started\n", string(counter))
	eventuallyGroupGone(t, pid)
}

func TestWaitHonoursContext(t *testing.T) {
	b := newBackend(t, t.TempDir())
	spec := binarySpec("ctx-job", `while :; do sleep 0.05; done`)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(context.Background(), spec)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	st, err := b.Wait(ctx, spec.ID, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, cluster.PhaseRunning, st.Phase)
}

// The Python types run ProcessesPerWorker processes of <Python> <script>;
// with Python=/bin/sh this needs no Python.
func TestMultiProcessRanks(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	opts := testOptions(data)
	opts.Python = "/bin/sh"
	b, err := New(opts)
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "rank.sh")
	require.NoError(t, os.WriteFile(script,
		[]byte(`echo "rank local=$LOCAL_RANK rank=$RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE node=$NODE_RANK args=$*"`+"\n"), 0o644))
	spec := cluster.WorkerSpec{
		ID: cluster.WorkerID{Job: "torch-job", Attempt: 1, Worker: 1}, Workers: 2, Node: "n",
		Type: cluster.TypePyTorch, Script: script, ProcessesPerWorker: 2, Flags: map[string]string{"epochs": "3"},
	}
	cleanupWorker(t, b, spec.ID)
	_, err = b.Start(ctx, spec)
	require.NoError(t, err)
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	got := lines(logOf(t, b, spec.ID))
	assert.True(t, got["rank local=0 rank=2 world=4 lws=2 node=1 args=--epochs=3"], got)
	assert.True(t, got["rank local=1 rank=3 world=4 lws=2 node=1 args=--epochs=3"], got)
}

func TestMultiProcessFailureTerminatesSiblings(t *testing.T) {
	ctx := ctxT(t)
	opts := testOptions(t.TempDir())
	opts.Python = "/bin/sh"
	b, err := New(opts)
	require.NoError(t, err)
	work := t.TempDir()
	script := filepath.Join(work, "fail.sh")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`
if [ "$LOCAL_RANK" = 1 ]; then
  while [ ! -f %[1]s/ready ]; do sleep 0.02; done
  exit 3
fi
trap 'echo term > %[1]s/term0; exit 0' TERM
echo ready > %[1]s/ready
while :; do sleep 0.02; done
`, work)), 0o644))
	spec := cluster.WorkerSpec{
		ID: cluster.WorkerID{Job: "fail-job", Attempt: 1}, Workers: 1, Node: "n",
		Type: cluster.TypeTorchrun, Script: script, ProcessesPerWorker: 2,
	}
	cleanupWorker(t, b, spec.ID)
	_, err = b.Start(ctx, spec)
	require.NoError(t, err)
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, st.ExitCode)
	assert.False(t, st.Signaled)
	assert.Equal(t, "term\n", waitFile(t, filepath.Join(work, "term0")))
	eventuallyGroupGone(t, st.PID)
}

func TestRealPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	if err := exec.Command(python, "-c", "pass").Run(); err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	script := filepath.Join(t.TempDir(), "train.py")
	require.NoError(t, os.WriteFile(script, []byte(`import os, sys
print("py local_rank=%s rank=%s world=%s argv=%s" % (os.environ["LOCAL_RANK"], os.environ["RANK"], os.environ["WORLD_SIZE"], " ".join(sys.argv[1:])))
`), 0o644))
	spec := cluster.WorkerSpec{
		ID: cluster.WorkerID{Job: "py-job", Attempt: 1}, Workers: 1, Node: "n",
		Type: cluster.TypePyTorch2, Script: script, ProcessesPerWorker: 2, Flags: map[string]string{"lr": "0.01"},
	}
	cleanupWorker(t, b, spec.ID)
	_, err = b.Start(ctx, spec)
	require.NoError(t, err)
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	log := logOf(t, b, spec.ID)
	require.Equal(t, 0, st.ExitCode, log)
	got := lines(log)
	assert.True(t, got["py local_rank=0 rank=0 world=2 argv=--lr=0.01"], log)
	assert.True(t, got["py local_rank=1 rank=1 world=2 argv=--lr=0.01"], log)
}

func TestExternalSIGKILL(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())

	t.Run("process", func(t *testing.T) {
		work := t.TempDir()
		spec := binarySpec("killed-proc", fmt.Sprintf(`echo $$ > %s/pid; exec sleep 1000`, work))
		cleanupWorker(t, b, spec.ID)
		_, err := b.Start(ctx, spec)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(work, "pid"))))
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		st, err := b.Wait(ctx, spec.ID, nil)
		require.NoError(t, err)
		assert.Equal(t, 137, st.ExitCode)
		assert.False(t, st.Signaled, "recorded by the supervisor, not our stop")
		assert.False(t, st.StopRequested)
	})
	t.Run("group", func(t *testing.T) {
		work := t.TempDir()
		spec := binarySpec("killed-group", fmt.Sprintf(`echo ready > %s/ready; exec sleep 1000`, work))
		cleanupWorker(t, b, spec.ID)
		st, err := b.Start(ctx, spec)
		require.NoError(t, err)
		waitFile(t, filepath.Join(work, "ready"))
		require.NoError(t, syscall.Kill(-st.PID, syscall.SIGKILL))
		st, err = b.Wait(ctx, spec.ID, nil)
		require.NoError(t, err)
		assert.Equal(t, 137, st.ExitCode)
		assert.True(t, st.Signaled)
		assert.False(t, st.StopRequested)
		// The record is persisted: a new backend sees the same.
		st2, err := newBackend(t, b.DataDir()).Status(ctx, spec.ID)
		require.NoError(t, err)
		assert.Equal(t, st.EndedAt, st2.EndedAt)
	})
}

func TestStraysAreKilledWhenWorkerExits(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	spec := binarySpec("stray-job", `sleep 1000 & echo bg started; exit 0`)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	eventuallyGroupGone(t, st.PID)
}

func TestList(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	for _, w := range []int{1, 0} {
		spec := binarySpec("list-job", "true")
		spec.Workers, spec.ID.Worker = 2, w
		_, err := b.Start(ctx, spec)
		require.NoError(t, err)
		_, err = b.Wait(ctx, spec.ID, nil)
		require.NoError(t, err)
	}
	sts, err := b.List(ctx, "list-job")
	require.NoError(t, err)
	require.Len(t, sts, 2)
	assert.Equal(t, 0, sts[0].ID.Worker)
	assert.Equal(t, 1, sts[1].ID.Worker)
	sts, err = b.List(ctx, "no-such-job")
	require.NoError(t, err)
	assert.Empty(t, sts)
}

func TestSpecValidation(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	bad := []cluster.WorkerSpec{
		{ID: cluster.WorkerID{Job: "j"}, Workers: 0, Type: "binary", Script: "true"},
		{ID: cluster.WorkerID{Job: "j", Worker: 2}, Workers: 2, Type: "binary", Script: "true"},
		{ID: cluster.WorkerID{Job: "j"}, Workers: 1, Type: "mpi", Script: "true"},
		{ID: cluster.WorkerID{Job: "j"}, Workers: 1, Type: "binary", Script: " "},
	}
	for _, s := range bad {
		_, err := b.Start(ctx, s)
		assert.Error(t, err, "%+v", s)
	}
	st, err := b.Status(ctx, cluster.WorkerID{Job: "j"})
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseNotFound, st.Phase)
	assert.False(t, errors.Is(err, cluster.ErrNotFound))
}

// The small supervisor binary next to the executable is preferred; without
// it (or if it cannot be run) the executable supervises itself.
func TestSupervisorNextToTheExecutable(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "trainq-worker")
	assert.Equal(t, []string{exe, "supervise"}, supervisorNextTo(exe))
	small := filepath.Join(dir, SupervisorBinary)
	require.NoError(t, os.WriteFile(small, []byte("#!/bin/sh\n"), 0o644))
	assert.Equal(t, []string{exe, "supervise"}, supervisorNextTo(exe), "not executable")
	require.NoError(t, os.Chmod(small, 0o755))
	assert.Equal(t, []string{small}, supervisorNextTo(exe))
}
