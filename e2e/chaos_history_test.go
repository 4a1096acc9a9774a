package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// chaosEvents builds synthetic histories for the server-side checks.
type chaosEvents struct {
	t0     time.Time
	events []*historypb.HistoryEvent
}

func (h *chaosEvents) add(ms int, typ enumspb.EventType, set func(*historypb.HistoryEvent)) int64 {
	e := &historypb.HistoryEvent{EventId: int64(len(h.events) + 1), EventType: typ,
		EventTime: timestamppb.New(h.t0.Add(time.Duration(ms) * time.Millisecond))}
	if set != nil {
		set(e)
	}
	h.events = append(h.events, e)
	return e.EventId
}

func chaosPayloads(t *testing.T, v any) *commonpb.Payloads {
	p, err := converter.GetDefaultDataConverter().ToPayloads(v)
	require.NoError(t, err)
	return p
}

// activity schedules, starts and (unless completedMs < 0) completes one
// activity on queue.
func (h *chaosEvents) activity(t *testing.T, name, queue string, in any, startedMs, completedMs int) {
	id := h.add(startedMs, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
			ActivityType: &commonpb.ActivityType{Name: name}, TaskQueue: &taskqueuepb.TaskQueue{Name: queue}, Input: chaosPayloads(t, in)}}
	})
	h.add(startedMs, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: id}}
	})
	if completedMs >= 0 {
		h.add(completedMs, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: id}}
		})
	}
}

//nolint:unparam // the call names the node, as refusedStart's does; the tests all use n1 today
func (h *chaosEvents) start(t *testing.T, id cluster.WorkerID, node string, gpus []int, ms int) {
	h.activity(t, "StartWorker", protocol.NodeTaskQueue(node), cluster.WorkerSpec{ID: id, Node: node, GPUs: gpus}, ms, ms+10)
}

// refusedStart is a StartWorker its node refused: the GPUs were in use.
func (h *chaosEvents) refusedStart(t *testing.T, id cluster.WorkerID, node string, gpus []int, ms int) {
	h.activity(t, "StartWorker", protocol.NodeTaskQueue(node), cluster.WorkerSpec{ID: id, Node: node, GPUs: gpus}, ms, -1)
	scheduled := h.events[len(h.events)-2].GetEventId()
	h.add(ms+10, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{
			ScheduledEventId: scheduled, Failure: &failurepb.Failure{Message: "GPUs in use",
				FailureInfo: &failurepb.Failure_ApplicationFailureInfo{ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: activities.ErrTypeGPUsBusy}}}}}
	})
}

func (h *chaosEvents) watchEnds(t *testing.T, id cluster.WorkerID, node string, startedMs, endMs int) {
	h.activity(t, "WatchWorker", protocol.NodeTaskQueue(node), activities.WatchWorkerInput{WorkerID: id}, startedMs, endMs)
}

