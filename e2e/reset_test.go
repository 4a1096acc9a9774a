package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/activities"
	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestResetAllocatorRecoversFromTheJobs: `temporal workflow reset` of an
// allocator, to before a running job's request and without reapplying the
// signals since, leaves the allocator believing free the node that job
// holds, under the epoch it had then. trainq-worker sees the reset is newer
// than the allocator's last recovery and has it rebuild its state from the
// jobs: the running job is held again, and a newcomer waits instead of being
// granted the same GPUs.
func TestResetAllocatorRecoversFromTheJobs(t *testing.T) {
	const allocation = "reset"
	startWorker(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	runGate := gate(filepath.Join(dir, "run"))
	spec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: allocation}.Spec()
	}
	// Its fence of the node is over too: an activity pending at the reset
	// point runs again after the reset with its old input (see docs/failures.md).
	eventually(t, long, "the allocator to recover at its start and fence its node", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(time.Time{}) && len(queue(t, allocation).Fenced) == 0
	})
	running := submit(t, spec(recordingScript(records, runGate.waitFor())))
	waitState(t, running, protocol.StateRunning, long)
	before := counts(t, allocation).RecoveredAt

	point := resetAllocatorBefore(t, allocation, running)
	t.Logf("reset the allocator to event %d; it had recovered at %s", point, before.Format(time.RFC3339Nano))
	eventually(t, long, "the reset allocator to recover from the jobs", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(before)
	})
	// The node stays fenced until its agent has said what runs there; the
	// running job is adopted then (by its register answer, or, if the
	// recovery's listing missed it, through its worker on the node).
	last := ""
	eventually(t, long, "the node to be back, held by the running job", func() bool {
		v := queue(t, allocation)
		st := status(t, running)
		if now := fmt.Sprintf("fenced %v, running %v, waiting %d; job %s attempt %d %s", v.Fenced, runningJobs(v), v.WaitingTotal, st.State, st.Attempt, st.Message); now != last {
			t.Log(now)
			last = now
		}
		return len(v.Fenced) == 0 && len(v.Running) == 1 && v.Running[0].Job == running
	})

	newcomer := submit(t, spec(recordingScript(records, "sleep 0.2")))
	eventually(t, long, "the newcomer to wait", func() bool { return queue(t, allocation).WaitingTotal == 1 })
	assert.Equal(t, protocol.StatePending, status(t, newcomer).State)
	runGate.open(t)
	waitState(t, running, protocol.StateCompleted, long)
	waitState(t, newcomer, protocol.StateCompleted, long)

	// An operator who runs `trainq allocator recover` at once after a reset,
	// as docs/failures.md says, has the state rebuilt once: that recovery is
	// the reset's, and the pass that grants the next job does not take the
	// run for reset again (a second recovery fenced every node anew).
	// (Reset to its latest workflow task: a point further back has reclaim
	// ticks due at once, at which the run notices the reset itself first.)
	tasks := completedTasks(t, allocation)
	latest := tasks[len(tasks)-1]
	resetAllocatorTo(t, allocation, latest)
	recoverNow(t, allocation)
	next := submit(t, spec(recordingScript(records, "sleep 0.2")))
	waitState(t, next, protocol.StateCompleted, long)
	assert.Equal(t, 1, recoveriesAfter(t, allocation, latest), "the operator's recovery was the only one after the reset")
	checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))
}

// recoveriesAfter counts the recoveries in the allocator's current run after
// event: each lists the allocation's jobs with one RegisterJobs activity (a
// fence's registration names its jobs instead).
func recoveriesAfter(t *testing.T, allocation string, event int64) int {
	t.Helper()
	n := 0
	for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
		a := e.GetActivityTaskScheduledEventAttributes()
		if e.GetEventId() <= event || a == nil || a.GetActivityType().GetName() != "RegisterJobs" {
			continue
		}
		var in activities.RegisterJobsInput
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in))
		if in.Jobs == nil {
			n++
		}
	}
	return n
}

// completedTasks are the event IDs of the workflow tasks the allocator's
// current run has completed, oldest first (at least one).
func completedTasks(t *testing.T, allocation string) []int64 {
	t.Helper()
	var out []int64
	for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			out = append(out, e.GetEventId())
		}
	}
	require.NotEmpty(t, out)
	return out
}

