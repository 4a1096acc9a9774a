package local

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// placedSpec is a worker of a 4-worker job on node with gpus that runs
// script.
func placedSpec(job string, attempt, worker int, node string, gpus []int, script string) cluster.WorkerSpec {
	return cluster.WorkerSpec{
		ID:      cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker},
		Workers: 4, Node: node, GPUs: gpus, Type: cluster.TypeBinary, Script: script,
		ProcessesPerWorker: 1,
	}
}

// holdScript writes <work>/<name>.ready once running and then runs until
// killed; a TERM is recorded in <work>/<name>.term.
func holdScript(work, name string) string {
	return fmt.Sprintf(`trap 'echo term > %[1]s/%[2]s.term; exit 0' TERM; echo ready > %[1]s/%[2]s.ready; while :; do sleep 0.02; done`, work, name)
}

func startHeld(t *testing.T, b *Backend, spec cluster.WorkerSpec, work, name string) cluster.WorkerStatus {
	t.Helper()
	cleanupWorker(t, b, spec.ID)
	st, err := b.Start(ctxT(t), spec)
	require.NoError(t, err)
	waitFile(t, filepath.Join(work, name+".ready"))
	return st
}

func ids(ws []cluster.PlacedWorker) []cluster.WorkerID {
	out := make([]cluster.WorkerID, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func TestLiveWorkers(t *testing.T) {
	ctx := ctxT(t)
	data, work := t.TempDir(), t.TempDir()
	b := newBackend(t, data)

	a1 := startHeld(t, b, placedSpec("job-b", 2, 1, "node-a", []int{4, 5}, holdScript(work, "a1")), work, "a1")
	a0 := startHeld(t, b, placedSpec("job-a", 1, 0, "node-a", []int{0, 1}, holdScript(work, "a0")), work, "a0")
	startHeld(t, b, placedSpec("job-a", 1, 1, "node-b", []int{0}, holdScript(work, "b1")), work, "b1")

	// An exited worker on node-a is not live.
	exited := placedSpec("job-a", 0, 0, "node-a", []int{2}, "true")
	cleanupWorker(t, b, exited.ID)
	_, err := b.Start(ctx, exited)
	require.NoError(t, err)
	st, err := b.Wait(ctx, exited.ID, nil)
	require.NoError(t, err)
	eventuallyGroupGone(t, st.PID) // the supervisor ends just after recording the exit

	// A worker killed from outside, with no exit record yet, is not live.
	killed := startHeld(t, b, placedSpec("job-c", 1, 0, "node-a", []int{3}, holdScript(work, "k")), work, "k")
	require.NoError(t, syscall.Kill(-killed.PID, syscall.SIGKILL))
	eventuallyGroupGone(t, killed.PID)

	// Old or hand-made state: spec.json without node and gpus, and
	// directories that are not workers, are skipped without error.
	noNode := startHeld(t, b, placedSpec("job-d", 1, 0, "", nil, holdScript(work, "nn")), work, "nn")
	require.NoError(t, os.MkdirAll(filepath.Join(data, "jobs", "job-e", "attempt-1", "worker-0"), 0o755)) // never launched
	require.NoError(t, os.MkdirAll(filepath.Join(data, "jobs", "job-e", "notes"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "jobs", "README"), []byte("x"), 0o644))

	live, err := b.LiveWorkers(ctx, "node-a")
	require.NoError(t, err)
	require.Equal(t, []cluster.WorkerID{a0.ID, a1.ID}, ids(live), "ordered by job, attempt, worker")
	assert.Equal(t, "node-a", live[0].Node)
	assert.Equal(t, []int{0, 1}, live[0].GPUs)
	assert.Equal(t, []int{4, 5}, live[1].GPUs)
	assert.Equal(t, cluster.PhaseRunning, live[0].Phase)
	assert.Equal(t, a0.PID, live[0].PID)
	assert.False(t, live[0].StartedAt.IsZero())

	live, err = b.LiveWorkers(ctx, "node-b")
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.Equal(t, cluster.WorkerID{Job: "job-a", Attempt: 1, Worker: 1}, live[0].ID)
	assert.Equal(t, []int{0}, live[0].GPUs)

	live, err = b.LiveWorkers(ctx, "node-z")
	require.NoError(t, err)
	assert.Empty(t, live)
	_, err = b.LiveWorkers(ctx, "")
	assert.Error(t, err)

	// A spec.json written before gpus existed still reads: the worker is
	// listed on its node with no GPUs.
	dir, err := b.WorkerDir(noNode.ID)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, fileSpec), []byte(`{"id":{"job":"job-d","attempt":1,"worker":0},"node":"node-b"}`), 0o644))
	live, err = b.LiveWorkers(ctx, "node-b")
	require.NoError(t, err)
	require.Len(t, live, 2)
	assert.Equal(t, noNode.ID, live[1].ID)
	assert.Empty(t, live[1].GPUs)

	// The JSON a node agent reports: the status's fields plus node and gpus.
	raw, err := json.Marshal(live[0])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	assert.Equal(t, "node-b", m["node"])
	assert.Equal(t, []any{0.0}, m["gpus"])
	assert.Equal(t, "running", m["phase"])
	assert.Equal(t, map[string]any{"job": "job-a", "attempt": 1.0, "worker": 1.0}, m["id"])
}

