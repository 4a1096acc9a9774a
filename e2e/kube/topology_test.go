package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/protocol"
)

const rackLabel = "example.com/rack"

func rackedNode(name, rack string) kubetest.Node {
	return kubetest.Node{Name: name, GPUs: 2, CPU: 16, MemoryGi: 128,
		Labels: map[string]string{"trainq.io/allocation": "racked", kubeb.FamilyLabel: "a100", rackLabel: rack}}
}

// TestKubeGangStaysInOneRack: allocation "racked" reads each node's rack from its
// example.com/rack label. rk-1 is in r1, rk-2 and rk-3 in r2: best fit alone would put a
// two-node gang on rk-1 and rk-2, across racks; it lands on rk-2 and rk-3. Then rk-1 and rk-3
// swap racks while nothing runs: the allocator learns it from the labels, and the next gang
// lands on rk-1 and rk-2.
func TestKubeGangStaysInOneRack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []kubetest.Node{rackedNode("rk-1", "r1"), rackedNode("rk-2", "r2"), rackedNode("rk-3", "r2")} {
		require.NoError(t, env.cluster.AddNode(ctx, n))
	}
	pw := watchPods(t)
	startWorker(t)
	// Each node's rack, once every node serves (kwok marks a new node Ready a moment after it
	// joins, and until its agent says what runs there it is fenced: the allocator counts it lost
	// and places nothing there; and a fresh allocator recovers first: see serves).
	racks := func() map[string]string {
		out := map[string]string{}
		if !serves("racked", "rk-1", "rk-2", "rk-3") {
			return out
		}
		for _, n := range queueNodes("racked") {
			out[n.Name] = n.Topology[rackLabel]
		}
		return out
	}
	eventually(t, long, "the three nodes to serve, the allocator knowing their racks", func() bool {
		return assert.ObjectsAreEqual(map[string]string{"rk-1": "r1", "rk-2": "r2", "rk-3": "r2"}, racks())
	})
	gangOn := func(want ...string) {
		t.Helper()
		job := submit(t, fixture.Job{Region: "K", Allocation: "racked", Class: "medium", Workers: 2, GPUs: 2, Script: "python3 train.py"}.Spec())
		var got []string
		for w := range 2 {
			pw.waitRunning(t, podName(job, 1, w))
			got = append(got, pw.pod(podName(job, 1, w)).Spec.NodeName)
		}
		slices.Sort(got)
		require.Equal(t, want, got, "the gang's nodes")
		for w := range 2 {
			exitPod(t, podName(job, 1, w), 0)
		}
		waitState(t, job, protocol.StateCompleted, long)
	}
	gangOn("rk-2", "rk-3")

	for name, rack := range map[string]string{"rk-1": "r2", "rk-3": "r1"} {
		node, err := env.cluster.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		node.Labels[rackLabel] = rack
		_, err = env.cluster.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	eventually(t, long, "the allocator to know the new racks, every node free", func() bool {
		return assert.ObjectsAreEqual(map[string]string{"rk-1": "r2", "rk-2": "r2", "rk-3": "r1"}, racks())
	})
	gangOn("rk-1", "rk-2")
}

// TestKubeDefragmentMoves: allocation "defrag" requires that a gang share a rack, and moves
// small jobs after a second. df-1 and df-2 are rack r1, df-3 alone is r2. A one-GPU job s
// lands on df-1; then a two-node gang of whole nodes can only run in r1 and cannot preempt s
// (same class). s gets a notice with reason defragment, exits on it, and reruns on df-3
// without spending a retry (MaxRetry 0); the gang starts on df-1 and df-2; no GPU is used by two pods at
// overlapping times (the pod watch's order), and no node holds more GPUs than it has.
func TestKubeDefragmentMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := func(name, rack string) kubetest.Node {
		n := rackedNode(name, rack)
		n.Labels["trainq.io/allocation"] = "defrag"
		return n
	}
	for _, n := range []kubetest.Node{node("df-1", "r1"), node("df-2", "r1"), node("df-3", "r2")} {
		require.NoError(t, env.cluster.AddNode(ctx, n))
	}
	pw, led := watchPods(t), startLedger(t)
	startWorker(t)
	eventually(t, long, "the three nodes to serve", func() bool { return serves("defrag", "df-1", "df-2", "df-3") })
	small := fixture.Job{Region: "K", Allocation: "defrag", Class: "medium", GPUs: 1, Script: "python3 train.py"}.Spec()
	small.MaxRetry = 0 // a move must not spend a retry
	s := submit(t, small)
	pw.waitRunning(t, podName(s, 1, 0))
	require.Equal(t, "df-1", pw.pod(podName(s, 1, 0)).Spec.NodeName, "best fit puts s on the first node")

	gang := submit(t, fixture.Job{Region: "K", Allocation: "defrag", Class: "medium", Workers: 2, GPUs: 2, Script: "python3 train.py"}.Spec())
	n := pw.waitNotice(t, podName(s, 1, 0))
	assert.Equal(t, protocol.NoticeReasonDefragment, n.Reason)
	assert.Nil(t, pw.pod(podName(gang, 1, 0)), "the gang does not start before s leaves")
	exitPod(t, podName(s, 1, 0), 0) // s saved on the notice and left

	// s reruns without spending a retry (MaxRetry 0), usually as attempt 2; neighbour run 38 saw
	// it run as attempt 3, its attempt 2 having started no pod, so follow whichever attempt runs.
	pw.waitRunning(t, podName(gang, 1, 0), podName(gang, 1, 1))
	var rerun string
	eventually(t, long, s+" to run again", func() bool {
		st := status(t, s)
		if st.State != protocol.StateRunning || st.Attempt < 2 {
			return false
		}
		rerun = podName(s, st.Attempt, 0)
		p := pw.pod(rerun)
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	var gangNodes []string
	for w := range 2 {
		gangNodes = append(gangNodes, pw.pod(podName(gang, 1, w)).Spec.NodeName)
	}
	slices.Sort(gangNodes)
	assert.Equal(t, []string{"df-1", "df-2"}, gangNodes, "the gang runs in rack r1")
	assert.Equal(t, "df-3", pw.pod(rerun).Spec.NodeName, "s reruns outside r1")
	for _, nd := range queueNodes("defrag") {
		assert.GreaterOrEqual(t, nd.FreeGPUs, 0, "node %s holds more GPUs than it has", nd.Name)
	}
	assert.Empty(t, gpuOverlaps(led.snapshot()), "GPUs used by two pods at once")
	exitPod(t, rerun, 0)
	st := waitState(t, s, protocol.StateCompleted, long)
	require.GreaterOrEqual(t, len(st.Attempts), 2)
	assert.Contains(t, st.Attempts[0].EndReason, "moved to make room for "+gang)
	assert.Zero(t, st.Restarts, "a move spends no retry")
	for w := range 2 {
		exitPod(t, podName(gang, 1, w), 0)
	}
	waitState(t, gang, protocol.StateCompleted, long)
}