// recoverNow sends the allocator the recover update, as `trainq allocator
// recover` does, and waits for its answer.
func recoverNow(t *testing.T, allocation string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	handle, err := env.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: protocol.AllocatorWorkflowID("T", allocation), UpdateName: protocol.UpdateRecover,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var reply protocol.RecoverReply
	require.NoError(t, handle.Get(ctx, &reply))
}

func counts(t *testing.T, allocation string) protocol.QueueCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c protocol.QueueCounts
	v, err := env.client.QueryWorkflow(ctx, protocol.AllocatorWorkflowID("T", allocation), "", protocol.QueryCounts)
	if err != nil {
		return c // between runs, or busy: the caller asks again
	}
	require.NoError(t, v.Get(&c))
	return c
}

// resetAllocatorBefore resets the allocator's current run to the last
// workflow task completed before job's request, reapplying no signal.
func resetAllocatorBefore(t *testing.T, allocation, job string) int64 {
	t.Helper()
	id := protocol.AllocatorWorkflowID("T", allocation)
	var point int64
	updates := updateInputs{}
	for _, e := range fetchHistory(t, id) {
		updates.admitted(e)
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			point = e.GetEventId()
		}
		var input *commonpb.Payloads // the request, sent as an update (or, to start the allocator, a signal)
		if in := updates.accepted(e); in.GetName() == protocol.UpdateRequest {
			input = in.GetArgs()
		}
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == protocol.SignalRequest {
			input = a.GetInput()
		}
		if input != nil {
			var req protocol.CapacityRequest
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(input, &req))
			if req.Job == job {
				break
			}
		}
	}
	require.NotZero(t, point)
	resetAllocatorTo(t, allocation, point)
	return point
}

// resetAllocatorTo resets the allocator's current run to the workflow task
// completed at event point, reapplying no signal or update.
func resetAllocatorTo(t *testing.T, allocation string, point int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := env.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: protocol.AllocatorWorkflowID("T", allocation)},
		Reason: "e2e: reset the allocator", WorkflowTaskFinishEventId: point, RequestId: uuid.NewString(),
		ResetReapplyExcludeTypes: []enumspb.ResetReapplyExcludeType{enumspb.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL, enumspb.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE},
	})
	require.NoError(t, err)
}

// TestResetAllocatorWithAFenceWaitingOnADeadAgent: an allocator reset to a
// point where its fence of a dead node had an inventory activity pending.
// Temporal's reset run can then fire none of its activities' timeouts: the
// inventory, expired in matching, is never timed out, and neither is any
// activity scheduled after it, so without the allocator's own guard (see
// guard in workflows/allocator.go) the node stayed fenced for ever, even
// once its agent was back (the chaos campaign on the production-shaped
// cluster found it). With the guard, the allocator gives the inventory up
// past its own timeouts, fences again, and the returning agent brings the
// node back.
func TestResetAllocatorWithAFenceWaitingOnADeadAgent(t *testing.T) {
	const allocation, dead = "agents-reset", "agent-1"
	c := startAgentClusterOf(t, allocation)
	eventually(t, long, "the allocator to serve both nodes", func() bool {
		cn := counts(t, allocation)
		return !cn.Recovering && cn.RecoveredAt.After(time.Time{}) && len(queue(t, allocation).Fenced) == 0
	})
	c.agents[dead].Kill()
	// A recovery fences every node until its agent says what runs there;
	// the dead one's inventory is not picked up.
	_, errOut, code := trainq(t, "--config", c.config, "allocator", "recover", allocation, "--region", "T")
	require.Equal(t, 0, code, errOut)
	var point int64
	eventually(t, long, "an inventory of "+dead+" pending across a workflow task of the allocator", func() bool {
		point = pendingAcrossATask(fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)), "NodeInventory", protocol.NodeTaskQueue(dead))
		return point != 0
	})
	resetAllocatorTo(t, allocation, point)
	t.Logf("reset the allocator to event %d, with %s's inventory pending", point, dead)
	// The reset run fences the node again (trainq-worker has it recover);
	// the agent stays away until that inventory's task, too, has expired in
	// matching unanswered (node_timeout, 4s), then comes back: only a
	// timeout can end the inventory now.
	var asked time.Time
	eventually(t, long, "the reset run to ask "+dead+" for an inventory", func() bool {
		asked = scheduledAfter(fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)), point, "NodeInventory", protocol.NodeTaskQueue(dead))
		return !asked.IsZero()
	})
	time.Sleep(time.Until(asked.Add(c.cfg.NodeTimeout.D() + 2*time.Second)))
	c.startAgent(t, dead)
	last := ""
	eventually(t, 2*long, dead+" to be back in service", func() bool {
		v := queue(t, allocation)
		if now := fmt.Sprintf("fenced %v", v.Fenced); now != last {
			t.Log(now)
			last = now
		}
		return len(v.Fenced) == 0
	})
	// Both nodes serve: two jobs of a whole node each run at once.
	a, b := c.submit(t, "true"), c.submit(t, "true")
	waitState(t, a, protocol.StateCompleted, long)
	waitState(t, b, protocol.StateCompleted, long)
}

