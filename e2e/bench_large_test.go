package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// largeNodes and largeGPUs shape the large benchmark's allocation: 32 nodes
// of 8 GPUs.
const largeNodes, largeGPUs = 32, 8

// TestBenchmarkLarge is `make bench`'s scale run: 2,000 short jobs (one GPU
// each) on one allocation of 256 GPUs, with the job path and slot cycle
// read from the job histories, and the allocator's workflow-task latency
// and continue-as-new count read from its own histories. Like
// TestBenchmarkThroughput it asserts only that every job completes.
func TestBenchmarkLarge(t *testing.T) {
	n := benchSize(t, "the end-to-end benchmark", "TRAINQ_BENCH_LARGE_JOBS", 2000)
	cfg, path := largeConfig(t)
	startWorkerWith(t, path)

	submitter := tqclient.New(env.client, cfg)
	submitted := make([]time.Time, n)
	names := make([]string, n)
	begin := time.Now()
	parallel(n, 16, func(i int) {
		submitted[i] = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sub, err := submitter.Submit(ctx, protocol.JobSpec{Script: "sleep 1", InstanceType: "a100.1gpu",
			Region: "T", AllocationName: "bench-large", PriorityClass: "medium", Type: "binary"}, tqclient.SubmitOptions{})
		require.NoError(t, err)
		names[i] = sub.JobName
	})
	submitDone := time.Since(begin)
	toRunning := make([]time.Duration, n)
	var lastRunning atomic.Int64
	parallel(n, 16, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		var st protocol.JobStatus
		require.NoError(t, env.client.GetWorkflow(ctx, names[i], "").Get(ctx, &st), names[i])
		require.Equal(t, protocol.StateCompleted, st.State, names[i])
		toRunning[i] = st.RunningAt.Sub(submitted[i])
		for {
			last := lastRunning.Load()
			if st.RunningAt.UnixNano() <= last || lastRunning.CompareAndSwap(last, st.RunningAt.UnixNano()) {
				break
			}
		}
	})
	admitted := float64(n) / time.Unix(0, lastRunning.Load()).Sub(begin).Seconds()
	traces := make([]jobTrace, n)
	parallel(n, 8, func(i int) { traces[i] = traceJob(t, names[i]) })
	alloc := allocatorFiguresOf(allocatorRuns(t, env.client, protocol.AllocatorWorkflowID("T", "bench-large")))

	p := func(d []time.Duration, q float64) time.Duration { return percentile(d, q).Round(time.Millisecond) }
	report := fmt.Sprintf(`trainq large benchmark (%d one-second jobs, allocation with %d GPUs)
  submitted in            %s (%.1f submissions/s, 16 concurrent clients)
  admitted (running)      %.1f jobs/s (first submit to last job running)
  submit -> Running       p50 %s  p95 %s
  capacity requests retried %d
allocator (all runs, from its histories)
  workflow task latency   p50 %s  p95 %s  (scheduled -> completed, %d tasks; %d failed or past the task timeout, %d sticky timeouts)
  continue-as-new         %d times
trainq job path, from the job histories
%s`, n, largeNodes*largeGPUs, submitDone.Round(time.Millisecond), float64(n)/submitDone.Seconds(), admitted,
		p(toRunning, 0.5), p(toRunning, 0.95), retriedRequests(traces),
		p(alloc.taskLatency, 0.5), p(alloc.taskLatency, 0.95), len(alloc.taskLatency), alloc.tasksLost, alloc.stickyTimeouts,
		alloc.continuedAsNew, pathOf(traces))
	fmt.Print(report)
	if out := os.Getenv("TRAINQ_BENCH_LARGE_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report), 0o644))
	}
}

// largeConfig writes the shared test config plus the bench-large allocation.
func largeConfig(t *testing.T) (*config.Config, string) {
	var b strings.Builder
	b.WriteString(fmt.Sprintf(testConfig, filepath.Join(env.dir, "data")))
	b.WriteString("      - name: bench-large\n        stop_grace_period: 3s\n        nodes:\n")
	for i := 1; i <= largeNodes; i++ {
		fmt.Fprintf(&b, "          - {name: large-%d, family: a100, gpus: %d, cpu: 96, ram_gb: 768}\n", i, largeGPUs)
	}
	path := filepath.Join(t.TempDir(), "trainq-large.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	return cfg, path
}

// allocatorFigures come from every run of one allocator workflow.
type allocatorFigures struct {
	taskLatency []time.Duration // WorkflowTaskScheduled -> WorkflowTaskCompleted
	// tasksLost are workflow tasks that failed or ran past the task
	// timeout; stickyTimeouts are tasks a worker's sticky queue did not
	// hand out in time (they move to the normal queue, and cost a replay).
	tasksLost, stickyTimeouts int
	continuedAsNew            int
}

// allocatorRuns reads the histories of every run of a workflow: the runs of
// a continue-as-new chain, and those of earlier chains (an allocator that
// was terminated and started afresh), as visibility lists them.
func allocatorRuns(t *testing.T, c client.Client, workflowID string) [][]*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var runs [][]*historypb.HistoryEvent
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %q", workflowID), NextPageToken: token})
		require.NoError(t, err)
		for _, e := range resp.GetExecutions() {
			events := history(t, c, workflowID, e.GetExecution().GetRunId())
			require.NotEmpty(t, events)
			runs = append(runs, events)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return runs
		}
	}
}

