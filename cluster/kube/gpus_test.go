package kube

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/trainq/trainq/cluster"
)

// TestStartRefusesGPUsALivePodUses: the node's agent never creates a pod on
// a GPU a live pod of another job or attempt uses there.
func TestStartRefusesGPUsALivePodUses(t *testing.T) {
	b, _ := newFake(t, fakeJobs{})
	ctx := context.Background()
	a := spec("a", 1, 0, 1) // gpu-3, GPUs 4 and 5
	_, err := b.Start(ctx, a)
	require.NoError(t, err)

	clash := spec("b", 1, 0, 1)
	clash.GPUs = []int{5, 6}
	_, err = b.Start(ctx, clash)
	var busy *cluster.GPUsBusy
	require.True(t, errors.As(err, &busy), "b shares GPU 5 with a's live pod: %v", err)
	assert.Equal(t, []int{5}, busy.GPUs)
	assert.Equal(t, a.ID, busy.Holder)
	st, err := b.Status(ctx, clash.ID)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseNotFound, st.Phase, "no pod was created for b")

	_, err = b.Start(ctx, a)
	assert.NoError(t, err, "starting the same worker again is not a clash")
	apart := spec("b", 1, 0, 1)
	apart.GPUs = []int{6, 7}
	_, err = b.Start(ctx, apart)
	assert.NoError(t, err)
}

// TestConcurrentStartsOnOneGPUCreateOnePod: of starts racing for one GPU in
// one process, exactly one creates its pod.
func TestConcurrentStartsOnOneGPUCreateOnePod(t *testing.T) {
	b, _ := newFake(t, fakeJobs{})
	const racers = 4
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		s := spec(string(rune('p'+i)), 1, 0, 1)
		s.GPUs = []int{0}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Start(context.Background(), s)
		}()
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		var busy *cluster.GPUsBusy
		switch {
		case err == nil:
			created++
		case !errors.As(err, &busy):
			t.Errorf("unexpected error: %v", err)
		}
	}
	assert.Equal(t, 1, created, "errors: %v", errs)
}

// raceAPod has another agent create worker's pod right before the next
// create of any other pod (after that start's cache check), once, and
// returns the pod.
func raceAPod(b *Backend, cs *fake.Clientset, worker cluster.WorkerSpec) *corev1.Pod {
	pod := b.Pod(worker, JobMeta{}, nil)
	raced := false
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod); p.Name != pod.Name && !raced {
			raced = true
			if err := cs.Tracker().Add(pod.DeepCopy()); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	return pod
}

// TestStartYieldsToAPodItsCacheMissed: another agent creates a pod on the
// same GPU between this start's cache check and its create (a stale agent
// during a partition, or a cache that lags): the start lists the node's pods
// from the API server after its create, finds the other pod, deletes its own
// and is refused, so that one pod is left on the GPU.
func TestStartYieldsToAPodItsCacheMissed(t *testing.T) {
	b, cs := newFake(t, fakeJobs{})
	ctx := context.Background()
	other := spec("other", 1, 0, 1) // GPUs 4 and 5 of gpu-3
	otherPod := raceAPod(b, cs, other)
	late := spec("late", 1, 0, 1)
	late.GPUs = []int{5, 6}
	_, err := b.Start(ctx, late)
	var busy *cluster.GPUsBusy
	require.True(t, errors.As(err, &busy), "late shares GPU 5 with other's pod: %v", err)
	assert.Equal(t, []int{5}, busy.GPUs)
	assert.Equal(t, other.ID, busy.Holder)
	pods, err := cs.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{otherPod.Name}, names, "the start that yielded deleted its pod")
}

// TestARetriedStartConfirmsItsGPUs: a start that created its pod but could
// not confirm its GPUs (the API server did not answer its list, nor its
// deletion) fails; tried again, it finds its pod and confirms it then: the
// other worker's pod on the GPU makes it yield, and one pod is left.
func TestARetriedStartConfirmsItsGPUs(t *testing.T) {
	b, cs := newFake(t, fakeJobs{})
	ctx := context.Background()
	otherPod := raceAPod(b, cs, spec("other", 1, 0, 1))
	listFails, deleteFails := 1, 1
	unavailable := errors.New("the server is currently unable to handle the request")
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.ListAction).GetListRestrictions().Fields.String() != "" && listFails > 0 {
			listFails--
			return true, nil, unavailable
		}
		return false, nil, nil
	})
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if deleteFails > 0 {
			deleteFails--
			return true, nil, unavailable
		}
		return false, nil, nil
	})
	late := spec("late", 1, 0, 1)
	late.GPUs = []int{5, 6}
	_, err := b.Start(ctx, late)
	require.ErrorContains(t, err, "unable to handle the request")
	_, err = b.Start(ctx, late)
	var busy *cluster.GPUsBusy
	require.True(t, errors.As(err, &busy), "the start tried again confirms its GPUs: %v", err)
	pods, err := cs.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "one pod on GPU 5")
	assert.Equal(t, otherPod.Name, pods.Items[0].Name)
}

