package logfile

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// A follower reads the last lines first, then only what was appended, and
// starts again when the log is replaced; a worker that never ran is not found.
func TestReadLog(t *testing.T) {
	s := Source{DataDir: t.TempDir()}
	ctx := context.Background()
	req := cluster.LogRequest{ID: cluster.WorkerID{Job: "lm-mpi-job-x", Attempt: 1, Worker: 0}, Node: "n1"}
	_, err := s.ReadLog(ctx, req)
	require.ErrorIs(t, err, cluster.ErrNotFound)

	path, err := Path(s.DataDir, req.ID)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	c, err := s.ReadLog(ctx, req)
	require.NoError(t, err)
	assert.Empty(t, c.Data, "a started worker that wrote nothing yet")

	require.NoError(t, os.WriteFile(path, []byte("a\nb\nc\n"), 0o644))
	var out bytes.Buffer
	first := req
	first.Tail = 2
	next, err := cluster.CopyLog(ctx, s, first, &out)
	require.NoError(t, err)
	assert.Equal(t, "b\nc\n", out.String())
	assert.EqualValues(t, 6, next)

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("d\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out.Reset()
	req.Offset = next
	next, err = cluster.CopyLog(ctx, s, req, &out)
	require.NoError(t, err)
	assert.Equal(t, "d\n", out.String())

	require.NoError(t, os.WriteFile(path, []byte("new\n"), 0o644))
	out.Reset()
	req.Offset = next
	_, err = cluster.CopyLog(ctx, s, req, &out)
	require.NoError(t, err)
	assert.Equal(t, "new\n", out.String(), "a replaced log is read from its start")
}