// scheduledAfter is when the first activity of the given type on queue
// was scheduled after event point, or zero.
func scheduledAfter(events []*historypb.HistoryEvent, point int64, activityType, queue string) time.Time {
	for _, e := range events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && e.GetEventId() > point &&
			a.GetActivityType().GetName() == activityType && a.GetTaskQueue().GetName() == queue {
			return e.GetEventTime().AsTime()
		}
	}
	return time.Time{}
}

// pendingAcrossATask finds, in an allocator's history, an activity of the
// given type on queue that was still pending when a later workflow task
// completed, and returns that task's completed event (a reset point whose
// run has the activity pending), or 0.
func pendingAcrossATask(events []*historypb.HistoryEvent, activityType, queue string) int64 {
	scheduled := map[int64]bool{}
	for _, e := range events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil &&
			a.GetActivityType().GetName() == activityType && a.GetTaskQueue().GetName() == queue {
			scheduled[e.GetEventId()] = true
		}
		for _, closed := range []int64{
			e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskFailedEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId(),
		} {
			delete(scheduled, closed)
		}
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && len(scheduled) > 0 {
			return e.GetEventId()
		}
	}
	return 0
}

// resetCANConfig is TestResetAllocatorThatContinuesAsNew's own config: an
// allocation no other config has, with the default reclaim_interval (30 s),
// so that trainq-worker's own look at the allocator comes too late to matter.
const resetCANConfig = `
data_dir: %s
default_region: T
default_allocation: reset-can
metrics_addr: ""
regions:
  - name: T
    allocations:
      - name: reset-can
        stop_grace_period: 3s
        nodes:
          - {name: reset-can-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`

