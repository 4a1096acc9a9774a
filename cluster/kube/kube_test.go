package kube

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/scheduler"
)

type fakeJobs struct {
	meta      JobMeta
	reason    string
	preemptor string
	ended     map[string]bool
}

func (f fakeJobs) Ended(_ context.Context, job string) (bool, error) { return f.ended[job], nil }

func (f fakeJobs) Meta(context.Context, string) (JobMeta, error) { return f.meta, nil }
func (f fakeJobs) StopReason(context.Context, cluster.WorkerID) (string, string, error) {
	return f.reason, f.preemptor, nil
}

func newFake(t *testing.T, jobs Jobs, objs ...runtime.Object) (*Backend, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	// The fake gives objects no UID; the API server does.
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		svc.UID = "uid-" + types.UID(svc.Name)
		return false, nil, nil
	})
	// Nor does it honour generateName, which every event uses.
	events := 0
	cs.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		if ev.Name == "" {
			events++
			ev.Name = ev.GenerateName + strconv.Itoa(events)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, Options{Client: cs, Namespace: "jobs", ImagePullSecrets: []string{"regcred"},
		TerminationGracePeriod: 45 * time.Second, DefaultImage: "busybox", Jobs: jobs, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, cs
}

func spec(job string, attempt, worker, workers int) cluster.WorkerSpec {
	return cluster.WorkerSpec{
		ID: cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker}, Workers: workers,
		Node: "gpu-3", GPUs: []int{4, 5}, Type: cluster.TypePyTorch2, Script: "train.py --epochs 3",
		ProcessesPerWorker: 2, Env: map[string]string{"NCCL_DEBUG": "INFO", "RANK": "99"},
		Flags: map[string]string{"lr": "0.1"}, BaseImage: "pytorch:2",
	}
}

func envMap(p *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		m[e.Name] = e.Value
	}
	return m
}

