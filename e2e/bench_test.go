package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestBenchmarkThroughput is `make bench`'s end-to-end benchmark. It is a
// measurement, not a test of speed: it asserts only that every job
// completes, and prints the figures.
func TestBenchmarkThroughput(t *testing.T) {
	n := benchSize(t, "the end-to-end benchmark", "TRAINQ_BENCH_JOBS", 200)
	startWorker(t)
	// A fresh trainq-worker's allocator recovers before it grants anything
	// (it lists the jobs twice, recoverySettle apart): a one-time cost per
	// worker start, not per job, so one job that runs through first keeps
	// it out of the figures below, and it is reported on its own.
	warm := time.Now()
	waitState(t, submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.1gpu", Region: "T",
		AllocationName: "bench", PriorityClass: "medium", Type: "binary"}), protocol.StateCompleted, long)
	warmUp := time.Since(warm)

	// 1. n one-second jobs on one allocation (32 GPUs, one GPU each).
	submitted := make([]time.Time, n)
	names := make([]string, n)
	begin := time.Now()
	parallel(n, 16, func(i int) {
		submitted[i] = time.Now()
		names[i] = submit(t, protocol.JobSpec{Script: "sleep 1", InstanceType: "a100.1gpu", Region: "T",
			AllocationName: "bench", PriorityClass: "medium", Type: "binary"})
	})
	submitDone := time.Since(begin)
	var toRunning []time.Duration
	var lastRunning time.Time
	for i, name := range names {
		st := waitState(t, name, protocol.StateCompleted, 10*time.Minute)
		require.NotNil(t, st.RunningAt)
		toRunning = append(toRunning, st.RunningAt.Sub(submitted[i]))
		if st.RunningAt.After(lastRunning) {
			lastRunning = *st.RunningAt
		}
	}
	admitted := float64(n) / lastRunning.Sub(begin).Seconds()
	traces := make([]jobTrace, n)
	for i, name := range names {
		traces[i] = traceJob(t, name)
	}
	path := pathOf(traces)

	// 2. Preemption rounds on an idle allocation: the low job's submit ->
	// Running (unloaded), a high job's submit -> its low victim's SIGTERM,
	// and the victim's exit -> the high job Running.
	rounds := preemptionRounds(t, 10)

	// 3. Bare-Temporal baseline: the same number of trivial workflows, each
	// doing one request/grant round trip with a shared entity workflow.
	base, baseTotal := runBaseline(t, n)

	p := func(d []time.Duration, q float64) time.Duration { return percentile(d, q).Round(time.Millisecond) }
	baseRate := float64(n) / baseTotal.Seconds()
	report := fmt.Sprintf(`trainq end-to-end benchmark (%d one-second jobs, allocation with 32 GPUs)
  warm-up job             %s (the new worker's allocator recovers first; not counted below)
  submitted in            %s (%.1f submissions/s, 16 concurrent clients)
  admitted (running)      %.1f jobs/s (first submit to last job running)
  submit -> Running       p50 %s  p95 %s
  capacity requests retried %d (the server refused or the activity failed)
preemption rounds on an idle allocation (%d rounds)
  unloaded submit -> Running        p50 %s  p95 %s
  high submit -> victim SIGTERM     p50 %s  p95 %s
  victim exit -> preemptor Running  p50 %s  p95 %s
bare-Temporal baseline (%d workflows, one update+signal round trip each with a shared entity)
  granted                 %.1f workflows/s
  submit -> granted       p50 %s  p95 %s
ratio trainq/baseline     throughput %.2f, p50 latency %.1fx
trainq job path, from the job histories
%s`, n, warmUp.Round(time.Millisecond), submitDone.Round(time.Millisecond), float64(n)/submitDone.Seconds(), admitted,
		p(toRunning, 0.5), p(toRunning, 0.95), retriedRequests(traces),
		len(rounds.unloaded), p(rounds.unloaded, 0.5), p(rounds.unloaded, 0.95),
		p(rounds.toSigterm, 0.5), p(rounds.toSigterm, 0.95), p(rounds.exitToRunning, 0.5), p(rounds.exitToRunning, 0.95),
		n, baseRate, p(base, 0.5), p(base, 0.95),
		admitted/baseRate, float64(percentile(toRunning, 0.5))/float64(percentile(base, 0.5)), path)
	fmt.Print(report)
	if out := os.Getenv("TRAINQ_BENCH_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report), 0o644))
	}
}

