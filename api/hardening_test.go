package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// post sends a JSON POST as bob to the two-workspace server.
func post(s *Server, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bobToken)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) Error {
	t.Helper()
	var e struct{ Error Error }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
	return e.Error
}

func jobBody(extra map[string]any) string {
	m := map[string]any{"script": "echo hi", "base_image": "img", "instance_type": "a100plus.1gpu"}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// The requests: each is refused before any Temporal call, with the
// field that is too large or out of range.
func TestRequestsThatCouldNeverStart(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	flags := map[string]any{}
	for _, k := range []string{"a", "b", "c"} {
		flags[k] = strings.Repeat("x", 50000)
	}
	env := map[string]any{}
	for i := range 9 {
		env[fmt.Sprintf("V%d", i)] = strings.Repeat("v", 60000)
	}
	for _, tc := range []struct {
		body   string
		code   int
		field  string
		phrase string
	}{
		// As Python's json.dumps writes them: "<" unescaped, 1 byte each in the body.
		{`{"script":"echo ok","base_image":"b","instance_type":"a100plus.1gpu","job_desc":"` + strings.Repeat("<", 1040000) + `"}`, 413, "job_desc", "largest field is job_desc"},
		{`{"script":"echo ok","base_image":"b","instance_type":"a100plus.1gpu","job_desc":"` + strings.Repeat("<", 400000) + `"}`, 413, "job_desc", "6 bytes each"},
		{jobBody(map[string]any{"flags": flags}), 422, "flags", "Linux accepts at most 131071 bytes in one argument"},
		{jobBody(map[string]any{"env_variables": env, "n_workers": 100, "max_retry": 100}), 422, "env_variables", "workflow history"},
		{jobBody(map[string]any{"processes_per_worker": 1000000}), 422, "processes_per_worker", "from 1 to 256"},
		{jobBody(map[string]any{"processes_per_worker": 97, "instance_type": "a100plus.8gpu.80vG.96C.768G"}), 422, "processes_per_worker", "at most 96"},
		{jobBody(map[string]any{"n_workers": 5000}), 422, "n_workers", "between 1 and 1024"},
		{jobBody(map[string]any{"checkpoint_dir": "../../etc"}), 422, "checkpoint_dir", "leads outside your workspace's directory"},
		{jobBody(map[string]any{"checkpoint_dir": "/etc/cron.d"}), 422, "checkpoint_dir", "is outside your workspace's directory"},
		{jobBody(map[string]any{"logs_dir": "/var/log"}), 422, "logs_dir", "is outside your workspace's directory"},
		{jobBody(map[string]any{"checkpoint_dir": strings.Repeat("d", 300)}), 422, "checkpoint_dir", "path element"},
		{`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","env_variables":{"A":"1","A":"2"}}`, 400, "env_variables.A", "appears twice"},
		{`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","health_params":{"Action":"restart","action":"delete"}}`, 400, "health_params.Action", "lower case"},
	} {
		require.Less(t, len(tc.body), MaxBodyBytes)
		rec := post(s, "/public/v2/jobs", tc.body)
		short := tc.body[:min(len(tc.body), 120)]
		require.Equal(t, tc.code, rec.Code, "%s: %s", short, rec.Body)
		e := errorOf(t, rec)
		assert.Equal(t, tc.field, e.Field, short)
		assert.Contains(t, e.Message, tc.phrase, short)
	}
	assert.Equal(t, 0, fb.started(), "a rejected request starts nothing")
}

// A relative checkpoint_dir resolves inside the workspace's directory; an
// absolute one inside it is kept; a symbolic link out of it is refused.
func TestCheckpointDirInsideTheWorkspace(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	root := filepath.Join(s.workspacesDir, teamB)
	for dir, want := range map[string]string{"runs/7": root + "/runs/7", root + "/x": root + "/x", "./a/../b": root + "/b"} {
		rec := post(s, "/public/v2/jobs", jobBody(map[string]any{"checkpoint_dir": dir, "logs_dir": "logs"}))
		require.Equal(t, 200, rec.Code, rec.Body.String())
		var sub submitted
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &sub))
		st, err := fb.Status(t.Context(), sub.JobName)
		require.NoError(t, err)
		assert.Equal(t, want, st.Spec.CheckpointDir, dir)
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	require.NoError(t, os.Symlink("/etc", filepath.Join(root, "etc")))
	rec := post(s, "/public/v2/jobs", jobBody(map[string]any{"checkpoint_dir": "etc/new"}))
	require.Equal(t, 422, rec.Code, rec.Body.String())
	assert.Contains(t, errorOf(t, rec).Message, "symbolic link")
}

