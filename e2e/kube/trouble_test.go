package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestKubeOOMKilled: a container the kernel killed for its memory fails
// the attempt with the kubelet's reason, not only exit code 137.
func TestKubeOOMKilled(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Script: "python3 train.py"}.Spec())
	pod := podName(job, 1, 0)
	pw.waitRunning(t, pod)
	exitPodWith(t, pod, 137, "OOMKilled")
	st := waitState(t, job, protocol.StateFailed, long)
	require.NotEmpty(t, st.Attempts)
	assert.Contains(t, st.Attempts[0].EndReason, "worker 0 exited with code 137 (OOMKilled)")
}

// TestKubePodUnknownIsNodeLoss: a pod stuck in phase Unknown on a node that
// still says Ready ends its attempt as a node loss after node_timeout; the
// job reruns on the other node, and the pod nobody holds is fenced away.
func TestKubePodUnknownIsNodeLoss(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "unknown", Class: "medium", Script: "python3 train.py"}.Spec())
	first := podName(job, 1, 0)
	pw.waitRunning(t, first)
	waitState(t, job, protocol.StateRunning, long)
	node := pw.pod(first).Spec.NodeName
	other := map[string]string{"unknown-1": "unknown-2", "unknown-2": "unknown-1"}[node]

	ctx := context.Background()
	p, err := env.cluster.Client.CoreV1().Pods(namespace).Get(ctx, first, metav1.GetOptions{})
	require.NoError(t, err)
	p.Status.Phase, p.Status.Reason = corev1.PodUnknown, "NodeLost"
	_, err = env.cluster.Client.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)

	second := podName(job, 2, 0)
	pw.waitRunning(t, second)
	assert.Equal(t, other, pw.pod(second).Spec.NodeName, "the rerun avoids the node that lost its pod")
	st := status(t, job)
	assert.Equal(t, 1, st.NodeLosses)
	assert.Equal(t, 0, st.Restarts, "a node loss does not count against max_retry")
	assert.Contains(t, st.Attempts[0].EndReason, "node "+node+" lost")
	assert.Contains(t, st.Attempts[0].EndReason, "phase Unknown")
	pw.waitGone(t, first) // the node's agent answers: the allocator fences it
	exitPod(t, second, 0)
	waitState(t, job, protocol.StateCompleted, long)
}
