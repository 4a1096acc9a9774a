package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// recordingScript records the worker's start and end (see
// testenv.ParseHoldRecords) around body, so that a test can check from the
// workers themselves that no GPU ever had two holders.
func recordingScript(records, body string) string {
	line := func(what string) string {
		return fmt.Sprintf(`echo "%s $TRAINQ_JOB_NAME $TRAINQ_ATTEMPT $TRAINQ_WORKER $TRAINQ_NODE $CUDA_VISIBLE_DEVICES $(date +%%s%%N)" >> %s`, what, records)
	}
	return line("start") + "; trap '" + strings.ReplaceAll(line("end"), "'", `'\''`) + "' EXIT; " + body
}

// checkNoDoubleHolds fails the test if any GPU index on any node was held by
// two workers at once, or any worker of an attempt started twice.
func checkNoDoubleHolds(t *testing.T, records, dataDir string) testenv.HoldReport {
	t.Helper()
	f, err := os.Open(records)
	require.NoError(t, err)
	defer f.Close()
	events, anomalies, err := testenv.ParseHoldRecords(f)
	require.NoError(t, err)
	require.Empty(t, anomalies)
	rep := testenv.CheckHolds(events, testenv.ExitTimes(dataDir), time.Now())
	assert.Empty(t, rep.Overlaps, "a GPU had two holders at once")
	assert.Empty(t, rep.Duplicates, "a worker of an attempt ran twice")
	assert.Empty(t, rep.Anomalies)
	return rep
}

func terminateAllocator(t *testing.T, allocation string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, env.client.TerminateWorkflow(ctx, protocol.AllocatorWorkflowID("T", allocation), "", "e2e: the allocator is lost"))
}

// TestTerminatedAllocatorRecovers terminates the allocator while jobs run,
// one releases and two wait; a fresh allocator must rebuild that picture
// from the jobs, grant nothing that is still held, and start every waiting job.
func TestTerminatedAllocatorRecovers(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	runGate, stopGate := gate(filepath.Join(dir, "run")), gate(filepath.Join(dir, "stop"))
	// running holds two of the three nodes until runGate opens.
	running := submit(t, fixture.Job{Allocation: "recover", Class: "high", Workers: 2, MaxRetry: 1, Script: recordingScript(records, runGate.waitFor())}.Spec())
	// releasing takes the third node and, once cancelled, stops only when
	// stopGate opens (the allocation's stop_grace_period is 30s).
	releasing := submit(t, fixture.Job{Allocation: "recover", Class: "medium", MaxRetry: 1, Script: recordingScript(records,
		"trap '"+stopGate.waitFor()+"; exit 0' TERM; while true; do sleep 0.05; done")}.Spec())
	waitState(t, running, protocol.StateRunning, long)
	waitState(t, releasing, protocol.StateRunning, long)
	waiting2 := submit(t, fixture.Job{Allocation: "recover", Class: "medium", Workers: 2, MaxRetry: 1, Script: recordingScript(records, "sleep 0.2")}.Spec())
	waiting1 := submit(t, fixture.Job{Allocation: "recover", Class: "low", MaxRetry: 1, Script: recordingScript(records, "sleep 0.2")}.Spec())
	eventually(t, long, "both new jobs to wait", func() bool { return len(queue(t, "recover").Waiting) == 2 })

	terminateAllocator(t, "recover")
	_, _, code := trainq(t, "cancel", releasing)
	require.Equal(t, 0, code)
	// The operator's command rebuilds the state (trainq-worker would also
	// restart the allocator on its own within reclaim_interval).
	out, errOut, code := trainq(t, "allocator", "recover", "recover", "--region", "T")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "recovered")

	v := queue(t, "recover")
	assert.False(t, v.Recovering)
	assert.Contains(t, runningJobs(v), running, "the running job's hold is known again")
	assert.ElementsMatch(t, []string{waiting2, waiting1}, waitingJobs(v), "the waiting jobs are queued again")
	stopGate.open(t)
	waitState(t, releasing, protocol.StateStopped, long)
	// Neither waiting job fits while running holds two nodes: a fresh,
	// empty allocator would have granted them its GPUs.
	st := status(t, waiting2)
	assert.Equal(t, protocol.StatePending, st.State)

	runGate.open(t)
	for _, job := range []string{running, waiting2, waiting1} {
		waitState(t, job, protocol.StateCompleted, long)
	}
	rep := checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))
	assert.GreaterOrEqual(t, len(rep.Holds), 6)
	eventually(t, long, "every GPU of the allocation to be free", func() bool {
		v := queue(t, "recover")
		return freeGPUs(v) == 6 && len(v.Running) == 0
	})
}