func TestContentTypeAndMethods(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	ok := jobBody(nil)
	for ct, code := range map[string]int{
		"":                                  415,
		"text/plain":                        415,
		"application/x-www-form-urlencoded": 415,
		"application/json; charset=latin1":  415,
		"application/json":                  200,
		"application/json; charset=UTF-8":   200,
		"application/merge-patch+json":      200,
	} {
		rec := post(s, "/public/v2/jobs", ok, "Content-Type", ct)
		assert.Equal(t, code, rec.Code, "%q: %s", ct, rec.Body)
		if code == 415 {
			assert.Equal(t, "Content-Type", errorOf(t, rec).Field)
			assert.Contains(t, errorOf(t, rec).Message, "JSON")
		}
	}
	assert.Equal(t, 415, post(s, "/public/v2/jobs/restart", `{"job_name":"`+jobB+`"}`, "Content-Type", "text/plain").Code)
	assert.Equal(t, 415, post(s, "/public/v2/notebooks", `{}`, "Content-Type", "").Code)
	assert.Equal(t, 3, fb.started())

	do := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+bobToken)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/public/v2/jobs/restart", "POST"},
		{"DELETE", "/public/v2/jobs/restart", "POST"},
		{"PUT", "/public/v2/jobs/restart", "POST"},
		{"PATCH", "/public/v2/jobs", "GET, POST"},
		{"POST", "/public/v2/jobs/" + jobB, "DELETE, GET"},
		{"DELETE", "/public/v2/jobs/" + jobB + "/logs", "GET"},
		{"POST", "/public/v2/allocations/default/queue", "GET"},
		{"GET", "/public/v2/notebooks", "POST"},
		{"GET", "/public/v2/notebooks/" + nbB, "DELETE"},
		{"POST", "/healthz", "GET"},
		{"BREW", "/public/v2/configs", "GET"},
	} {
		rec := do(tc.method, tc.path)
		require.Equal(t, 405, rec.Code, "%s %s: %s", tc.method, tc.path, rec.Body)
		allow := rec.Header().Values("Allow")
		sort.Strings(allow)
		assert.Equal(t, tc.allow, strings.Join(allow, ", "), "%s %s", tc.method, tc.path)
		assert.Equal(t, codeMethod, errorOf(t, rec).Code)
	}
	// The metrics keep made-up methods to one label.
	m := do("GET", "/metrics").Body.String()
	assert.Contains(t, m, `method="OTHER"`)
	assert.NotContains(t, m, "BREW")
}

// TestNotFoundTakesAlike: every 404 for a job name waits until NotFoundFloor after its lookup
// began, so its time does not tell a job of another workspace (whose lookup finds it, later:
// describeDelay) from a name nobody has. Checked without letting the machine's speed decide: the
// wait is recorded instead of slept, and its deadline must be NotFoundFloor after a start that lies
// between the request's sending and its answer, for both; then, slept for real, each 404 takes at
// least the floor.
func TestNotFoundTakesAlike(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	floor := 40 * time.Millisecond
	s.opts.NotFoundFloor = floor
	fb.describeDelay = 8 * time.Millisecond
	missing := "lm-mpi-job-00000000-0000-4000-8000-000000000000"
	var deadlines []time.Time
	s.waitUntil = func(_ context.Context, deadline time.Time) { deadlines = append(deadlines, deadline) }
	for _, name := range []string{jobA, missing} {
		deadlines = nil
		sent := time.Now()
		rec := recorderDo(s, bobToken)("GET", "/public/v2/jobs/"+name, "")
		answered := time.Now()
		require.Equal(t, 404, rec.Code, name)
		require.Len(t, deadlines, 1, "%s: its 404 waits once", name)
		d := deadlines[0]
		assert.False(t, d.Before(sent.Add(floor)) || d.After(answered.Add(floor)),
			"%s: waits until %s after the request, want %s after its lookup began (the request took %s)", name, d.Sub(sent), floor, answered.Sub(sent))
		fb.mu.Lock()
		began := fb.describedAt
		fb.mu.Unlock()
		assert.False(t, d.After(began.Add(floor)), "%s: waits until %s after its lookup began, want %s: a wait counted from after the lookup tells the two apart", name, d.Sub(began), floor)
		if name == jobA {
			assert.GreaterOrEqual(t, answered.Sub(sent), fb.describeDelay, "the lookup found bob another workspace's job, inside the wait")
		}
	}
	s.waitUntil = waitUntil
	for _, name := range []string{jobA, missing} {
		sent := time.Now()
		rec := recorderDo(s, bobToken)("GET", "/public/v2/jobs/"+name, "")
		require.Equal(t, 404, rec.Code, name)
		assert.GreaterOrEqual(t, time.Since(sent), floor, "%s: a 404 takes at least the floor", name)
	}
}