func TestFence(t *testing.T) {
	ctx := ctxT(t)
	data, work := t.TempDir(), t.TempDir()
	b := newBackend(t, data)

	keep := startHeld(t, b, placedSpec("fence-job", 1, 0, "node-a", []int{0}, holdScript(work, "keep")), work, "keep")
	old := startHeld(t, b, placedSpec("fence-job", 0, 0, "node-a", []int{1}, holdScript(work, "old")), work, "old")
	stubborn := startHeld(t, b, placedSpec("other-job", 3, 2, "node-a", []int{2, 3},
		fmt.Sprintf(`trap '' TERM; echo ready > %s/stubborn.ready; while :; do sleep 0.02; done`, work)), work, "stubborn")
	elsewhere := startHeld(t, b, placedSpec("fence-job", 0, 1, "node-b", []int{1}, holdScript(work, "elsewhere")), work, "elsewhere")

	grace := 500 * time.Millisecond
	began := time.Now()
	stopped, live, err := cluster.Fence(ctx, b, "node-a", []cluster.WorkerID{keep.ID, {Job: "gone-job", Attempt: 1}}, grace)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(began), grace, "the stubborn worker got its grace")
	require.Equal(t, []cluster.WorkerID{old.ID, stubborn.ID}, ids(stopped))
	for _, s := range stopped {
		assert.Equal(t, cluster.PhaseExited, s.Phase, s.ID)
		assert.True(t, s.StopRequested, s.ID)
		assert.Equal(t, "node-a", s.Node)
		assertGroupGone(t, s.PID)
	}
	assert.Equal(t, []int{2, 3}, stopped[1].GPUs)
	assert.Equal(t, 0, stopped[0].ExitCode, "SIGTERM first: it exited through its trap")
	assert.Equal(t, "term\n", waitFile(t, filepath.Join(work, "old.term")))
	assert.Equal(t, 137, stopped[1].ExitCode, "SIGKILL after the grace")
	require.Equal(t, []cluster.WorkerID{keep.ID}, ids(live))

	// The kept worker and the one on another node are untouched.
	for _, id := range []cluster.WorkerID{keep.ID, elsewhere.ID} {
		st, err := b.Status(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, cluster.PhaseRunning, st.Phase, id)
		assert.False(t, st.StopRequested, id)
	}
	assert.NoFileExists(t, filepath.Join(work, "keep.term"))
	assert.NoFileExists(t, filepath.Join(work, "elsewhere.term"))

	// Idempotent.
	stopped, live, err = cluster.Fence(ctx, b, "node-a", []cluster.WorkerID{keep.ID}, grace)
	require.NoError(t, err)
	assert.Empty(t, stopped)
	assert.Equal(t, []cluster.WorkerID{keep.ID}, ids(live))

	// Keeping nothing empties the node.
	stopped, live, err = cluster.Fence(ctx, b, "node-b", nil, grace)
	require.NoError(t, err)
	assert.Equal(t, []cluster.WorkerID{elsewhere.ID}, ids(stopped))
	assert.Empty(t, live)
}

func TestFenceNeedsInventory(t *testing.T) {
	var b struct{ cluster.Backend } // hides the Inventory methods
	b.Backend = newBackend(t, t.TempDir())
	_, _, err := cluster.Fence(ctxT(t), b, "node-a", nil, 0)
	assert.ErrorIs(t, err, cluster.ErrNoInventory)
}

func TestLastOutput(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	work := t.TempDir()
	script := fmt.Sprintf(`echo first line; while [ ! -f %[1]s/go ]; do sleep 0.02; done; echo second line; while [ ! -f %[1]s/release ]; do sleep 0.02; done`, work)
	spec := binarySpec("output-job", script)
	cleanupWorker(t, b, spec.ID)

	_, err := b.LastOutput(ctx, spec.ID)
	require.ErrorIs(t, err, cluster.ErrNotFound)

	_, err = b.Start(ctx, spec)
	require.NoError(t, err)
	logPath, err := b.LogPath(spec.ID)
	require.NoError(t, err)
	waitLog(t, b, spec.ID, "first line\n")

	// Make the log look an hour old: LastOutput is its mtime.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	require.NoError(t, os.Chtimes(logPath, old, old))
	last, err := b.LastOutput(ctx, spec.ID)
	require.NoError(t, err)
	assert.True(t, last.Equal(old), "got %v, want %v", last, old)

	// Another backend (a restarted trainq-worker) sees the same.
	last2, err := newBackend(t, b.DataDir()).LastOutput(ctx, spec.ID)
	require.NoError(t, err)
	assert.True(t, last2.Equal(old))

	// A new line moves it.
	before := time.Now().Add(-time.Second) // allow for coarse file-system timestamps
	require.NoError(t, os.WriteFile(filepath.Join(work, "go"), nil, 0o644))
	waitLog(t, b, spec.ID, "second line\n")
	last, err = b.LastOutput(ctx, spec.ID)
	require.NoError(t, err)
	assert.True(t, last.After(before), "LastOutput %v did not move past %v", last, before)
	assert.False(t, last.After(time.Now().Add(time.Second)))

	require.NoError(t, os.WriteFile(filepath.Join(work, "release"), nil, 0o644))
	_, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
}

// waitLog polls the worker's log until it contains want.
func waitLog(t *testing.T, b *Backend, id cluster.WorkerID, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(logOf(t, b, id), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("log of %s never contained %q:\n%s", id, want, logOf(t, b, id))
}
