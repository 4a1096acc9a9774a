package local

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

func gpuSpec(job string, attempt int, gpus ...int) cluster.WorkerSpec {
	s := binarySpec(job, "sleep 60")
	s.ID.Attempt = attempt
	s.GPUs = gpus
	return s
}

// TestStartRefusesGPUsALiveWorkerUses: whatever the allocator decided, the
// node never starts a worker on a GPU a live worker of another job or
// attempt uses; once that worker has ended, its GPUs can be used again.
func TestStartRefusesGPUsALiveWorkerUses(t *testing.T) {
	ctx := ctxT(t)
	data := t.TempDir()
	b := newBackend(t, data)
	a := gpuSpec("a", 1, 0, 1)
	cleanupWorker(t, b, a.ID)
	_, err := b.Start(ctx, a)
	require.NoError(t, err)

	busy := gpuSpec("b", 1, 1, 2)
	cleanupWorker(t, b, busy.ID)
	_, err = b.Start(ctx, busy)
	var gpusBusy *cluster.GPUsBusy
	require.True(t, errors.As(err, &gpusBusy), "b shares GPU 1 with a, which runs: %v", err)
	assert.Equal(t, []int{1}, gpusBusy.GPUs)
	assert.Equal(t, a.ID, gpusBusy.Holder)
	st, err := b.Status(ctx, busy.ID)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseNotFound, st.Phase, "nothing of b was started")

	// Another process (a restarted agent) sees the same claims.
	specJSON, _ := json.Marshal(busy)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRAINQ_TEST_START="+data, "TRAINQ_TEST_SPEC="+string(specJSON))
	out, err := cmd.CombinedOutput()
	assert.Error(t, err, "another process must not start b either")
	assert.Contains(t, string(out), "GPUs [1] on node-a are still used")

	// The same worker again is the idempotent start, not a conflict, and
	// a next attempt of a on other GPUs is fine.
	_, err = b.Start(ctx, a)
	assert.NoError(t, err)
	other := gpuSpec("a", 2, 4)
	cleanupWorker(t, b, other.ID)
	_, err = b.Start(ctx, other)
	assert.NoError(t, err)

	// Once a has ended, b starts on its GPU.
	_, err = b.Stop(ctx, a.ID, 0)
	require.NoError(t, err)
	_, err = b.Start(ctx, busy)
	assert.NoError(t, err)
}

// TestConcurrentStartsOnOneGPU: of two starts racing for one GPU, exactly
// one runs.
func TestConcurrentStartsOnOneGPU(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	const racers = 4
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		spec := gpuSpec(string(rune('p'+i)), 1, 3)
		cleanupWorker(t, b, spec.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Start(ctx, spec)
		}()
	}
	wg.Wait()
	started := 0
	for _, err := range errs {
		var busy *cluster.GPUsBusy
		switch {
		case err == nil:
			started++
		case !errors.As(err, &busy):
			t.Errorf("unexpected error: %v", err)
		}
	}
	assert.Equal(t, 1, started, "errors: %v", errs)
}
