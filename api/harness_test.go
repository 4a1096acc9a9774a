package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// env is shared by the tests that need Temporal: one dev server, one
// trainq-worker, one API server (httptest) around the real handler.
var env struct {
	ready  bool
	why    string // why not ready
	dir    string
	cfg    *config.Config
	client sdkclient.Client
	server *httptest.Server
	// handler and backend are the Server behind server and its client.
	handler *Server
	backend *client.Client
	tokens  map[string]string // user -> bearer token
	// cluster: the tests run on the production-shaped Temporal cluster
	// (TRAINQ_TEST_CLUSTER=1), with two trainq-workers and two trainq-api
	// processes behind env.server (cluster_test.go).
	cluster bool
}

// testConfig: region SR006 with the seed's instance type in its default
// allocation (two a100plus 8-GPU nodes, so the seed body's n_workers=2 fits),
// and small allocations of their own for tests that watch queues.
const testConfig = `
data_dir: %s
default_region: SR006
default_allocation: default
reclaim_interval: 2s
metrics_addr: ""
regions:
  - name: SR006
    allocations:
      - name: default
        stop_grace_period: 3s
        nodes:
          - {name: api-a100plus-1, family: a100plus, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: api-a100plus-2, family: a100plus, gpus: 8, cpu: 96, ram_gb: 768}
      - name: t
        stop_grace_period: 3s
        queues:
          - {name: default, type: default, default: true}
          - {name: shared, type: shared, job_priority_allowed: [shared-low, shared-medium]}
          - name: prod
            description: urgent production jobs
            nodes: [api-t-3, api-t-4]
            job_priority_allowed: [medium, high]
            default_priority: {job: high}
            workspaces: [team-b]
        nodes:
          - {name: api-t-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-t-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-t-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-t-4, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: q
        stop_grace_period: 3s
        nodes:
          - {name: api-q-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: lim
        stop_grace_period: 1s
        limits:
          - {workspace: team-a, class: medium, max_waiting: 1}
        nodes:
          - {name: api-lim-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: w
        stop_grace_period: 1s
        nodes:
          - {name: api-w-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: dry
        stop_grace_period: 1s
        nodes:
          - {name: api-dry-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: ui
        stop_grace_period: 60s
        nodes:
          - {name: api-ui-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-ui-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-ui-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: api-ui-4, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`

// The test principals.
var testUsers = []struct{ user, workspace, role string }{
	{"alice", "team-a", RoleUser},
	{"bob", "team-b", RoleUser},
	{"carol", "team-empty", RoleUser},
	{"dave", "team-dave", RoleUser},
	{"root", "ops", RoleAdmin},
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		env.why = "fuzzing"
	} else if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "^$" {
		env.why = "no tests selected"
	}
	if env.why != "" {
		os.Exit(m.Run())
	}
	testenv.Bootstrap{Package: "api", Root: "..", TestsWithoutServer: true,
		Build: map[string]string{"trainq-worker": "./cmd/trainq-worker", "trainq-supervise": "./cmd/trainq-supervise"}}.Main(m, run)
}

func run(m *testing.M, h *testenv.Harness) int {
	if h.Skip != "" {
		env.why = h.Skip
		return m.Run()
	}
	root, temporalBin := h.Root, h.TemporalBin
	env.dir = h.Dir
	var err error
	workerBin := filepath.Join(h.BinDir, "trainq-worker")
	configPath := filepath.Join(env.dir, "client.yaml")
	dataDir := filepath.Join(env.dir, "data")
	if err := os.WriteFile(configPath, []byte(fmt.Sprintf(testConfig, dataDir)), 0o644); err != nil {
		panic(err)
	}
	if env.cfg, err = config.Load(configPath); err != nil {
		panic(err)
	}
	var hostPort string
	if os.Getenv("TRAINQ_TEST_CLUSTER") != "" {
		cl, addr, stop, err := startTestCluster(root, env.dir)
		if err != nil {
			return h.Fail("Temporal cluster", err)
		}
		defer stop()
		env.client, hostPort, env.cluster = cl, addr, true
	} else {
		srv, err := testenv.StartDevServer(temporalBin)
		if err != nil {
			return h.Fail("dev server", err)
		}
		defer func() { _ = srv.Stop() }()
		env.client, hostPort = srv.Client(), srv.FrontendHostPort()
	}

	// On the cluster: two replicas of the workflow worker, the agents apart.
	var workers []*testenv.WorkerProcess
	roles := [][]string{{"--config", configPath}}
	if env.cluster {
		roles = [][]string{{"--config", configPath, "--agents=false"}, {"--config", configPath, "--agents=false"}, agentArgs(configPath)}
	}
	defer func() {
		for _, w := range workers {
			w.Stop(30 * time.Second)
		}
		testenv.KillLeftoverWorkers(dataDir)
	}()
	for _, args := range roles {
		worker, err := testenv.StartWorker(workerBin, args, []string{"TEMPORAL_ADDRESS=" + hostPort})
		if err != nil {
			return h.Fail("trainq-worker", err)
		}
		workers = append(workers, worker)
	}

	tokensPath := filepath.Join(env.dir, "tokens.yaml")
	env.tokens = map[string]string{}
	for _, u := range testUsers {
		tok, err := AddToken(tokensPath, u.user, u.workspace, u.role)
		if err != nil {
			panic(err)
		}
		env.tokens[u.user] = tok
	}
	tokens, err := LoadTokens(tokensPath)
	if err != nil {
		panic(err)
	}
	env.backend = client.New(env.client, env.cfg)
	// The worker starts the allocators after it is up: a test that asks one
	// first would get "no running allocator" on a busy machine.
	if err := waitForAllocators(env.backend, env.cfg); err != nil {
		return h.Fail("allocators", err)
	}
	s, err := New(Options{Config: env.cfg, Backend: env.backend, Tokens: tokens,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CallTimeout: 15 * time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	env.handler = s
	if env.cluster {
		// Two trainq-api processes behind one address, alternating.
		proxy, stop, err := startAPIReplicas(root, configPath, tokensPath, hostPort)
		if err != nil {
			return h.Fail("trainq-api", err)
		}
		defer stop()
		env.server = proxy
	} else {
		env.server = httptest.NewServer(s)
	}
	defer env.server.Close()
	env.ready = true
	code := m.Run()
	if code != 0 {
		for i, w := range workers {
			fmt.Fprintf(os.Stderr, "trainq-worker %v log (tail):\n%s\n", roles[i], w.LogTail(40))
		}
	}
	return code
}

// needServer skips a test that needs the dev server when there is none.
func needServer(t *testing.T) {
	t.Helper()
	if !env.ready {
		t.Skip("no Temporal dev server: " + env.why)
	}
}

// response is an answer of the API server.
type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), string(r.Body))
}

