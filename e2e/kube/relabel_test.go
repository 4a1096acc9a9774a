package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/protocol"
)

func labelledNode(name, allocation string) kubetest.Node {
	return kubetest.Node{Name: name, GPUs: 2, CPU: 16, MemoryGi: 128,
		Labels: map[string]string{"trainq.io/allocation": allocation, kubeb.FamilyLabel: "a100"}}
}

// TestKubeRelabelledNodeMovesOnlyWhenFree: rl-1 belongs to relabel-a by its
// label and runs a job there; it is relabelled to relabel-b, where a job
// waits. The node must not be in both allocations at once: relabel-a refuses
// to drop it while its job holds it, so relabel-b does not get it (and its
// waiting job does not start on GPUs that are in use) until the job ends;
// then it moves, and relabel-b's job runs there.
func TestKubeRelabelledNodeMovesOnlyWhenFree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, env.cluster.AddNode(ctx, labelledNode("rl-1", "relabel-a")))
	require.NoError(t, env.cluster.AddNode(ctx, labelledNode("rl-2", "relabel-b")))
	pw := watchPods(t)
	w := startWorker(t)
	eventually(t, long, "each allocation to know its node", func() bool {
		a, b := queueNodes("relabel-a"), queueNodes("relabel-b")
		return len(a) == 1 && a[0].Name == "rl-1" && len(b) == 1 && b[0].Name == "rl-2"
	})
	holder := submit(t, fixture.Job{Region: "K", Allocation: "relabel-a", Class: "medium", Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(holder, 1, 0))
	first := submit(t, fixture.Job{Region: "K", Allocation: "relabel-b", Class: "medium", Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(first, 1, 0))
	waiter := submit(t, fixture.Job{Region: "K", Allocation: "relabel-b", Class: "medium", Script: "python3 train.py"}.Spec())
	waitState(t, waiter, protocol.StatePending, long)

	node, err := env.cluster.Client.CoreV1().Nodes().Get(ctx, "rl-1", metav1.GetOptions{})
	require.NoError(t, err)
	node.Labels["trainq.io/allocation"] = "relabel-b"
	_, err = env.cluster.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)

	// The worker sees the relabel at once and tries the move every few
	// seconds; while the holder runs, rl-1 stays in relabel-a only.
	wctx, wcancel := context.WithTimeout(context.Background(), long)
	defer wcancel()
	require.NoError(t, w.WaitLog(wctx, "still in another allocation"), "the worker holds the move back")
	require.NoError(t, w.WaitLog(wctx, "the allocator refused the changed config"), "relabel-a refuses to drop the held node")
	names := func(alloc string) []string {
		var out []string
		for _, n := range queueNodes(alloc) {
			out = append(out, n.Name)
		}
		return out
	}
	assert.Equal(t, []string{"rl-1"}, names("relabel-a"), "the held node stays where its job runs")
	assert.Equal(t, []string{"rl-2"}, names("relabel-b"), "the node is not in two allocations")
	assert.Equal(t, protocol.StatePending, status(t, waiter).State, "nothing starts on GPUs in use")

	exitPod(t, podName(holder, 1, 0), 0)
	waitState(t, holder, protocol.StateCompleted, long)
	pw.waitRunning(t, podName(waiter, 1, 0))
	assert.Equal(t, "rl-1", pw.pod(podName(waiter, 1, 0)).Spec.NodeName, "once free, the node moved and serves relabel-b")
	assert.Empty(t, names("relabel-a"))
	exitPod(t, podName(first, 1, 0), 0)
	exitPod(t, podName(waiter, 1, 0), 0)
}
