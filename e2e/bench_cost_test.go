package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
)

// TestBenchmarkCost is `make bench`'s cost model: what one Temporal
// primitive, and one trainq job, costs the dev server's CPU on this
// machine. It runs n trivial workflows of each shape, then n one-worker
// trainq jobs, on the package's dev server (in memory; run it alone so that
// the server is fresh) and reads the server's CPU time (utime+stime of
// /proc/PID/stat) around each phase, less the server's idle rate. The
// figures say which of a job's primitives are worth cutting; they are as
// noisy as the machine.
func TestBenchmarkCost(t *testing.T) {
	n := benchSize(t, "the cost model", "TRAINQ_BENCH_COST_N", 300)
	server := devServerPid(t)
	w := worker.New(env.client, costQueue, worker.Options{})
	for name, fn := range costShapes {
		w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
	}
	w.RegisterWorkflowWithOptions(costEntity, workflow.RegisterOptions{Name: "costEntity"})
	w.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "CostNop"})
	w.RegisterActivityWithOptions(costRun, activity.RegisterOptions{Name: "CostRun"})
	require.NoError(t, w.Start())
	defer w.Stop()
	_, err := env.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: costEntityID, TaskQueue: costQueue}, "costEntity")
	require.NoError(t, err)

	// Warm up (first tasks, caches), then the server's idle rate.
	runShape(t, "bare", 20)
	idleFrom := cpuOf(t, server)
	idleFor := 3 * time.Second
	time.Sleep(idleFor) // measuring the idle rate takes an idle period: nothing to await
	idle := (cpuOf(t, server) - idleFrom) / idleFor.Seconds()

	var b strings.Builder
	fmt.Fprintf(&b, "Temporal cost model: dev server CPU per workflow (%d workflows per shape, 16 concurrent clients; server idle %.0f ms CPU/s, subtracted)\n", n, idle*1000)
	fmt.Fprintf(&b, "  %-24s %13s %10s %16s %8s\n", "shape", "server ms/wf", "vs bare", "test proc ms/wf", "wf/s")
	var bare float64
	for _, shape := range costOrder {
		m := measure(t, server, idle, n, func() { runShape(t, shape, n) })
		if shape == "bare" {
			bare = m.server
		}
		fmt.Fprintf(&b, "  %-24s %13.2f %+10.2f %16.2f %8.1f\n", shape, m.server, m.server-bare, m.self, m.rate)
	}
	w.Stop()
	// The bare-Temporal baseline of TestBenchmarkThroughput, for the ratio.
	base := measure(t, server, idle, n, func() { runBaseline(t, n) })
	fmt.Fprintf(&b, "  %-24s %13.2f %+10.2f %16.2f %8.1f\n", "throughput baseline", base.server, base.server-bare, base.self, base.rate)
	b.WriteString(trainqJobCost(t, server, idle, n, bare, base.server))
	fmt.Print(b.String())
	if out := os.Getenv("TRAINQ_BENCH_COST_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}

// trainqJobCost runs n one-worker jobs (`true`, one GPU) through
// trainq-worker and reports what one job costs the server, against the
// bare workflow, and which events one job and its allocator record.
func trainqJobCost(t *testing.T, server int, idle float64, n int, bare, base float64) string {
	tw := startWorker(t)
	spec := protocol.JobSpec{Script: "true", InstanceType: "a100.1gpu", Region: "T",
		AllocationName: "bench", PriorityClass: "medium", Type: "binary"}
	runJobs := func(k int) []string {
		names := make([]string, k)
		parallel(k, 16, func(i int) {
			names[i] = submit(t, spec)
			require.NoError(t, waitResult(t, names[i]))
		})
		return names
	}
	runJobs(5) // the allocator recovers and warms up first
	allocator := protocol.AllocatorWorkflowID("T", "bench")
	allocBefore := describeLength(t, allocator)
	worker0, children0 := cpuTimes(t, tw.Pid())
	var names []string
	m := measure(t, server, idle, n, func() { names = runJobs(n) })
	worker1, children1 := cpuTimes(t, tw.Pid())
	workerMs, childrenMs := (worker1-worker0)/float64(n)*1000, (children1-children0)/float64(n)*1000
	allocAfter := describeLength(t, allocator)

	var b strings.Builder
	fmt.Fprintf(&b, "trainq one-worker job (%d jobs, `true` on 1 GPU of 32)\n", n)
	fmt.Fprintf(&b, "  server %.2f ms/job (%.1f x bare, %.2f x the baseline), trainq-worker %.2f ms/job (+ %.2f in its job supervisors), test proc %.2f ms/job, %.1f jobs/s\n",
		m.server, m.server/bare, m.server/base, workerMs, childrenMs, m.self, m.rate)
	events := fetchHistory(t, names[len(names)/2])
	fmt.Fprintf(&b, "  one job's history: %d events: %s\n", len(events), eventCounts(events))
	if allocBefore.run == allocAfter.run {
		fmt.Fprintf(&b, "  allocator history: %.1f events per job\n", float64(allocAfter.length-allocBefore.length)/float64(n))
	} else {
		b.WriteString("  allocator history: continued as new during the phase, events per job not counted\n")
	}
	return b.String()
}

type costFigures struct{ server, self, rate float64 }

// measure runs phase and returns the server's CPU (less its idle rate) and
// this process's CPU per item, in ms, and the items per second.
func measure(t *testing.T, server int, idle float64, n int, phase func()) costFigures {
	self0, srv0, t0 := cpuOf(t, os.Getpid()), cpuOf(t, server), time.Now()
	phase()
	took := time.Since(t0).Seconds()
	return costFigures{
		server: (cpuOf(t, server) - srv0 - idle*took) / float64(n) * 1000,
		self:   (cpuOf(t, os.Getpid()) - self0) / float64(n) * 1000,
		rate:   float64(n) / took,
	}
}

type historyLength struct {
	run    string
	length int64
}

func describeLength(t *testing.T, workflowID string) historyLength {
	d, err := env.client.DescribeWorkflow(context.Background(), workflowID, "")
	require.NoError(t, err)
	info := d.RawResponse.GetWorkflowExecutionInfo()
	return historyLength{run: info.GetExecution().GetRunId(), length: info.GetHistoryLength()}
}

// eventCounts lists a history's event types with their counts, most first.
func eventCounts(events []*historypb.HistoryEvent) string {
	counts := map[string]int{}
	for _, e := range events {
		counts[strings.TrimPrefix(e.GetEventType().String(), "EVENT_TYPE_")]++
	}
	kinds := slices.Collect(maps.Keys(counts))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// devServerPid finds the package's dev server among the processes: the
// `temporal server start-dev` that listens on env.hostPort.
func devServerPid(t *testing.T) int {
	port := env.hostPort[strings.LastIndexByte(env.hostPort, ':')+1:]
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if i := slices.Index(args, "--port"); slices.Contains(args, "start-dev") && i >= 0 && i+1 < len(args) && args[i+1] == port {
			return pid
		}
	}
	t.Fatalf("no dev server process listens on port %s", port)
	return 0
}

const (
	costQueue    = "bench-cost"
	costEntityID = "bench-cost-entity"
)

// costOrder lists the shapes; each adds one primitive to "bare".
var costOrder = []string{"bare", "+upsert (2 attrs)", "+activity", "+local activity", "+signal to entity", "+timer",
	"+start, then watch", "+run (signal, watch)", "+local activity, query"}

var costShapes = map[string]func(workflow.Context) error{
	"bare": func(ctx workflow.Context) error { return nil },
	"+upsert (2 attrs)": func(ctx workflow.Context) error {
		return workflow.UpsertTypedSearchAttributes(ctx, protocol.KeyState.ValueSet("Running"), protocol.KeyAttempt.ValueSet(1))
	},
	"+activity": func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		return workflow.ExecuteActivity(ctx, "CostNop").Get(ctx, nil)
	},
	"+local activity": func(ctx workflow.Context) error {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		return workflow.ExecuteLocalActivity(ctx, func(context.Context) error { return nil }).Get(ctx, nil)
	},
	"+signal to entity": func(ctx workflow.Context) error {
		return workflow.SignalExternalWorkflow(ctx, costEntityID, "", "poke", nil).Get(ctx, nil)
	},
	"+timer": func(ctx workflow.Context) error { return workflow.Sleep(ctx, time.Millisecond) },
	// The capacity request's local activity also asks the allocator where
	// the request stands (a query): what that question costs.
	"+local activity, query": func(ctx workflow.Context) error {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		return workflow.ExecuteLocalActivity(ctx, costQuery).Get(ctx, nil)
	},
	// A worker's start and watch as two activities (StartWorker, then
	// WatchWorker), against one activity that signals its workflow once the
	// worker runs and returns when it exits (a RunWorker): what merging
	// them would save. The "worker" runs 50 ms in both.
	"+start, then watch": func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		if err := workflow.ExecuteActivity(ctx, "CostNop").Get(ctx, nil); err != nil {
			return err
		}
		return workflow.ExecuteActivity(ctx, "CostRun", false).Get(ctx, nil)
	},
	"+run (signal, watch)": func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
		run := workflow.ExecuteActivity(ctx, "CostRun", true)
		workflow.GetSignalChannel(ctx, "started").Receive(ctx, nil)
		return run.Get(ctx, nil)
	},
}

