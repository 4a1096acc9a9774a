// Package e2e tests trainq end to end: a real Temporal dev server (bin/temporal),
// the real trainq-worker and trainq binaries, and real worker processes.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/tempcluster"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// env is shared by every test of the package: one dev server, one config.
var env struct {
	dir        string
	binDir     string
	configPath string
	cfg        *config.Config
	hostPort   string
	client     client.Client
	// cluster is the production-shaped Temporal cluster the suite runs on
	// under TRAINQ_TEST_CLUSTER=1 (nil on the dev server): see cluster_test.go.
	cluster *tempcluster.Cluster
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
      - name: capped
        stop_grace_period: 3s
        max_waiting: 2
        limits:
          - {workspace: team-a, class: medium, max_waiting: 1}
        nodes:
          - {name: capped-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: recover
        stop_grace_period: 30s
        nodes:
          - {name: recover-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: recover-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: recover-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: reset
        stop_grace_period: 3s
        nodes:
          - {name: reset-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: resetreg
        stop_grace_period: 3s
        ordering: fair-share
        fair_share_half_life: 1h
        fair_share_interval: 1s
        nodes:
          - {name: resetreg-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: guard
        stop_grace_period: 3s
        nodes:
          - {name: guard-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: notice
        stop_grace_period: 3s
        preemption_notice: 30s
        nodes:
          - {name: notice-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: resetjob
        stop_grace_period: 3s
        preemption_notice: 30s
        nodes:
          - {name: resetjob-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: signal
        stop_grace_period: 3s
        preemption_notice: 30s
        preemption_notice_by_class: {medium: 20s}
        notice_signal: SIGUSR1
        nodes:
          - {name: signal-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: placed
        stop_grace_period: 3s
        queues:
          - {name: default, default: true}
          - {name: pair, nodes: [placed-2, placed-3]}
        nodes:
          - {name: placed-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: placed-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: placed-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: eta
        stop_grace_period: 3s
        nodes:
          - {name: eta-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: loan
        stop_grace_period: 3s
        preemption_notice: 5s
        reserve_after: 1m
        backfill: true
        nodes:
          - {name: loan-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: limited
        stop_grace_period: 3s
        limits:
          - {class: high, max_gpus: 2}
        nodes:
          - {name: limited-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: limited-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: fair
        stop_grace_period: 3s
        ordering: fair-share
        fair_share_half_life: 1h
        fair_share_interval: 1s
        nodes:
          - {name: fair-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: drain
        stop_grace_period: 3s
        preemption_notice: 30s
        nodes:
          - {name: drain-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: drain-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: idle
        stop_grace_period: 5s
        idle_timeout: 6s
        idle_warning: 3s
        nodes:
          - {name: idle-1, family: a100, gpus: 1, cpu: 16, ram_gb: 128}
      - name: autostop
        stop_grace_period: 3s
        idle_timeout: 2s
        nodes:
          - {name: autostop-1, family: a100, gpus: 1, cpu: 16, ram_gb: 128}
      - name: bench
        stop_grace_period: 3s
        nodes:
          - {name: bench-1, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-2, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-3, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
          - {name: bench-4, family: a100, gpus: 8, cpu: 96, ram_gb: 768}
`

func TestMain(m *testing.M) {
	testenv.Bootstrap{Package: "e2e", Root: "..",
		Build: map[string]string{"trainq-worker": "./cmd/trainq-worker", "trainq-supervise": "./cmd/trainq-supervise", "trainq": "./cmd/trainq"}}.Main(m, run)
}

func run(m *testing.M, h *testenv.Harness) int {
	root, temporalBin := h.Root, h.TemporalBin
	env.dir, env.binDir = h.Dir, h.BinDir
	var err error
	env.configPath = filepath.Join(env.dir, "trainq.yaml")
	if err := os.WriteFile(env.configPath, []byte(fmt.Sprintf(testConfig, filepath.Join(env.dir, "data"))), 0o644); err != nil {
		panic(err)
	}
	if env.cfg, err = config.Load(env.configPath); err != nil {
		panic(err)
	}
	if os.Getenv("TRAINQ_TEST_CLUSTER") != "" {
		stop, err := startTestCluster(root)
		if err != nil {
			return h.Fail("Temporal cluster", err)
		}
		defer stop()
	} else {
		srv, err := testenv.StartDevServer(temporalBin)
		if err != nil {
			return h.Fail("dev server", err)
		}
		defer func() { _ = srv.Stop() }()
		env.hostPort = srv.FrontendHostPort()
		env.client = srv.Client()
	}
	for _, kv := range [][2]string{
		{"TEMPORAL_ADDRESS", env.hostPort},
		{"TRAINQ_TEMPORAL_BIN_RESOLVED", temporalBin},
		{"TRAINQ_CONFIG", env.configPath},
	} {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	code := m.Run()
	testenv.KillLeftoverWorkers(filepath.Join(env.dir, "data"))
	return code
}

// startWorker starts trainq-worker on the shared config; the test stops it at its end.
func startWorker(t *testing.T) *testenv.WorkerProcess {
	t.Helper()
	return startWorkerWith(t, env.configPath)
}

// startWorkerWith starts trainq-worker on configPath; the test stops it at its end.
// On the test cluster (TRAINQ_TEST_CLUSTER=1) the test's trainq runs as two
// replicas, as behind a Deployment, with the node agents apart: the worker
// returned runs the workflows and control activities (--agents=false), and
// the test's first call also starts a second such replica and one
// `trainq-worker agent` process for every node of the config, kept for the
// whole test. Killing the returned worker leaves the other replica to carry on.
func startWorkerWith(t *testing.T, configPath string) *testenv.WorkerProcess {
	t.Helper()
	if env.cluster != nil {
		return startClusterWorker(t, configPath)
	}
	w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"),
		[]string{"--config", configPath}, []string{"TEMPORAL_ADDRESS=" + env.hostPort})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("trainq-worker log:\n%s", w.LogTail(60))
		}
	})
	return w
}

// startShortRunAllocator starts the allocation's allocator afresh, before
// trainq-worker does, with a per-run message limit (the worker's reconfigure
// at its start keeps it, and every run carries it on): the allocator then
// continues as new every few requests and releases, as a busy one does after
// max_updates_per_run. It terminates a run left by an earlier test first, and
// the allocator when the test ends.
func startShortRunAllocator(t *testing.T, cfg *config.Config, allocation string, maxUpdatesPerRun int) {
	t.Helper()
	in, err := cfg.AllocatorInput("T", allocation)
	require.NoError(t, err)
	in.MaxUpdatesPerRun = maxUpdatesPerRun
	id := protocol.AllocatorWorkflowID("T", allocation)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.client.TerminateWorkflow(ctx, id, "", "e2e: restarted with a per-run message limit"); err != nil {
		var notFound *serviceerror.NotFound
		require.ErrorAs(t, err, &notFound)
	}
	_, err = env.client.ExecuteWorkflow(ctx, protocol.AllocatorStartOptions("T", allocation), protocol.AllocatorWorkflowName, in)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.client.TerminateWorkflow(ctx, id, "", "e2e: test over")
	})
}

// trainq runs the CLI and returns its stdout; it fails the test on a
// non-zero exit unless allowFail.
func trainq(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.binDir, "trainq"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort, "TRAINQ_CONFIG="+env.configPath)
	return runCommand(t, cmd)
}

// runCommand runs cmd and returns its stdout, stderr and exit code; it fails
// the test only if the command could not run at all.
func runCommand(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return stdout.String(), stderr.String(), code
}

// submit submits spec; a retry after a transient error finds the job the
// first try started, by its name.
func submit(t *testing.T, spec protocol.JobSpec) string {
	t.Helper()
	name := tqclient.NewJobName(spec.Kind)
	var sub tqclient.Submission
	require.NoError(t, testenv.Retry(t, long, "submit "+name, func(ctx context.Context) (err error) {
		sub, err = tqclient.New(env.client, env.cfg).Submit(ctx, spec, tqclient.SubmitOptions{Name: name})
		return err
	}))
	return sub.JobName
}

func status(t *testing.T, job string) protocol.JobStatus {
	t.Helper()
	var st protocol.JobStatus
	require.NoError(t, testenv.Retry(t, long, "status of "+job, func(ctx context.Context) (err error) {
		st, err = tqclient.New(env.client, nil).Status(ctx, job)
		return err
	}))
	return st
}

func queue(t *testing.T, allocation string) protocol.QueueView {
	t.Helper()
	var v protocol.QueueView
	require.NoError(t, testenv.Retry(t, long, "queue of "+allocation, func(ctx context.Context) (err error) {
		v, err = tqclient.New(env.client, nil).Queue(ctx, "T", allocation)
		return err
	}))
	return v
}

// eventually polls cond until it holds (see testenv.Eventually).
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func waitState(t *testing.T, job string, want protocol.JobState, timeout time.Duration) protocol.JobStatus {
	t.Helper()
	return testenv.WaitState(t, env.client, job, want, timeout)
}

// waitResult waits for the job workflow to close.
func waitResult(t *testing.T, job string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out protocol.JobStatus
	return env.client.GetWorkflow(ctx, job, "").Get(ctx, &out)
}

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
