package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestBurstOfGrantsAfterOneRelease: one job holds every GPU of an allocation
// while 5,000 one-GPU jobs wait ($TRAINQ_BURST_JOBS changes the number); it
// releases all its workers in one signal, and one scheduling pass can then
// grant every waiting job. The server fails a workflow task that would leave
// more than 2,000 signals undelivered (limit.numPendingSignals.error), and
// since the pass is in the allocator's history every retry would fail the
// same way: the allocator would be wedged for good. The test checks that
// every job is granted once, that no workflow task of the allocator failed,
// and reports the time from the release to the last grant delivered and the
// most commands one workflow task sent. Jobs are the scale test's idle
// stubs: the allocator's grants only need a workflow to land in.
func TestBurstOfGrantsAfterOneRelease(t *testing.T) {
	waiting := envInt("TRAINQ_BURST_JOBS", 5000)
	const allocation = "burst"
	nodes := (waiting + 7) / 8
	startWorker(t)
	allocator := startStubAllocator(t, allocation, nodes, 4*waiting)

	// 1. The holder takes every GPU: one worker of 8 GPUs on each node.
	holder := protocol.JobNamePrefix + uuid.NewString()
	startStub(t, holder)
	signalAllocator(t, allocator, protocol.SignalRequest, protocol.CapacityRequest{Job: holder, Attempt: 1, Kind: scheduler.KindJob,
		Class: scheduler.Medium, InstanceType: "a100.8gpu", Workers: nodes, SubmittedAt: time.Now()})
	eventually(t, 2*time.Minute, "the holder to run", func() bool { return len(queue(t, allocation).Running) == 1 })

	// 2. The small jobs queue behind it.
	small := makeScaleJobs(waiting, 0)
	submitScaleJobs(t, allocator, small)
	eventually(t, 10*time.Minute, fmt.Sprintf("%d jobs to wait", waiting), func() bool {
		return queue(t, allocation).WaitingTotal == waiting
	})

	// 3. One release frees every GPU.
	workers := make([]int, nodes)
	for i := range workers {
		workers[i] = i
	}
	signalAllocator(t, allocator, protocol.SignalRelease, protocol.ReleaseSignal{Job: holder, Attempt: 1, Workers: workers, Stopping: true})
	var h burstHistory
	eventually(t, 10*time.Minute, "every waiting job's grant to be delivered", func() bool {
		h = readBurstHistory(t, allocator)
		require.Empty(t, h.failedCauses, "allocator workflow tasks failed")
		return h.grantsDelivered == waiting+1
	})

	v := queue(t, allocation)
	assert.Zero(t, v.WaitingTotal)
	assert.Len(t, v.Running, waiting)
	assert.Equal(t, int64(waiting+1), v.Counters.Grants, "every job was granted once")
	assert.Zero(t, h.signalsFailed, "no grant was refused by the server")
	assert.LessOrEqual(t, h.mostInFlight, protocol.AllocatorSignalBudget, "signals in flight at once")
	checkGrantsDelivered(t, small)
	saveBurstHistories(t, allocator)
	t.Logf("burst of %d grants after one release: last grant delivered %s after the release; at most %d signals in flight; largest workflow task sent %d commands; %d allocator events; %d tasks run again for a signal that came in meanwhile (UnhandledCommand); %d tasks timed out; longest task %s",
		waiting, h.lastGrant.Sub(h.release).Round(time.Millisecond), h.mostInFlight, h.mostCommands, h.events, h.unhandled,
		h.timedOut, h.longestTask.Round(time.Millisecond))
}

// saveBurstHistories writes each run of the allocator, oldest first, to
// $TRAINQ_BURST_HISTORIES/run-NN.json when that is set, for a replay
// measurement (workflows.BenchmarkReplayHistories).
func saveBurstHistories(t *testing.T, allocator string) {
	t.Helper()
	dir := os.Getenv("TRAINQ_BURST_HISTORIES")
	if dir == "" {
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i, run := range scaleAllocatorRuns(t, allocator) {
		events := history(t, env.client, allocator, run.runID)
		b, err := protojson.Marshal(&historypb.History{Events: events})
		require.NoError(t, err)
		path := filepath.Join(dir, fmt.Sprintf("run-%02d.json", i))
		require.NoError(t, os.WriteFile(path, b, 0o644))
		t.Logf("wrote %s: %d events, %d bytes", path, len(events), len(b))
	}
}

// startStub starts an idle stub workflow named job (see the scale test).
func startStub(t *testing.T, job string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: job, TaskQueue: scaleTaskQueue}, scaleStubType)
	require.NoError(t, err)
}