// serveReal serves s on a real listener with short timeouts, as trainq-api
// does, and returns its address.
func serveReal(t *testing.T, s *Server, o ServerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := NewHTTPServer(s, o)
	limited := Listener(ln, o, s.ConnectionRefused)
	go func() { _ = hs.Serve(limited) }() // http.ErrServerClosed once the test's cleanup closes it
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// rawRequest writes head (and then body, a byte every gap) on a new
// connection and returns the answer's status line and how long it took;
// "closed" if the server closed the connection without one.
func rawRequest(t *testing.T, addr, head, body string, gap time.Duration) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = io.WriteString(c, head)
	require.NoError(t, err)
	go func() {
		for i := 0; i < len(body); i++ {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "closed", time.Since(start)
	}
	return strings.TrimSpace(line), time.Since(start)
}

// No request of any shape holds a connection for longer than the header and
// body timeouts: a declared body that never comes, a body that trickles in,
// a chunked body that never ends, headers that never end.
func TestSlowClientsAreAnswered(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	// An answer that must not wait for the body comes before the timeout
	// (now); one that waits for the timeout comes after it, within slack.
	// Both are generous, so that a busy machine's slowness is never taken
	// for the server's.
	const timeout = 5 * time.Second
	const now, slack = timeout - time.Second, timeout + 10*time.Second
	s.opts.BodyTimeout = timeout
	o := ServerOptions{HeaderTimeout: timeout, BodyTimeout: timeout, MaxConnsPerClient: 100}
	addr := serveReal(t, s, o)
	auth := "Authorization: Bearer " + bobToken + "\r\n"
	json := "Content-Type: application/json\r\n"
	for _, tc := range []struct {
		name, head, body string
		gap              time.Duration
		want             string
		within           time.Duration
	}{
		{"declared body, none sent, no token, /healthz", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "", 0, "HTTP/1.1 200 OK", now},
		{"declared body, none sent, no token, POST", "POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "", 0, "HTTP/1.1 401 Unauthorized", now},
		{"declared body, none sent, wrong type", "POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100000\r\n\r\n", "", 0, "HTTP/1.1 415 Unsupported Media Type", now},
		{"declared body, none sent, GET with token", "GET /public/v2/configs HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100\r\n\r\n", "", 0, "HTTP/1.1 200 OK", now},
		{"declared body, none sent", "POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\n" + auth + json + "Content-Length: 100000\r\n\r\n", "", 0, "HTTP/1.1 408 Request Timeout", slack},
		{"a byte every 200ms", "POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\n" + auth + json + "Content-Length: 1000\r\n\r\n", strings.Repeat(" ", 1000), 200 * time.Millisecond, "HTTP/1.1 408 Request Timeout", slack},
		{"a byte every 200ms, no token", "POST /public/v2/jobs/restart HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", strings.Repeat(" ", 1000), 200 * time.Millisecond, "HTTP/1.1 401 Unauthorized", now},
		{"chunked, never ends", "POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\n" + auth + json + "Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", "", 0, "HTTP/1.1 408 Request Timeout", slack},
		{"headers never end", "GET /healthz HTTP/1.1\r\nHost: x\r\n", "", 0, "closed", slack},
		{"headers trickle", "", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 100), 100 * time.Millisecond, "closed", slack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			line, took := rawRequest(t, addr, tc.head, tc.body, tc.gap)
			if tc.want == "closed" && line == "HTTP/1.1 400 Bad Request" {
				line = "closed" // the server may say why it closes
			}
			assert.Equal(t, tc.want, line)
			assert.Less(t, took, tc.within)
		})
	}
	t.Run("a whole body, sent slowly but within the timeout", func(t *testing.T) {
		body := jobBody(nil)
		line, _ := rawRequest(t, addr, fmt.Sprintf("POST /public/v2/jobs HTTP/1.1\r\nHost: x\r\n%s%sContent-Length: %d\r\n\r\n", auth, json, len(body)), body, time.Millisecond)
		assert.Equal(t, "HTTP/1.1 200 OK", line)
	})
	_ = fb
}

// A followed log outlives the request timeouts: they bound reading the
// request, not answering it.
func TestFollowOutlivesRequestTimeouts(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	s.opts.BodyTimeout = 300 * time.Millisecond
	addr := serveReal(t, s, ServerOptions{HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	req, _ := http.NewRequest("GET", "http://"+addr+"/public/v2/jobs/"+jobB+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+bobToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the followed log ended after less than 1.5s: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
}

// One client address gets MaxConnsPerClient connections; the next is
// answered 429 and closed, and a place frees when a connection closes.
func TestConnectionsPerClient(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	addr := serveReal(t, s, ServerOptions{MaxConnsPerClient: 3})
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them
	line, _ := rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "", 0)
	assert.Equal(t, "HTTP/1.1 429 Too Many Requests", line)
	// The held connections still work.
	_, err := io.WriteString(held[0], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	status, err := bufio.NewReader(held[0]).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 200 OK\r\n", status)
	require.NoError(t, held[1].Close())
	time.Sleep(100 * time.Millisecond)
	line, _ = rawRequest(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "", 0)
	assert.Equal(t, "HTTP/1.1 200 OK", line)
	for _, c := range held {
		_ = c.Close()
	}
	m := recorderDo(s, "")("GET", "/metrics", "")
	assert.Contains(t, string(m.Body), "trainq_api_connections_refused_total 1")
}
