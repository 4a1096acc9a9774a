package cluster

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNode is a Backend and Inventory over an in-memory list of live
// workers. arrive is added to the node after the first listing, as a worker
// started by a stale activity while the node is being fenced.
type fakeNode struct {
	live    []PlacedWorker
	arrive  []PlacedWorker
	lists   int
	stopped []WorkerID
	stopErr error
}

func (f *fakeNode) LiveWorkers(ctx context.Context, node string) ([]PlacedWorker, error) {
	f.lists++
	out := append([]PlacedWorker(nil), f.live...)
	if f.lists == 1 {
		f.live = append(f.live, f.arrive...)
	}
	return out, nil
}

func (f *fakeNode) Stop(ctx context.Context, id WorkerID, grace time.Duration) (WorkerStatus, error) {
	if f.stopErr != nil {
		return WorkerStatus{ID: id}, f.stopErr
	}
	f.stopped = append(f.stopped, id)
	for i, w := range f.live {
		if w.ID == id {
			f.live = append(f.live[:i], f.live[i+1:]...)
			break
		}
	}
	return WorkerStatus{ID: id, Phase: PhaseExited, ExitCode: 143, Signaled: true, StopRequested: true}, nil
}

func (f *fakeNode) Rendezvous(context.Context, string, int) (string, int, error) { return "", 0, nil }
func (f *fakeNode) Start(context.Context, WorkerSpec) (WorkerStatus, error) {
	return WorkerStatus{}, nil
}
func (f *fakeNode) Wait(context.Context, WorkerID, func(WorkerStatus)) (WorkerStatus, error) {
	return WorkerStatus{}, nil
}
func (f *fakeNode) Status(context.Context, WorkerID) (WorkerStatus, error) {
	return WorkerStatus{}, nil
}
func (f *fakeNode) Logs(context.Context, WorkerID, int, io.Writer) error { return nil }
func (f *fakeNode) ReadLog(context.Context, LogRequest) (LogChunk, error) {
	return LogChunk{}, nil
}

//nolint:unparam // a builder's call names every field of the worker it builds; the tests all use attempt 1 today
func placed(job string, attempt int, gpus ...int) PlacedWorker {
	id := WorkerID{Job: job, Attempt: attempt}
	return PlacedWorker{WorkerStatus: WorkerStatus{ID: id, Phase: PhaseRunning}, Node: "n", GPUs: gpus}
}

func TestFenceConfirmsOnlyAnEmptyNode(t *testing.T) {
	keep, stale, late := placed("keep", 1, 0), placed("stale", 1, 1), placed("late", 1, 2)
	f := &fakeNode{live: []PlacedWorker{keep, stale}, arrive: []PlacedWorker{late}}
	stopped, live, err := Fence(context.Background(), f, "n", []WorkerID{keep.ID}, time.Second)
	require.Error(t, err, "a worker that arrived during the fence is not confirmed gone")
	assert.Contains(t, err.Error(), "fence node n: late/attempt-1/worker-0 is still live")
	require.Len(t, stopped, 1)
	assert.Equal(t, stale.ID, stopped[0].ID)
	assert.Equal(t, PhaseExited, stopped[0].Phase)
	assert.Equal(t, []int{1}, stopped[0].GPUs)
	assert.Equal(t, []WorkerID{keep.ID, late.ID}, []WorkerID{live[0].ID, live[1].ID})

	// Fencing again stops the late one and confirms.
	stopped, live, err = Fence(context.Background(), f, "n", []WorkerID{keep.ID}, time.Second)
	require.NoError(t, err)
	require.Len(t, stopped, 1)
	assert.Equal(t, late.ID, stopped[0].ID)
	require.Len(t, live, 1)
	assert.Equal(t, keep.ID, live[0].ID)
}

func TestFenceReportsStopErrors(t *testing.T) {
	boom := errors.New("boom")
	f := &fakeNode{live: []PlacedWorker{placed("stale", 1, 0)}, stopErr: boom}
	stopped, live, err := Fence(context.Background(), f, "n", nil, time.Second)
	assert.ErrorIs(t, err, boom)
	assert.Empty(t, stopped)
	assert.Len(t, live, 1)
}
