package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/trainq/trainq/protocol"
)

// This file reads where a job's time goes from its own workflow history
// (event timestamps, written by the server), so that the benchmark shows
// which step of the path an optimisation shortened.

// workerTrace is one worker of a job's first attempt.
type workerTrace struct {
	node    string
	gpus    []int
	started time.Time // StartWorker completed
	exited  time.Time // WatchWorker completed: the worker's processes are gone
}

// jobTrace is a job's path: submit → request sent → granted → all workers
// started, and each worker's exit.
type jobTrace struct {
	job                                   string
	submitted, requested, granted, allRun time.Time
	// startScheduled is when the job's workflow task scheduled the first
	// StartWorker: granted -> startScheduled is the job's own task,
	// startScheduled -> allRun the node agent's start.
	startScheduled time.Time
	workers        map[int]*workerTrace
	// requestRetried says the capacity request took more than one try
	// (the server refused it, or the activity failed).
	requestRetried bool
}

func traceJob(t *testing.T, job string) jobTrace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := env.client.GetWorkflowHistory(ctx, job, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events = append(events, e)
	}
	return parseJobTrace(job, events)
}

func parseJobTrace(job string, events []*historypb.HistoryEvent) jobTrace {
	tr := jobTrace{job: job, workers: map[int]*workerTrace{}}
	type scheduled struct {
		kind  string
		input *commonpb.Payloads
	}
	acts := map[int64]scheduled{}
	worker := func(w int) *workerTrace {
		if tr.workers[w] == nil {
			tr.workers[w] = &workerTrace{}
		}
		return tr.workers[w]
	}
	for _, e := range events {
		at := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			tr.submitted = at
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			acts[e.GetEventId()] = scheduled{a.GetActivityType().GetName(), a.GetInput()}
			if a.GetActivityType().GetName() == "StartWorker" && tr.startScheduled.IsZero() {
				tr.startScheduled = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := e.GetActivityTaskStartedEventAttributes()
			if acts[a.GetScheduledEventId()].kind == "RequestCapacity" && a.GetAttempt() > 1 {
				tr.requestRetried = true
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			// A request made as a local activity.
			if kind, attempt := localActivityOf(e); kind == "RequestCapacity" {
				if tr.requested.IsZero() {
					tr.requested = at
				}
				tr.requestRetried = tr.requestRetried || attempt > 1
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			if e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == protocol.SignalGrant && tr.granted.IsZero() {
				tr.granted = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			s := acts[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]
			var in struct {
				ID struct {
					Worker int `json:"worker"`
				} `json:"id"`
				Worker int    `json:"worker"`
				Node   string `json:"node"`
				GPUs   []int  `json:"gpus"`
			}
			if p := s.input.GetPayloads(); len(p) > 0 {
				_ = json.Unmarshal(p[0].GetData(), &in)
			}
			switch s.kind {
			case "RequestCapacity":
				if tr.requested.IsZero() {
					tr.requested = at
				}
			case "StartWorker":
				w := worker(in.ID.Worker)
				if w.started.IsZero() {
					w.started, w.node, w.gpus = at, in.Node, in.GPUs
				}
				if at.After(tr.allRun) {
					tr.allRun = at
				}
			case "WatchWorker":
				if w := worker(in.Worker); w.exited.IsZero() {
					w.exited = at
				}
			}
		}
	}
	return tr
}

// localActivityOf reads the activity type and attempt of a local activity's
// marker (the SDK's "LocalActivity" marker, its "data" detail).
func localActivityOf(e *historypb.HistoryEvent) (string, int) {
	m := e.GetMarkerRecordedEventAttributes()
	if m.GetMarkerName() != "LocalActivity" {
		return "", 0
	}
	p := m.GetDetails()["data"].GetPayloads()
	if len(p) == 0 {
		return "", 0
	}
	var data struct {
		ActivityType string
		Attempt      int
	}
	if json.Unmarshal(p[0].GetData(), &data) != nil {
		return "", 0
	}
	return data.ActivityType, data.Attempt
}

func retriedRequests(traces []jobTrace) int {
	n := 0
	for _, tr := range traces {
		if tr.requestRetried {
			n++
		}
	}
	return n
}

// pathFigures are the p50/p95 of each step over many jobs, and of the slot
// cycle: from a worker's exit to the next job's grant and worker start on
// the same GPU.
type pathFigures struct {
	submitToRequested, requestedToGranted, grantedToStarted []time.Duration
	grantedToStartScheduled, startScheduledToStarted        []time.Duration
	exitToNextGrant, exitToNextStart                        []time.Duration
}

func pathOf(traces []jobTrace) pathFigures {
	var f pathFigures
	type hold struct {
		job             string
		granted         time.Time
		started, exited time.Time
	}
	byGPU := map[string][]hold{}
	for _, tr := range traces {
		if tr.granted.IsZero() || tr.allRun.IsZero() {
			continue
		}
		f.submitToRequested = append(f.submitToRequested, tr.requested.Sub(tr.submitted))
		f.requestedToGranted = append(f.requestedToGranted, tr.granted.Sub(tr.requested))
		f.grantedToStarted = append(f.grantedToStarted, tr.allRun.Sub(tr.granted))
		if !tr.startScheduled.IsZero() {
			f.grantedToStartScheduled = append(f.grantedToStartScheduled, tr.startScheduled.Sub(tr.granted))
			f.startScheduledToStarted = append(f.startScheduledToStarted, tr.allRun.Sub(tr.startScheduled))
		}
		for _, w := range tr.workers {
			for _, g := range w.gpus {
				key := fmt.Sprintf("%s/%d", w.node, g)
				byGPU[key] = append(byGPU[key], hold{tr.job, tr.granted, w.started, w.exited})
			}
		}
	}
	for _, holds := range byGPU {
		sort.Slice(holds, func(i, j int) bool { return holds[i].started.Before(holds[j].started) })
		for i := 1; i < len(holds); i++ {
			prev, next := holds[i-1], holds[i]
			if prev.exited.IsZero() || next.granted.Before(prev.exited) {
				continue
			}
			f.exitToNextGrant = append(f.exitToNextGrant, next.granted.Sub(prev.exited))
			f.exitToNextStart = append(f.exitToNextStart, next.started.Sub(prev.exited))
		}
	}
	return f
}

func (f pathFigures) String() string {
	var b strings.Builder
	row := func(name string, d []time.Duration) {
		fmt.Fprintf(&b, "  %-32s p50 %-8s p95 %-8s (%d)\n", name,
			percentile(d, 0.5).Round(time.Millisecond), percentile(d, 0.95).Round(time.Millisecond), len(d))
	}
	row("submit -> request sent", f.submitToRequested)
	row("request sent -> granted", f.requestedToGranted)
	row("granted -> all workers started", f.grantedToStarted)
	row("  granted -> start scheduled", f.grantedToStartScheduled)
	row("  start scheduled -> started", f.startScheduledToStarted)
	row("worker exit -> next grant (GPU)", f.exitToNextGrant)
	row("worker exit -> next start (GPU)", f.exitToNextStart)
	return b.String()
}

func TestPathOfMeasuresTheSlotCycle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	a := jobTrace{job: "a", submitted: ms(0), requested: ms(100), granted: ms(300), allRun: ms(600),
		workers: map[int]*workerTrace{0: {node: "n1", gpus: []int{0}, started: ms(600), exited: ms(10000)}}}
	b := jobTrace{job: "b", submitted: ms(50), requested: ms(150), granted: ms(10200), allRun: ms(10500),
		workers: map[int]*workerTrace{0: {node: "n1", gpus: []int{0}, started: ms(10500), exited: ms(20000)}}}
	other := jobTrace{job: "c", submitted: ms(0), requested: ms(10), granted: ms(20), allRun: ms(30),
		workers: map[int]*workerTrace{0: {node: "n2", gpus: []int{0}, started: ms(30), exited: ms(40)}}}
	f := pathOf([]jobTrace{b, a, other})
	require.Equal(t, []time.Duration{200 * time.Millisecond}, f.exitToNextGrant)
	require.Equal(t, []time.Duration{500 * time.Millisecond}, f.exitToNextStart)
	require.Len(t, f.submitToRequested, 3)
	require.Contains(t, f.String(), "worker exit -> next start (GPU)  p50 500ms")
}
