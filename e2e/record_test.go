package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainq/trainq/activities"
	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
	"github.com/trainq/trainq/workflows"
)

// TestRecordHistories records the workflow histories that the workflows
// package replays (TestReplayRecordedHistories) from real runs on the dev
// server. `make histories` runs it; it is skipped otherwise. Each history is
// written as the JSON that `temporal workflow show --output json` gives, and
// replayed once here, so that a file that cannot be replayed is never kept.
// TRAINQ_HISTORIES_DIR overrides the output directory.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("TRAINQ_RECORD_HISTORIES") != "1" {
		t.Skip("set TRAINQ_RECORD_HISTORIES=1 (make histories) to re-record the replayed workflow histories")
	}
	dir := os.Getenv("TRAINQ_HISTORIES_DIR")
	if dir == "" {
		release := os.Getenv("TRAINQ_RELEASE")
		require.NotEmpty(t, release, "name the release the histories stand for: make histories RELEASE=v1.2.3")
		dir = filepath.Join("..", "workflows", "testdata", "histories", release)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	startWorker(t)

	// TRAINQ_RECORD_ONLY (comma-separated names) records only some, so that
	// adding a history keeps the others as the older code recorded them.
	only := os.Getenv("TRAINQ_RECORD_ONLY")
	record := func(name string, f func(t *testing.T, dir string)) {
		if only != "" && !slices.Contains(strings.Split(only, ","), name) {
			return
		}
		t.Run(name, func(t *testing.T) { f(t, dir) })
	}
	record("preempted-and-rerun", recordPreemptedAndRerun)
	record("cancelled", recordCancelled)
	record("withdrawn", recordWithdrawn)
	record("allocator-continued-as-new", recordAllocatorContinuedAsNew)
	record("recovered", recordRecovered)
	record("mid-flight", recordMidFlight)
	record("notice", recordNotice)
	record("notebook-autoshutdown", recordNotebookAutoshutdown)
	record("fair-share", recordFairShare)
}

// (g) A Jupyter server with shutdown_in on allocation autostop: warned, then
// stopped by its timer (the server never answers /api/status, so its
// allocation's idle rule never fires). Recorded: the notebook's history.
func recordNotebookAutoshutdown(t *testing.T, dir string) {
	name := tqclient.NewJobName("notebook")
	out, stderr, code := trainq(t, "notebook", "start", "--region", "T", "--allocation", "autostop", "--name", name, "--shutdown-in", "4")
	require.Equal(t, 0, code, "%s%s", out, stderr)
	st := waitState(t, name, protocol.StateStopped, long)
	require.NotEmpty(t, st.Attempts)
	require.NotNil(t, st.Attempts[0].WarnedAt, "warned before the stop")
	writeHistory(t, filepath.Join(dir, "job-notebook-shutdown-in.json"), runHistory(t, name, ""))
}

// (h) The allocator of allocation fair (ordering fair-share, ranked every
// second): team-a's job runs while team-a's and team-b's wait, the lighter
// team-b's goes first, and all complete. Recorded: the allocator's run so far.
func recordFairShare(t *testing.T, dir string) {
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	first := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-a", Author: "team-a-user", Script: hold.waitFor()}.Spec())
	waitState(t, first, protocol.StateRunning, long)
	heavier := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-a", Author: "team-a-user", Script: "true"}.Spec())
	eventually(t, long, "team-a's second job to be queued", func() bool { return queue(t, "fair").WaitingTotal == 1 })
	lighter := submit(t, fixture.Job{Allocation: "fair", Workspace: "team-b", Author: "team-b-user", Script: "true"}.Spec())
	eventually(t, long, "team-b's job to go first", func() bool {
		w := queue(t, "fair").Waiting
		return len(w) == 2 && w[0].Job == lighter
	})
	hold.open(t)
	for _, job := range []string{first, lighter, heavier} {
		waitState(t, job, protocol.StateCompleted, long)
	}
	writeHistory(t, filepath.Join(dir, "allocator-fair-share.json"), runHistory(t, protocol.AllocatorWorkflowID("T", "fair"), ""))
}

