package local

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// escapeScript starts two processes that leave the worker's process group
// and session (setsid), one of them with an emptied environment, writes
// their pids to dir, and then runs body.
func escapeScript(dir, body string) string {
	return `setsid sh -c 'echo $$ > ` + dir + `/marked.pid.tmp; mv ` + dir + `/marked.pid.tmp ` + dir + `/marked.pid; exec sleep 600' & ` +
		`setsid env -i /bin/sh -c 'echo $$ > ` + dir + `/bare.pid.tmp; mv ` + dir + `/bare.pid.tmp ` + dir + `/bare.pid; exec sleep 600' & ` +
		`while [ ! -e ` + dir + `/marked.pid ] || [ ! -e ` + dir + `/bare.pid ]; do sleep 0.02; done; ` + body
}

// startWorker starts spec on b, to be stopped at the test's end.
func startWorker(t *testing.T, b *Backend, spec cluster.WorkerSpec) {
	t.Helper()
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctxT(t), spec)
	require.NoError(t, err)
}

// startsOnGPU0 says whether a worker of another job can start on GPU 0.
func startsOnGPU0(t *testing.T, b *Backend, job string) error {
	t.Helper()
	next := gpuSpec(job, 1, 0)
	cleanupWorker(t, b, next.ID)
	_, err := b.Start(ctxT(t), next)
	return err
}

func pidIn(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, path)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

func alive(pid int) bool {
	st, ok := readStat(pid)
	return ok && !st.dead()
}

// TestWorkerProcessesThatLeaveTheGroupEndWithIt: a worker whose script
// starts processes in a session of their own (setsid, as daemonising
// launchers do), one of them with an empty environment, and exits: the
// supervisor ends them before it records the exit, so that an exited worker
// has freed its GPUs, and the next worker on them starts.
func TestWorkerProcessesThatLeaveTheGroupEndWithIt(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	dir := t.TempDir()
	spec := gpuSpec("escapes", 1, 0)
	spec.Script = escapeScript(dir, "exit 0")
	startWorker(t, b, spec)
	marked, bare := pidIn(t, filepath.Join(dir, "marked.pid")), pidIn(t, filepath.Join(dir, "bare.pid"))
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	assert.False(t, alive(marked), "the process that left the group outlived the worker's exit")
	assert.False(t, alive(bare), "the process that left the group and cleared its environment outlived the worker's exit")
	// Both escaped processes are among those it names. (It may name more: on a busy machine the
	// shell's short-lived children, such as the mv that wrote a pid file, may not have exited yet
	// when it looks; run 19 beside a CPU-heavy neighbour saw three.)
	m := regexp.MustCompile(`terminating \d+ leftover process\(es\) \[([0-9 ]+)\]`).FindStringSubmatch(logOf(t, b, spec.ID))
	require.NotNil(t, m, "the supervisor says which leftover processes it ends")
	named := strings.Fields(m[1])
	assert.Contains(t, named, strconv.Itoa(marked))
	assert.Contains(t, named, strconv.Itoa(bare))

	assert.NoError(t, startsOnGPU0(t, b, "next"))
}

// TestAProcessThatLeftTheGroupKeepsItsGPUs: when the whole process group of
// a worker is killed (its supervisor too, as the OOM killer or a SIGKILL to
// the group does), a process that had left the group lives on: its GPUs are
// refused to the next worker until it is ended, by Stop or by the first look
// at the worker's status, before the worker is reported exited. (One that
// also cleared its environment is not found once its supervisor is gone; the
// docs say so.)
func TestAProcessThatLeftTheGroupKeepsItsGPUs(t *testing.T) {
	for _, end := range []string{"stopped", "watched"} {
		t.Run(end, func(t *testing.T) {
			ctx := ctxT(t)
			b := newBackend(t, t.TempDir())
			dir := t.TempDir()
			spec := gpuSpec("killed-"+end, 1, 0)
			spec.Script = escapeScript(dir, "sleep 600")
			startWorker(t, b, spec)
			marked := pidIn(t, filepath.Join(dir, "marked.pid"))
			// The process that cleared its environment outlives the killed
			// supervisor (nothing can tell it was the worker's); pidIn ends
			// it with the test, or it would hold the test run's output pipe,
			// and so make and CI, for its whole sleep.
			pidIn(t, filepath.Join(dir, "bare.pid"))
			wdir, err := b.WorkerDir(spec.ID)
			require.NoError(t, err)
			info, err := readProcInfo(wdir)
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(-info.PID, syscall.SIGKILL))
			require.Eventually(t, func() bool { return !groupAlive(info) }, time.Minute, 20*time.Millisecond)
			require.True(t, alive(marked))

			next := gpuSpec("next-"+end, 1, 0)
			cleanupWorker(t, b, next.ID)
			_, err = b.Start(ctx, next)
			var busy *cluster.GPUsBusy
			require.True(t, errors.As(err, &busy), "GPU 0 is still used by a process of %s: %v", spec.ID, err)
			assert.Equal(t, spec.ID, busy.Holder)

			if end == "stopped" {
				_, err = b.Stop(ctx, spec.ID, 0)
				require.NoError(t, err)
			} else {
				st, err := b.Wait(ctx, spec.ID, nil)
				require.NoError(t, err)
				assert.Equal(t, 137, st.ExitCode)
			}
			assert.False(t, alive(marked), "the process that left the group is ended before the worker counts as ended")
			_, err = b.Start(ctx, next)
			assert.NoError(t, err)
		})
	}
}

