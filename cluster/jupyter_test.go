package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadJupyterStatus: the status of a (fake) Jupyter server, its busy
// kernels, its clock, and what is not an answer.
func TestReadJupyterStatus(t *testing.T) {
	kernels := `[]`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token good" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Date", "Wed, 04 Mar 2026 10:10:00 GMT")
		switch r.URL.Path {
		case "/api/status":
			fmt.Fprint(w, `{"connections": 1, "kernels": 2, "last_activity": "2026-03-04T10:00:00.250000Z", "started": "2026-03-04T09:00:00Z"}`)
		case "/api/kernels":
			assert.Equal(t, "1", r.URL.Query().Get("no_track_activity"), "listing kernels must not count as activity")
			fmt.Fprint(w, kernels)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	st, err := ReadJupyterStatus(ctx, srv.Client(), srv.URL+"/", "good")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 3, 4, 10, 0, 0, 25e7, time.UTC), st.LastActivity.UTC())
	assert.Equal(t, time.Date(2026, 3, 4, 10, 10, 0, 0, time.UTC), st.ServerTime)
	assert.Equal(t, 2, st.Kernels)
	assert.Zero(t, st.BusyKernels)
	// Idleness is measured on the server's clock, whatever ours says.
	assert.Equal(t, 9*time.Minute+59750*time.Millisecond, st.IdleFor(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))

	kernels = `[{"execution_state": "idle"}, {"execution_state": "busy"}]`
	st, err = ReadJupyterStatus(ctx, srv.Client(), srv.URL, "good")
	require.NoError(t, err)
	assert.Equal(t, 1, st.BusyKernels)
	assert.Zero(t, st.IdleFor(time.Now()), "a kernel running a cell is activity, silent or not")

	_, err = ReadJupyterStatus(ctx, srv.Client(), srv.URL, "bad")
	assert.True(t, errors.Is(err, ErrJupyterForbidden), "%v", err)

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"ok": true}`) }))
	defer other.Close()
	_, err = ReadJupyterStatus(ctx, other.Client(), other.URL, "good")
	assert.ErrorContains(t, err, "no last_activity")

	other.Close()
	_, err = ReadJupyterStatus(ctx, other.Client(), other.URL, "good")
	assert.Error(t, err, "a server that does not answer gives no status")
}

func TestJupyterIdleFor(t *testing.T) {
	last := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	now := last.Add(3 * time.Minute)
	assert.Equal(t, 3*time.Minute, JupyterStatus{LastActivity: last}.IdleFor(now), "no Date header: the caller's clock")
	assert.Equal(t, time.Minute, JupyterStatus{LastActivity: last, ServerTime: last.Add(time.Minute)}.IdleFor(now))
	assert.Zero(t, JupyterStatus{LastActivity: last.Add(500 * time.Millisecond), ServerTime: last}.IdleFor(now), "activity within the header's second")
	assert.Zero(t, JupyterStatus{LastActivity: now.Add(time.Hour)}.IdleFor(now), "a clock behind the server's never counts as idle")
	assert.Zero(t, JupyterStatus{}.IdleFor(now))
}
