package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/kubetest"
)

// TestKubeRacingAgentsLeaveOnePodOnAGPU: two node agents (a stale one beside
// its replacement during a partition) start workers of two jobs on the same
// GPU, the second start running between the first one's check of its pod
// cache and its create. Each agent's cache check passes; the first start,
// listing the node's pods from the API server after its create, finds the
// second one's pod, deletes its own and is refused as GPUsBusy: one pod is
// left on the GPU.
func TestKubeRacingAgentsLeaveOnePodOnAGPU(t *testing.T) {
	const node = "race-1"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, env.cluster.AddNode(ctx, kubetest.Node{Name: node, GPUs: 2, CPU: 16, MemoryGi: 128}))
	newAgent := func(beforeCreate func()) *kube.Backend {
		b, err := kube.New(ctx, kube.Options{Client: env.cluster.Client, Namespace: namespace, DefaultImage: "busybox:1.36",
			BeforeCreate: beforeCreate})
		require.NoError(t, err)
		t.Cleanup(b.Close)
		return b
	}
	spec := func(job string) cluster.WorkerSpec {
		return cluster.WorkerSpec{ID: cluster.WorkerID{Job: job, Attempt: 1, Worker: 0}, Workers: 1, Node: node,
			Type: cluster.TypeBinary, Script: "sleep 600", ProcessesPerWorker: 1, GPUs: []int{0}}
	}
	first, second := spec("lm-mpi-job-race-first"), spec("lm-mpi-job-race-second")
	stale := newAgent(nil)
	var secondErr error
	raced := false
	replacement := newAgent(func() {
		if !raced {
			raced = true
			_, secondErr = stale.Start(ctx, second)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range []cluster.WorkerSpec{first, second} {
			_, _ = stale.Stop(ctx, s.ID, time.Second)
		}
	})

	_, err := replacement.Start(ctx, first)
	require.True(t, raced)
	require.NoError(t, secondErr, "the start that created its pod first keeps it")
	var busy *cluster.GPUsBusy
	require.True(t, errors.As(err, &busy), "the start whose cache missed the other pod yields: %v", err)
	assert.Equal(t, second.ID, busy.Holder)
	assert.Equal(t, []int{0}, busy.GPUs)

	pods, err := env.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var onNode []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			onNode = append(onNode, p.Name)
		}
	}
	assert.Equal(t, []string{kube.PodName(second.ID)}, onNode, "one live pod on the GPU")
}
