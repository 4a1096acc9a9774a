package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/agentlogs"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// remoteConfig is a two-node allocation whose nodes live on other hosts
// (their addresses are loopback aliases, which Linux answers on).
const remoteConfig = `
data_dir: %s
default_region: T
default_allocation: remote
reclaim_interval: 2s
metrics_addr: ""
regions:
  - name: T
    allocations:
      - name: remote
        stop_grace_period: 3s
        nodes:
          - {name: remote-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128, address: 127.0.0.2}
          - {name: remote-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128, address: 127.0.0.3}
`

// remoteHosts is the workflows' machine and the nodes' machine: the same
// config but each its own data dir, as two hosts would have.
type remoteHosts struct {
	control, nodes        string // config files
	controlData, nodeData string
	cfg                   *config.Config
	agent                 *testenv.WorkerProcess
}

func startRemoteHosts(t *testing.T) *remoteHosts {
	t.Helper()
	dir := t.TempDir()
	h := &remoteHosts{control: filepath.Join(dir, "control.yaml"), nodes: filepath.Join(dir, "nodes.yaml"),
		controlData: filepath.Join(dir, "control-data"), nodeData: filepath.Join(dir, "node-data")}
	require.NoError(t, os.WriteFile(h.control, []byte(fmt.Sprintf(remoteConfig, h.controlData)), 0o644))
	require.NoError(t, os.WriteFile(h.nodes, []byte(fmt.Sprintf(remoteConfig, h.nodeData)), 0o644))
	var err error
	h.cfg, err = config.Load(h.control)
	require.NoError(t, err)
	t.Cleanup(func() { testenv.KillLeftoverWorkers(h.nodeData) })
	startProcess(t, "--config", h.control, "--agents=false")
	h.agent = startProcess(t, "agent", "--node", "remote-1", "--node", "remote-2", "--config", h.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, h.agent.WaitLog(ctx, "running"))
	return h
}

// A two-node job whose agents run "elsewhere": MASTER_ADDR is worker 0's
// node address, and the logs, which exist only in the nodes' data dir, are
// read through the agents, chunk by chunk, from the control side.
func TestRemoteNodesMasterAddrAndLogs(t *testing.T) {
	h := startRemoteHosts(t)
	const lines = 20000 // about 1 MB: several chunks
	script := fmt.Sprintf(`echo "rank=$RANK master=$MASTER_ADDR"; i=0; while [ $i -lt %d ]; do echo "line $i of the log of rank $RANK padded to forty bytes"; i=$((i+1)); done`, lines)
	spec := protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "remote",
		PriorityClass: "medium", NWorkers: 2, Type: "binary"}
	job := submitWith(t, h.cfg, spec)
	st := waitState(t, job, protocol.StateCompleted, 2*time.Minute)
	a := st.Attempts[len(st.Attempts)-1]
	require.Len(t, a.Placement, 2)
	nodeOf := map[int]string{}
	for _, p := range a.Placement {
		nodeOf[p.Worker] = p.Node
	}
	master := h.cfg.NodeAddress(nodeOf[0])
	require.NotEmpty(t, master)

	_, err := os.Stat(filepath.Join(h.controlData, "jobs", job))
	require.True(t, os.IsNotExist(err), "the control side has no log of its own to read: %v", err)

	r := &agentlogs.Reader{Client: env.client}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for w := range 2 {
		var out bytes.Buffer
		req := cluster.LogRequest{ID: cluster.WorkerID{Job: job, Attempt: a.Number, Worker: w}, Node: nodeOf[w]}
		_, err := cluster.CopyLog(ctx, r, req, &out)
		require.NoError(t, err)
		text := out.String()
		assert.Contains(t, text, fmt.Sprintf("rank=%d master=%s\n", w, master), "MASTER_ADDR is worker 0's node address")
		assert.Contains(t, text, fmt.Sprintf("line %d of the log of rank %d", lines-1, w))
		assert.Equal(t, lines+1, strings.Count(text, " of the log of rank ")+1, "every line, across chunks")

		var tail bytes.Buffer
		req.Tail = 2
		_, err = cluster.CopyLog(ctx, r, req, &tail)
		require.NoError(t, err)
		assert.Equal(t, 2, strings.Count(tail.String(), "\n"), tail.String())
	}

	_, err = r.ReadLog(ctx, cluster.LogRequest{ID: cluster.WorkerID{Job: job, Attempt: a.Number, Worker: 7}, Node: nodeOf[0]})
	require.ErrorIs(t, err, cluster.ErrNotFound)

	// The CLI, from another directory, on the control side's config.
	logs := func(args ...string) string {
		cmd := exec.Command(filepath.Join(env.binDir, "trainq"), append([]string{"logs"}, args...)...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort, "TRAINQ_CONFIG="+h.control)
		out, errOut, code := runCommand(t, cmd)
		require.Equal(t, 0, code, errOut)
		return out
	}
	out := logs("--tail", "3", job) // the last line of each, then its supervisor's two
	for w := range 2 {
		assert.Contains(t, out, fmt.Sprintf("[worker %d] line %d of the log of rank %d padded to forty bytes\n", w, lines-1, w))
	}
	assert.Equal(t, 6, strings.Count(out, "\n"), out)
	out = logs("--worker", "1", job)
	assert.Equal(t, lines, strings.Count(out, " of the log of rank 1 "), "the whole log of worker 1, across chunks")
	assert.Contains(t, out, "\nrank=1 master="+master+"\n")

	// With the agent gone, a read says so instead of waiting for ever.
	h.agent.Stop(30 * time.Second)
	began := time.Now()
	_, err = r.ReadLog(ctx, cluster.LogRequest{ID: cluster.WorkerID{Job: job, Attempt: a.Number}, Node: nodeOf[0]})
	require.ErrorIs(t, err, agentlogs.ErrAgentUnreachable)
	assert.Contains(t, err.Error(), "trainq-worker agent --node "+nodeOf[0])
	t.Logf("an unreachable agent is reported after %v", time.Since(began).Round(time.Millisecond))
}

// A Jupyter server on a node of another host: its status, `trainq status`
// and the API's view carry the URL where it serves (the node's address and
// the port it was given as TRAINQ_NOTEBOOK_PORT), and something answers there.
func TestRemoteNotebookURL(t *testing.T) {
	h := startRemoteHosts(t)
	spec := protocol.JobSpec{Kind: scheduler.KindNotebook, Script: `exec python3 -m http.server "$TRAINQ_NOTEBOOK_PORT" --bind 0.0.0.0`,
		InstanceType: "a100.1gpu", Region: "T", AllocationName: "remote", NWorkers: 1, Type: "binary"}
	job := submitWith(t, h.cfg, spec)
	st := waitState(t, job, protocol.StateRunning, 2*time.Minute)
	url := st.URL()
	node := st.Attempts[len(st.Attempts)-1].Placement[0].Node
	require.Regexp(t, `^http://`+regexp.QuoteMeta(h.cfg.NodeAddress(node))+`:[0-9]+/\?token=[0-9a-f]+$`, url)

	eventually(t, 30*time.Second, "the notebook answers at its URL", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	out, _, code := trainq(t, "status", job)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^\s+url\s+`+regexp.QuoteMeta(url)+`$`, out)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, env.client.CancelWorkflow(ctx, job, ""))
	st = waitState(t, job, protocol.StateStopped, time.Minute)
	assert.Empty(t, st.URL(), "a stopped server has no URL")
}