// TestTerminatedAllocatorIsRestartedByTheWorker checks that a pending job
// does not wait for ever when nobody recovers the allocator by hand.
func TestTerminatedAllocatorIsRestartedByTheWorker(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	blocker := gate(filepath.Join(dir, "blocker"))
	first := submit(t, fixture.Job{Allocation: "recover", Class: "medium", Workers: 3, MaxRetry: 1, Script: blocker.waitFor()}.Spec())
	waitState(t, first, protocol.StateRunning, long)
	pending := submit(t, fixture.Job{Allocation: "recover", Class: "medium", MaxRetry: 1, Script: "true"}.Spec())
	eventually(t, long, "the job to wait", func() bool { return len(queue(t, "recover").Waiting) == 1 })
	terminateAllocator(t, "recover")
	blocker.open(t)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, pending, protocol.StateCompleted, long)
}

// agentConfig is a config of its own for the agent tests: a short
// node_timeout, so that a killed agent counts as lost within seconds.
const agentConfig = `
data_dir: %s
default_region: T
default_allocation: agents
reclaim_interval: 2s
node_timeout: 4s
metrics_addr: ""
regions:
  - name: T
    allocations:
      - name: agents
        stop_grace_period: 3s
        nodes:
          - {name: agent-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: agent-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`

type agentCluster struct {
	config, data string
	allocation   string
	cfg          *config.Config
	agents       map[string]*testenv.WorkerProcess
}

// startAgentCluster runs the workflows in one trainq-worker and each node's
// agent in a process of its own, as on a real cluster.
func startAgentCluster(t *testing.T) *agentCluster {
	t.Helper()
	return startAgentClusterOf(t, "agents")
}

// startAgentClusterOf is startAgentCluster with the allocation named
// allocation instead of agents: a test that needs an allocator with no past
// takes a name of its own.
func startAgentClusterOf(t *testing.T, allocation string) *agentCluster {
	t.Helper()
	dir := t.TempDir()
	c := &agentCluster{config: filepath.Join(dir, "trainq.yaml"), data: filepath.Join(dir, "data"), agents: map[string]*testenv.WorkerProcess{}, allocation: allocation}
	cfg := strings.ReplaceAll(fmt.Sprintf(agentConfig, c.data), "allocation: agents", "allocation: "+allocation)
	cfg = strings.ReplaceAll(cfg, "- name: agents", "- name: "+allocation)
	require.NoError(t, os.WriteFile(c.config, []byte(cfg), 0o644))
	var err error
	c.cfg, err = config.Load(c.config)
	require.NoError(t, err)
	t.Cleanup(func() { testenv.KillLeftoverWorkers(c.data) })
	startProcess(t, "--config", c.config, "--agents=false")
	for _, node := range []string{"agent-1", "agent-2"} {
		c.startAgent(t, node)
	}
	return c
}

func (c *agentCluster) startAgent(t *testing.T, node string) {
	t.Helper()
	c.agents[node] = startProcess(t, "agent", "--node", node, "--config", c.config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.agents[node].WaitLog(ctx, "running"))
}

func startProcess(t *testing.T, args ...string) *testenv.WorkerProcess {
	t.Helper()
	w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"), args, []string{"TEMPORAL_ADDRESS=" + env.hostPort})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("trainq-worker %v log:\n%s", args, w.LogTail(40))
		}
	})
	if env.cluster != nil && slices.Contains(args, "--agents=false") {
		startSecondReplica(t, args)
	}
	return w
}

func (c *agentCluster) submit(t *testing.T, script string) string {
	t.Helper()
	spec := fixture.Job{Allocation: "agents", Script: script}.Spec()
	spec.AllocationName = c.allocation
	return submitWith(t, c.cfg, spec)
}

func nodeOfJob(t *testing.T, job string) string {
	st := status(t, job)
	require.NotEmpty(t, st.Attempts)
	p := st.Attempts[len(st.Attempts)-1].Placement
	require.Len(t, p, 1)
	return p[0].Node
}

func agentsQueue(t *testing.T) protocol.QueueView { return queue(t, "agents") }

func fencedNodes(v protocol.QueueView) []string {
	var out []string
	for _, f := range v.Fenced {
		out = append(out, f.Node)
	}
	return out
}