// TestStopPastGraceEndsWhatLeftTheGroup: a worker that ignores SIGTERM
// outlasts Stop's grace, so Stop SIGKILLs its group, supervisor included,
// before the supervisor could end what left the group. Stop ends those
// first, while they still descend from the supervisor: even the process
// that cleared its environment is gone when Stop returns, and the next
// worker starts on the GPU.
func TestStopPastGraceEndsWhatLeftTheGroup(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	dir := t.TempDir()
	spec := gpuSpec("stop-grace", 1, 0)
	spec.Script = escapeScript(dir, "trap '' TERM; while true; do sleep 0.05; done")
	startWorker(t, b, spec)
	marked, bare := pidIn(t, filepath.Join(dir, "marked.pid")), pidIn(t, filepath.Join(dir, "bare.pid"))
	st, err := b.Stop(ctx, spec.ID, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, cluster.PhaseExited, st.Phase)
	assert.False(t, alive(marked), "the process that left the group")
	assert.False(t, alive(bare), "the process that left the group and cleared its environment")
	assert.NoError(t, startsOnGPU0(t, b, "next-after-stop"))
}

// TestSupervisorReapsTheOrphansItAdopts: the supervisor adopts the worker's
// orphans (it is a child subreaper); those that end while the worker runs
// are reaped at once, not left as zombies for the worker's whole life.
func TestSupervisorReapsTheOrphansItAdopts(t *testing.T) {
	b := newBackend(t, t.TempDir())
	dir := t.TempDir()
	spec := gpuSpec("orphans", 1, 0)
	// Each orphan's pid is written down; its parent shell exits at once.
	spec.Script = "for i in 1 2 3 4 5 6 7 8 9 10; do sh -c 'sleep 0.01 & echo $! >> " + dir + "/orphans'; done; " +
		"echo x > " + dir + "/done; sleep 600"
	startWorker(t, b, spec)
	waitFile(t, filepath.Join(dir, "done"))
	var orphans []int
	for _, f := range strings.Fields(readFileT(t, filepath.Join(dir, "orphans"))) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		orphans = append(orphans, pid)
	}
	require.Len(t, orphans, 10)
	ended := func(pid int) bool { st, ok := readStat(pid); return !ok || st.dead() }
	reaped := func(pid int) bool { _, ok := readStat(pid); return !ok }
	// First every orphan has ended (a zombie until someone reaps it)...
	require.Eventually(t, func() bool { return !slices.ContainsFunc(orphans, func(p int) bool { return !ended(p) }) },
		time.Minute, 20*time.Millisecond, "the orphans end within 10 ms of their start")
	// ...then the supervisor, their parent now, reaps them.
	assert.Eventually(t, func() bool { return !slices.ContainsFunc(orphans, func(p int) bool { return !reaped(p) }) },
		time.Minute, 20*time.Millisecond, "the orphans the supervisor adopted are reaped while the worker runs")
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// TestAStartAfterACleanExitLooksThroughNoProcess: a worker whose supervisor
// recorded its exit left no process behind, so the next start on its GPU
// does not look through the node's processes (a good part of a second on a
// node with thousands) to find out.
func TestAStartAfterACleanExitLooksThroughNoProcess(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	first := gpuSpec("clean", 1, 0, 1)
	first.Script = "true"
	startWorker(t, b, first)
	_, err := b.Wait(ctx, first.ID, nil)
	require.NoError(t, err)
	before := processScans.Load()
	next := gpuSpec("after-clean", 1, 0, 1)
	cleanupWorker(t, b, next.ID)
	_, err = b.Start(ctx, next)
	require.NoError(t, err)
	assert.Equal(t, before, processScans.Load(), "the start looked through the node's processes")
}

// TestStopGivesWhatLeftTheGroupItsSIGTERM: a stop's SIGTERM reaches the
// processes that left the worker's group too, so that they can stop
// gracefully (write their checkpoint, say they ended) within the grace.
func TestStopGivesWhatLeftTheGroupItsSIGTERM(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	dir := t.TempDir()
	spec := gpuSpec("stop-term", 1, 0)
	spec.Script = `setsid sh -c 'trap "echo graceful > ` + dir + `/stray-ended; exit 0" TERM; echo $$ > ` + dir + `/stray.pid.tmp; mv ` + dir + `/stray.pid.tmp ` + dir + `/stray.pid; while true; do sleep 0.05; done' & ` +
		`while [ ! -e ` + dir + `/stray.pid ]; do sleep 0.02; done; trap '' TERM; while [ ! -e ` + dir + `/stray-ended ]; do sleep 0.05; done`
	startWorker(t, b, spec)
	stray := pidIn(t, filepath.Join(dir, "stray.pid"))
	// The worker's own process ignores SIGTERM and ends once the stray has:
	// only a SIGTERM to the stray ends the worker within the grace.
	_, err := b.Stop(ctx, spec.ID, time.Minute)
	require.NoError(t, err)
	assert.False(t, alive(stray))
	ended, _ := os.ReadFile(filepath.Join(dir, "stray-ended"))
	assert.Equal(t, "graceful\n", string(ended), "the stray stopped on its SIGTERM")
}