func TestStartCreatesABoundPodAndAHeadlessService(t *testing.T) {
	b, cs := newFake(t, fakeJobs{meta: JobMeta{PriorityClass: "high", InstanceType: "a100.2gpu.40vG.24C.192G"}})
	ctx := context.Background()
	job := "lm-mpi-job-0b1c"
	addr, port, err := b.Rendezvous(ctx, job, 2)
	require.NoError(t, err)
	assert.Equal(t, "lm-mpi-job-0b1c-a2-w0.lm-mpi-job-0b1c", addr)
	assert.Equal(t, 29500, port)
	s := spec(job, 2, 1, 3)
	s.MasterAddr, s.MasterPort = addr, port
	st, err := b.Start(ctx, s)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseRunning, st.Phase)

	pod, err := cs.CoreV1().Pods("jobs").Get(ctx, "lm-mpi-job-0b1c-a2-w1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "gpu-3", pod.Spec.NodeName, "bound by trainq, not kube-scheduler")
	assert.Empty(t, pod.Spec.SchedulerName)
	assert.Equal(t, pod.Name, pod.Spec.Hostname)
	assert.Equal(t, job, pod.Spec.Subdomain)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.Equal(t, int64(45), *pod.Spec.TerminationGracePeriodSeconds)
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, pod.Spec.ImagePullSecrets)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)
	assert.False(t, *pod.Spec.EnableServiceLinks)
	assert.Equal(t, map[string]string{
		LabelManagedBy: "trainq", LabelName: "trainq", LabelComponent: "worker", LabelJob: job,
		LabelAttempt: "2", LabelWorker: "1", LabelPriorityClass: "high",
	}, pod.Labels)
	assert.Equal(t, job, pod.Annotations[AnnotationJobName])
	assert.Equal(t, "4,5", pod.Annotations[AnnotationGPUs])

	c := pod.Spec.Containers[0]
	assert.Equal(t, "pytorch:2", c.Image)
	gpu := c.Resources.Limits[GPUResource]
	assert.Equal(t, int64(2), gpu.Value())
	cpu, mem := c.Resources.Requests[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceMemory]
	assert.Equal(t, int64(24), cpu.Value())
	assert.Equal(t, int64(192)<<30, mem.Value())
	e := envMap(pod)
	assert.Equal(t, addr, e["MASTER_ADDR"])
	assert.Equal(t, addr, e["PET_MASTER_ADDR"])
	assert.Equal(t, "29500", e["MASTER_PORT"])
	assert.Equal(t, "29500", e["PET_MASTER_PORT"])
	assert.Equal(t, "3", e["PET_NNODES"])
	assert.Equal(t, "1", e["PET_NODE_RANK"])
	assert.Equal(t, "2", e["PET_NPROC_PER_NODE"])
	assert.Equal(t, "6", e["WORLD_SIZE"])
	assert.Equal(t, "2", e["RANK"], "trainq's RANK wins over env_variables")
	assert.Equal(t, "INFO", e["NCCL_DEBUG"])
	assert.Equal(t, "4,5", e["TRAINQ_GPUS"])
	assert.Equal(t, "1", e["PYTHONUNBUFFERED"])
	assert.NotContains(t, e, "CUDA_VISIBLE_DEVICES")
	// Two processes, each with its own rank.
	script := c.Command[2]
	assert.Contains(t, script, "(RANK=2 LOCAL_RANK=0 exec python3 train.py --epochs 3 --lr=0.1) &")
	assert.Contains(t, script, "(RANK=3 LOCAL_RANK=1 exec python3 train.py --epochs 3 --lr=0.1) &")

	svc, err := cs.CoreV1().Services("jobs").Get(ctx, job, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.True(t, svc.Spec.PublishNotReadyAddresses)
	assert.Equal(t, map[string]string{LabelManagedBy: "trainq", LabelJob: job}, svc.Spec.Selector)
	require.Len(t, pod.OwnerReferences, 1)
	assert.Equal(t, "Service", pod.OwnerReferences[0].Kind)
	assert.Equal(t, job, pod.OwnerReferences[0].Name)
	assert.Equal(t, svc.UID, pod.OwnerReferences[0].UID)
}

func TestStartIsIdempotent(t *testing.T) {
	b, cs := newFake(t, nil)
	ctx := context.Background()
	s := spec("j1", 1, 0, 1)
	_, err := b.Start(ctx, s)
	require.NoError(t, err)
	_, err = b.Start(ctx, s)
	require.NoError(t, err)
	creates := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "pods" {
			creates++
		}
	}
	assert.Equal(t, 1, creates, "a repeated Start finds the pod and creates none")
}

func TestStartWithoutImageFails(t *testing.T) {
	cs := fake.NewClientset()
	b, err := New(context.Background(), Options{Client: cs, Namespace: "jobs"})
	require.NoError(t, err)
	defer b.Close()
	s := spec("j1", 1, 0, 1)
	s.BaseImage = ""
	_, err = b.Start(context.Background(), s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "base_image")
}