// TestResetAllocatorThatContinuesAsNew: an allocator reset to before a
// running job's request, which then continues as new at once (here: its
// per-run message limit, reached by the newcomers' requests), must not hand
// the reset run's pool to the next run. The next run is no reset run:
// Temporal keeps the last reset time for the reset run alone, so nothing
// outside the allocator could tell it to recover. The reset run notices
// the reset itself at its first task after the reset point and recovers
// before it decides anything: the running job is held again, and the
// newcomers wait in the runs that follow instead of being granted its GPUs.
func TestResetAllocatorThatContinuesAsNew(t *testing.T) {
	const allocation = "reset-can"
	dir := t.TempDir()
	path := filepath.Join(dir, "trainq-reset-can.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(resetCANConfig, filepath.Join(env.dir, "data"))), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, cfg.ReclaimInterval.D(), "the default reclaim_interval")

	const updatesPerRun = 5
	startShortRunAllocator(t, cfg, allocation, updatesPerRun)
	id := protocol.AllocatorWorkflowID("T", allocation)
	startWorkerWith(t, path)

	records := filepath.Join(dir, "records")
	runGate := gate(filepath.Join(dir, "run"))
	spec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: allocation}.Spec()
	}
	eventually(t, long, "the allocator to recover at its start and fence its node", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(time.Time{}) && len(queue(t, allocation).Fenced) == 0
	})
	running := submitWith(t, cfg, spec(recordingScript(records, runGate.waitFor())))
	waitState(t, running, protocol.StateRunning, long)
	before := counts(t, allocation).RecoveredAt

	point := resetAllocatorBefore(t, allocation, running)
	resetRun := currentRunOf(t, env.client, id)
	t.Logf("reset the allocator to event %d (run %s); it had recovered at %s", point, resetRun, before.Format(time.RFC3339Nano))
	var newcomers []string
	for currentRunOf(t, env.client, id) == resetRun {
		require.Less(t, len(newcomers), 2*updatesPerRun, "the reset run should have continued as new")
		job := submitWith(t, cfg, spec(recordingScript(records, "sleep 0.2")))
		newcomers = append(newcomers, job)
		eventually(t, long, "the newcomer's request to reach the allocator", func() bool {
			return inQueue(queue(t, allocation), job) || currentRunOf(t, env.client, id) != resetRun
		})
	}
	t.Logf("the allocator continued as new after %d newcomers", len(newcomers))

	eventually(t, long, "the allocator to hold the running job again, the newcomers waiting", func() bool {
		c := counts(t, allocation)
		v := queue(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(before) && len(v.Fenced) == 0 &&
			len(v.Running) == 1 && v.Running[0].Job == running && v.WaitingTotal == len(newcomers)
	})
	for _, job := range newcomers {
		assert.Equal(t, protocol.StatePending, status(t, job).State, job)
	}
	runGate.open(t)
	waitState(t, running, protocol.StateCompleted, long)
	for _, job := range newcomers {
		waitState(t, job, protocol.StateCompleted, long)
	}
	checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))

	// A reset to a run's first task runs that task afresh, with the state
	// the previous run handed over then: the run must notice that too, of
	// itself (trainq-worker's look, every 30 s, would send the recover
	// update).
	before = counts(t, allocation).RecoveredAt
	first := completedTasks(t, allocation)[0]
	resetAllocatorTo(t, allocation, first)
	eventually(t, long, "the allocator reset to its first task to recover", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(before)
	})
	for _, e := range fetchHistory(t, id) {
		if a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			assert.NotEqual(t, protocol.UpdateRecover, a.GetAcceptedRequest().GetInput().GetName(), "the reset run recovered when asked, not of itself")
		}
	}
}

// currentRunOf is the run ID of workflow id's current run.
func currentRunOf(t *testing.T, c client.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// inQueue tells whether job waits or runs in v.
func inQueue(v protocol.QueueView, job string) bool {
	return slices.Contains(waitingJobs(v), job) || slices.Contains(runningJobs(v), job)
}

// TestJobResetWhileItsAttemptIsPreempted: `temporal workflow reset` of a job
// to the task that began its attempt, reapplying no signal, while a
// preemption notice runs for that attempt (the chaos campaign found a job
// stuck this way). The reset run knows nothing of the attempt's
// worker and asks for the attempt again; the allocator, which is releasing
// that attempt, can neither grant it again nor wait for a release that no
// run will send. It stops the worker itself and has the job rerun as its next
// attempt, without spending max_retry (0 here): the preemptor starts, and
// the job completes on its rerun.
func TestJobResetWhileItsAttemptIsPreempted(t *testing.T) {
	const allocation = "resetjob"
	startWorker(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	// The first attempt ignores its notice; the rerun completes.
	victimScript := `if [ -e ` + dir + `/ran ]; then exit 0; fi; touch ` + dir + `/ran; exec sleep 600`
	victim, high := preemptedVictim(t, allocation, records, victimScript, 0)

	events := fetchHistory(t, victim)
	point, target := jobResetPoint(events, 1)
	require.NotZero(t, point)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := env.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: victim},
		Reason: "e2e: reset a preempted job", WorkflowTaskFinishEventId: point, RequestId: uuid.NewString(),
		// Reapplied, the grant and the preemption would let the reset run
		// take its attempt back and stop it on the notice as if nothing had
		// happened; without them it has truly forgotten the attempt.
		ResetReapplyExcludeTypes: []enumspb.ResetReapplyExcludeType{enumspb.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL, enumspb.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE},
	})
	require.NoError(t, err)
	t.Logf("reset %s to event %d (%s) during its notice", victim, point, target)

	waitState(t, high, protocol.StateCompleted, long)
	st := waitState(t, victim, protocol.StateCompleted, long)
	require.Len(t, st.Attempts, 2, "the reset attempt, then the rerun")
	assert.Contains(t, st.Attempts[0].EndReason, "reset")
	assert.Zero(t, st.Restarts, "a reset attempt spends no retry")
	checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))
}