func (r response) err(t *testing.T) Error {
	t.Helper()
	var e struct{ Error Error }
	r.json(t, &e)
	return e.Error
}

// call sends a request as user ("" = no token) to the test server.
func call(t *testing.T, user, method, path string, body any, hdr ...string) response {
	t.Helper()
	needServer(t)
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, env.server.URL+path, rd)
	require.NoError(t, err)
	if user != "" {
		tok, ok := env.tokens[user]
		if !ok {
			tok = user // a raw (unknown) token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
}

// submitJob posts a job as user and returns its name.
func submitJob(t *testing.T, user string, req map[string]any, hdr ...string) string {
	t.Helper()
	r := call(t, user, "POST", "/public/v2/jobs", req, hdr...)
	require.Equal(t, 200, r.Code, string(r.Body))
	var sub submitted
	r.json(t, &sub)
	require.True(t, strings.HasPrefix(sub.JobName, protocol.JobNamePrefix), sub.JobName)
	if slices.Contains(hdr, "Idempotency-Key") {
		// A keyed submission answers with the job's state when asked, and a job the allocator
		// granted at once may be Starting by then (neighbour run 33 saw it).
		require.Contains(t, []string{"Pending", "Starting"}, sub.Status)
	} else {
		require.Equal(t, "Pending", sub.Status)
	}
	return sub.JobName
}

// job is a binary job on allocation t.
func job(script string, more ...any) map[string]any {
	m := map[string]any{"script": script, "base_image": "busybox", "instance_type": "a100.1gpu", "allocation_name": "t", "type": "binary"}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i].(string)] = more[i+1]
	}
	return m
}

func jobStatus(t *testing.T, user, name string) jobView {
	t.Helper()
	r := call(t, user, "GET", "/public/v2/jobs/"+name, nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var v jobView
	r.json(t, &v)
	return v
}

const long = 90 * time.Second

//nolint:unparam // the call shows how long it waits, as testenv.Eventually's does
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func waitStatus(t *testing.T, user, name string, want ...string) jobView {
	t.Helper()
	var v jobView
	eventually(t, long, fmt.Sprintf("%s to reach %v", name, want), func() bool {
		r := call(t, user, "GET", "/public/v2/jobs/"+name, nil)
		if r.Code == http.StatusServiceUnavailable {
			// Temporal or the worker is busy for a moment (the API's
			// answer to a transient error): ask again.
			t.Logf("status of %s: %s (asking again)", name, r.Body)
			return false
		}
		require.Equal(t, 200, r.Code, string(r.Body))
		r.json(t, &v)
		for _, w := range want {
			if v.Status == w {
				return true
			}
		}
		if protocol.JobState(v.Status).Terminal() {
			t.Fatalf("%s ended %s (%s), want %v", name, v.Status, v.Message, want)
		}
		return false
	})
	return v
}

// listNames lists job names as user with query q.
func listNames(t *testing.T, user, q string) (int, []string) {
	t.Helper()
	r := call(t, user, "GET", "/public/v2/jobs"+q, nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var out struct {
		Count int      `json:"count"`
		Jobs  []jobRow `json:"jobs"`
	}
	r.json(t, &out)
	var names []string
	for _, j := range out.Jobs {
		names = append(names, j.JobName)
	}
	return out.Count, names
}

// waitForAllocators waits until every configured allocation answers.
func waitForAllocators(c *client.Client, cfg *config.Config) error {
	deadline := time.Now().Add(3 * time.Minute)
	for _, a := range cfg.Allocations() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Counts(ctx, a.Region, a.Allocation.Name)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("allocation %s/%s: %w", a.Region, a.Allocation.Name, err)
			}
			time.Sleep(200 * time.Millisecond) // polling a process that starts on its own
		}
	}
	return nil
}