func TestNotebookGetsAJupyterPortAndURL(t *testing.T) {
	b, cs := newFake(t, fakeJobs{meta: JobMeta{PriorityClass: "high", Notebook: true}})
	ctx := context.Background()
	s := spec("jupyter-abc", 1, 0, 1)
	s.Type = cluster.TypeBinary
	_, err := b.Start(ctx, s)
	require.NoError(t, err)
	pod, err := cs.CoreV1().Pods("jobs").Get(ctx, "jupyter-abc-a1-w0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "notebook", pod.Labels[LabelComponent])
	assert.Equal(t, "http://jupyter-abc-a1-w0.jupyter-abc.jobs.svc:8888/", pod.Annotations[AnnotationURL])
	svc, err := cs.CoreV1().Services("jobs").Get(ctx, "jupyter-abc", metav1.GetOptions{})
	require.NoError(t, err)
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	assert.Contains(t, ports, int32(8888))
}

func TestStopMarksThePodAndDeletesItWithTheGrace(t *testing.T) {
	b, cs := newFake(t, fakeJobs{reason: "preempted by lm-mpi-job-9 (high job): needs GPUs", preemptor: "lm-mpi-job-9"})
	ctx := context.Background()
	_, err := b.Start(ctx, spec("j1", 1, 0, 1))
	require.NoError(t, err)
	var graceSeen int64
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.DeleteOptions.GracePeriodSeconds != nil {
			graceSeen = *d.DeleteOptions.GracePeriodSeconds
		}
		return false, nil, nil
	})
	st, err := b.Stop(ctx, cluster.WorkerID{Job: "j1", Attempt: 1}, 7*time.Second)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.True(t, st.StopRequested)
	assert.Equal(t, int64(7), graceSeen)
	evs, err := cs.CoreV1().Events("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, evs.Items, 1)
	assert.Equal(t, "Preempted", evs.Items[0].Reason)
	assert.Contains(t, evs.Items[0].Message, "lm-mpi-job-9")
	// The pod was annotated before it was deleted.
	var patched, deleted int
	for i, a := range cs.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "" && patched == 0 {
			patched = i
			assert.Contains(t, string(a.(k8stesting.PatchAction).GetPatch()), "lm-mpi-job-9")
		}
		if a.GetVerb() == "delete" {
			deleted = i
		}
	}
	assert.Positive(t, patched)
	assert.Less(t, patched, deleted)
	// A stopped (gone) worker is stopped again at once.
	st, err = b.Stop(ctx, cluster.WorkerID{Job: "j1", Attempt: 1}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
}

func pod(name, node string, phase corev1.PodPhase, labels map[string]string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", Labels: labels, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
}

func TestLiveWorkersListsThePodsOfANodeThatHaveNotEnded(t *testing.T) {
	mk := func(job string, worker int, node string, phase corev1.PodPhase) *corev1.Pod {
		id := cluster.WorkerID{Job: job, Attempt: 1, Worker: worker}
		return pod(PodName(id), node, phase, workerLabels(id, "worker"), map[string]string{AnnotationJobName: job, AnnotationGPUs: "0,1"})
	}
	b, _ := newFake(t, nil,
		mk("b", 0, "n1", corev1.PodRunning), mk("a", 1, "n1", corev1.PodPending), mk("a", 0, "n1", corev1.PodSucceeded),
		mk("c", 0, "n2", corev1.PodRunning))
	live, err := b.LiveWorkers(context.Background(), "n1")
	require.NoError(t, err)
	require.Len(t, live, 2)
	assert.Equal(t, cluster.WorkerID{Job: "a", Attempt: 1, Worker: 1}, live[0].ID)
	assert.Equal(t, cluster.WorkerID{Job: "b", Attempt: 1, Worker: 0}, live[1].ID)
	assert.Equal(t, []int{0, 1}, live[0].GPUs)
	list, err := b.List(context.Background(), "a")
	require.NoError(t, err)
	assert.Len(t, list, 2)
}

func TestStatusOfEndedPods(t *testing.T) {
	id := cluster.WorkerID{Job: "j", Attempt: 1}
	p := pod("j-a1-w0", "n", corev1.PodFailed, nil, nil)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: metav1.Now()}}}}
	st := StatusOf(id, p)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 137, st.ExitCode)
	assert.True(t, st.Signaled)

	rejected := pod("j-a1-w0", "n", corev1.PodFailed, nil, nil)
	rejected.Status.Reason, rejected.Status.Message = "OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu"
	why, now := startFailure(rejected)
	assert.True(t, now)
	assert.Contains(t, why, "OutOfnvidia.com/gpu")

	pulling := pod("j-a1-w0", "n", corev1.PodPending, nil, nil)
	pulling.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}
	why, now = startFailure(pulling)
	assert.False(t, now, "a pull may still succeed: fail only after image_pull_timeout")
	assert.Equal(t, "ImagePullBackOff: Back-off pulling image", why)
	assert.Equal(t, cluster.PhaseRunning, StatusOf(id, pulling).Phase)
}

