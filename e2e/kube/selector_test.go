package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	trainq "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// queueNodes is the allocator's view of its nodes (none while it does not run).
func queueNodes(alloc string) []scheduler.NodeInfo {
	v, _ := queueView(alloc)
	return v.Nodes
}

// queueView is allocation alloc's queue in region K (ok false: it did not answer).
func queueView(alloc string) (v protocol.QueueView, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := trainq.New(env.client, nil).Queue(ctx, "K", alloc)
	return v, err == nil
}

// serves says whether allocation alloc grants on each of the named nodes now: each known to it,
// not lost (a fenced node counts as lost: one that joins is fenced until its agent says what runs
// there) and free, and the allocator not recovering. The last is what a wait on the nodes alone
// misses: a freshly started allocator shows every node free for the moment before its recovery
// fences them all, and they come back in the order their agents answer.
func serves(alloc string, names ...string) bool {
	v, ok := queueView(alloc)
	if !ok || v.Recovering {
		return false
	}
	for _, name := range names {
		i := slices.IndexFunc(v.Nodes, func(nd scheduler.NodeInfo) bool { return nd.Name == name })
		if i < 0 || v.Nodes[i].Lost || v.Nodes[i].FreeGPUs != v.Nodes[i].GPUs {
			return false
		}
	}
	return true
}

// TestKubeNodeSelector: allocation "selected" lists no node; it picks the
// nodes labelled trainq.io/allocation=selected, with their allocatable. A
// node that joins while trainq-worker runs reaches the allocator, and a
// job runs on it.
func TestKubeNodeSelector(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	eventually(t, long, "the allocator of the selected nodes knows sel-1", func() bool {
		nodes := queueNodes("selected")
		return len(nodes) == 1 && nodes[0].Name == "sel-1" && nodes[0].GPUs == 2
	})
	first := submit(t, fixture.Job{Region: "K", Allocation: "selected", Class: "medium", Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(first, 1, 0))
	assert.Equal(t, "sel-1", pw.pod(podName(first, 1, 0)).Spec.NodeName)

	second := submit(t, fixture.Job{Region: "K", Allocation: "selected", Class: "medium", Script: "python3 train.py"}.Spec())
	st := waitState(t, second, protocol.StatePending, long)
	assert.Equal(t, protocol.StatePending, st.State, "one selected node, held by the first job")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, env.cluster.AddNode(ctx, selectedNode("sel-2")))
	pw.waitRunning(t, podName(second, 1, 0))
	assert.Equal(t, "sel-2", pw.pod(podName(second, 1, 0)).Spec.NodeName, "the node that joined runs the waiting job")
	var names []string
	for _, n := range queueNodes("selected") {
		names = append(names, n.Name)
	}
	assert.Equal(t, []string{"sel-1", "sel-2"}, names)
	// A job no selected node can ever hold is refused by the allocator,
	// which alone knows the nodes picked now.
	big := fixture.Job{Region: "K", Allocation: "selected", Class: "medium", Script: "python3 train.py"}.Spec()
	big.InstanceType = "a100.4gpu"
	refused := waitState(t, submit(t, big), protocol.StateFailed, long)
	assert.Contains(t, refused.Message, "the largest a100 node in this allocation has 2")

	exitPod(t, podName(first, 1, 0), 0)
	exitPod(t, podName(second, 1, 0), 0)
	waitState(t, first, protocol.StateCompleted, long)
	waitState(t, second, protocol.StateCompleted, long)
}
