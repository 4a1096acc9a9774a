package activities

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/cluster"
)

// TestIdleVerdict: when a status read warns, stops or lifts the warning.
func TestIdleVerdict(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	in := WatchNotebookIdleInput{IdleTimeout: 30 * time.Minute, Warning: 5 * time.Minute}
	read := func(last time.Time, at time.Duration) cluster.JupyterStatus {
		return cluster.JupyterStatus{LastActivity: last, ServerTime: t0.Add(at)}
	}
	farClock := t0.Add(24 * time.Hour) // this machine's clock, a day off: not used while the server sends its own

	r, done := idleVerdict(in, read(t0, 24*time.Minute), farClock)
	assert.False(t, done, "idle 24m of 30m, warning at 25m: go on (%+v)", r)
	r, done = idleVerdict(in, read(t0, 25*time.Minute), farClock)
	require.True(t, done)
	assert.Equal(t, NotebookIdleReply{Verdict: IdleWarn, LastActivity: t0, At: t0.Add(25 * time.Minute), IdleFor: 25 * time.Minute, Left: 5 * time.Minute}, r)

	warned := in
	warned.Warned = &r
	_, done = idleVerdict(warned, read(t0, 29*time.Minute), farClock)
	assert.False(t, done, "warned, idle 29m: go on")
	r2, done := idleVerdict(warned, read(t0, 30*time.Minute), farClock)
	require.True(t, done)
	assert.Equal(t, IdleStop, r2.Verdict)

	r2, done = idleVerdict(warned, read(t0.Add(28*time.Minute), 29*time.Minute), farClock)
	require.True(t, done)
	assert.Equal(t, IdleActive, r2.Verdict, "used after the warning")

	busy := read(t0, 40*time.Minute)
	busy.BusyKernels = 1
	r2, done = idleVerdict(warned, busy, farClock)
	require.True(t, done)
	assert.Equal(t, IdleActive, r2.Verdict, "a cell still running is activity")
	_, done = idleVerdict(in, busy, farClock)
	assert.False(t, done, "a busy kernel is never warned of")

	// A warning given late (idle 40m when first read) still stands for its
	// 5 minutes before the stop.
	late, done := idleVerdict(in, read(t0, 40*time.Minute), farClock)
	require.True(t, done)
	assert.Equal(t, IdleWarn, late.Verdict)
	assert.Zero(t, late.Left)
	lateIn := in
	lateIn.Warned = &late
	_, done = idleVerdict(lateIn, read(t0, 44*time.Minute), farClock)
	assert.False(t, done, "4 minutes after a late warning: not yet")
	r2, done = idleVerdict(lateIn, read(t0, 45*time.Minute), farClock)
	require.True(t, done)
	assert.Equal(t, IdleStop, r2.Verdict)

	// Without a Date header, this machine's clock measures.
	r2, done = idleVerdict(in, cluster.JupyterStatus{LastActivity: t0}, t0.Add(26*time.Minute))
	require.True(t, done)
	assert.Equal(t, IdleWarn, r2.Verdict)
}

// fakeJupyter is a backend whose one notebook worker's server says what
// the test sets (or does not answer).
type fakeJupyter struct {
	cluster.Backend
	mu    sync.Mutex
	st    cluster.JupyterStatus
	err   error
	reads int
	notes []string
}

func (f *fakeJupyter) NotebookStatus(ctx context.Context, id cluster.WorkerID) (cluster.JupyterStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.st, f.err
}

func (f *fakeJupyter) NoteLog(ctx context.Context, id cluster.WorkerID, line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, line)
	return nil
}

func (f *fakeJupyter) set(fn func(f *fakeJupyter)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// TestWatchNotebookIdle: the watch ends with a warning only once the server
// has been idle long enough, keeps going while the server is used or does
// not answer, and says so in the server's log.
func TestWatchNotebookIdle(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	f := &fakeJupyter{err: errors.New("connection refused")}
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&Activities{Backend: f})
	in := WatchNotebookIdleInput{ID: cluster.WorkerID{Job: "jupyter-1", Attempt: 1}, IdleTimeout: 2 * time.Second, Warning: time.Second, Rule: "allocation a"}

	// Unreachable, then used all the time, for longer than the timeout;
	// then left alone.
	go func() {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			f.set(func(f *fakeJupyter) { f.err, f.st = nil, cluster.JupyterStatus{LastActivity: time.Now()} })
			time.Sleep(100 * time.Millisecond)
		}
	}()
	started := time.Now()
	val, err := env.ExecuteActivity((&Activities{}).WatchNotebookIdle, in)
	require.NoError(t, err)
	var r NotebookIdleReply
	require.NoError(t, val.Get(&r))
	assert.Equal(t, IdleWarn, r.Verdict)
	assert.True(t, r.LastActivity.After(started.Add(2800*time.Millisecond)), "not warned while the server was used (last activity %s after the start)", r.LastActivity.Sub(started))
	assert.GreaterOrEqual(t, r.IdleFor, time.Second, "warned once idle for the timeout less the warning")
	assert.GreaterOrEqual(t, time.Since(r.LastActivity), time.Second)
	require.Len(t, f.notes, 1)
	assert.Contains(t, f.notes[0], "it will be stopped in 1s unless it is used (idle_timeout 2s of allocation a)")

	f.set(func(f *fakeJupyter) { f.st.LastActivity = time.Now() })
	in.Warned = &r
	val, err = env.ExecuteActivity((&Activities{}).WatchNotebookIdle, in)
	require.NoError(t, err)
	require.NoError(t, val.Get(&r))
	assert.Equal(t, IdleActive, r.Verdict)

	in.Warned = nil
	val, err = env.ExecuteActivity((&Activities{}).WatchNotebookIdle, in)
	require.NoError(t, err)
	require.NoError(t, val.Get(&r))
	require.Equal(t, IdleWarn, r.Verdict)
	in.Warned = &r
	val, err = env.ExecuteActivity((&Activities{}).WatchNotebookIdle, in)
	require.NoError(t, err)
	require.NoError(t, val.Get(&r))
	assert.Equal(t, IdleStop, r.Verdict)
	assert.Contains(t, f.notes[len(f.notes)-1], "stopping this Jupyter server: idle for 2s (idle_timeout of allocation a)")

	// A backend that cannot read a server's status says so, for good.
	plain := s.NewTestActivityEnvironment()
	plain.RegisterActivity(&Activities{Backend: newLocalBackendOnly(t)})
	_, err = plain.ExecuteActivity((&Activities{}).WatchNotebookIdle, in)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, ErrTypeUnsupported, appErr.Type())
}

// backendOnly hides every optional interface of a backend.
type backendOnly struct{ cluster.Backend }

func newLocalBackendOnly(t *testing.T) cluster.Backend { return backendOnly{newLocal(t)} }