func TestWaitFailsAPodThatCannotPullItsImage(t *testing.T) {
	b, cs := newFake(t, nil)
	b.opts.ImagePullTimeout = 100 * time.Millisecond
	ctx := context.Background()
	_, err := b.Start(ctx, spec("j1", 1, 0, 1))
	require.NoError(t, err)
	p, err := cs.CoreV1().Pods("jobs").Get(ctx, "j1-a1-w0", metav1.GetOptions{})
	require.NoError(t, err)
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
	_, err = cs.CoreV1().Pods("jobs").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	beats := 0
	_, err = b.Wait(wctx, cluster.WorkerID{Job: "j1", Attempt: 1}, func(cluster.WorkerStatus) { beats++ })
	require.Error(t, err)
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
	assert.Contains(t, err.Error(), "worker 0 could not start: pod j1-a1-w0 on node gpu-3: ErrImagePull: not found")
	assert.Positive(t, beats)
}

func TestWaitReportsTheExitOfAWatchedPod(t *testing.T) {
	b, cs := newFake(t, nil)
	ctx := context.Background()
	_, err := b.Start(ctx, spec("j1", 1, 0, 1))
	require.NoError(t, err)
	done := make(chan cluster.WorkerStatus, 1)
	go func() {
		st, _ := b.Wait(ctx, cluster.WorkerID{Job: "j1", Attempt: 1}, nil)
		done <- st
	}()
	p, err := cs.CoreV1().Pods("jobs").Get(ctx, "j1-a1-w0", metav1.GetOptions{})
	require.NoError(t, err)
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, FinishedAt: metav1.Now()}}}}
	_, err = cs.CoreV1().Pods("jobs").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	select {
	case st := <-done:
		assert.Equal(t, cluster.PhaseExited, st.Phase)
		assert.Equal(t, 3, st.ExitCode)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not see the pod end")
	}
	_, err = b.Wait(ctx, cluster.WorkerID{Job: "never", Attempt: 1}, nil)
	assert.ErrorIs(t, err, cluster.ErrNotFound)
}

func TestNames(t *testing.T) {
	assert.Equal(t, "lm-mpi-job-0b1c", JobBase("lm-mpi-job-0b1c"))
	for _, job := range []string{"My_Job.v2", "7-eleven", strings.Repeat("x", 200)} {
		base := JobBase(job)
		assert.True(t, isDNS1035(base), "%q -> %q is a DNS-1035 label", job, base)
		assert.LessOrEqual(t, len(PodName(cluster.WorkerID{Job: job, Attempt: 104, Worker: 1023})), 63)
	}
	assert.NotEqual(t, JobBase("a_b"), JobBase("a.b"), "different jobs never share a base")
}

func TestParseLogTime(t *testing.T) {
	ts, err := ParseLogTime([]byte("2026-11-30T18:00:01.123456789Z epoch 3 loss 0.1\n"))
	require.NoError(t, err)
	assert.Equal(t, 123456789, ts.Nanosecond())
	ts, err = ParseLogTime(nil)
	require.NoError(t, err)
	assert.True(t, ts.IsZero())
	_, err = ParseLogTime([]byte("no stamp"))
	assert.Error(t, err)
}

func TestNodeReady(t *testing.T) {
	ready := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "up"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	down := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Message: "Kubelet stopped posting node status."}}}}
	b, _ := newFake(t, nil, ready, down)
	ok, _ := b.NodeReady("up")
	assert.True(t, ok)
	ok, why := b.NodeReady("down")
	assert.False(t, ok)
	assert.Equal(t, "has an Unknown Ready condition: Kubelet stopped posting node status.", why)
	ok, why = b.NodeReady("nowhere")
	assert.False(t, ok)
	assert.Equal(t, "does not exist in the cluster", why)
}

