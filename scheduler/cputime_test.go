//go:build cpuharness && linux

package scheduler

// Thread CPU time of Schedule calls, for comparing trees on a busy machine, where wall-clock
// benchmarks swing 2-4x: go test -tags cpuharness -count=1 -run TestCPUTime -v ./scheduler/
// (to compare with an older tree, copy this file there; before touch existed, every pass was
// full, so drop the p.touch() calls). It asserts nothing about time.

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0) // CLOCK_THREAD_CPUTIME_ID
	return time.Duration(ts.Nano())
}

func cpuSummary(s []time.Duration) string {
	slices.Sort(s)
	return fmt.Sprintf("min %v p25 %v median %v", s[0], s[len(s)/4], s[len(s)/2])
}

// TestCPUTimeWaitingFull: BenchmarkScheduleWaitingFull's pass (1,000 full nodes, 1k and 10k
// waiting, an event before each pass), 100 batches of 10 passes, GC off while measuring.
func TestCPUTimeWaitingFull(t *testing.T) {
	runtime.LockOSThread() // the thread's clock is read twice around each batch
	defer runtime.UnlockOSThread()
	for _, n := range []int{1000, 10000} {
		p := benchPool(t, n, false, mixedClass)
		now := t0.Add(time.Hour)
		for range 50 {
			p.touch()
			p.Schedule(now)
		}
		runtime.GC()
		old := debug.SetGCPercent(-1)
		var s []time.Duration
		for range 100 {
			st := threadCPU()
			for range 10 {
				p.touch()
				p.Schedule(now)
			}
			s = append(s, (threadCPU()-st)/10)
		}
		debug.SetGCPercent(old)
		t.Logf("WaitingFull/%dk: %s", n/1000, cpuSummary(s))
	}
}

// TestCPUTimeRestored: one pass on a restored pool, 25 times, a GC before each: 8,000 grants
// (BenchmarkScheduleBulkGrant), a preemption (BenchmarkSchedulePreemption), the whole trace
// (BenchmarkScheduleTrace, skipped without the trace).
func TestCPUTimeRestored(t *testing.T) {
	t.Run("BulkGrant", func(t *testing.T) {
		d1, _ := ParseInstanceType(benchTypes[0])
		p := mustPool(t, nodesOf("node", "a100plus", 1000, 8, 96, 768), Policy{})
		for i := range 10000 {
			mustEnqueue(t, p, Request{Job: fmt.Sprintf("j-%05d", i), Kind: KindJob, Class: Class(i % 3), Demand: d1, Workers: 1, Seq: int64(i)})
		}
		cpuTimeRestored(t, p.Snapshot(), t0)
	})
	t.Run("Preemption", func(t *testing.T) {
		p := benchPool(t, 10000, true, lowClass)
		d8, _ := ParseInstanceType(benchTypes[3])
		mustEnqueue(t, p, Request{Job: "urgent", Kind: KindJob, Class: High, Demand: d8, Workers: 2, Seq: 1, SubmittedAt: t0})
		cpuTimeRestored(t, p.Snapshot(), t0.Add(time.Hour))
	})
	t.Run("Trace", func(t *testing.T) { cpuTimeRestored(t, tracePool(t).Snapshot(), t0) })
}

func cpuTimeRestored(t *testing.T, snap Snapshot, now time.Time) {
	runtime.LockOSThread() // the thread's clock is read twice around each call
	defer runtime.UnlockOSThread()
	var s []time.Duration
	for range 25 {
		p, err := Restore(snap)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		st := threadCPU()
		p.Schedule(now)
		s = append(s, threadCPU()-st)
	}
	t.Logf("%s", cpuSummary(s))
}