func allocatorFiguresOf(runs [][]*historypb.HistoryEvent) allocatorFigures {
	var f allocatorFigures
	for _, events := range runs {
		f.addTasks(events)
		if events[len(events)-1].GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW {
			f.continuedAsNew++
		}
	}
	return f
}

// firstTaskBy is when the first workflow task completed by the worker
// process pid (the SDK's identity "pid@host@") at or after from, if any.
func firstTaskBy(runs [][]*historypb.HistoryEvent, pid int, from time.Time) (time.Time, bool) {
	prefix := fmt.Sprintf("%d@", pid)
	var first time.Time
	for _, events := range runs {
		for _, e := range events {
			at := e.GetEventTime().AsTime()
			if e.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED || at.Before(from) ||
				!strings.HasPrefix(e.GetWorkflowTaskCompletedEventAttributes().GetIdentity(), prefix) {
				continue
			}
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
	}
	return first, !first.IsZero()
}

func (f *allocatorFigures) addTasks(events []*historypb.HistoryEvent) {
	scheduled := map[int64]time.Time{}
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = e.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			id := e.GetWorkflowTaskCompletedEventAttributes().GetScheduledEventId()
			if at, ok := scheduled[id]; ok {
				f.taskLatency = append(f.taskLatency, e.GetEventTime().AsTime().Sub(at))
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			if e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
				f.stickyTimeouts++
			} else {
				f.tasksLost++
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			f.tasksLost++
		}
	}
}

// history reads one run's full history ("" runID: the current run).
func history(t *testing.T, c client.Client, workflowID, runID string) []*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events = append(events, e)
	}
	return events
}

func TestAllocatorFiguresReadTasksAndRuns(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(id int64, ms int, typ enumspb.EventType) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventType: typ, EventTime: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))}
	}
	completed := func(id int64, ms int, scheduled int64, identity string) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskCompletedEventAttributes{WorkflowTaskCompletedEventAttributes: &historypb.WorkflowTaskCompletedEventAttributes{
			ScheduledEventId: scheduled, Identity: identity}}
		return e
	}
	timedOut := func(id int64, ms int, typ enumspb.TimeoutType) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskTimedOutEventAttributes{WorkflowTaskTimedOutEventAttributes: &historypb.WorkflowTaskTimedOutEventAttributes{
			TimeoutType: typ}}
		return e
	}
	older := []*historypb.HistoryEvent{
		ev(1, 0, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), completed(3, 40, 1, "11@host@q"),
		ev(4, 100, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), timedOut(5, 3100, enumspb.TIMEOUT_TYPE_START_TO_CLOSE),
		ev(6, 3100, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), completed(8, 3300, 6, "22@host@q"),
		ev(9, 3300, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW),
	}
	newer := []*historypb.HistoryEvent{ev(1, 3400, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), completed(3, 3500, 1, "22@host@q"),
		timedOut(4, 3600, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START)}
	f := allocatorFiguresOf([][]*historypb.HistoryEvent{newer, older})
	require.Equal(t, []time.Duration{100 * time.Millisecond, 40 * time.Millisecond, 200 * time.Millisecond}, f.taskLatency)
	require.Equal(t, 1, f.tasksLost)
	require.Equal(t, 1, f.stickyTimeouts)
	require.Equal(t, 1, f.continuedAsNew)
	at, ok := firstTaskBy([][]*historypb.HistoryEvent{newer, older}, 22, t0.Add(time.Second))
	require.True(t, ok)
	require.Equal(t, t0.Add(3300*time.Millisecond), at)
	_, ok = firstTaskBy([][]*historypb.HistoryEvent{newer, older}, 11, t0.Add(time.Second))
	require.False(t, ok)
}