func TestCollectFinishedDeletesOnlyEndedJobsPastTheirKeep(t *testing.T) {
	jobs := fakeJobs{ended: map[string]bool{"done": true, "recent": true}}
	b, cs := newFake(t, jobs)
	b.opts.KeepFinished = time.Hour
	ctx := context.Background()
	for i, job := range []string{"done", "recent", "running", "waiting"} {
		s := spec(job, 1, 0, 1)
		s.GPUs = []int{i} // one GPU each: the node refuses to share one
		_, err := b.Start(ctx, s)
		require.NoError(t, err)
	}
	end := func(job string, at time.Time) {
		p, err := cs.CoreV1().Pods("jobs").Get(ctx, job+"-a1-w0", metav1.GetOptions{})
		require.NoError(t, err)
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at)}}}}
		_, err = cs.CoreV1().Pods("jobs").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	now := time.Now()
	end("done", now.Add(-2*time.Hour))
	end("recent", now.Add(-10*time.Minute))
	end("waiting", now.Add(-2*time.Hour)) // its workflow still runs: a rerun may come
	require.Eventually(t, func() bool {
		p, _, _ := b.pods.GetStore().GetByKey("jobs/waiting-a1-w0")
		return p != nil && p.(*corev1.Pod).Status.Phase == corev1.PodSucceeded
	}, 5*time.Second, 10*time.Millisecond)
	n, err := b.CollectFinished(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	svcs, err := cs.CoreV1().Services("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var left []string
	for _, s := range svcs.Items {
		left = append(left, s.Name)
	}
	assert.ElementsMatch(t, []string{"recent", "running", "waiting"}, left)
}

func TestSelectNodesReadsAllocatable(t *testing.T) {
	node := func(name string, lbls map[string]string, gpus, cpuMilli int64, memGi int64) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				GPUResource:           *resource.NewQuantity(gpus, resource.DecimalSI),
				corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(memGi<<30+12345, resource.BinarySI),
			}},
		}
	}
	demo := map[string]string{"trainq.io/allocation": "demo", FamilyLabel: "a100"}
	b, _ := newFake(t, nil,
		node("gpu-b", demo, 8, 95500, 700),
		node("gpu-a", demo, 4, 16000, 128),
		node("nofamily", map[string]string{"trainq.io/allocation": "demo"}, 8, 1000, 1),
		node("other", map[string]string{"trainq.io/allocation": "prod", FamilyLabel: "h100"}, 8, 1000, 1),
	)
	nodes, skipped := b.SelectNodes(map[string]string{"trainq.io/allocation": "demo"}, nil)
	assert.Equal(t, []scheduler.Node{
		{Name: "gpu-a", Family: "a100", GPUs: 4, CPU: 16, RAMGB: 128},
		{Name: "gpu-b", Family: "a100", GPUs: 8, CPU: 95, RAMGB: 700},
	}, nodes)
	require.Len(t, skipped, 1)
	assert.Equal(t, "nofamily", skipped[0].Name)
	assert.Contains(t, skipped[0].Why, FamilyLabel)
}

// An allocation with topology levels reads each node's domains from its
// labels of the levels' names; a node without one is a domain of its own.
func TestSelectNodesReadsTopologyLabels(t *testing.T) {
	node := func(name string, lbls map[string]string) *corev1.Node {
		lbls["trainq.io/allocation"], lbls[FamilyLabel] = "demo", "a100"
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}
	}
	const block, rack = "example.com/block", "example.com/rack"
	b, _ := newFake(t, nil,
		node("gpu-1", map[string]string{block: "b1", rack: "r1"}),
		node("gpu-2", map[string]string{block: "b1", rack: "r2"}),
		node("norack", map[string]string{block: "b1"}),
	)
	nodes, skipped := b.SelectNodes(map[string]string{"trainq.io/allocation": "demo"}, []string{block, rack})
	require.Len(t, nodes, 3)
	assert.Empty(t, skipped)
	assert.Equal(t, map[string]string{block: "b1", rack: "r1"}, nodes[0].Topology)
	assert.Equal(t, map[string]string{block: "b1", rack: "r2"}, nodes[1].Topology)
	assert.Equal(t, map[string]string{block: "b1", rack: "~norack"}, nodes[2].Topology)
}

