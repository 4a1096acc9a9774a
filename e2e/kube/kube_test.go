package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

func envOf(p *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		m[e.Name] = e.Value
	}
	return m
}

// TestKubePodsOfAJob runs a two-worker job to completion and checks what
// its pods and Service look like on the API server.
func TestKubePodsOfAJob(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	spec := jobSpec("basic", "medium", 2, map[string]string{"KWOK_EXIT_AFTER": "2s"})
	spec.BaseImage = "registry.example/train:1"
	job := submit(t, spec)
	w0, w1 := podName(job, 1, 0), podName(job, 1, 1)
	pw.waitRunning(t, w0, w1)
	p0, p1 := pw.pod(w0), pw.pod(w1)
	assert.ElementsMatch(t, []string{"basic-1", "basic-2"}, []string{p0.Spec.NodeName, p1.Spec.NodeName}, "bound by trainq to the granted nodes")
	for _, p := range []*corev1.Pod{p0, p1} {
		assert.Equal(t, "trainq", p.Labels[kubeb.LabelManagedBy])
		assert.Equal(t, job, p.Labels[kubeb.LabelJob])
		assert.Equal(t, "1", p.Labels[kubeb.LabelAttempt])
		assert.Equal(t, "medium", p.Labels[kubeb.LabelPriorityClass])
		assert.Equal(t, job, p.Annotations[kubeb.AnnotationJobName])
		assert.Equal(t, "registry.example/train:1", p.Spec.Containers[0].Image)
		assert.Equal(t, "regcred", p.Spec.ImagePullSecrets[0].Name)
		assert.Equal(t, job, p.Spec.Subdomain)
		assert.Equal(t, p.Name, p.Spec.Hostname)
		gpus := p.Spec.Containers[0].Resources.Limits[kubeb.GPUResource]
		assert.Equal(t, int64(2), gpus.Value())
		require.Len(t, p.OwnerReferences, 1)
		assert.Equal(t, "Service", p.OwnerReferences[0].Kind)
		e := envOf(p)
		assert.Equal(t, w0+"."+job, e["MASTER_ADDR"])
		assert.Equal(t, "29500", e["MASTER_PORT"])
		assert.Equal(t, e["MASTER_ADDR"], e["PET_MASTER_ADDR"])
		assert.Equal(t, "2", e["PET_NNODES"])
		assert.Equal(t, "2", e["WORLD_SIZE"])
		assert.Equal(t, job, e["TRAINQ_JOB_NAME"])
		assert.NotContains(t, e, "CUDA_VISIBLE_DEVICES", "the device plugin numbers the granted GPUs from 0")
	}
	assert.Equal(t, "1", envOf(p1)["RANK"])
	assert.Equal(t, "1", envOf(p1)["PET_NODE_RANK"])
	svc, err := env.cluster.Client.CoreV1().Services(namespace).Get(context.Background(), job, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.True(t, svc.Spec.PublishNotReadyAddresses)
	assert.Equal(t, p0.OwnerReferences[0].UID, svc.UID)
	waitState(t, job, protocol.StateCompleted, long)
}

// TestKubeFailingPodExitCode: a container that exits with code 3 fails the
// attempt with that code.
func TestKubeFailingPodExitCode(t *testing.T) {
	startWorker(t)
	job := submit(t, jobSpec("basic", "medium", 1, map[string]string{"KWOK_EXIT_AFTER": "1s", "KWOK_EXIT_CODE": "3"}))
	st := waitState(t, job, protocol.StateFailed, long)
	require.NotEmpty(t, st.Attempts)
	assert.Contains(t, st.Attempts[0].EndReason, "worker 0 exited with code 3")
	require.NotNil(t, st.Attempts[0].ExitCode)
	assert.Equal(t, 3, *st.Attempts[0].ExitCode)
}

// TestKubeImagePullFailure: an image that cannot be pulled fails the
// attempt with the reason, instead of hanging.
func TestKubeImagePullFailure(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, jobSpec("basic", "medium", 1, map[string]string{"KWOK_IMAGE_PULL": "fail"}))
	st := waitState(t, job, protocol.StateFailed, long)
	require.NotEmpty(t, st.Attempts)
	assert.Contains(t, st.Attempts[0].EndReason, "ErrImagePull")
	assert.Contains(t, st.Attempts[0].EndReason, "could not start")
	// The pod that could not start is deleted, and its capacity released.
	pw.waitGone(t, podName(job, 1, 0))
}

// TestKubeCancel: a cancelled job's pods are marked, deleted and gone, and
// the job ends Stopped.
func TestKubeCancel(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, jobSpec("basic", "high", 2, nil))
	w0, w1 := podName(job, 1, 0), podName(job, 1, 1)
	pw.waitRunning(t, w0, w1)
	waitState(t, job, protocol.StateRunning, long)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, workflows.Cancel(ctx, env.client, job))
	pw.waitGone(t, w0, w1)
	waitState(t, job, protocol.StateStopped, long)
	evs := events(t, w0)
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason+": "+e.Message)
	}
	assert.Contains(t, strings.Join(reasons, "\n"), "Stopped: stopped by the user")
}
