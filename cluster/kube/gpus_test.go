package kube

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestPodCarriesMLSpaceSettings: shm_size_class sizes a memory /dev/shm,
// internet false labels the pod for a NetworkPolicy, conda_env wraps the
// command, and a pytorch_elastic worker gets torchrun's --nnodes range.
func TestPodCarriesMLSpaceSettings(t *testing.T) {
	b, _ := newFake(t, fakeJobs{})
	s := spec("a", 1, 0, 2) // GPUs 4 and 5
	s.ShmGB, s.NoInternet, s.CondaEnv = 128, true, "torch"
	s.Type, s.ElasticMinWorkers, s.ElasticMaxWorkers, s.ElasticMaxRestarts = cluster.TypePyTorchElastic, 1, 2, 3
	pod := b.Pod(s, JobMeta{}, nil)
	require.Len(t, pod.Spec.Volumes, 1)
	v := pod.Spec.Volumes[0]
	require.NotNil(t, v.EmptyDir)
	assert.Equal(t, "Memory", string(v.EmptyDir.Medium))
	assert.Equal(t, "128Gi", v.EmptyDir.SizeLimit.String())
	require.Len(t, pod.Spec.Containers[0].VolumeMounts, 1)
	assert.Equal(t, "/dev/shm", pod.Spec.Containers[0].VolumeMounts[0].MountPath)
	assert.Equal(t, "false", pod.Labels[LabelInternet])
	assert.Contains(t, pod.Spec.Containers[0].Command[2], "exec conda run --no-capture-output -n 'torch'")
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "1:2", env["PET_NNODES"])
	assert.Equal(t, "3", env["PET_MAX_RESTARTS"])

	plain := b.Pod(spec("b", 1, 0, 1), JobMeta{}, nil)
	assert.Empty(t, plain.Spec.Volumes, "no shm_size_class: the runtime's /dev/shm")
	assert.NotContains(t, plain.Labels, LabelInternet)
}