// The pod log API has no offsets: ReadLog keeps the end of the first
// offset+max bytes. client-go's fake serves every log as "fake logs".
func TestReadLogSlicesThePodLog(t *testing.T) {
	b, _ := newFake(t, nil, pod(PodName(cluster.WorkerID{Job: "j", Attempt: 1}), "gpu-1", corev1.PodRunning, nil, nil))
	id := cluster.WorkerID{Job: "j", Attempt: 1}
	ctx := context.Background()
	c, err := b.ReadLog(ctx, cluster.LogRequest{ID: id})
	require.NoError(t, err)
	assert.Equal(t, "fake logs", string(c.Data))
	assert.False(t, c.More())
	c, err = b.ReadLog(ctx, cluster.LogRequest{ID: id, Offset: 5, MaxBytes: 2})
	require.NoError(t, err)
	assert.Equal(t, "lo", string(c.Data))
	assert.Equal(t, int64(5), c.Offset)
	assert.True(t, c.More(), "the log goes on past the chunk")
}

// holdDeletes makes the fake API server delete pods as a real one deletes a
// pod with a finalizer: it only sets deletionTimestamp, and the pod stays.
func holdDeletes(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		obj, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), d.Namespace, d.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		if p.DeletionTimestamp == nil {
			now := metav1.Now()
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, d.DeleteOptions.GracePeriodSeconds
		}
		return true, nil, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, d.Namespace)
	})
}

// endContainers plays the kubelet killing the worker's container with
// exit code, leaving the pod's phase as it is.
func endContainers(t *testing.T, cs *fake.Clientset, name string, code int32) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods("jobs").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", FinishedAt: metav1.Now()}}}}
	_, err = cs.CoreV1().Pods("jobs").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func stuckEvents(t *testing.T, cs *fake.Clientset) []corev1.Event {
	t.Helper()
	evs, err := cs.CoreV1().Events("jobs").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.Reason == EventStuckTerminating {
			out = append(out, e)
		}
	}
	return out
}