// TestKilledAgentLosesItsNode kills the agent of a running job's node: the
// attempt ends as a node loss and reruns on the other node without spending
// max_retry; the lost node grants nothing until its agent is back and has
// stopped the stale worker.
func TestKilledAgentLosesItsNode(t *testing.T) {
	c := startAgentCluster(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	job := c.submit(t, recordingScript(records,
		`if [ "$TRAINQ_ATTEMPT" = 1 ]; then while true; do sleep 0.05; done; fi`))
	waitState(t, job, protocol.StateRunning, long)
	lost := nodeOfJob(t, job)
	c.agents[lost].Kill()

	st := waitState(t, job, protocol.StateCompleted, 3*long)
	require.Len(t, st.Attempts, 2)
	assert.Equal(t, fmt.Sprintf("node %s lost: its agent did not answer for 4s", lost), st.Attempts[0].EndReason)
	assert.Equal(t, 0, st.Restarts, "a node loss does not count against max_retry")
	assert.Equal(t, 1, st.NodeLosses)
	assert.NotEqual(t, lost, st.Attempts[1].Placement[0].Node, "the rerun went to the node that answers")
	v := agentsQueue(t)
	assert.Equal(t, []string{lost}, fencedNodes(v))
	assert.Contains(t, v.Fenced[0].Reason, "lost")

	// The stale worker of attempt 1 still runs on the lost node: its GPUs
	// were never granted again, and the returning agent stops it.
	stale := func() bool {
		ws, err := testenv.LiveWorkers(c.data)
		require.NoError(t, err)
		return slices.ContainsFunc(ws, func(w testenv.LiveWorker) bool { return w.Key.Job == job && w.Key.Attempt == 1 })
	}
	require.True(t, stale(), "the lost node's worker outlived its agent")
	c.startAgent(t, lost)
	eventually(t, long, "the returning agent to stop the stale worker and the node to serve again", func() bool {
		return !stale() && len(agentsQueue(t).Fenced) == 0
	})
	checkNoDoubleHolds(t, records, c.data)
	next := c.submit(t, "true")
	waitState(t, next, protocol.StateCompleted, long)
}

// TestCancelWithNodeGone cancels a job whose node's agent is dead, and one
// whose agent dies while it stops: both end Stopped, and their nodes are
// fenced rather than freed.
func TestCancelWithNodeGone(t *testing.T) {
	c := startAgentCluster(t)
	dir := t.TempDir()
	stopping := gate(filepath.Join(dir, "stopping"))
	slowStop := c.submit(t, "trap 'touch "+string(stopping)+"; sleep 60' TERM; while true; do sleep 0.05; done")
	goneFirst := c.submit(t, "while true; do sleep 0.05; done")
	waitState(t, slowStop, protocol.StateRunning, long)
	waitState(t, goneFirst, protocol.StateRunning, long)

	// goneFirst's agent dies, then the user cancels it.
	c.agents[nodeOfJob(t, goneFirst)].Kill()
	_, _, code := trainq(t, "--config", c.config, "cancel", goneFirst)
	require.Equal(t, 0, code)
	// slowStop is cancelled, and its agent dies while it stops.
	_, _, code = trainq(t, "--config", c.config, "cancel", slowStop)
	require.Equal(t, 0, code)
	eventually(t, long, "slowStop's worker to get SIGTERM", func() bool { _, err := os.Stat(string(stopping)); return err == nil })
	c.agents[nodeOfJob(t, slowStop)].Kill()

	for _, job := range []string{goneFirst, slowStop} {
		waitState(t, job, protocol.StateStopped, 3*long)
	}
	v := agentsQueue(t)
	assert.ElementsMatch(t, []string{"agent-1", "agent-2"}, fencedNodes(v), "nobody confirmed the workers stopped")
	assert.Empty(t, v.Running)
	// Nothing is granted on a fenced node, until its agent is back and has
	// stopped the workers nobody holds.
	next := c.submit(t, "true")
	eventually(t, long, "the new job to wait", func() bool { return slices.Contains(waitingJobs(agentsQueue(t)), next) })
	assert.Equal(t, protocol.StatePending, status(t, next).State)
	for _, node := range []string{"agent-1", "agent-2"} {
		c.startAgent(t, node)
	}
	waitState(t, next, protocol.StateCompleted, long)
	eventually(t, long, "the returning agents to stop the cancelled jobs' workers and unfence their nodes", func() bool {
		ws, err := testenv.LiveWorkers(c.data)
		require.NoError(t, err)
		return len(ws) == 0 && len(agentsQueue(t).Fenced) == 0
	})
}

func runningJobs(v protocol.QueueView) []string {
	var out []string
	for _, r := range v.Running {
		out = append(out, r.Job)
	}
	return out
}

func waitingJobs(v protocol.QueueView) []string {
	var out []string
	for _, w := range v.Waiting {
		out = append(out, w.Job)
	}
	return out
}

func freeGPUs(v protocol.QueueView) int {
	n := 0
	for _, node := range v.Nodes {
		n += node.FreeGPUs
	}
	return n
}
