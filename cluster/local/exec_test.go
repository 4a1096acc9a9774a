package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A command line longer than Linux accepts in one argument is refused by
// Start itself, with the reason, and nothing is launched.
func TestStartRefusesCommandTheOSCannotExec(t *testing.T) {
	data := t.TempDir()
	b := newBackend(t, data)
	spec := binarySpec("too-long", "echo "+strings.Repeat("x", 140<<10))
	_, err := b.Start(ctxT(t), spec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MAX_ARG_STRLEN")
	dir, _ := b.WorkerDir(spec.ID)
	assert.NoFileExists(t, filepath.Join(dir, filePID), "nothing was launched")

	// An environment that is too large altogether.
	spec = binarySpec("too-much-env", "true")
	spec.Env = map[string]string{}
	for i := range (argLimit() / (100 << 10)) + 1 {
		spec.Env[fmt.Sprintf("V%d", i)] = strings.Repeat("v", 100<<10)
	}
	_, err = b.Start(ctxT(t), spec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stack limit")
}

// When the supervisor cannot start the worker's process (here: its own
// environment is so large that the worker's variables push the exec over
// the OS's limit, which Start's own check, made with trainq-worker's
// environment, cannot see), Start fails with the real reason, and so does
// a retried Start.
func TestStartReportsWhyAProcessDidNotStart(t *testing.T) {
	data := t.TempDir()
	opts := testOptions(data)
	limit := argLimit()
	pad := limit - 200<<10 - len(strings.Join(os.Environ(), "\x00"))
	argv := []string{"/usr/bin/env"}
	for i := 0; pad > 0; i++ {
		n := min(pad, 100<<10)
		argv = append(argv, fmt.Sprintf("PAD%d=%s", i, strings.Repeat("p", n)))
		pad -= n + 16
	}
	opts.SupervisorArgv = append(argv, opts.SupervisorArgv[1:]...)
	b, err := New(opts)
	require.NoError(t, err)
	spec := binarySpec("exec-fails", "echo never")
	spec.Env = map[string]string{"A": strings.Repeat("a", 100<<10), "B": strings.Repeat("b", 100<<10), "C": strings.Repeat("c", 100<<10)}
	_, err = b.Start(ctxT(t), spec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "argument list too long")
	assert.Contains(t, err.Error(), "local_rank 0")
	_, err = b.Start(ctxT(t), spec)
	require.Error(t, err, "a retried Start says the same")
	assert.Contains(t, err.Error(), "argument list too long")

	// A worker that starts and fails is no start failure: its exit code says it.
	st, err := b.Start(ctxT(t), binarySpec("starts-then-fails", "exit 3"))
	require.NoError(t, err)
	st, err = b.Wait(ctxT(t), st.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, st.ExitCode)
	_, err = b.Start(ctxT(t), binarySpec("starts-then-fails", "exit 3"))
	assert.NoError(t, err)
}

func TestStartFailureRecords(t *testing.T) {
	dir := t.TempDir()
	assert.NoError(t, startFailure(dir), "nothing recorded yet")
	require.NoError(t, writeJSONAtomic(filepath.Join(dir, fileExit), exitRecord{ExitCode: 127, Error: "read launch plan: no launch.json"}))
	assert.ErrorContains(t, startFailure(dir), "read launch plan")
	require.NoError(t, writeJSONAtomic(filepath.Join(dir, fileExit), exitRecord{ExitCode: 137, Killed: true, Error: "process group gone"}))
	assert.NoError(t, startFailure(dir), "killed is not a start failure")
	require.NoError(t, writeJSONAtomic(filepath.Join(dir, filePIDs), []procExit{{LocalRank: 0, PID: 42}, {LocalRank: 1, ExitCode: 127, Error: "fork/exec /bin/sh: no such file"}, {LocalRank: 2, Error: errTextOtherFailed}}))
	assert.ErrorContains(t, startFailure(dir), "local_rank 1: fork/exec /bin/sh: no such file")
}
