package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// holdForever puts a finalizer on the pod that nobody removes while the
// test runs (a controller that is down, a stuck volume), and removes it at
// the test's end so that the namespace cleans up.
func holdForever(t *testing.T, name string) {
	t.Helper()
	holdPod(t, name)
	t.Cleanup(func() {
		_, err := env.cluster.Client.CoreV1().Pods(namespace).Patch(context.Background(), name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("release pod %s: %v", name, err)
		}
	})
}

// endTerminating waits until the pod's deletion was requested, and then
// plays its kubelet: the container got SIGTERM and ended with 143, the pod
// failed, and the pod object stays, held by its finalizer.
func (pw *podWatch) endTerminating(t *testing.T, name string) {
	t.Helper()
	pw.waitTerminating(t, name)
	exitPod(t, name, 143)
}

func (pw *podWatch) waitTerminating(t *testing.T, name string) {
	t.Helper()
	pw.wait(t, "pod "+name+" to be Terminating", func(pw *podWatch) bool {
		p := pw.pods[name]
		return p != nil && p.DeletionTimestamp != nil
	})
}

// endContainers plays a kubelet that reports the pod's containers ended
// (143, SIGTERM) but leaves its phase Running, as kubelets before the
// terminal phase of deleted pods (Kubernetes 1.27) did.
func endContainers(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	pods := env.cluster.Client.CoreV1().Pods(namespace)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, p.Status.ContainerStatuses)
	cs := &p.Status.ContainerStatuses[0]
	started := metav1.Now()
	if cs.State.Running != nil {
		started = cs.State.Running.StartedAt
	}
	cs.Ready, cs.Started = false, new(bool)
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 143, Reason: "Error", StartedAt: started, FinishedAt: metav1.Now()}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// stuckEvent returns the message of the pod's StuckTerminating event, or "".
func stuckEvent(t *testing.T, pod string) string {
	t.Helper()
	for _, e := range events(t, pod) {
		if e.Reason == kubeb.EventStuckTerminating {
			return e.Message
		}
	}
	return ""
}

// TestKubeCancelWithPodStuckTerminating: a cancelled job whose pod stays
// Terminating after its container ended (a finalizer nobody removes) ends
// Stopped all the same, its node's GPUs go to the next job, and an event
// on the pod names the finalizer that holds it.
func TestKubeCancelWithPodStuckTerminating(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "stuck", Class: "high", Script: "python3 train.py"}.Spec())
	pod := podName(job, 1, 0)
	pw.waitRunning(t, pod)
	waitState(t, job, protocol.StateRunning, long)
	holdForever(t, pod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, trainq.New(env.client, nil).Cancel(ctx, job))
	pw.endTerminating(t, pod)

	waitState(t, job, protocol.StateStopped, long)
	p := pw.pod(pod)
	require.NotNil(t, p, "the pod is not force-deleted")
	assert.NotNil(t, p.DeletionTimestamp)
	assert.Equal(t, []string{holdFinalizer}, p.Finalizers, "its finalizer is left alone")
	msg := stuckEvent(t, pod)
	assert.Contains(t, msg, "stuck Terminating")
	assert.Contains(t, msg, holdFinalizer)

	// The node's two GPUs are free: the next job gets them.
	next := submit(t, fixture.Job{Region: "K", Allocation: "stuck", Class: "high", Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(next, 1, 0))
	assert.Equal(t, p.Spec.NodeName, pw.pod(podName(next, 1, 0)).Spec.NodeName)
	exitPod(t, podName(next, 1, 0), 0)
	waitState(t, next, protocol.StateCompleted, long)
}

// TestKubePreemptionWithPodStuckTerminating: a preempted job's pod stays
// Terminating after its container ended; the preemptor starts on its node
// all the same, and the victim reruns in attempt 2's pod afterwards.
func TestKubePreemptionWithPodStuckTerminating(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	low := fixture.Job{Region: "K", Allocation: "stuck", Class: "low", Script: "python3 train.py"}.Spec()
	low.MaxRetry = 1
	victim := submit(t, low)
	first := podName(victim, 1, 0)
	pw.waitRunning(t, first)
	waitState(t, victim, protocol.StateRunning, long)
	holdForever(t, first)

	preemptor := submit(t, fixture.Job{Region: "K", Allocation: "stuck", Class: "high", Script: "python3 train.py"}.Spec())
	pw.endTerminating(t, first)
	pw.waitRunning(t, podName(preemptor, 1, 0))
	assert.NotNil(t, pw.pod(first), "the victim's pod is still Terminating")
	exitPod(t, podName(preemptor, 1, 0), 0)
	waitState(t, preemptor, protocol.StateCompleted, long)

	// The rerun waits for the stop of attempt 1, which gives up on the pod.
	pw.waitRunning(t, podName(victim, 2, 0))
	assert.NotNil(t, pw.pod(first), "the victim's first pod is still Terminating")
	assert.Contains(t, stuckEvent(t, first), holdFinalizer)
	st := status(t, victim)
	assert.Equal(t, 2, st.Attempt)
	require.NotNil(t, st.Attempts[0].Preemptor)
	assert.Equal(t, preemptor, st.Attempts[0].Preemptor.Job)
	exitPod(t, podName(victim, 2, 0), 0)
	waitState(t, victim, protocol.StateCompleted, long)
}

// TestKubeFenceWithPodStuckTerminating: the pod left on a lost node is
// fenced when the node is back, and a finalizer keeps it Terminating after
// its container ended; the fence succeeds all the same, and the node's
// GPUs are granted again.
func TestKubeFenceWithPodStuckTerminating(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "fenced", Class: "medium", Script: "python3 train.py"}.Spec())
	first := podName(job, 1, 0)
	pw.waitRunning(t, first)
	waitState(t, job, protocol.StateRunning, long)
	node := pw.pod(first).Spec.NodeName
	other := map[string]string{"fenced-1": "fenced-2", "fenced-2": "fenced-1"}[node]
	holdForever(t, first)
	ctx := context.Background()
	require.NoError(t, env.cluster.SetNodeDown(ctx, node, true))
	t.Cleanup(func() { _ = env.cluster.SetNodeDown(context.Background(), node, false) })

	second := podName(job, 2, 0)
	pw.waitRunning(t, second)
	require.Equal(t, other, pw.pod(second).Spec.NodeName)
	assert.Contains(t, status(t, job).Attempts[0].EndReason, "node "+node+" lost")

	// The node is back: the fence deletes the pod nobody holds, whose
	// container ends, but the pod stays, and stays Running.
	require.NoError(t, env.cluster.SetNodeDown(ctx, node, false))
	pw.waitTerminating(t, first)
	endContainers(t, first)

	// Both GPUs of the other node are taken: a job gets the fenced node's.
	third := submit(t, fixture.Job{Region: "K", Allocation: "fenced", Class: "medium", Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(third, 1, 0))
	assert.Equal(t, node, pw.pod(podName(third, 1, 0)).Spec.NodeName, "the fenced node is used again")
	assert.NotNil(t, pw.pod(first), "the fenced pod is still Terminating")
	assert.Contains(t, stuckEvent(t, first), holdFinalizer, "an event names the finalizer")
	exitPod(t, second, 0)
	exitPod(t, podName(third, 1, 0), 0)
	waitState(t, job, protocol.StateCompleted, long)
	waitState(t, third, protocol.StateCompleted, long)
}
