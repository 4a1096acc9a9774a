package local

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	spec.Script = `echo "port=$TRAINQ_NOTEBOOK_PORT token=$JUPYTER_TOKEN"`
	st, err := b.Start(ctx, spec)
	require.NoError(t, err)
	url, token, ok := strings.Cut(st.URL, "?token=")
	require.True(t, ok, "the URL carries the server's token, so that its user can log in: %s", st.URL)
	assert.Equal(t, "http://10.0.0.7:41234/", url)
	again, err := b.Start(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, st.URL, again.URL, "a repeated start says the same")
	_, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, b.Logs(ctx, spec.ID, 0, &out))
	assert.Contains(t, out.String(), "port=41234 token="+token+"\n", "the server's JUPYTER_TOKEN is the URL's")

	// A user who sets JUPYTER_TOKEN logs in with theirs: the URL carries none.
	own := binarySpec("jupyter-own", "true")
	own.Notebook, own.MasterAddr, own.MasterPort = true, "10.0.0.7", 41235
	own.Env = map[string]string{cluster.JupyterTokenEnv: "mine"}
	st, err = b.Start(ctx, own)
	require.NoError(t, err)
	assert.Equal(t, "http://10.0.0.7:41235/", st.URL)
	_, err = b.Wait(ctx, own.ID, nil)
	require.NoError(t, err)

	plain := binarySpec("job-1", "true")
	st, err = b.Start(ctx, plain)
	require.NoError(t, err)
	assert.Empty(t, st.URL, "only a notebook has a URL")
	_, err = b.Wait(ctx, plain.ID, nil)
	require.NoError(t, err)
}

// A Jupyter server's worker gets a token of its own, in
// TRAINQ_NOTEBOOK_TOKEN and JUPYTER_TOKEN, and NotebookStatus reads the
// server's /api/status on its port with it.
func TestNotebookStatusUsesTheWorkersToken(t *testing.T) {
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"))
		if r.URL.Path != "/api/status" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"connections": 0, "kernels": 0, "last_activity": "2026-03-04T10:00:00.5Z", "started": "2026-03-04T09:00:00Z"}`)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	b := newBackend(t, t.TempDir())
	spec := binarySpec("jupyter-2", `echo "token=$TRAINQ_NOTEBOOK_TOKEN jupyter=$JUPYTER_TOKEN"`)
	spec.Notebook, spec.MasterAddr, spec.MasterPort = true, "127.0.0.1", port
	ctx := ctxT(t)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	_, err = b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, b.Logs(ctx, spec.ID, 0, &out))
	m := regexp.MustCompile(`token=([0-9a-f]{48}) jupyter=([0-9a-f]+)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "the worker sees its token: %s", out.String())
	assert.Equal(t, m[1], m[2], "JUPYTER_TOKEN is the same token")

	st, err := b.NotebookStatus(ctx, spec.ID)
	require.NoError(t, err)
	assert.Equal(t, "token "+m[1], seen.Load())
	assert.Equal(t, time.Date(2026, 3, 4, 10, 0, 0, 5e8, time.UTC), st.LastActivity.UTC())
	assert.False(t, st.ServerTime.IsZero(), "the Date header gives the server's clock")

	require.NoError(t, b.NoteLog(ctx, spec.ID, "idle for 5m"))
	out.Reset()
	require.NoError(t, b.Logs(ctx, spec.ID, 1, &out))
	assert.Equal(t, "[trainq] idle for 5m\n", out.String())

	other := binarySpec("job-2", "true")
	_, err = b.Start(ctx, other)
	require.NoError(t, err)
	_, err = b.NotebookStatus(ctx, other.ID)
	assert.ErrorContains(t, err, "is not a Jupyter server's worker")
	// Its supervisor writes into the test's directory until it has exited.
	_, err = b.Wait(ctx, other.ID, nil)
	require.NoError(t, err)
}
