package kube

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
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
	spec := fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Workers: 2, Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "2s"}}.Spec()
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
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "1s", "KWOK_EXIT_CODE": "3"}}.Spec())
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
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Script: "python3 train.py", Env: map[string]string{"KWOK_IMAGE_PULL": "fail"}}.Spec())
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
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "high", Workers: 2, Script: "python3 train.py"}.Spec())
	w0, w1 := podName(job, 1, 0), podName(job, 1, 1)
	pw.waitRunning(t, w0, w1)
	waitState(t, job, protocol.StateRunning, long)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, trainq.New(env.client, nil).Cancel(ctx, job))
	pw.waitGone(t, w0, w1)
	waitState(t, job, protocol.StateStopped, long)
	evs := events(t, w0)
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason+": "+e.Message)
	}
	assert.Contains(t, strings.Join(reasons, "\n"), "Stopped: stopped by the user")
}

// TestKubeSeedWorkedExample plays the priorities page's worked example with
// pods on four 2-GPU nodes: Job 4 starts on the node that Job 1's first pod
// vacated, and Job 3 waits for Job 0's two nodes, whose preempted pods take
// their time to stop.
func TestKubeSeedWorkedExample(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job0 := submit(t, fixture.Job{Region: "K", Allocation: "seed", Class: "low", Workers: 2, Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(job0, 1, 0), podName(job0, 1, 1))
	waitState(t, job0, protocol.StateRunning, long)
	// Job 0's containers take their time to stop once told to.
	holdPod(t, podName(job0, 1, 0))
	holdPod(t, podName(job0, 1, 1))

	job1 := submit(t, fixture.Job{Region: "K", Allocation: "seed", Class: "high", Workers: 2, Script: "python3 train.py"}.Spec())
	pw.waitRunning(t, podName(job1, 1, 0), podName(job1, 1, 1))
	st1 := waitState(t, job1, protocol.StateRunning, long)
	var lastRunning time.Time
	pw.mu.Lock()
	for _, n := range []string{podName(job1, 1, 0), podName(job1, 1, 1)} {
		if pw.running[n].After(lastRunning) {
			lastRunning = pw.running[n]
		}
	}
	pw.mu.Unlock()
	t.Logf("FIGURE grant → all pods Running (2 pods): %v", lastRunning.Sub(*st1.Attempts[0].StartedAt).Round(time.Millisecond))

	job2 := submit(t, fixture.Job{Region: "K", Allocation: "seed", Class: "low", Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "1s"}}.Spec())
	eventually(t, long, "Job 2 to wait with a reason", func() bool { return status(t, job2).Reason != "" })

	// Job 3 (medium) preempts Job 0 (low), whose pods are marked and deleted
	// but stay until their containers stop.
	job3 := submit(t, fixture.Job{Region: "K", Allocation: "seed", Class: "medium", Workers: 2, Script: "python3 train.py"}.Spec())
	pw.wait(t, "Job 0's pods to be marked as preempted by Job 3", func(pw *podWatch) bool {
		for w := range 2 {
			p := pw.pods[podName(job0, 1, w)]
			if p == nil || p.Annotations[kubeb.AnnotationPreemptor] != job3 || p.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	})
	var preempted bool
	for _, e := range events(t, podName(job0, 1, 0)) {
		preempted = preempted || (e.Reason == "Preempted" && strings.Contains(e.Message, job3))
	}
	assert.True(t, preempted, "an event says Job 3 preempted Job 0's pod")
	eventually(t, long, "Job 3 to wait on Job 0's releasing capacity", func() bool {
		st := status(t, job3)
		return st.State == protocol.StatePending && slices.Contains(st.WaitingFor, job0)
	})

	// Job 4 (high) arrives; nothing is free.
	job4 := submit(t, fixture.Job{Region: "K", Allocation: "seed", Class: "high", Script: "python3 train.py"}.Spec())
	eventually(t, long, "Job 4 to wait with a reason", func() bool { return status(t, job4).Reason != "" })

	// Job 1's first container ends: Job 4 starts on that node, before Job 3.
	node1w0 := pw.pod(podName(job1, 1, 0)).Spec.NodeName
	exitPod(t, podName(job1, 1, 0), 0)
	pw.waitRunning(t, podName(job4, 1, 0))
	assert.Equal(t, node1w0, pw.pod(podName(job4, 1, 0)).Spec.NodeName, "Job 4 runs where Job 1's first pod ran")
	assert.Equal(t, protocol.StatePending, status(t, job3).State, "Job 3 needs two whole nodes")
	assert.Equal(t, protocol.StatePending, status(t, job2).State, "Job 2 waits behind Job 3")

	// Job 0's containers stop: Job 3 gets their two nodes.
	nodes0 := []string{pw.pod(podName(job0, 1, 0)).Spec.NodeName, pw.pod(podName(job0, 1, 1)).Spec.NodeName}
	releasePod(t, podName(job0, 1, 0))
	releasePod(t, podName(job0, 1, 1))
	pw.waitGone(t, podName(job0, 1, 0), podName(job0, 1, 1))
	pw.waitRunning(t, podName(job3, 1, 0), podName(job3, 1, 1))
	assert.ElementsMatch(t, nodes0, []string{pw.pod(podName(job3, 1, 0)).Spec.NodeName, pw.pod(podName(job3, 1, 1)).Spec.NodeName},
		"Job 3 runs on Job 0's two nodes")
	assert.Equal(t, protocol.StatePending, status(t, job2).State, "Job 2 waits behind Job 3 and Job 4")

	exitPod(t, podName(job1, 1, 1), 0)
	waitState(t, job2, protocol.StateCompleted, long)
	for _, p := range []string{podName(job3, 1, 0), podName(job3, 1, 1), podName(job4, 1, 0)} {
		exitPod(t, p, 0)
	}
	waitState(t, job0, protocol.StatePreempted, long)
	for _, j := range []string{job1, job3, job4} {
		waitState(t, j, protocol.StateCompleted, long)
	}
}

// TestKubePreemptionReruns: a preempted job's pod is marked with its
// preemptor, deleted with the allocation's grace and gone before the
// preemptor starts; the job reruns in a new pod once capacity is back.
func TestKubePreemptionReruns(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	low := fixture.Job{Region: "K", Allocation: "preempt", Class: "low", Script: "python3 train.py"}.Spec()
	low.MaxRetry = 1
	victim := submit(t, low)
	pw.waitRunning(t, podName(victim, 1, 0))
	waitState(t, victim, protocol.StateRunning, long)

	preemptor := submit(t, fixture.Job{Region: "K", Allocation: "preempt", Class: "high", Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "2s"}}.Spec())
	pw.waitGone(t, podName(victim, 1, 0))
	pw.mu.Lock()
	marked, gone := pw.marked[podName(victim, 1, 0)], pw.gone[podName(victim, 1, 0)]
	p := pw.pods[podName(preemptor, 1, 0)]
	last := pw.last[podName(victim, 1, 0)]
	pw.mu.Unlock()
	assert.Equal(t, preemptor, last.Annotations[kubeb.AnnotationPreemptor], "the victim's pod names its preemptor")
	assert.Equal(t, "low", last.Labels[kubeb.LabelPriorityClass])
	assert.Equal(t, "a100.2gpu", last.Annotations[kubeb.AnnotationInstanceType])
	var preempted []string
	for _, e := range events(t, podName(victim, 1, 0)) {
		if e.Reason == "Preempted" {
			preempted = append(preempted, e.Message)
		}
	}
	require.Len(t, preempted, 1, "one Preempted event on the victim's pod")
	assert.Contains(t, preempted[0], preemptor)
	t.Logf("FIGURE preemption (pod marked) → last pod gone: %v", gone.Sub(marked).Round(time.Millisecond))
	assert.False(t, marked.IsZero(), "the pod was marked before it was deleted")
	assert.Nil(t, p, "the preemptor's pod is created only once the victim's is gone")

	pw.waitRunning(t, podName(preemptor, 1, 0))
	waitState(t, preemptor, protocol.StateCompleted, long)
	// The victim reruns in attempt 2's pod.
	pw.waitRunning(t, podName(victim, 2, 0))
	st := status(t, victim)
	assert.Equal(t, 2, st.Attempt)
	require.NotNil(t, st.Attempts[0].Preemptor)
	assert.Equal(t, preemptor, st.Attempts[0].Preemptor.Job)
	exitPod(t, podName(victim, 2, 0), 0)
	waitState(t, victim, protocol.StateCompleted, long)
}

