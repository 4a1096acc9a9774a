package local

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

func TestReadLogInChunks(t *testing.T) {
	b := newBackend(t, t.TempDir())
	spec := binarySpec("chunked", `for i in 1 2 3 4 5; do echo "line $i"; done`)
	ctx := ctxT(t)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	_, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)

	var all bytes.Buffer
	end, err := cluster.CopyLog(ctx, b, cluster.LogRequest{ID: spec.ID, MaxBytes: 7}, &all)
	require.NoError(t, err)
	assert.Contains(t, all.String(), "\nline 1\nline 2\nline 3\nline 4\nline 5\n")
	assert.True(t, strings.HasSuffix(all.String(), "worker exited with code 0\n"), "read to the end, across chunks of 7 bytes")
	assert.Equal(t, int64(all.Len()), end)

	c, err := b.ReadLog(ctx, cluster.LogRequest{ID: spec.ID, Offset: end})
	require.NoError(t, err)
	assert.Empty(t, c.Data, "nothing past the end")
	c, err = b.ReadLog(ctx, cluster.LogRequest{ID: spec.ID, Offset: end + 100})
	require.NoError(t, err)
	assert.True(t, c.Reset, "an offset past the end starts again")

	_, err = b.ReadLog(ctx, cluster.LogRequest{ID: cluster.WorkerID{Job: "never", Attempt: 1}})
	require.ErrorIs(t, err, cluster.ErrNotFound)
}

// A Jupyter server's worker listens on TRAINQ_NOTEBOOK_PORT, the rendezvous
// port, and says where it serves.
func TestNotebookWorkerGetsPortAndURL(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	spec := binarySpec("jupyter-1", `echo "port=$TRAINQ_NOTEBOOK_PORT"`)
	spec.Notebook, spec.MasterAddr, spec.MasterPort = true, "10.0.0.7", 41234
	ctx := ctxT(t)
	st, err := b.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, "http://10.0.0.7:41234/", st.URL)
	again, err := b.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, st.URL, again.URL, "a repeated start says the same")
	_, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, b.Logs(ctx, spec.ID, 0, &out))
	assert.Contains(t, out.String(), "port=41234\n")

	plain := binarySpec("job-1", "true")
	st, err = b.Start(ctx, plain)
	require.NoError(t, err)
	assert.Empty(t, st.URL, "only a notebook has a URL")
	_, err = b.Wait(ctx, plain.ID, nil)
	require.NoError(t, err)
}