// TestARetriedStartKeepsItsPodBesideAYieldedOne: a worker's pod runs; a
// later start of another worker on its GPU yielded (its pod is being
// deleted). The running worker's start tried again (after a trainq-worker
// restart) confirms its GPUs, and keeps its pod: the other pod is the one
// that yields.
func TestARetriedStartKeepsItsPodBesideAYieldedOne(t *testing.T) {
	b, cs := newFake(t, fakeJobs{})
	ctx := context.Background()
	running := spec("running", 1, 0, 1) // GPUs 4 and 5 of gpu-3
	_, err := b.Start(ctx, running)
	require.NoError(t, err)
	p, err := cs.CoreV1().Pods("jobs").Get(ctx, PodName(running.ID), metav1.GetOptions{})
	require.NoError(t, err)
	p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	_, err = cs.CoreV1().Pods("jobs").Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)

	yielded := spec("yielded", 1, 0, 1)
	yp := b.Pod(yielded, JobMeta{}, nil)
	yp.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	deleting := metav1.NewTime(time.Now())
	yp.DeletionTimestamp = &deleting
	require.NoError(t, cs.Tracker().Add(yp))

	_, err = b.Start(ctx, running)
	require.NoError(t, err, "the running worker keeps its GPUs")
	_, err = cs.CoreV1().Pods("jobs").Get(ctx, PodName(running.ID), metav1.GetOptions{})
	assert.NoError(t, err, "its pod was not deleted")
}

// TestPodCarriesMLSpaceSettings: shm_size_class sizes a memory /dev/shm,
// internet false labels the pod for a NetworkPolicy, conda_env wraps the
// command, and a pytorch_elastic worker gets torchrun's --nnodes range.
func TestPodCarriesMLSpaceSettings(t *testing.T) {
	b, _ := newFake(t, fakeJobs{})
	s := spec("a", 1, 0, 2) // GPUs 4 and 5
	s.ShmGB, s.NoInternet, s.CondaEnv = 128, true, "torch"
	s.Type, s.ElasticMinWorkers, s.ElasticMaxWorkers, s.ElasticMaxRestarts = cluster.TypePyTorchElastic, 1, 2, 3
	pod := b.Pod(s, JobMeta{}, nil)
	v, ok := volume(pod, "dshm")
	require.True(t, ok, "a /dev/shm volume")
	require.NotNil(t, v.EmptyDir)
	assert.Equal(t, "Memory", string(v.EmptyDir.Medium))
	assert.Equal(t, "128Gi", v.EmptyDir.SizeLimit.String())
	assert.Equal(t, "/dev/shm", mountOf(pod, "dshm"))
	assert.Equal(t, "false", pod.Labels[LabelInternet])
	assert.Contains(t, pod.Spec.Containers[0].Command[2], "exec conda run --no-capture-output -n 'torch'")
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "1:2", env["PET_NNODES"])
	assert.Equal(t, "3", env["PET_MAX_RESTARTS"])

	plain := b.Pod(spec("b", 1, 0, 1), JobMeta{}, nil)
	_, ok = volume(plain, "dshm")
	assert.False(t, ok, "no shm_size_class: the runtime's /dev/shm")
	assert.NotContains(t, plain.Labels, LabelInternet)
}

// TestPodShowsItsNotice: every pod mounts its notice annotation where its
// $TRAINQ_NOTICE_FILE names, and Notice sets that annotation.
func TestPodShowsItsNotice(t *testing.T) {
	b, cs := newFake(t, fakeJobs{})
	s := spec("a", 1, 0, 1)
	pod := b.Pod(s, JobMeta{}, nil)
	v, ok := volume(pod, "trainq-notice")
	require.True(t, ok)
	require.NotNil(t, v.DownwardAPI)
	assert.Equal(t, "metadata.annotations['trainq.io/notice']", v.DownwardAPI.Items[0].FieldRef.FieldPath)
	assert.Equal(t, NoticePath, mountOf(pod, "trainq-notice")+"/"+v.DownwardAPI.Items[0].Path)
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, NoticePath, env[cluster.NoticeFileEnv])

	ctx := context.Background()
	_, err := b.Start(ctx, s)
	require.NoError(t, err)
	require.NoError(t, b.Notice(ctx, s.ID, []byte(`{"reason":"preempted"}`)))
	got, err := cs.CoreV1().Pods("jobs").Get(ctx, PodName(s.ID), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, `{"reason":"preempted"}`, got.Annotations[AnnotationNotice])
	other := spec("nobody", 1, 0, 1)
	assert.True(t, errors.Is(b.Notice(ctx, other.ID, []byte("{}")), cluster.ErrNotFound))
}

func volume(pod *corev1.Pod, name string) (corev1.Volume, bool) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

func mountOf(pod *corev1.Pod, name string) string {
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == name {
			return m.MountPath
		}
	}
	return ""
}