// A deleted pod whose containers have all ended but that a finalizer keeps
// Terminating: Stop reports the worker stopped, with its exit status, once
// TerminatingTimeout has passed, and records why the pod stays.
func TestStopReturnsWhenAPodStaysTerminatingAfterItsContainersEnded(t *testing.T) {
	b, cs := newFake(t, fakeJobs{reason: "stopped by the user"})
	b.opts.TerminatingTimeout = 100 * time.Millisecond
	holdDeletes(t, cs)
	ctx := context.Background()
	id := cluster.WorkerID{Job: "j1", Attempt: 1}
	_, err := b.Start(ctx, spec("j1", 1, 0, 1))
	require.NoError(t, err)
	p, err := cs.CoreV1().Pods("jobs").Get(ctx, "j1-a1-w0", metav1.GetOptions{})
	require.NoError(t, err)
	p.Finalizers = []string{"example.com/hold"}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	_, err = cs.CoreV1().Pods("jobs").Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)

	// While the container runs, the pod holds its GPUs: Stop waits.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = b.Stop(short, id, 5*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	live, err := b.LiveWorkers(ctx, "gpu-3")
	require.NoError(t, err)
	require.Len(t, live, 1, "a Terminating pod whose container runs is live")

	done := make(chan cluster.WorkerStatus, 1)
	go func() {
		st, err := b.Stop(ctx, id, 5*time.Second)
		assert.NoError(t, err)
		done <- st
	}()
	endContainers(t, cs, "j1-a1-w0", 143) // the phase stays Running, as an older kubelet leaves it
	var st cluster.WorkerStatus
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waits for a pod whose containers ended to be removed")
	}
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.Equal(t, 143, st.ExitCode)
	assert.True(t, st.StopRequested)
	assert.True(t, st.Signaled)

	p, err = cs.CoreV1().Pods("jobs").Get(ctx, "j1-a1-w0", metav1.GetOptions{})
	require.NoError(t, err, "the pod is neither force-deleted...")
	assert.Equal(t, []string{"example.com/hold"}, p.Finalizers, "...nor stripped of its finalizers")
	evs := stuckEvents(t, cs)
	require.Len(t, evs, 1)
	assert.Equal(t, corev1.EventTypeWarning, evs[0].Type)
	assert.Equal(t, "j1-a1-w0", evs[0].InvolvedObject.Name)
	assert.Contains(t, evs[0].Message, "finalizers example.com/hold")

	live, err = b.LiveWorkers(ctx, "gpu-3")
	require.NoError(t, err)
	assert.Empty(t, live, "the fence does not count a pod whose containers ended as a live worker")
	fenced, stillLive, err := cluster.Fence(ctx, b, "gpu-3", nil, time.Second)
	require.NoError(t, err)
	assert.Empty(t, fenced)
	assert.Empty(t, stillLive)

	// A repeated Stop (a retried activity) does not wait again, nor report again.
	again, err := b.Stop(ctx, id, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 143, again.ExitCode)
	assert.Len(t, stuckEvents(t, cs), 1)

	// The next attempt has its own pod.
	next := spec("j1", 2, 0, 1)
	nst, err := b.Start(ctx, next)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseRunning, nst.Phase)
}

func TestPodEnded(t *testing.T) {
	mk := func(phase corev1.PodPhase, states ...corev1.ContainerState) *corev1.Pod {
		p := pod("j-a1-w0", "n", phase, nil, nil)
		for i, s := range states {
			name := ContainerName
			if i > 0 {
				name = "sidecar"
			}
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, State: s})
		}
		return p
	}
	ended := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	assert.True(t, podEnded(mk(corev1.PodFailed)))
	assert.True(t, podEnded(mk(corev1.PodRunning, ended)))
	assert.False(t, podEnded(mk(corev1.PodRunning, running)))
	assert.False(t, podEnded(mk(corev1.PodRunning, ended, running)), "one container still runs")
	assert.False(t, podEnded(mk(corev1.PodPending)), "no status yet")
	noStatus := mk(corev1.PodRunning, ended)
	noStatus.Spec.Containers = append(noStatus.Spec.Containers, corev1.Container{Name: "unreported"})
	assert.False(t, podEnded(noStatus))
	sidecar := mk(corev1.PodRunning, ended)
	sidecar.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", State: running}}
	assert.False(t, podEnded(sidecar))
	assert.Equal(t, cluster.PhaseExited, StatusOf(cluster.WorkerID{Job: "j", Attempt: 1}, mk(corev1.PodRunning, ended)).Phase)
}

func TestRemovalWaitCountsFromTheContainersEnd(t *testing.T) {
	b := &Backend{opts: Options{TerminatingTimeout: 15 * time.Second}}
	now := time.Now()
	at := func(finished time.Time) *corev1.Pod {
		p := pod("j-a1-w0", "n", corev1.PodFailed, nil, nil)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(finished)}}}}
		return p
	}
	assert.Equal(t, 10*time.Second, b.removalWait(at(now.Add(-5*time.Second)), now))
	assert.Equal(t, time.Duration(0), b.removalWait(at(now.Add(-time.Hour)), now), "stuck long ago: no new wait")
	assert.Equal(t, 15*time.Second, b.removalWait(at(now.Add(time.Hour)), now), "a kubelet clock ahead waits no longer")
	assert.Equal(t, 15*time.Second, b.removalWait(pod("j-a1-w0", "n", corev1.PodFailed, nil, nil), now))
}
