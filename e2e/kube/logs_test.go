package kube

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	trainq "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/protocol"
)

// TestKubeLogs reads a pod's log the way `trainq logs` and the API do: the
// client has no kubeconfig, so the read goes through the agent of the pod's
// node, whose backend asks the pod log API (kwok plays the kubelet), in
// chunks by offset.
func TestKubeLogs(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Script: "python3 train.py"}.Spec())
	pod := podName(job, 1, 0)
	pw.waitRunning(t, pod)
	waitState(t, job, protocol.StateRunning, long)
	source, err := trainq.New(env.client, env.cfg).LogSource()
	require.NoError(t, err)
	req := cluster.LogRequest{ID: cluster.WorkerID{Job: job, Attempt: 1}, Node: pw.pod(pod).Spec.NodeName}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()

	var all bytes.Buffer
	small := req
	small.MaxBytes = 10
	end, err := cluster.CopyLog(ctx, source, small, &all)
	require.NoError(t, err)
	assert.Equal(t, kubetest.PodLogText, all.String(), "the whole log, 10 bytes at a time")
	assert.Equal(t, int64(len(kubetest.PodLogText)), end)

	var tail bytes.Buffer
	last := req
	last.Tail = 1
	_, err = cluster.CopyLog(ctx, source, last, &tail)
	require.NoError(t, err)
	assert.Equal(t, "line 2 of it\n", tail.String())

	c, err := source.ReadLog(ctx, cluster.LogRequest{ID: cluster.WorkerID{Job: job, Attempt: 1, Worker: 5}, Node: req.Node})
	require.ErrorIs(t, err, cluster.ErrNotFound, "no such pod: %+v", c)
	exitPod(t, pod, 0)
	waitState(t, job, protocol.StateCompleted, long)
}

// TestKubeNotebookURL: a Jupyter server's pod listens on 8888 behind its
// job's Service, and its status says where.
func TestKubeNotebookURL(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	spec := trainq.NotebookSpec(env.cfg, trainq.NotebookRequest{Region: "K", AllocationName: "basic", InstanceType: "a100.1gpu"})
	job := submit(t, spec)
	pod := podName(job, 1, 0)
	pw.waitRunning(t, pod)
	st := waitState(t, job, protocol.StateRunning, long)
	svc := kubeb.ServiceName(job)
	assert.Equal(t, "http://"+pod+"."+svc+"."+namespace+".svc:8888/", st.URL())
	assert.Equal(t, st.URL(), pw.pod(pod).Annotations[kubeb.AnnotationURL])
	assert.Equal(t, "8888", envOf(pw.pod(pod))["TRAINQ_NOTEBOOK_PORT"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, trainq.New(env.client, env.cfg).Cancel(ctx, job))
	pw.waitGone(t, pod)
	assert.Empty(t, waitState(t, job, protocol.StateStopped, long).URL())
}
