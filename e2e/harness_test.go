// Package e2e tests trainq end to end: a real Temporal dev server (bin/temporal),
// the real trainq-worker and trainq binaries, and real worker processes.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// env is shared by every test of the package: one dev server, one config.
var env struct {
	dir        string
	binDir     string
	configPath string
	cfg        *config.Config
	hostPort   string
	client     client.Client
}

// testConfig gives every test its own allocation so that tests cannot
// disturb each other's queues.
const testConfig = `
data_dir: %s
default_region: T
default_allocation: basic
reclaim_interval: 2s
metrics_addr: ""
regions:
  - name: T
    allocations:
      - name: basic
        stop_grace_period: 3s
        nodes:
          - {name: basic-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: basic-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: seed
        stop_grace_period: 60s
        nodes:
          - {name: seed-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-4, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: preempt
        stop_grace_period: 3s
        nodes:
          - {name: preempt-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: bench
        stop_grace_period: 3s
        nodes:
          - {name: bench-1, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-2, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-3, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-4, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
`

func TestMain(m *testing.M) {
	if os.Getenv("TRAINQ_SKIP_E2E") != "" {
		fmt.Println("e2e: skipped (TRAINQ_SKIP_E2E is set)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	temporalBin := os.Getenv("TRAINQ_TEMPORAL_BIN")
	if temporalBin == "" {
		temporalBin = filepath.Join(root, "bin", "temporal")
	}
	if _, err := os.Stat(temporalBin); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the Temporal CLI is missing at %s; run `make test` (it installs it) or set TRAINQ_SKIP_E2E=1\n", temporalBin)
		return 1
	}
	env.dir, err = os.MkdirTemp("", "trainq-e2e-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(env.dir)
	env.binDir = filepath.Join(env.dir, "bin")
	for pkg, name := range map[string]string{"./worker": "trainq-worker", "./starter": "trainq"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(env.binDir, name), pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build failed:", err)
			return 1
		}
	}
	env.configPath = filepath.Join(env.dir, "trainq.yaml")
	if err := os.WriteFile(env.configPath, []byte(fmt.Sprintf(testConfig, filepath.Join(env.dir, "data"))), 0o644); err != nil {
		panic(err)
	}
	if env.cfg, err = config.Load(env.configPath); err != nil {
		panic(err)
	}
	var serverLog bytes.Buffer
	srv, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{
		ExistingPath: temporalBin,
		LogLevel:     "error",
		ExtraArgs:    protocol.DevServerSearchAttributeArgs(),
		Stdout:       &serverLog,
		Stderr:       &serverLog,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: dev server:", err, serverLog.String())
		return 1
	}
	defer srv.Stop()
	env.hostPort = srv.FrontendHostPort()
	env.client = srv.Client()
	os.Setenv("TEMPORAL_ADDRESS", env.hostPort)
	os.Setenv("TRAINQ_TEMPORAL_BIN_RESOLVED", temporalBin)
	os.Setenv("TRAINQ_CONFIG", env.configPath)
	code := m.Run()
	killLeftoverWorkers(filepath.Join(env.dir, "data"))
	return code
}

// killLeftoverWorkers ends the process groups of workers that a failed test
// left running, so that a failure does not leave processes behind.
func killLeftoverWorkers(dataDir string) {
	pids, _ := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "attempt-*", "worker-*", "pid"))
	for _, p := range pids {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// workerProcess is a running trainq-worker.
type workerProcess struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWorker starts trainq-worker; the test stops it at its end.
func startWorker(t *testing.T) *workerProcess {
	t.Helper()
	w := &workerProcess{log: &syncBuffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(filepath.Join(env.binDir, "trainq-worker"), "--config", env.configPath)
	w.cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort)
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	require.NoError(t, w.cmd.Start())
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		w.stop(t)
		if t.Failed() {
			t.Logf("trainq-worker log:\n%s", tail(w.log.String(), 60))
		}
	})
	return w
}

// stop ends the worker gracefully.
func (w *workerProcess) stop(t *testing.T) {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// kill ends the worker abruptly, as a crash would.
func (w *workerProcess) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// trainq runs the CLI and returns its stdout; it fails the test on a
// non-zero exit unless allowFail.
func trainq(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.binDir, "trainq"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort, "TRAINQ_CONFIG="+env.configPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("trainq %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

func submit(t *testing.T, spec protocol.JobSpec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := workflows.Submit(ctx, env.client, env.cfg, "", spec)
	require.NoError(t, err)
	return sub.JobName
}

func status(t *testing.T, job string) protocol.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := workflows.Status(ctx, env.client, job)
	require.NoError(t, err)
	return st
}

func queue(t *testing.T, allocation string) protocol.QueueView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := workflows.Queue(ctx, env.client, "T", allocation)
	require.NoError(t, err)
	return v
}

// eventually polls cond until it holds or the deadline passes. It is the
// way to wait for a state another process reaches; it never stands in for
// an event the test could await directly.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitState(t *testing.T, job string, want protocol.JobState, timeout time.Duration) protocol.JobStatus {
	t.Helper()
	var st protocol.JobStatus
	eventually(t, timeout, fmt.Sprintf("%s to reach %s", job, want), func() bool {
		st = status(t, job)
		if st.State.Terminal() && st.State != want {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("%s ended %s, want %s:\n%s", job, st.State, want, b)
		}
		return st.State == want
	})
	return st
}

// waitResult waits for the job workflow to close.
func waitResult(t *testing.T, job string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out protocol.JobStatus
	return env.client.GetWorkflow(ctx, job, "").Get(ctx, &out)
}

// script builds a shell command line for type=binary jobs.
func script(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// gate is a file a test creates to let a waiting worker script go on.
type gate string

func (g gate) open(t *testing.T) {
	t.Helper()
	require.NoError(t, os.WriteFile(string(g), nil, 0o644))
}

// waitFor returns a script fragment that blocks until the gate exists.
func (g gate) waitFor() string {
	return fmt.Sprintf("while [ ! -e %q ]; do sleep 0.05; done", string(g))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return string(b)
}
