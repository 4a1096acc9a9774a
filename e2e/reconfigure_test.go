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

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// reconfConfig is the reconfigure test's own config: region R, allocation
// reconf and nodes reconf-* that no other test uses. %s is the node list.
const reconfConfig = `
data_dir: %s
default_region: R
default_allocation: reconf
reclaim_interval: 2s
metrics_addr: ""
regions:
  - name: R
    allocations:
      - name: reconf
        stop_grace_period: 3s
        nodes:
%s
`

const (
	reconfNode1 = "          - {name: reconf-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}"
	reconfNode2 = "          - {name: reconf-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}"
)

// reconfSetup writes a version of the reconfigure config with nodes and
// returns its path and the loaded config.
func reconfSetup(t *testing.T, name string, nodes ...string) (string, *config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trainq-"+name+".yaml")
	// The harness's data dir, so that its clean-up also ends what a failed
	// test here leaves running.
	body := fmt.Sprintf(reconfConfig, filepath.Join(env.dir, "data"), strings.Join(nodes, "\n"))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	return path, cfg
}

func reconfQueue(t *testing.T) protocol.QueueView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := tqclient.New(env.client, nil).Queue(ctx, "R", "reconf")
	require.NoError(t, err)
	return v
}

func nodeNames(v protocol.QueueView) []string {
	var out []string
	for _, n := range v.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func jobNames(v protocol.QueueView) (running, waiting []string) {
	for _, r := range v.Running {
		running = append(running, r.Job)
	}
	for _, w := range v.Waiting {
		waiting = append(waiting, w.Job)
	}
	slices.Sort(running)
	return running, waiting
}

// TestReconfigureOnWorkerRestart edits the config between worker restarts:
// a config that removes a busy node is refused (the worker says why and
// starts anyway, the allocation is unchanged); a config that adds a node
// lets the waiting job start there while the first one still runs.
func TestReconfigureOnWorkerRestart(t *testing.T) {
	oneNode, cfg := reconfSetup(t, "one", reconfNode1)
	dropBusy, _ := reconfSetup(t, "drop-busy", reconfNode2)
	twoNodes, _ := reconfSetup(t, "two", reconfNode1, reconfNode2)
	dir := t.TempDir()
	spec := func(g gate) protocol.JobSpec {
		return fixture.Job{Script: g.waitFor(), Region: "R", Allocation: "reconf"}.Spec()
	}
	logHas := func(w interface{ LogTail(int) string }, s string) bool { return strings.Contains(w.LogTail(100000), s) }

	// One 2-GPU node: the first job runs, the second waits.
	w := startWorkerWith(t, oneNode)
	gFirst, gSecond := gate(filepath.Join(dir, "first")), gate(filepath.Join(dir, "second"))
	first := submitWith(t, cfg, spec(gFirst))
	waitState(t, first, protocol.StateRunning, long)
	second := submitWith(t, cfg, spec(gSecond))
	eventually(t, long, "the second job to wait", func() bool {
		_, waiting := jobNames(reconfQueue(t))
		return slices.Equal(waiting, []string{second})
	})
	w.Stop(30 * time.Second)

	// A config without reconf-1, where the first job runs: refused, with
	// the reason in the log; the worker still starts.
	bad := startWorkerWith(t, dropBusy)
	want := fmt.Sprintf("node reconf-1 cannot be removed: %s holds GPUs 0,1 on it; stop it first", first)
	eventually(t, long, "the refusal in the worker's log", func() bool { return logHas(bad, want) })
	eventually(t, long, "the worker to start", func() bool { return logHas(bad, "trainq-worker is running") })
	assert.True(t, logHas(bad, "the allocator refused the changed config"))
	v := reconfQueue(t)
	assert.Equal(t, []string{"reconf-1"}, nodeNames(v), "a refused config changes nothing")
	running, waiting := jobNames(v)
	assert.Equal(t, []string{first}, running)
	assert.Equal(t, []string{second}, waiting)
	assert.Equal(t, protocol.StatePending, status(t, second).State)
	bad.Stop(30 * time.Second)

	// A config that adds reconf-2: the waiting job starts there while the
	// first one still runs on reconf-1.
	good := startWorkerWith(t, twoNodes)
	st := waitState(t, second, protocol.StateRunning, long)
	require.Len(t, st.Attempts, 1)
	require.Len(t, st.Attempts[0].Placement, 1)
	assert.Equal(t, "reconf-2", st.Attempts[0].Placement[0].Node)
	assert.Equal(t, protocol.StateRunning, status(t, first).State)
	v = reconfQueue(t)
	assert.Equal(t, []string{"reconf-1", "reconf-2"}, nodeNames(v))
	running, waiting = jobNames(v)
	assert.Equal(t, sorted2(first, second), running)
	assert.Empty(t, waiting)
	assert.True(t, logHas(good, "allocator reconfigured"), "the worker logs what changed")
	assert.True(t, logHas(good, "added node(s) reconf-2"))

	gFirst.open(t)
	gSecond.open(t)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, second, protocol.StateCompleted, long)
	eventually(t, long, "the allocation to be free", func() bool {
		v := reconfQueue(t)
		return len(v.Running) == 0 && len(v.Waiting) == 0
	})
}

func sorted2(a, b string) []string {
	s := []string{a, b}
	slices.Sort(s)
	return s
}