// TestCopyOfAPreemptedJobsRequestChangesNothing: a copy of a job's capacity
// request (a retried request, a request check racing the grant) reaches the
// allocator while it releases that job's attempt, which the job holds and is
// stopping on its notice. The allocator asks the job, which still holds the
// attempt, and drops the copy: the worker is not stopped under it, it exits
// on its notice as it would have, and the attempt ends as a preemption.
func TestCopyOfAPreemptedJobsRequestChangesNothing(t *testing.T) {
	const allocation = "resetjob"
	startWorker(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	saved := gate(filepath.Join(dir, "save"))
	victimScript := `if [ -e ` + dir + `/saved ]; then exit 0; fi; ` + filepath.Join(env.binDir, "trainq") + ` notice --wait > /dev/null; ` +
		saved.waitFor() + `; touch ` + dir + `/saved; exit 0`
	victim, high := preemptedVictim(t, allocation, records, victimScript, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	copied := fixture.Request{Job: victim, Attempt: 1, Class: scheduler.Low, Workers: 1}.Capacity()
	require.NoError(t, env.client.SignalWorkflow(ctx, protocol.AllocatorWorkflowID("T", allocation), "", protocol.SignalRequest, copied))
	// Either the allocator has asked the victim (and so taken its answer),
	// or the copy has already ended the attempt (which the asserts below fail).
	eventually(t, long, "the allocator to act on the copy", func() bool {
		if st := status(t, victim); st.Attempt > 1 || (len(st.Attempts) > 0 && st.Attempts[0].EndedAt != nil) {
			return true
		}
		for _, e := range fetchHistory(t, victim) {
			if a := e.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil && strings.HasPrefix(a.GetMeta().GetUpdateId(), "forgotten/") {
				return true
			}
		}
		return false
	})
	saved.open(t)

	waitState(t, high, protocol.StateCompleted, long)
	st := waitState(t, victim, protocol.StateCompleted, long)
	require.Len(t, st.Attempts, 2)
	first := st.Attempts[0]
	require.NotNil(t, first.Preemptor, "the first attempt ended as a preemption")
	assert.Equal(t, high, first.Preemptor.Job)
	assert.NotNil(t, first.ExitedOnNoticeAt, "its worker exited on the notice, not stopped by a reclaim")
	assert.NotContains(t, first.EndReason, "reset")
	checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))
}

// preemptedVictim runs script as a low job on allocation (one node), then a
// high job that preempts it, and returns once the allocator is releasing the
// low job's attempt.
func preemptedVictim(t *testing.T, allocation, records, script string, maxRetry int) (victim, high string) {
	t.Helper()
	victim = submit(t, protocol.JobSpec{Script: recordingScript(records, script), InstanceType: "a100.2gpu", Region: "T",
		AllocationName: allocation, PriorityClass: "low", NWorkers: 1, Type: "binary", MaxRetry: maxRetry})
	waitState(t, victim, protocol.StateRunning, long)
	high = submit(t, protocol.JobSpec{Script: recordingScript(records, "sleep 0.2"), InstanceType: "a100.2gpu", Region: "T",
		AllocationName: allocation, PriorityClass: "high", NWorkers: 1, Type: "binary"})
	eventually(t, long, "the allocator to preempt the victim", func() bool {
		v := queue(t, allocation)
		return len(v.Running) == 1 && v.Running[0].Job == victim && v.Running[0].Releasing
	})
	return victim, high
}

