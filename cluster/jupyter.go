package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Environment variables of a Jupyter server's worker (WorkerSpec.Notebook).
const (
	// NotebookPortEnv is the port the server must listen on.
	NotebookPortEnv = "TRAINQ_NOTEBOOK_PORT"
	// NotebookTokenEnv is the token the server must accept
	// (--ServerApp.token=$TRAINQ_NOTEBOOK_TOKEN): trainq reads the server's
	// /api/status with it to tell whether it is idle. JupyterTokenEnv,
	// which Jupyter reads when no token is given, is set to it too unless
	// the job's env_variables set it.
	NotebookTokenEnv = "TRAINQ_NOTEBOOK_TOKEN"
	JupyterTokenEnv  = "JUPYTER_TOKEN"
)

// JupyterStatus is what a Jupyter server says of its own activity: its
// GET /api/status (which, unlike other API calls, does not count as
// activity), and how many of its kernels run code now.
type JupyterStatus struct {
	// LastActivity is the server's last_activity: the latest API call,
	// kernel message or terminal use (the server's start at first).
	LastActivity time.Time `json:"last_activity"`
	Started      time.Time `json:"started"`
	Kernels      int       `json:"kernels"`
	Connections  int       `json:"connections"`
	// BusyKernels counts the kernels whose execution_state is busy (a cell
	// still running, perhaps silently): such a server is not idle.
	BusyKernels int `json:"busy_kernels,omitempty"`
	// ServerTime is the server's clock when it answered (its Date header,
	// to the second), so that idleness is measured on the server's clock;
	// zero if it sent none.
	ServerTime time.Time `json:"server_time,omitzero"`
}

// IdleFor is how long the server has been idle when it answered, measured
// on its own clock (ServerTime, else now, which the caller reads from its
// clock): 0 while a kernel is busy. ServerTime has whole seconds, so up to
// a second is added back, never taken off: an idle time is never
// overestimated by the header's rounding.
func (s JupyterStatus) IdleFor(now time.Time) time.Duration {
	if s.BusyKernels > 0 || s.LastActivity.IsZero() {
		return 0
	}
	if !s.ServerTime.IsZero() {
		now = s.ServerTime
		if now.Before(s.LastActivity) {
			return 0 // the Date header's second began before the activity
		}
	}
	return max(now.Sub(s.LastActivity), 0)
}

// NotebookProber is implemented by backends that can reach the Jupyter
// server of a notebook worker and read its status (see JupyterStatus).
// An error means the server did not say (not started yet, not a Jupyter
// server, another token): it does not mean the server is idle.
type NotebookProber interface {
	NotebookStatus(ctx context.Context, id WorkerID) (JupyterStatus, error)
}

// LogNoter is implemented by backends that can add a line of trainq's own
// to a worker's log (a warning the user reads beside the server's output).
type LogNoter interface {
	NoteLog(ctx context.Context, id WorkerID, line string) error
}

// ErrJupyterForbidden is returned (wrapped) by ReadJupyterStatus when the
// server refuses the token: it does not use $TRAINQ_NOTEBOOK_TOKEN.
var ErrJupyterForbidden = errors.New("the Jupyter server refused trainq's token ($" + NotebookTokenEnv + ")")

// ReadJupyterStatus asks the Jupyter server at base (http://host:port/,
// with the server's base_url) for its status with token: GET /api/status,
// then GET /api/kernels?no_track_activity=1 for busy kernels when it has
// any. Neither call counts as activity.
func ReadJupyterStatus(ctx context.Context, hc *http.Client, base, token string) (JupyterStatus, error) {
	base = strings.TrimSuffix(base, "/")
	var st JupyterStatus
	h, err := getJupyter(ctx, hc, base+"/api/status", token, &st)
	if err != nil {
		return JupyterStatus{}, err
	}
	if st.LastActivity.IsZero() {
		return JupyterStatus{}, errors.New("the server's /api/status has no last_activity: not a Jupyter server?")
	}
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		st.ServerTime = d.UTC()
	}
	if st.Kernels > 0 {
		var kernels []struct {
			ExecutionState string `json:"execution_state"`
		}
		if _, err := getJupyter(ctx, hc, base+"/api/kernels?no_track_activity=1", token, &kernels); err != nil {
			return JupyterStatus{}, fmt.Errorf("list kernels: %w", err)
		}
		for _, k := range kernels {
			if k.ExecutionState == "busy" {
				st.BusyKernels++
			}
		}
	}
	return st, nil
}

func getJupyter(ctx context.Context, hc *http.Client, url, token string, v any) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("GET %s: %s: %w", url, resp.Status, ErrJupyterForbidden)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, fmt.Errorf("GET %s: not a Jupyter status: %w", url, err)
	}
	return resp.Header, nil
}