// (f) Stop notices: on allocation notice a low job, preempted with a
// notice, saves and exits, reruns and completes; a medium job, cancelled,
// is told, saves and exits. Recorded: both jobs' histories and the
// allocator's.
func recordNotice(t *testing.T, dir string) {
	work := t.TempDir()
	trainqBin := filepath.Join(env.binDir, "trainq")
	victim := submit(t, protocol.JobSpec{Script: `if [ -e ` + work + `/saved ]; then exit 0; fi; ` + trainqBin + ` notice --wait > /dev/null; touch ` + work + `/saved; exit 0`,
		InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice", PriorityClass: "low", NWorkers: 1, Type: "binary", MaxRetry: 1})
	waitState(t, victim, protocol.StateRunning, long)
	high := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	waitState(t, high, protocol.StateCompleted, long)
	st := waitState(t, victim, protocol.StateCompleted, long)
	require.Equal(t, 1, st.Restarts)

	cancelled := submit(t, protocol.JobSpec{Script: trainqBin + ` notice --wait > /dev/null; exit 0`,
		InstanceType: "a100.2gpu", Region: "T", AllocationName: "notice", PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	waitState(t, cancelled, protocol.StateRunning, long)
	_, _, code := trainq(t, "cancel", cancelled)
	require.Equal(t, 0, code)
	st = waitState(t, cancelled, protocol.StateStopped, long)
	require.NotNil(t, st.Attempts[0].ExitedOnNoticeAt)

	writeHistory(t, filepath.Join(dir, "job-preempted-with-notice.json"), runHistory(t, victim, ""))
	writeHistory(t, filepath.Join(dir, "job-cancelled-with-notice.json"), runHistory(t, cancelled, ""))
	writeHistory(t, filepath.Join(dir, "allocator-notice.json"), idleHistory(t, protocol.AllocatorWorkflowID("T", "notice")))
}

// (e) Workflows caught mid-flight, as an upgrade finds them: a job with 4
// workers running, a notebook waiting, and an allocator with running,
// releasing and waiting jobs.
func recordMidFlight(t *testing.T, dir string) {
	work := t.TempDir()
	hold := gate(filepath.Join(work, "hold"))
	running := submit(t, fixture.Job{Allocation: "seed", Class: "high", Workers: 4, GPUs: 1, Script: hold.waitFor()}.Spec())
	waitState(t, running, protocol.StateRunning, long)
	terming := filepath.Join(work, "terming")
	releasing := submit(t, fixture.Job{Allocation: "seed", Class: "high", GPUs: 1,
		Script: "trap 'touch " + terming + "; sleep 30' TERM; " + hold.waitFor()}.Spec())
	waitState(t, releasing, protocol.StateRunning, long)
	_, _, code := trainq(t, "cancel", releasing)
	require.Equal(t, 0, code)
	eventually(t, long, "the cancelled job to get SIGTERM", func() bool { _, err := os.Stat(terming); return err == nil })
	out, errOut, code := trainq(t, "notebook", "start", "--region", "T", "--allocation", "seed", "--instance-type", "a100.2gpu", "--output", "json")
	require.Equal(t, 0, code, errOut)
	var nb struct {
		JobName string `json:"job_name"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &nb))
	eventually(t, long, "the notebook to wait", func() bool { return slices.Contains(waitingJobs(queue(t, "seed")), nb.JobName) })
	v := queue(t, "seed")
	require.Len(t, v.Running, 2)

	writeHistory(t, filepath.Join(dir, "job-running-4-workers.json"), idleHistory(t, running))
	writeHistory(t, filepath.Join(dir, "notebook-pending.json"), idleHistory(t, nb.JobName))
	writeHistory(t, filepath.Join(dir, "allocator-running-releasing-waiting.json"), idleHistory(t, protocol.AllocatorWorkflowID("T", "seed")))
	for _, job := range []string{running, nb.JobName} {
		_, _, code := trainq(t, "cancel", job)
		require.Equal(t, 0, code)
	}
	hold.open(t)
	for _, job := range []string{running, releasing, nb.JobName} {
		waitState(t, job, protocol.StateStopped, 2*long)
	}
}

// (d) An allocator terminated while one job holds capacity and another
// waits; the fresh run recovers both from the jobs, then grants the waiting
// job when the holder ends. Recorded: the fresh allocator run and the
// holder's job history with its register update.
func recordRecovered(t *testing.T, dir string) {
	work := t.TempDir()
	hold := gate(filepath.Join(work, "hold"))
	holder := submit(t, fixture.Job{Allocation: "recover", Class: "high", Workers: 3, MaxRetry: 1, Script: hold.waitFor()}.Spec())
	waitState(t, holder, protocol.StateRunning, long)
	waiter := submit(t, fixture.Job{Allocation: "recover", Class: "medium", MaxRetry: 1, Script: "true"}.Spec())
	eventually(t, long, "the second job to wait", func() bool { return len(queue(t, "recover").Waiting) == 1 })
	terminateAllocator(t, "recover")
	_, errOut, code := trainq(t, "allocator", "recover", "recover", "--region", "T")
	require.Equal(t, 0, code, errOut)
	hold.open(t)
	waitState(t, holder, protocol.StateCompleted, long)
	waitState(t, waiter, protocol.StateCompleted, long)
	writeHistory(t, filepath.Join(dir, "allocator-recovered.json"), idleHistory(t, protocol.AllocatorWorkflowID("T", "recover")))
	writeHistory(t, filepath.Join(dir, "job-registered.json"), runHistory(t, holder, ""))
}

// (a) A low job with max_retry 1 is preempted by a high one, reruns and
// completes; the allocator's history of the whole scenario goes with it.
func recordPreemptedAndRerun(t *testing.T, dir string) {
	work := t.TempDir()
	low := submit(t, fixture.Job{Allocation: "preempt", Class: "low", MaxRetry: 1, Script: victimScript(work)}.Spec())
	waitState(t, low, protocol.StateRunning, long)
	gateHigh := gate(filepath.Join(work, "high"))
	high := submit(t, fixture.Job{Allocation: "preempt", Class: "high", Script: gateHigh.waitFor()}.Spec())
	waitState(t, high, protocol.StateRunning, long)
	st := waitState(t, low, protocol.StatePending, long)
	require.Equal(t, 2, st.Attempt)
	gateHigh.open(t)
	waitState(t, high, protocol.StateCompleted, long)
	st = waitState(t, low, protocol.StateCompleted, long)
	require.Len(t, st.Attempts, 2)
	require.NotNil(t, st.Attempts[0].Preemptor)
	require.Equal(t, high, st.Attempts[0].Preemptor.Job)
	require.NoError(t, waitResult(t, low))
	require.NoError(t, waitResult(t, high))
	eventually(t, long, "the preempt allocation to be free", func() bool { return allFree(t, "preempt") })

	writeHistory(t, filepath.Join(dir, "job-preempted-and-rerun.json"), runHistory(t, low, ""))
	writeHistory(t, filepath.Join(dir, "allocator-preempt.json"), idleHistory(t, protocol.AllocatorWorkflowID("T", "preempt")))
}

// (b) A running job is cancelled.
func recordCancelled(t *testing.T, dir string) {
	work := t.TempDir()
	job := submit(t, fixture.Job{GPUs: 1, Script: "echo $$ > " + work + "/pid; while true; do sleep 0.05; done"}.Spec())
	waitState(t, job, protocol.StateRunning, long)
	pid := pidOf(t, filepath.Join(work, "pid"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, env.client.CancelWorkflow(ctx, job, ""))
	waitState(t, job, protocol.StateStopped, long)
	var canceled *temporal.CanceledError
	require.True(t, errors.As(waitResult(t, job), &canceled))
	require.True(t, processGone(pid))

	writeHistory(t, filepath.Join(dir, "job-cancelled.json"), runHistory(t, job, ""))
}

// (i) A job cancelled while it waits withdraws its request by an update,
// and the job behind it runs. Recorded: the cancelled job's history and
// its allocator's (allocation eta).
func recordWithdrawn(t *testing.T, dir string) {
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	blocker := submit(t, fixture.Job{Allocation: "eta", Class: "high", Script: hold.waitFor()}.Spec())
	waitState(t, blocker, protocol.StateRunning, long)
	withdrawn := submit(t, fixture.Job{Allocation: "eta", Class: "high", Script: "true"}.Spec())
	next := submit(t, fixture.Job{Allocation: "eta", Class: "medium", Script: "true"}.Spec())
	eventually(t, long, "both jobs to wait", func() bool { return len(waitingJobs(queue(t, "eta"))) == 2 })
	_, _, code := trainq(t, "cancel", withdrawn)
	require.Equal(t, 0, code)
	waitState(t, withdrawn, protocol.StateStopped, long)
	hold.open(t)
	waitState(t, next, protocol.StateCompleted, long)
	waitState(t, blocker, protocol.StateCompleted, long)

	writeHistory(t, filepath.Join(dir, "job-withdrawn.json"), runHistory(t, withdrawn, ""))
	writeHistory(t, filepath.Join(dir, "allocator-withdrawal.json"), idleHistory(t, protocol.AllocatorWorkflowID("T", "eta")))
}

// allocatorInputWithKnob is protocol.AllocatorInput plus the per-run update
// limit the allocator should take from its input (max_updates_per_run). Sent
// as JSON, the field is ignored by an allocator that does not know it; the
// allocator then continues as new after its built-in 1000 updates, which this
// test also reaches, only more slowly and with a much longer history.
type allocatorInputWithKnob struct {
	protocol.AllocatorInput
	MaxUpdatesPerRun int `json:"max_updates_per_run,omitempty"`
}

// (c) An allocator run that ends in continue-as-new with waiting jobs. The
// test runs its own allocator, for an allocation the worker does not manage,
// and sends it capacity requests itself: the first from an idle holder
// workflow (on a task queue nobody polls, so it takes grants without running)
// that gets the only node, the others from names that just wait.
func recordAllocatorContinuedAsNew(t *testing.T, dir string) {
	const allocation = "record-can"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := env.client
	allocatorID := protocol.AllocatorWorkflowID("T", allocation)

	// The allocation's one node has an agent of its own here (no worker
	// process serves it): a fresh allocator fences its nodes until their
	// agents answer.
	backend, err := local.New(local.Options{DataDir: t.TempDir()})
	require.NoError(t, err)
	agent := worker.New(c, protocol.NodeTaskQueue(allocation+"-1"), worker.Options{})
	agent.RegisterActivity(&activities.Activities{Client: c, Backend: backend})
	require.NoError(t, agent.Start())
	t.Cleanup(agent.Stop)

	holder := "record-can-holder"
	hrun, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: holder, TaskQueue: "trainq-record-idle"}, "RecordIdleHolder")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), holder, hrun.GetRunID(), "recording done") })

	in := allocatorInputWithKnob{
		AllocatorInput: protocol.AllocatorInput{
			Region: "T", Allocation: allocation,
			Nodes:           []scheduler.Node{{Name: allocation + "-1", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}},
			StopGracePeriod: time.Second,
			ReclaimInterval: time.Hour,
		},
		MaxUpdatesPerRun: 4,
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: allocatorID, TaskQueue: protocol.TaskQueue},
		protocol.AllocatorWorkflowName, in)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), allocatorID, "", "recording done") })
	firstRun := run.GetRunID()

	request := func(job string) error {
		req := protocol.CapacityRequest{Job: job, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Medium,
			InstanceType: "a100.2gpu", Workers: 1}
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: allocatorID, UpdateID: fmt.Sprintf("request/%s/1", job), UpdateName: protocol.UpdateRequestCapacity,
			Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		var reply protocol.CapacityReply
		return h.Get(ctx, &reply)
	}
	continued := func() bool {
		d, err := c.DescribeWorkflow(ctx, allocatorID, firstRun)
		require.NoError(t, err)
		return d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	}
	require.NoError(t, request(holder))
	sent := 1
	for ; sent < 1100 && !continued(); sent++ {
		// An update that races the hand-over may fail; the next one goes to the new run.
		if err := request(fmt.Sprintf("record-can-waiting-%04d", sent)); err != nil {
			t.Logf("request %d: %v", sent, err)
		}
	}
	eventually(t, long, "the allocator's first run to continue as new", continued)
	t.Logf("the allocator continued as new after %d capacity requests", sent)

	// The new run holds the same queue: the holder runs, the others wait.
	v := queue(t, allocation)
	require.Len(t, v.Running, 1)
	require.Equal(t, holder, v.Running[0].Job)
	require.NotEmpty(t, v.Waiting)

	events := runHistory(t, allocatorID, firstRun)
	require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, events[len(events)-1].GetEventType())
	writeHistory(t, filepath.Join(dir, "allocator-continued-as-new.json"), events)
}

// runHistory returns every event of one run (the current run if runID is "").
func runHistory(t *testing.T, workflowID, runID string) []*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := env.client.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events = append(events, e)
	}
	require.NotEmpty(t, events)
	return events
}

// idleHistory returns the history of a running workflow at a moment when no
// workflow task is in flight, so that the recording ends on a whole task.
func idleHistory(t *testing.T, workflowID string) []*historypb.HistoryEvent {
	t.Helper()
	var events []*historypb.HistoryEvent
	eventually(t, long, workflowID+" to be idle", func() bool {
		events = runHistory(t, workflowID, "")
		switch events[len(events)-1].GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED:
			return false
		}
		return true
	})
	return events
}

// writeHistory writes events as protojson of history.History, then replays
// the file against the current workflow code.
func writeHistory(t *testing.T, path string, events []*historypb.HistoryEvent) {
	t.Helper()
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&historypb.History{Events: events})
	require.NoError(t, err)
	// A release's histories stand for what it left running; recording
	// them again would hide a break with that release.
	_, err = os.Stat(path)
	require.True(t, errors.Is(err, os.ErrNotExist), "%s exists: histories are recorded once per release; pick a new RELEASE", path)
	require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	t.Logf("wrote %s: %d events, %d bytes", path, len(events), len(b))

	r := testenv.NewReplayer()
	r.RegisterWorkflowWithOptions(workflows.JobWorkflow, workflow.RegisterOptions{Name: protocol.JobWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, path), "the recorded history %s does not replay", path)
}