// TestResetIntoARecoveryRegistersAgain: a reset whose point lies within a
// recovery's registration runs that registration again under the epoch drawn
// before the point, and each job answers that register update's ID with the
// answer it gave the first time. Here b waited then and runs now. The pool
// was rebuilt from "b waits" (and "c waits"), its refusals sent and its
// fences started, before the next pass noticed the reset and rebuilt it
// again; that those fences kept nothing b needed is owed to their ending
// with their epoch. The allocator now registers the jobs again under a new
// epoch before it rebuilds anything: one rebuild, from answers given after
// the reset; b is held, charged from its start, and runs on undisturbed.
func TestResetIntoARecoveryRegistersAgain(t *testing.T) {
	const allocation = "resetreg"
	startWorker(t)
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	aGate, bGate := gate(filepath.Join(dir, "a")), gate(filepath.Join(dir, "b"))
	spec := func(workspace, script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: allocation, Workspace: workspace}.Spec()
	}
	eventually(t, long, "the allocator to recover at its start and fence its node", func() bool {
		c := counts(t, allocation)
		return !c.Recovering && c.RecoveredAt.After(time.Time{}) && len(queue(t, allocation).Fenced) == 0
	})
	a := submit(t, spec("team-a", recordingScript(records, aGate.waitFor())))
	waitState(t, a, protocol.StateRunning, long)
	b := submit(t, spec("team-b", recordingScript(records, bGate.waitFor())))
	c := submit(t, spec("team-a", recordingScript(records, "sleep 0.2")))
	eventually(t, long, "b and c to wait behind a", func() bool { return queue(t, allocation).WaitingTotal == 2 })

	// A job that cannot answer keeps the registration open for the register
	// update's timeout (30 s): the window to take a reset point in, which the
	// reclaim ticks (every 2 s here) give.
	mute := startMuteJob(t, allocation)
	eventually(t, long, "visibility to list the mute job", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := env.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: activities.JobsQuery("T", allocation)})
		return err == nil && slices.ContainsFunc(resp.GetExecutions(), func(e *workflowpb.WorkflowExecutionInfo) bool {
			return e.GetExecution().GetWorkflowId() == mute
		})
	})
	startRegistration := lastRecoveryRegistration(t, allocation)
	recovered := make(chan error, 1)
	go func() {
		_, err := tqclient.New(env.client, env.cfg).RecoverAllocator(context.Background(), "T", allocation)
		recovered <- err
	}()
	var registering int64
	eventually(t, long, "the recovery to register the jobs", func() bool {
		registering = lastRecoveryRegistration(t, allocation)
		return registering > startRegistration
	})
	point := taskCompletedAfter(t, allocation, registering)
	require.NoError(t, <-recovered)
	require.False(t, registrationDone(t, allocation, registering, point),
		"the registration ended before the next workflow task (event %d): no reset point within it; events since it was scheduled: %s",
		point, historySince(t, allocation, registering))

	// b is granted once a ends, and c waits behind it. b holds its GPUs for
	// 20 s, so that what it used is plain in its workspace's usage.
	aGate.open(t)
	waitState(t, a, protocol.StateCompleted, long)
	st := waitState(t, b, protocol.StateRunning, long)
	require.NotNil(t, st.Attempts[0].StartedAt)
	bStarted := *st.Attempts[0].StartedAt
	eventually(t, long, "c to wait behind b", func() bool { return queue(t, allocation).WaitingTotal == 1 })
	time.Sleep(time.Until(bStarted.Add(20 * time.Second)))
	before := counts(t, allocation).RecoveredAt
	rebuilt := queue(t, allocation).Counters.Recoveries

	resetAllocatorTo(t, allocation, point)
	t.Logf("reset the allocator to event %d, within the registration scheduled at event %d", point, registering)
	terminateJob(t, mute)
	var recoveredAt time.Time
	eventually(t, 3*long, "the reset allocator to recover and fence its node", func() bool {
		c := counts(t, allocation)
		recoveredAt = c.RecoveredAt
		return !c.Recovering && c.RecoveredAt.After(before) && len(queue(t, allocation).Fenced) == 0
	})
	v := queue(t, allocation)
	// The reset took the count back to before the recovery it landed in.
	assert.Equal(t, rebuilt, v.Counters.Recoveries,
		"the pool was rebuilt once after the reset, from fresh answers, not first from the stale ones")
	assert.Equal(t, []string{b}, runningJobs(v), "b holds the node after the recovery")
	assert.Equal(t, 1, v.WaitingTotal, "c waits")
	st = status(t, b)
	assert.Equal(t, protocol.StateRunning, st.State, "%s", st.Message)
	assert.Equal(t, 1, st.Attempt, "b's first attempt runs on: %s", st.Message)
	// Its 2 GPUs from its start to the recovery (the half-life is an hour:
	// a minute's decay is under 2 %).
	held := 2 * recoveredAt.Sub(bStarted).Hours()
	usage := map[string]float64{}
	for _, u := range v.FairShare {
		usage[u.Workspace] = u.GPUHours
	}
	assert.GreaterOrEqual(t, usage["team-b"], 0.9*held,
		"b's workspace is charged for the %s b held 2 GPUs before the recovery: %+v", recoveredAt.Sub(bStarted).Round(time.Second), v.FairShare)

	bGate.open(t)
	waitState(t, b, protocol.StateCompleted, long)
	waitState(t, c, protocol.StateCompleted, long)
	checkNoDoubleHolds(t, records, filepath.Join(env.dir, "data"))
}

