package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/tempcluster"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// startTestCluster starts the cluster of internal/tempcluster for the whole
// package and points env at it.
func startTestCluster(root string) (stop func(), err error) {
	bin, err := tempcluster.FindBinaries(root)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := tempcluster.Start(ctx, bin, tempcluster.Options{Dir: filepath.Join(env.dir, "cluster")})
	if err != nil {
		return nil, err
	}
	fmt.Printf("e2e: on a Temporal %s cluster: PostgreSQL persistence and SQL visibility, %d history shards, "+
		"frontend/history/matching/worker as separate processes, frontend %s (started in %s)\n",
		tempcluster.Version, c.Shards(), c.HostPort(), time.Since(start).Round(100*time.Millisecond))
	env.cluster = c
	env.hostPort = c.HostPort()
	if env.client, err = c.Client(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return func() {
		env.client.Close()
		if os.Getenv("TRAINQ_CLUSTER_KEEP") != "" {
			fmt.Println("e2e: cluster logs kept in", c.Dir())
		}
		c.Stop()
	}, nil
}

// clusterProcs are the trainq processes a test shares on the cluster, per config.
var clusterProcs sync.Map // *testing.T + config path -> struct{}

// startClusterWorker: see startWorkerWith.
func startClusterWorker(t *testing.T, configPath string) *testenv.WorkerProcess {
	t.Helper()
	key := fmt.Sprintf("%p %s", t, configPath)
	if _, loaded := clusterProcs.LoadOrStore(key, struct{}{}); !loaded {
		t.Cleanup(func() { clusterProcs.Delete(key) })
		cfg, err := config.Load(configPath)
		require.NoError(t, err)
		args := []string{"agent", "--config", configPath}
		for _, n := range cfg.Nodes() {
			args = append(args, "--node", n)
		}
		agent := startProcessNamed(t, "agents", args...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, agent.WaitLog(ctx, "running"))
		startProcessNamed(t, "replica 2", "--config", configPath, "--agents=false")
	}
	return startProcessNamed(t, "replica 1", "--config", configPath, "--agents=false")
}

// startSecondReplica starts another trainq-worker like the one args started.
func startSecondReplica(t *testing.T, args []string) {
	t.Helper()
	startProcessNamed(t, "replica 2", args...)
}

func startProcessNamed(t *testing.T, name string, args ...string) *testenv.WorkerProcess {
	t.Helper()
	w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"), args, []string{"TEMPORAL_ADDRESS=" + env.hostPort})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("trainq-worker (%s) %v log:\n%s", name, args, w.LogTail(40))
		}
	})
	return w
}

// needCluster skips a test that only makes sense on the test cluster.
func needCluster(t *testing.T) {
	t.Helper()
	if env.cluster == nil {
		t.Skip("needs the production-shaped cluster: TRAINQ_TEST_CLUSTER=1 (make test-cluster)")
	}
}

// TestClusterServicesRestartUnderAJob kills -9 and restarts each Temporal
// service, then crashes and restarts PostgreSQL, while a job runs and
// another waits for its GPUs: after each fault a new job submitted runs to
// the end, and at the end both first jobs complete and the allocation is free.
func TestClusterServicesRestartUnderAJob(t *testing.T) {
	needCluster(t)
	startWorker(t)
	dir := t.TempDir()
	g := gate(filepath.Join(dir, "go"))
	running := submit(t, protocol.JobSpec{Script: g.waitFor(), InstanceType: "a100.2gpu", Region: "T", AllocationName: "basic",
		PriorityClass: "medium", NWorkers: 2, Type: "binary"})
	waitState(t, running, protocol.StateRunning, long)
	waiting := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "basic",
		PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	eventually(t, long, "the second job to wait", func() bool { return len(queue(t, "basic").Waiting) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var maxLag time.Duration
	for _, fault := range []string{tempcluster.History, tempcluster.Matching, tempcluster.Frontend, "postgres", tempcluster.Worker} {
		start := time.Now()
		if fault == "postgres" {
			require.NoError(t, env.cluster.RestartPostgres(ctx))
		} else {
			require.NoError(t, env.cluster.Restart(ctx, fault), fault)
		}
		t.Logf("kill -9 and restart of %s: serving again in %s", fault, time.Since(start).Round(time.Millisecond))
		require.Equal(t, protocol.StateRunning, status(t, running).State, "after the restart of %s", fault)
		// A probe job on another allocation runs from submission to its end.
		probe := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.1gpu", Region: "T", AllocationName: "eta",
			PriorityClass: "medium", NWorkers: 1, Type: "binary"})
		lag := visibilityLag(t, probe, "eta")
		waitState(t, probe, protocol.StateCompleted, long)
		t.Logf("after %s: a new job ran to its end %s after the restart; listed by its allocation %s after its start returned",
			fault, time.Since(start).Round(time.Millisecond), lag.Round(time.Millisecond))
		maxLag = max(maxLag, lag)
	}
	t.Logf("FIGURES largest visibility lag after a restart: %s (a job listed by its allocation, as recovery lists them, after its start returned)",
		maxLag.Round(time.Millisecond))
	g.open(t)
	waitState(t, running, protocol.StateCompleted, long)
	waitState(t, waiting, protocol.StateCompleted, long)
	eventually(t, long, "the basic allocation to be free", func() bool { return allFree(t, "basic") })
}

// visibilityLag polls visibility, from now, until it lists job by its
// region and allocation attributes, as recovery's listing finds jobs, and
// returns how long that took.
func visibilityLag(t *testing.T, job, allocation string) time.Duration {
	t.Helper()
	start := time.Now()
	query := fmt.Sprintf("WorkflowId = '%s' AND %s = 'T' AND %s = '%s'", job, protocol.SARegion, protocol.SAAllocation, allocation)
	for time.Since(start) < long {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := env.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		cancel()
		if err == nil && len(resp.Executions) == 1 {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s is not listed by %q after %s", job, query, long)
	return 0
}