func TestChaosServerSeesGPUsHandedOnTooEarly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := cluster.WorkerID{Job: "a", Attempt: 1, Worker: 0}
	b := cluster.WorkerID{Job: "b", Attempt: 1, Worker: 0}
	c := cluster.WorkerID{Job: "c", Attempt: 1, Worker: 0}
	run := func(build func(jobs, alloc *chaosEvents)) *chaosServer {
		jobs, alloc := &chaosEvents{t0: t0}, &chaosEvents{t0: t0}
		build(jobs, alloc)
		s := newChaosServer()
		s.add(chaosRunRef{id: "jobs", run: "1", typ: protocol.JobWorkflowName}, jobs.events)
		s.add(chaosRunRef{id: protocol.AllocatorWorkflowID("C", "chaos"), run: "1", typ: protocol.AllocatorWorkflowName}, alloc.events)
		s.finish()
		return s
	}

	t.Run("a watch saw the worker end first", func(t *testing.T) {
		s := run(func(jobs, _ *chaosEvents) {
			jobs.start(t, a, "n1", []int{0, 1}, 1000)
			jobs.watchEnds(t, a, "n1", 1100, 5000)
			jobs.start(t, b, "n1", []int{1}, 6000)
			jobs.start(t, c, "n1", []int{2}, 2000) // another GPU
		})
		assert.Empty(t, s.unconfirmed)
		assert.Equal(t, 3, s.workers)
		assert.Len(t, s.neverEnded, 2, "b and c run on")
	})
	t.Run("a start its node refused held nothing", func(t *testing.T) {
		s := run(func(jobs, _ *chaosEvents) {
			jobs.start(t, a, "n1", []int{0}, 1000)
			jobs.refusedStart(t, b, "n1", []int{0}, 3000)
			jobs.watchEnds(t, a, "n1", 1100, 5000)
		})
		assert.Empty(t, s.unconfirmed)
		assert.Len(t, s.refusedStarts, 1)
		assert.Empty(t, s.neverEnded, "the refused worker never ran")
	})
	t.Run("started before the watch saw the worker end", func(t *testing.T) {
		s := run(func(jobs, _ *chaosEvents) {
			jobs.start(t, a, "n1", []int{0}, 1000)
			jobs.start(t, b, "n1", []int{0}, 3000)
			jobs.watchEnds(t, a, "n1", 1100, 5000)
		})
		require.Len(t, s.unconfirmed, 1)
		assert.Contains(t, s.unconfirmed[0], "b/attempt-1/worker-0 started")
	})
	t.Run("a release without lost nodes is seen first", func(t *testing.T) {
		s := run(func(jobs, alloc *chaosEvents) {
			jobs.start(t, a, "n1", []int{0}, 1000)
			alloc.add(2000, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, func(e *historypb.HistoryEvent) {
				e.Attributes = &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{
					SignalName: protocol.SignalRelease, Input: chaosPayloads(t, protocol.ReleaseSignal{Job: "a", Attempt: 1, Workers: []int{0}})}}
			})
			jobs.start(t, b, "n1", []int{0}, 3000)
		})
		assert.Empty(t, s.unconfirmed)
	})
	t.Run("a lost release proves nothing; a fence that kept the worker neither", func(t *testing.T) {
		s := run(func(jobs, alloc *chaosEvents) {
			jobs.start(t, a, "n1", []int{0}, 1000)
			alloc.add(2000, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, func(e *historypb.HistoryEvent) {
				e.Attributes = &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{
					SignalName: protocol.SignalRelease, Input: chaosPayloads(t, protocol.ReleaseSignal{Job: "a", Attempt: 1, Workers: []int{0}, LostNodes: []string{"n1"}})}}
			})
			alloc.activity(t, "FenceNode", protocol.NodeTaskQueue("n1"), activities.FenceNodeInput{Keep: []cluster.WorkerID{a}}, 2500, 2600)
			jobs.start(t, b, "n1", []int{0}, 3000)
		})
		require.Len(t, s.unconfirmed, 1)
		assert.Contains(t, s.unconfirmed[0], "no history shows it gone")
	})
	t.Run("a fence that did not keep the worker is seen first", func(t *testing.T) {
		s := run(func(jobs, alloc *chaosEvents) {
			jobs.start(t, a, "n1", []int{0}, 1000)
			alloc.activity(t, "FenceNode", protocol.NodeTaskQueue("n2"), activities.FenceNodeInput{}, 2000, 2100) // another node
			alloc.activity(t, "FenceNode", protocol.NodeTaskQueue("n1"), activities.FenceNodeInput{Keep: []cluster.WorkerID{c}}, 2500, 2600)
			jobs.start(t, b, "n1", []int{0}, 3000)
		})
		assert.Empty(t, s.unconfirmed)
	})
	t.Run("a fence that began before the worker started does not cover it", func(t *testing.T) {
		s := run(func(jobs, alloc *chaosEvents) {
			alloc.activity(t, "FenceNode", protocol.NodeTaskQueue("n1"), activities.FenceNodeInput{}, 500, 2600)
			jobs.start(t, a, "n1", []int{0}, 1000)
			jobs.start(t, b, "n1", []int{0}, 3000)
		})
		assert.Len(t, s.unconfirmed, 1)
	})
	t.Run("a reset run's copy of the history counts once", func(t *testing.T) {
		jobs := &chaosEvents{t0: t0}
		jobs.start(t, a, "n1", []int{0}, 1000)
		jobs.add(1500, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{
				Cause: enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE}}
		})
		s := newChaosServer()
		s.add(chaosRunRef{id: "a", run: "1", typ: protocol.JobWorkflowName}, jobs.events)
		s.add(chaosRunRef{id: "a", run: "2", typ: protocol.JobWorkflowName}, jobs.events)
		s.finish()
		assert.Equal(t, map[string]int{protocol.JobWorkflowName + ": " + enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE.String(): 1}, s.failed)
		assert.Equal(t, 1, s.workers)
	})
}