func signalAllocator(t *testing.T, allocator, name string, arg any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, env.client.SignalWorkflow(ctx, allocator, "", name, arg))
}

// burstHistory is what the allocator's history says of the burst.
type burstHistory struct {
	events                         int
	release, lastGrant             time.Time
	grantsDelivered, signalsFailed int
	// failedCauses are the causes of the workflow tasks that failed, but
	// for UnhandledCommand: the server fails a task that completes while a
	// new event (here, a request signal) has come in, and the worker runs
	// it again with that event; those are counted in unhandled.
	failedCauses []string
	unhandled    int
	// mostInFlight is the most signals sent and not yet delivered at any
	// point; mostCommands the most commands one workflow task completed with.
	mostInFlight, mostCommands int
	// timedOut counts the workflow tasks that timed out (start to close);
	// longestTask is the longest a worker took from a task's start to its
	// completion, a replay of the run included when the task was not sticky.
	timedOut    int
	longestTask time.Duration
}

// readBurstHistory reads every run of the allocator: the server suggests
// continue-as-new long before the burst is over.
func readBurstHistory(t *testing.T, allocator string) burstHistory {
	t.Helper()
	var h burstHistory
	for _, run := range scaleAllocatorRuns(t, allocator) {
		h.add(history(t, env.client, allocator, run.runID))
	}
	return h
}

// add counts one run's events.
func (h *burstHistory) add(events []*historypb.HistoryEvent) {
	grants := map[int64]bool{} // initiated event ids of grant signals
	inFlight := 0
	commands := map[int64]int{}      // workflow task completed event id -> commands
	started := map[int64]time.Time{} // workflow task started event id -> when
	for _, e := range events {
		h.events++
		if task := commandTask(e); task != 0 {
			commands[task]++
			h.mostCommands = max(h.mostCommands, commands[task])
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			if e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == protocol.SignalRelease {
				h.release = e.GetEventTime().AsTime()
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			inFlight++
			h.mostInFlight = max(h.mostInFlight, inFlight)
			if e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes().GetSignalName() == protocol.SignalGrant {
				grants[e.GetEventId()] = true
			}
		case enumspb.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
			inFlight--
			if grants[e.GetExternalWorkflowExecutionSignaledEventAttributes().GetInitiatedEventId()] {
				h.grantsDelivered++
				if at := e.GetEventTime().AsTime(); at.After(h.lastGrant) {
					h.lastGrant = at
				}
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED:
			inFlight--
			h.signalsFailed++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started[e.GetEventId()] = e.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if at, ok := started[e.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()]; ok {
				h.longestTask = max(h.longestTask, e.GetEventTime().AsTime().Sub(at))
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			if e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType() == enumspb.TIMEOUT_TYPE_START_TO_CLOSE {
				h.timedOut++
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			cause := e.GetWorkflowTaskFailedEventAttributes().GetCause()
			if cause == enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND {
				h.unhandled++
			} else {
				h.failedCauses = append(h.failedCauses, cause.String())
			}
		}
	}
}

// commandTask is the workflow task whose completion recorded e as a
// command, or 0 if e is not a command.
func commandTask(e *historypb.HistoryEvent) int64 {
	switch {
	case e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes() != nil:
		return e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes().GetWorkflowTaskCompletedEventId()
	case e.GetActivityTaskScheduledEventAttributes() != nil:
		return e.GetActivityTaskScheduledEventAttributes().GetWorkflowTaskCompletedEventId()
	case e.GetTimerStartedEventAttributes() != nil:
		return e.GetTimerStartedEventAttributes().GetWorkflowTaskCompletedEventId()
	case e.GetMarkerRecordedEventAttributes() != nil:
		return e.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId()
	case e.GetUpsertWorkflowSearchAttributesEventAttributes() != nil:
		return e.GetUpsertWorkflowSearchAttributesEventAttributes().GetWorkflowTaskCompletedEventId()
	case e.GetWorkflowPropertiesModifiedEventAttributes() != nil:
		return e.GetWorkflowPropertiesModifiedEventAttributes().GetWorkflowTaskCompletedEventId()
	}
	return 0
}