// startMuteJob starts a job workflow of the allocation on a task queue no
// worker polls: visibility lists it as a running job of the allocation, but
// it answers no register update. The test terminates it at its end.
func startMuteJob(t *testing.T, allocation string) string {
	t.Helper()
	spec := fixture.Job{Script: "true", Allocation: allocation}.Spec()
	name := "mute-" + allocation
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: name, TaskQueue: "trainq-e2e-nobody-polls",
		TypedSearchAttributes: temporal.NewSearchAttributes(
			protocol.KeyState.ValueSet(string(protocol.StatePending)),
			protocol.KeyAllocation.ValueSet(allocation),
			protocol.KeyRegion.ValueSet("T"),
		),
	}, protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec})
	require.NoError(t, err)
	t.Cleanup(func() { terminateJob(t, name) })
	return name
}

// terminateJob terminates a job workflow, if it still runs.
func terminateJob(t *testing.T, job string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.client.TerminateWorkflow(ctx, job, "", "e2e: done with it")
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		require.NoError(t, err)
	}
}

// lastRecoveryRegistration is the event ID at which the allocator's current
// run last scheduled a recovery's RegisterJobs (one listing the jobs, not
// naming them), or 0.
func lastRecoveryRegistration(t *testing.T, allocation string) int64 {
	t.Helper()
	var last int64
	for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
		a := e.GetActivityTaskScheduledEventAttributes()
		if a == nil || a.GetActivityType().GetName() != "RegisterJobs" {
			continue
		}
		var in activities.RegisterJobsInput
		require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in))
		if in.Jobs == nil {
			last = e.GetEventId()
		}
	}
	return last
}

// taskCompletedAfter waits for the allocator to complete a workflow task
// after event from, and returns that task's completed event.
func taskCompletedAfter(t *testing.T, allocation string, from int64) int64 {
	t.Helper()
	var point int64
	eventually(t, long, "the allocator to complete a workflow task", func() bool {
		for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
			if e.GetEventId() > from && e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
				point = e.GetEventId()
				return true
			}
		}
		return false
	})
	return point
}

// registrationDone says whether the activity scheduled at event scheduled
// had closed by event before.
func registrationDone(t *testing.T, allocation string, scheduled, before int64) bool {
	t.Helper()
	for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
		if e.GetEventId() >= before {
			break
		}
		if e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId() == scheduled ||
			e.GetActivityTaskFailedEventAttributes().GetScheduledEventId() == scheduled ||
			e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId() == scheduled {
			return true
		}
	}
	return false
}

// historySince outlines the allocator's events after event from, for a
// failure's message.
func historySince(t *testing.T, allocation string, from int64) string {
	t.Helper()
	var out []string
	for _, e := range fetchHistory(t, protocol.AllocatorWorkflowID("T", allocation)) {
		if e.GetEventId() < from {
			continue
		}
		line := fmt.Sprintf("%d %s", e.GetEventId(), strings.TrimPrefix(e.GetEventType().String(), "EVENT_TYPE_"))
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			line += " " + a.GetSignalName()
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			line += " " + a.GetActivityType().GetName()
		}
		out = append(out, line)
	}
	return strings.Join(out, "; ")
}
