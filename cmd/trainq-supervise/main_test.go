package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/internal/testenv"
)

// The built binary supervises a real worker: the local backend starts it
// with the worker's directory, it runs the worker's processes, and their
// exit code and output reach the backend.
func TestTheBinarySupervisesAWorker(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), local.SupervisorBinary)
	require.NoError(t, testenv.Build(root, bin, "./cmd/trainq-supervise"))
	b, err := local.New(local.Options{DataDir: t.TempDir(), SupervisorArgv: []string{bin}, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := cluster.WorkerSpec{ID: cluster.WorkerID{Job: "sup", Attempt: 1, Worker: 0}, Workers: 1, Node: "n",
		Type: cluster.TypeBinary, Script: "echo supervised; exit 3", ProcessesPerWorker: 1}
	_, err = b.Start(ctx, spec)
	require.NoError(t, err)
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 3, st.ExitCode)
	out, err := os.ReadFile(st.LogPath)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(out), "supervised"), "log: %s", out)
}