// preemptionFigures are the latencies of the preemption rounds.
type preemptionFigures struct {
	unloaded, toSigterm, exitToRunning []time.Duration
}

// preemptionRounds runs n rounds on the one-node preempt allocation: a low
// job that records when it gets SIGTERM (and exits right after), then a
// high job that needs its GPUs.
func preemptionRounds(t *testing.T, n int) preemptionFigures {
	var f preemptionFigures
	for round := 0; round < n; round++ {
		termFile := filepath.Join(t.TempDir(), "term")
		submitted := time.Now()
		low := submit(t, fixture.Job{Allocation: "preempt", Class: "low", Script: `trap 'date +%s%N > ` + termFile + `; exit 143' TERM; while true; do sleep 0.02; done`}.Spec())
		lowSt := waitState(t, low, protocol.StateRunning, long)
		f.unloaded = append(f.unloaded, lowSt.RunningAt.Sub(submitted))
		t0 := time.Now()
		high := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: "true"}.Spec())
		var ns int64
		eventually(t, long, "the victim to get SIGTERM", func() bool {
			v, err := strconv.ParseInt(strings.TrimSpace(readFile(t, termFile)), 10, 64)
			ns = v
			return err == nil
		})
		// The victim's trap exits right after writing the file.
		exited := time.Unix(0, ns)
		f.toSigterm = append(f.toSigterm, exited.Sub(t0))
		highSt := waitState(t, high, protocol.StateCompleted, long)
		f.exitToRunning = append(f.exitToRunning, highSt.RunningAt.Sub(exited))
		waitState(t, low, protocol.StatePreempted, long)
	}
	return f
}

func parallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

const baselineQueue = "bench-baseline"

// baselineEntity grants every request at once: the cost of one
// request/grant round trip through a shared entity workflow, as trainq's
// allocator does it, without any scheduling.
func baselineEntity(ctx workflow.Context) error {
	err := workflow.SetUpdateHandler(ctx, "request", func(ctx workflow.Context, requester string) error {
		return workflow.SignalExternalWorkflow(ctx, requester, "", "grant", nil).Get(ctx, nil)
	})
	if err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// baselineJob asks the entity for a grant and waits for it.
func baselineJob(ctx workflow.Context) (time.Time, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	if err := workflow.ExecuteActivity(actx, "BaselineRequest", workflow.GetInfo(ctx).WorkflowExecution.ID).Get(ctx, nil); err != nil {
		return time.Time{}, err
	}
	workflow.GetSignalChannel(ctx, "grant").Receive(ctx, nil)
	return workflow.Now(ctx), nil
}

type baselineActivities struct{ c client.Client }

func (a *baselineActivities) BaselineRequest(ctx context.Context, requester string) error {
	op := a.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: "bench-baseline-entity", TaskQueue: baselineQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, "baselineEntity")
	h, err := a.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: "request", Args: []any{requester},
			WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

func runBaseline(t *testing.T, n int) ([]time.Duration, time.Duration) {
	w := worker.New(env.client, baselineQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(baselineEntity, workflow.RegisterOptions{Name: "baselineEntity"})
	w.RegisterWorkflowWithOptions(baselineJob, workflow.RegisterOptions{Name: "baselineJob"})
	w.RegisterActivity(&baselineActivities{c: env.client})
	require.NoError(t, w.Start())
	defer w.Stop()
	lat := make([]time.Duration, n)
	begin := time.Now()
	parallel(n, 16, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		run, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("bench-baseline-%d-%d", begin.UnixNano(), i), TaskQueue: baselineQueue}, "baselineJob")
		require.NoError(t, err)
		var granted time.Time
		require.NoError(t, run.Get(ctx, &granted))
		lat[i] = granted.Sub(start)
	})
	return lat, time.Since(begin)
}

// benchSize skips a benchmark unless TRAINQ_BENCH is set (make bench), and
// gives its size: the positive integer in env, else def.
func benchSize(t *testing.T, what, env string, def int) int {
	if os.Getenv("TRAINQ_BENCH") == "" {
		t.Skip("set TRAINQ_BENCH=1 (make bench) to run " + what)
	}
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return v
	}
	return def
}