func costQuery(ctx context.Context) error {
	_, err := env.client.QueryWorkflow(ctx, costEntityID, "", "where")
	return err
}

// costRun stands for a worker that runs 50 ms; with signal it first tells
// its workflow that it started, as a RunWorker would.
func costRun(ctx context.Context, signal bool) error {
	if signal {
		info := activity.GetInfo(ctx)
		if err := env.client.SignalWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, "started", nil); err != nil {
			return err
		}
	}
	select { // the worker's run time: the workload, not a synchronisation
	case <-time.After(50 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// costEntity takes signals and answers a query, and does nothing else: the
// receiving side of a signal (an event and a workflow task on the entity)
// counts too.
func costEntity(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, "where", func() (int, error) { return 1, nil }); err != nil {
		return err
	}
	ch := workflow.GetSignalChannel(ctx, "poke")
	for {
		ch.Receive(ctx, nil)
	}
}

func runShape(t *testing.T, shape string, n int) {
	prefix := fmt.Sprintf("cost-%d-", time.Now().UnixNano())
	parallel(n, 16, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		run, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: prefix + strconv.Itoa(i), TaskQueue: costQueue}, shape)
		require.NoError(t, err)
		require.NoError(t, run.Get(ctx, nil), shape)
	})
}

// cpuOf is a process's user+system CPU time so far, in seconds (clock
// ticks of 10 ms: Linux's USER_HZ is 100).
func cpuOf(t *testing.T, pid int) float64 {
	own, _ := cpuTimes(t, pid)
	return own
}

// cpuTimes is a process's own CPU time and that of its children it has
// waited for (the job workers' supervisors of trainq-worker), in seconds.
func cpuTimes(t *testing.T, pid int) (own, children float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ticks [4]float64 // utime, stime, cutime, cstime
	for i := range ticks {
		v, err := strconv.ParseFloat(f[11+i], 64)
		require.NoError(t, err)
		ticks[i] = v / 100
	}
	return ticks[0] + ticks[1], ticks[2] + ticks[3]
}