func TestChaosServerSortsFailedTasks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &chaosEvents{t0: t0}
	fail := func(ms int, cause enumspb.WorkflowTaskFailedCause) {
		h.add(ms, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{Cause: cause}}
		})
	}
	fail(1, enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND)
	fail(2, enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW)
	fail(3, enumspb.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND) // a task follows: not a terminate's
	h.add(4, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, nil)
	fail(5, enumspb.WORKFLOW_TASK_FAILED_CAUSE_PENDING_SIGNALS_LIMIT_EXCEEDED)
	fail(6, enumspb.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND) // the terminate's, after a buffered signal
	h.add(7, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{SignalName: "request"}}
	})
	h.add(8, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, nil)
	for i, msg := range []string{"history_events: premature end of stream, expectedLastEventID=13 but no more events after eventID=11", "panic: nil map"} {
		h.add(100+i, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, func(e *historypb.HistoryEvent) { // times of their own: events are told apart by them
			e.Attributes = &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{
				Cause: enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE, Failure: &failurepb.Failure{Message: msg}}}
		})
	}
	s := newChaosServer()
	s.add(chaosRunRef{id: "x", run: "1", typ: protocol.AllocatorWorkflowName}, h.events)
	s.finish()
	assert.Equal(t, map[string]int{protocol.AllocatorWorkflowName: 1}, s.unhandled)
	alloc := protocol.AllocatorWorkflowName + ": "
	assert.Equal(t, map[string]int{alloc + "ResetWorkflow": 1, alloc + "ForceCloseCommand": 1}, s.resets)
	assert.Equal(t, map[string]int{alloc + "ForceCloseCommand": 1, alloc + "PendingSignalsLimitExceeded": 1, alloc + "WorkflowWorkerUnhandledFailure": 1}, s.failed,
		"a worker's own failure (a panic) fails the run")
	assert.Equal(t, map[string]int{protocol.AllocatorWorkflowName: 1}, s.cutShort, "a history the server cut short does not")
}

func TestChaosServerFindsDroppedReleases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &chaosEvents{t0: t0}
	release := func(ms int, workers []int) int64 {
		return h.add(ms, enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_SignalExternalWorkflowExecutionInitiatedEventAttributes{SignalExternalWorkflowExecutionInitiatedEventAttributes: &historypb.SignalExternalWorkflowExecutionInitiatedEventAttributes{
				SignalName: protocol.SignalRelease, Input: chaosPayloads(t, protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: workers})}}
		})
	}
	refused := func(ms int, id int64, cause enumspb.SignalExternalWorkflowExecutionFailedCause) {
		h.add(ms, enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_SignalExternalWorkflowExecutionFailedEventAttributes{SignalExternalWorkflowExecutionFailedEventAttributes: &historypb.SignalExternalWorkflowExecutionFailedEventAttributes{
				InitiatedEventId: id, Cause: cause}}
		})
	}
	delivered := func(ms int, id int64) {
		h.add(ms, enumspb.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_ExternalWorkflowExecutionSignaledEventAttributes{ExternalWorkflowExecutionSignaledEventAttributes: &historypb.ExternalWorkflowExecutionSignaledEventAttributes{InitiatedEventId: id}}
		})
	}
	limit := enumspb.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_SIGNAL_COUNT_LIMIT_EXCEEDED
	refused(2, release(1, []int{0}), limit) // sent again and delivered
	delivered(4, release(3, []int{0}))
	refused(6, release(5, []int{1}), limit) // dropped
	refused(8, release(7, []int{2}), enumspb.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND)
	s := newChaosServer()
	s.add(chaosRunRef{id: "j", run: "1", typ: protocol.JobWorkflowName}, h.events)
	s.finish()
	assert.Equal(t, 2, s.refused, "a signal to an allocator that does not exist is not a refusal")
	require.Len(t, s.dropped, 1)
	assert.Contains(t, s.dropped[0], "workers [1]")
}

func TestJobResetPoint(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &chaosEvents{t0: t0}
	task := func() int64 { return h.add(0, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, nil) }
	upsert := func(task int64, attempt int64) {
		h.add(0, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, func(e *historypb.HistoryEvent) {
			p, err := converter.GetDefaultDataConverter().ToPayload(attempt)
			require.NoError(t, err)
			e.Attributes = &historypb.HistoryEvent_UpsertWorkflowSearchAttributesEventAttributes{UpsertWorkflowSearchAttributesEventAttributes: &historypb.UpsertWorkflowSearchAttributesEventAttributes{
				WorkflowTaskCompletedEventId: task, SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{protocol.SAAttempt: p}}}}
		})
	}
	first := task()
	upsert(first, 1)
	t1 := task()
	upsert(t1, 1) // the same attempt again
	t2 := task()
	upsert(t2, 2)
	ev, what := jobResetPoint(h.events, 2)
	assert.Equal(t, t2, ev)
	assert.Contains(t, what, "attempt 2")
	ev, _ = jobResetPoint(h.events, 1)
	assert.Equal(t, first, ev, "the first task that set the attempt")
	ev, what = jobResetPoint(h.events, 3)
	assert.Equal(t, first, ev, "an attempt of an earlier run: the run's first task")
	assert.Contains(t, what, "first workflow task")
	ev, _ = jobResetPoint(h.events, 0)
	assert.Equal(t, first, ev)
}