// TestKubeWorkerRestartReattaches: trainq-worker is killed while a job
// runs; the next one re-attaches to the same pods, creates none, and sees
// the job through.
func TestKubeWorkerRestartReattaches(t *testing.T) {
	pw := watchPods(t)
	w := startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "medium", Workers: 2, Script: "python3 train.py"}.Spec())
	w0, w1 := podName(job, 1, 0), podName(job, 1, 1)
	pw.waitRunning(t, w0, w1)
	waitState(t, job, protocol.StateRunning, long)
	uids := []string{string(pw.pod(w0).UID), string(pw.pod(w1).UID)}
	w.Kill()
	<-w.Done()
	exitPod(t, w0, 0) // a container ends while nobody watches
	startWorker(t)
	exitPod(t, w1, 0)
	waitState(t, job, protocol.StateCompleted, long)
	list, err := env.cluster.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kubeb.LabelJob + "=" + job})
	require.NoError(t, err)
	var got []string
	for _, p := range list.Items {
		got = append(got, string(p.UID))
	}
	assert.ElementsMatch(t, uids, got, "the same two pods, and no other")
}

// TestKubeNodeNotReadyIsNodeLoss: a node whose kubelet stops answering
// ends the attempt as a node loss (not counted against max_retry); the job
// reruns on the other node; when the node is back, the allocator fences it:
// the stale pod is deleted before its GPUs are granted again.
func TestKubeNodeNotReadyIsNodeLoss(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "lost", Class: "medium", Script: "python3 train.py"}.Spec())
	first := podName(job, 1, 0)
	pw.waitRunning(t, first)
	waitState(t, job, protocol.StateRunning, long)
	node := pw.pod(first).Spec.NodeName
	other := map[string]string{"lost-1": "lost-2", "lost-2": "lost-1"}[node]
	ctx := context.Background()
	require.NoError(t, env.cluster.SetNodeDown(ctx, node, true))
	t.Cleanup(func() { _ = env.cluster.SetNodeDown(context.Background(), node, false) })

	second := podName(job, 2, 0)
	pw.waitRunning(t, second)
	assert.Equal(t, other, pw.pod(second).Spec.NodeName, "the rerun goes to the node that is up")
	st := status(t, job)
	assert.Equal(t, 1, st.NodeLosses)
	assert.Equal(t, 0, st.Restarts, "a node loss does not count against max_retry")
	assert.Contains(t, st.Attempts[0].EndReason, "node "+node+" lost")
	assert.NotNil(t, pw.pod(first), "nobody could stop the pod on the lost node")

	// The node comes back: the allocator fences it, which deletes the pod
	// nobody holds.
	require.NoError(t, env.cluster.SetNodeDown(ctx, node, false))
	pw.waitGone(t, first)
	exitPod(t, second, 0)
	waitState(t, job, protocol.StateCompleted, long)
}
