package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/activities"
	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// This file injects the chaos campaign's faults beyond kill -9 and
// terminate: the two-jobs-one-node agent outage, allocator and job resets,
// and the burst. Each waits for the events it needs (a worker's start
// record, the allocator's answer to its queue query), bounded, and says in
// its description what it did.

// chaosPoll is how often a fault looks again at what it waits for (the
// record file, the allocator's queue query): there is no event to wait on.
const chaosPoll = 100 * time.Millisecond

// waitFor calls cond every chaosPoll until it holds or timeout passes; it
// returns whether it held.
func (r *chaosRun) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || r.isOver() {
			return false
		}
		time.Sleep(chaosPoll)
	}
}

// startedWorkers reads the record file: the workers of each job's attempt
// that have written their start line, by job, attempt, worker.
func (r *chaosRun) startedWorkers() map[testenv.WorkerKey]testenv.HoldEvent {
	out := map[testenv.WorkerKey]testenv.HoldEvent{}
	f, err := os.Open(r.records)
	if err != nil {
		return out
	}
	defer f.Close()
	evs, _, _ := testenv.ParseHoldRecords(f)
	for _, ev := range evs {
		if ev.Start {
			if _, ok := out[ev.Key]; !ok {
				out[ev.Key] = ev
			}
		}
	}
	return out
}

// attemptStarted tells whether every worker of job's attempt has started.
func (r *chaosRun) attemptStarted(started map[testenv.WorkerKey]testenv.HoldEvent, j chaosJob, attempt int) bool {
	for w := range j.workers {
		if _, ok := started[testenv.WorkerKey{Job: j.name, Attempt: attempt, Worker: w}]; !ok {
			return false
		}
	}
	return true
}

// runsAttempt tells whether every worker of job's attempt has recorded its
// start and the job's workflow says Running: its starts have completed and
// its watches are out (a start still in flight is not a watch to lose).
func (r *chaosRun) runsAttempt(j chaosJob, attempt int) bool {
	if !r.attemptStarted(r.startedWorkers(), j, attempt) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ji, err := r.describeJob(ctx, j.name)
	return err == nil && ji.attempt == int64(attempt) && ji.state == string(protocol.StateRunning)
}

// pastAttempt tells whether job's workflow has begun an attempt after
// attempt.
func (r *chaosRun) pastAttempt(job string, attempt int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ji, err := r.describeJob(ctx, job)
	return err == nil && ji.attempt > int64(attempt)
}

// queue asks the allocator's queue query, every waiting job listed.
func (r *chaosRun) queue() (protocol.QueueView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return tqclient.New(r.c, nil).QueuePage(ctx, chaosRegion, chaosAllocation, protocol.QueuePage{Limit: 1000})
}

// pairOutage is the two-jobs-one-node outage: the pair of pinned jobs
// starts on the pair node; its agent is killed; both jobs' watches are lost
// in turn (each after its heartbeat timeout and node_timeout) and their
// lost releases make the allocator fence the node; the agent is started
// again as soon as the allocator has taken the second one, so that it can
// answer a fence that was sent while the second job still held its GPU.
// Were that answer to bring the node back, the second job's worker (still
// running: the fence kept it) would share its GPU with the next grant.
func (r *chaosRun) pairOutage(f chaosFault) (string, bool) {
	a, b := f.jobs[0], f.jobs[1]
	if !r.submit(a) {
		return fmt.Sprintf("could not submit %s", a.name), false
	}
	if !r.waitFor(90*time.Second, func() bool { return r.runsAttempt(a, 1) }) {
		return fmt.Sprintf("%s did not run on %s within 90s; no outage", a.name, r.plan.pairNode), false
	}
	time.Sleep(f.stagger) // the plan's spacing of the two starts
	if !r.submit(b) {
		return fmt.Sprintf("could not submit %s", b.name), false
	}
	if !r.waitFor(90*time.Second, func() bool { return r.runsAttempt(b, 1) }) {
		return fmt.Sprintf("%s did not run on %s within 90s; no outage", b.name, r.plan.pairNode), false
	}
	p := r.pairAgent
	r.setDown(p, true)
	pid := p.p.Pid()
	killed := time.Now()
	r.kill(p)
	r.logf("killed %s (pid %d) with SIGKILL while %s and %s run there", p.name, pid, a.name, b.name)
	// Both watches lost: each job has moved on to its next attempt, which
	// it begins only once its lost release has been delivered to the
	// allocator.
	var firstGone time.Duration
	lost := r.waitFor(chaosWatchHeartbeat+40*time.Second, func() bool {
		ga, gb := r.pastAttempt(a.name, 1), r.pastAttempt(b.name, 1)
		if firstGone == 0 && (ga || gb) {
			firstGone = time.Since(killed)
		}
		return ga && gb
	})
	down := time.Since(killed)
	restarted := time.Now()
	err := r.start(p)
	r.setDown(p, false)
	if err != nil {
		r.problem("%v", err)
		return fmt.Sprintf("%s killed; RESTART FAILED: %v", p.name, err), false
	}
	if !lost {
		return fmt.Sprintf("%s (pid %d) killed while %s and %s ran there; they did not both lose their watches within %s; restarted after %s",
			p.name, pid, a.name, b.name, down.Round(100*time.Millisecond), down.Round(100*time.Millisecond)), false
	}
	return fmt.Sprintf("%s (pid %d) killed while %s and %s (started %s apart) ran there; the first delivered its lost release %s after the kill, "+
		"the second %s after it; agent started again at once (down %s), serving %s after its start (pid %d); %s",
		p.name, pid, a.name, b.name, f.stagger, firstGone.Round(100*time.Millisecond), (down - firstGone).Round(100*time.Millisecond),
		down.Round(100*time.Millisecond), time.Since(restarted).Round(10*time.Millisecond), p.p.Pid(), r.fenceAtRestart(b, restarted)), true
}

// fenceAtRestart says whether, when the pair node's agent came back, a
// fence of the node that kept the second job's worker was still waiting
// for it (sent before that job's loss): the race the outage is after. It
// reads the allocator's current run.
func (r *chaosRun) fenceAtRestart(b chaosJob, restarted time.Time) string {
	id := protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation)
	events, err := chaosHistory(r.c, id, "")
	if err != nil {
		return "(could not read the allocator's history: " + err.Error() + ")"
	}
	queue := protocol.NodeTaskQueue(r.plan.pairNode)
	kept := cluster.WorkerID{Job: b.name, Attempt: 1, Worker: 0}
	fences := map[int64]bool{} // scheduled event -> keeps b's worker
	inventories := map[int64]bool{}
	waiting := map[int64]bool{}
	for _, e := range events {
		at := e.GetEventTime().AsTime()
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetTaskQueue().GetName() == queue && at.Before(restarted) {
			switch a.GetActivityType().GetName() {
			case "FenceNode":
				var in activities.FenceNodeInput
				if decodeFirst(a.GetInput(), &in) == nil {
					fences[e.GetEventId()] = slices.Contains(in.Keep, kept)
					waiting[e.GetEventId()] = true
				}
			case "NodeInventory": // a fence's first step: what it keeps is decided after
				inventories[e.GetEventId()] = true
				waiting[e.GetEventId()] = true
			}
		}
		var closed int64
		switch {
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			closed = e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
		case e.GetActivityTaskTimedOutEventAttributes() != nil:
			closed = e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId()
		case e.GetActivityTaskFailedEventAttributes() != nil:
			closed = e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()
		case e.GetActivityTaskCanceledEventAttributes() != nil:
			closed = e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId()
		}
		if closed != 0 && at.Before(restarted) {
			delete(waiting, closed)
		}
	}
	for ev := range waiting {
		if fences[ev] {
			return fmt.Sprintf("a fence that kept %s's worker (event %d) was still waiting for the agent", b.name, ev)
		}
	}
	for ev := range waiting {
		if inventories[ev] {
			return fmt.Sprintf("a fence's inventory of the node (event %d) was waiting for the agent: what it keeps is decided after", ev)
		}
	}
	if len(waiting) > 0 {
		return fmt.Sprintf("a fence was waiting for the agent, not keeping %s's worker", b.name)
	}
	return "no fence was waiting for the agent"
}

// runOf describes a workflow's current run.
func (r *chaosRun) runOf(id string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := r.c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return "", err
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId(), nil
}

// chaosHistory reads one run's history, asking again on a transient error.
func chaosHistory(c client.Client, id, run string) ([]*historypb.HistoryEvent, error) {
	var last error
	for try := 0; try < 5; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		it := c.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var events []*historypb.HistoryEvent
		var err error
		for it.HasNext() {
			var e *historypb.HistoryEvent
			if e, err = it.Next(); err != nil {
				break
			}
			events = append(events, e)
		}
		cancel()
		if err == nil {
			return events, nil
		}
		last = err
		time.Sleep(time.Second)
	}
	return nil, last
}

// reset resets a workflow's run to the workflow task whose completion is
// event, as `temporal workflow reset --event-id` does (signals after it are
// applied again).
func (r *chaosRun) reset(id, run string, event int64, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.c.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 client.DefaultNamespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: run},
		Reason:                    reason,
		WorkflowTaskFinishEventId: event,
		RequestId:                 uuid.NewString(),
	})
	return err
}

// resetAllocator resets the allocator's current run to its depth-th latest
// completed workflow task, then asks it to recover at once with `trainq
// allocator recover`, as docs/failures.md tells an operator to.
func (r *chaosRun) resetAllocator(f chaosFault) (string, bool) {
	id := protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation)
	run, err := r.runOf(id)
	if err != nil {
		return fmt.Sprintf("could not describe %s: %v; not reset", id, err), false
	}
	events, err := chaosHistory(r.c, id, run)
	if err != nil {
		return fmt.Sprintf("could not read %s's history: %v; not reset", id, err), false
	}
	var completed []int64
	for _, e := range events {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			completed = append(completed, e.GetEventId())
		}
	}
	if len(completed) == 0 {
		return fmt.Sprintf("%s run %s has no completed workflow task; not reset", id, run), false
	}
	event := completed[max(len(completed)-f.depth, 0)]
	back := len(completed) - max(len(completed)-f.depth, 0)
	where := fmt.Sprintf("back %d of the %d completed workflow tasks of run %s, %d events", back, len(completed), run, len(events))
	if f.intoRegistration {
		point, scheduled, ok := registrationResetPoint(events)
		asked := ""
		if !ok {
			// The run has not recovered since it began (it continued as
			// new): ask it to, and take a task of that registration.
			point, scheduled, ok = r.openRegistration(id, run, events[len(events)-1].GetEventId())
			asked = "asked `trainq allocator recover` and reset "
		}
		if ok {
			event = point
			where = fmt.Sprintf("%sinto the recovery registration scheduled at event %d of run %s", asked, scheduled, run)
		} else {
			where += " (no recovery registration to reset into)"
		}
	}
	asked := time.Now()
	if err := r.reset(id, run, event, "chaos test: allocator reset"); err != nil {
		r.problem("reset %s to event %d: %v", id, event, err)
		return fmt.Sprintf("reset of %s to event %d FAILED: %v", id, event, err), false
	}
	reset := time.Now()
	if resetRun, err := r.runOf(id); err == nil && resetRun != run {
		r.mu.Lock()
		r.resetRuns = append(r.resetRuns, resetRun)
		r.mu.Unlock()
	}
	if f.unattended {
		desc := fmt.Sprintf("`temporal workflow reset --workflow-id %s --event-id %d` (%s), no `trainq allocator recover`", id, event, where)
		if after, ok := r.awaitSelfRecovery(asked); ok {
			return desc + fmt.Sprintf("; the allocator recovered of itself %s after the reset", after.Round(10*time.Millisecond)), true
		}
		r.problem("the reset allocator did not recover of itself within %s", chaosSelfRecovery)
		return desc + fmt.Sprintf("; the allocator did NOT recover of itself within %s", chaosSelfRecovery), false
	}
	cmd := exec.Command(filepath.Join(env.binDir, "trainq"), "allocator", "recover", chaosAllocation, "--region", chaosRegion)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+r.hostPort(), "TRAINQ_CONFIG="+r.configPath)
	out, err := cmd.CombinedOutput()
	desc := fmt.Sprintf("`temporal workflow reset --workflow-id %s --event-id %d` (%s); `trainq allocator recover %s`",
		id, event, where, chaosAllocation)
	r.mu.Lock()
	r.recoveries++
	if err != nil {
		r.unrecovered = append(r.unrecovered, fmt.Sprintf("after the allocator reset: `trainq allocator recover` failed after %s: %v: %s",
			time.Since(reset).Round(10*time.Millisecond), err, strings.TrimSpace(string(out))))
	}
	r.mu.Unlock()
	if err != nil {
		r.problem("trainq allocator recover: %v: %s", err, strings.TrimSpace(string(out)))
		return desc + fmt.Sprintf(" FAILED: %v", err), false
	}
	return desc + fmt.Sprintf(" answered %s after the reset", time.Since(reset).Round(10*time.Millisecond)), true
}

// openRegistration asks the allocator to recover (its answer is awaited in
// the background, and counted as every harness recovery is), and returns a
// workflow task completed inside that recovery's registration, scheduled
// after event since of run, once there is one (at most 30 s).
func (r *chaosRun) openRegistration(id, run string, since int64) (point, scheduled int64, ok bool) {
	go func() { _, _, _ = r.recoverAllocator("to reset the allocator into its registration") }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !r.isOver() {
		events, err := chaosHistory(r.c, id, run)
		if err == nil {
			if point, scheduled, ok = registrationResetPoint(events); ok && scheduled > since {
				return point, scheduled, true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, 0, false
}

// registrationResetPoint finds, in a run's history, the latest recovery
// registration (a RegisterJobs that lists the jobs) within which the run
// completed a workflow task, and returns the first such task's completed
// event and the registration's scheduled event.
func registrationResetPoint(events []*historypb.HistoryEvent) (point, scheduled int64, ok bool) {
	closed := map[int64]int64{} // scheduled event -> the event that closed the activity
	for _, e := range events {
		for _, id := range []int64{
			e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskFailedEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId(),
			e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId(),
		} {
			if id != 0 {
				closed[id] = e.GetEventId()
			}
		}
	}
	for i, e := range events {
		a := e.GetActivityTaskScheduledEventAttributes()
		var in activities.RegisterJobsInput
		if a == nil || a.GetActivityType().GetName() != "RegisterJobs" || decodeFirst(a.GetInput(), &in) != nil || in.Jobs != nil {
			continue
		}
		end, done := closed[e.GetEventId()]
		for _, later := range events[i+1:] {
			if done && later.GetEventId() >= end {
				break
			}
			if later.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
				point, scheduled, ok = later.GetEventId(), e.GetEventId(), true
				break
			}
		}
	}
	return point, scheduled, ok
}

// chaosSelfRecovery bounds the wait for a reset allocator to notice its reset
// and recover without being asked: it notices at its next pass or reclaim
// tick (the plan's reclaim_interval is 1–2 s), so two minutes are ample even
// for a busy machine.
const chaosSelfRecovery = 2 * time.Minute

// awaitSelfRecovery waits until the allocator has recovered since the reset
// was asked for, and says how long after that it was.
func (r *chaosRun) awaitSelfRecovery(asked time.Time) (time.Duration, bool) {
	id := protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation)
	for deadline := time.Now().Add(chaosSelfRecovery); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := r.c.QueryWorkflow(ctx, id, "", protocol.QueryCounts)
		cancel()
		var c protocol.QueueCounts
		if err != nil || v.Get(&c) != nil {
			continue // between runs, or busy
		}
		if !c.Recovering && c.RecoveredAt.After(asked) {
			return time.Since(asked), true
		}
	}
	return 0, false
}

// resetJob resets a running job (the pick-th, by name, of the jobs the
// allocator has running whose workers all started) to the workflow task
// that began its latest attempt (depth 0) or the one before (depth 1),
// within its current run.
func (r *chaosRun) resetJob(f chaosFault) (string, bool) {
	var running []string
	attempts := map[string]int{}
	r.waitFor(30*time.Second, func() bool {
		v, err := r.queue()
		if err != nil {
			return false
		}
		started := r.startedWorkers()
		running, attempts = nil, map[string]int{}
		for _, run := range v.Running {
			j, ok := r.jobs[run.Job]
			// Not the pair's (their outage waits on their attempts) nor
			// the burst's wide job.
			if ok && !run.Releasing && !j.gated && j.ramGB == 0 && r.attemptStarted(started, j, run.Attempt) {
				running = append(running, run.Job)
				attempts[run.Job] = run.Attempt
			}
		}
		return len(running) > 0
	})
	if len(running) == 0 {
		return "no job was running within 30s; no job reset", false
	}
	sort.Strings(running)
	job := running[f.pick%len(running)]
	attempt := attempts[job]
	run, err := r.runOf(job)
	if err != nil {
		return fmt.Sprintf("could not describe %s: %v; not reset", job, err), false
	}
	events, err := chaosHistory(r.c, job, run)
	if err != nil {
		return fmt.Sprintf("could not read %s's history: %v; not reset", job, err), false
	}
	event, target := jobResetPoint(events, attempt-f.depth)
	if event == 0 {
		return fmt.Sprintf("%s's run %s has no completed workflow task; not reset", job, run), false
	}
	if err := r.reset(job, run, event, "chaos test: job reset"); err != nil {
		r.problem("reset %s to event %d: %v", job, event, err)
		return fmt.Sprintf("reset of %s to event %d FAILED: %v", job, event, err), false
	}
	return fmt.Sprintf("`temporal workflow reset --workflow-id %s --event-id %d` while it ran attempt %d: %s",
		job, event, attempt, target), true
}

// jobResetPoint finds, in a job run's history, the completion of the
// workflow task that began attempt (the first search-attribute upsert
// setting TrainqAttempt to it); an attempt that began in an earlier run, or
// attempt 0, falls back to the run's first completed task.
func jobResetPoint(events []*historypb.HistoryEvent, attempt int) (int64, string) {
	var first int64
	for _, e := range events {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && first == 0 {
			first = e.GetEventId()
		}
		up := e.GetUpsertWorkflowSearchAttributesEventAttributes()
		if up == nil || attempt < 1 {
			continue
		}
		p, ok := up.GetSearchAttributes().GetIndexedFields()[protocol.SAAttempt]
		var n int64
		if ok && chaosDecode(p, &n) == nil && int(n) == attempt {
			return up.GetWorkflowTaskCompletedEventId(), fmt.Sprintf("the workflow task that began its attempt %d", attempt)
		}
	}
	return first, "its run's first workflow task"
}

// chaosBurstWaiting is how many of a burst's 1-GPU jobs must wait behind
// the wide job before it ends.
const chaosBurstWaiting = 20

// burst: the wide job takes most of the pool (high class: it preempts
// what it must); once it runs, the burst's 1-GPU jobs are submitted and
// queue behind it; once the allocator shows them all waiting, the wide
// job's gate opens, it ends, and its release frees capacity for all of
// them in one pass.
func (r *chaosRun) burst(f chaosFault) (string, bool) {
	wide, small := f.jobs[0], f.jobs[1:]
	defer func() {
		// Whatever happened, the wide job must be able to end.
		_ = os.WriteFile(r.gate(wide.name), nil, 0o644)
	}()
	if !r.submit(wide) {
		return fmt.Sprintf("could not submit %s", wide.name), false
	}
	t0 := time.Now()
	if !r.waitFor(90*time.Second, func() bool { return r.attemptStarted(r.startedWorkers(), wide, 1) }) {
		return fmt.Sprintf("%s (%d × %d GPUs) did not run within 90s; no burst", wide.name, wide.workers, wide.gpus), false
	}
	runs := time.Since(t0)
	errs := make(chan error, len(small))
	parallel(len(small), 4, func(i int) {
		if !r.submit(small[i]) {
			errs <- fmt.Errorf("%s", small[i].name)
		}
	})
	close(errs)
	for err := range errs {
		return fmt.Sprintf("could not submit %v", err), false
	}
	// The wide job leaves a few GPUs to the burst; the others wait.
	var waiting int
	var in map[string]bool
	queued := r.waitFor(20*time.Second, func() bool {
		v, err := r.queue()
		if err != nil {
			return false
		}
		in = map[string]bool{}
		for _, w := range v.Waiting {
			in[w.Job] = true
		}
		waiting = 0
		for _, j := range small {
			if in[j.name] {
				waiting++
			}
		}
		return waiting >= chaosBurstWaiting
	})
	// Every other one-GPU job that waits is cancelled at once, as a sweep
	// stopped: a burst of withdrawals into the allocator.
	var cancelled []string
	for i, j := range small {
		if queued && i%2 == 0 && in[j.name] {
			cancelled = append(cancelled, j.name)
		}
	}
	parallel(len(cancelled), 8, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.c.CancelWorkflow(ctx, cancelled[i], ""); err != nil {
			r.problem("cancel %s: %v", cancelled[i], err)
		}
	})
	if err := os.WriteFile(r.gate(wide.name), nil, 0o644); err != nil {
		r.problem("open the gate of %s: %v", wide.name, err)
	}
	var open []string
	stopped := r.waitFor(90*time.Second, func() bool {
		open = open[:0]
		for _, job := range cancelled {
			// One granted just before its cancel may have completed.
			if st, err := r.status(job); err != nil || st.State != protocol.StateStopped && st.State != protocol.StateCompleted {
				open = append(open, job)
			}
		}
		return len(open) == 0
	})
	desc := fmt.Sprintf("%s (%d × %d GPUs, high) ran %s after its submission; %d/%d one-GPU jobs waited behind it when it ended, and %d were cancelled at once",
		wide.name, wide.workers, wide.gpus, runs.Round(100*time.Millisecond), waiting, len(small), len(cancelled))
	if !stopped {
		desc += fmt.Sprintf("; %d cancelled jobs not ended within 90s (%s: %s)", len(open), open[0], r.statusText(open[0]))
	}
	return desc, queued && stopped
}

// capLowered lowers chaosCapWorkspace's high cap under two of its waiting
// jobs (see faultCapLowered): the config is rewritten and trainq-worker
// restarted (kill -9), which applies it. The job the new cap can never let
// start must end, naming the cap; the other must not, and must start once
// the holder's gate opens. The config keeps the new cap: every later
// restart applies it again.
func (r *chaosRun) capLowered(f chaosFault) (string, bool) {
	holder, over, under := f.jobs[0], f.jobs[1], f.jobs[2]
	defer func() {
		// Whatever happened, the holder must be able to end.
		_ = os.WriteFile(r.gate(holder.name), nil, 0o644)
	}()
	if !r.submit(holder) {
		return fmt.Sprintf("could not submit %s", holder.name), false
	}
	if !r.waitFor(90*time.Second, func() bool { return r.attemptStarted(r.startedWorkers(), holder, 1) }) {
		return fmt.Sprintf("%s did not run within 90s (%s); the cap was not lowered", holder.name, r.statusText(holder.name)), false
	}
	for _, j := range []chaosJob{over, under} {
		if !r.submit(j) {
			return fmt.Sprintf("could not submit %s", j.name), false
		}
	}
	// Both wait on the old cap while the holder runs (a job's first request
	// can take a while to reach the allocator on a busy machine).
	var reasons []string
	waited := r.waitFor(time.Minute, func() bool {
		v, err := r.queue()
		if err != nil {
			return false
		}
		reasons = reasons[:0]
		for _, w := range v.Waiting {
			if w.Job == over.name || w.Job == under.name {
				reasons = append(reasons, w.Job+": "+w.Reason)
			}
		}
		return len(reasons) == 2
	})
	if err := r.writeConfig(f.capTo); err != nil {
		r.problem("lower the cap: %v", err)
		return err.Error(), false
	}
	desc := fmt.Sprintf("%s high cap %d → %d under %s (%d GPUs) and %s (%d GPUs) while %s holds %d; ",
		chaosCapWorkspace, chaosCapBefore, f.capTo, over.name, over.workers*over.gpus, under.name, under.workers*under.gpus,
		holder.name, holder.workers*holder.gpus)
	if !waited {
		desc += fmt.Sprintf("they were not both waiting within a minute (the allocator's queue had %q); ", reasons)
	}
	desc += r.bounce(r.main, f.down)
	applied := time.Now()

	// The job over the new cap ends, naming it; the other still waits.
	var st protocol.JobStatus
	refused := r.waitFor(time.Minute, func() bool {
		var err error
		st, err = r.status(over.name)
		return err == nil && st.State.Terminal()
	})
	switch {
	case !refused:
		desc += fmt.Sprintf("; %s did not end within a minute (%s: %s)", over.name, st.State, st.Reason)
	case !strings.Contains(st.Message, "high.max_gpus"):
		desc += fmt.Sprintf("; %s ended %s without naming the cap: %q", over.name, st.State, st.Message)
		refused = false
	default:
		desc += fmt.Sprintf("; %s ended %s %s after the restart: %q", over.name, st.State,
			time.Since(applied).Round(100*time.Millisecond), st.Message)
	}
	if err := os.WriteFile(r.gate(holder.name), nil, 0o644); err != nil {
		r.problem("open the gate of %s: %v", holder.name, err)
	}
	started := r.waitFor(90*time.Second, func() bool { return r.attemptStarted(r.startedWorkers(), under, 1) })
	if started {
		desc += fmt.Sprintf("; %s started once %s ended", under.name, holder.name)
	} else {
		desc += fmt.Sprintf("; %s did not start within 90s of %s's end", under.name, holder.name)
	}
	return desc, waited && refused && started
}

// status asks a job its status, as `trainq status` does.
func (r *chaosRun) status(job string) (protocol.JobStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tqclient.New(r.c, nil).Status(ctx, job)
}

// statusText is a job's state and, while it waits, its position and reason,
// for a fault's line.
func (r *chaosRun) statusText(job string) string {
	st, err := r.status(job)
	if err != nil {
		return "status: " + err.Error()
	}
	text := fmt.Sprintf("%s, attempt %d", st.State, st.Attempt)
	if st.Reason != "" {
		text += fmt.Sprintf(", position %d: %s", st.Position, st.Reason)
	}
	return text
}

// recoverAllocator asks the allocator to recover, as `trainq allocator
// recover` does, and counts a call that got no answer: a recovery held up
// (by a job that cannot answer, say) is one the harness sees fail. A call
// cut off by the dev server's kill is asked once more.
func (r *chaosRun) recoverAllocator(why string) (protocol.RecoverReply, time.Duration, error) {
	start := time.Now()
	reply, err := tqclient.New(r.c, r.cfg).RecoverAllocator(context.Background(), chaosRegion, chaosAllocation)
	if err != nil {
		r.logf("trainq allocator recover (%s) failed after %s, asking again: %v", why, time.Since(start).Round(10*time.Millisecond), err)
		reply, err = tqclient.New(r.c, r.cfg).RecoverAllocator(context.Background(), chaosRegion, chaosAllocation)
	}
	took := time.Since(start)
	r.mu.Lock()
	r.recoveries++
	if err != nil {
		r.unrecovered = append(r.unrecovered, fmt.Sprintf("%s: no answer after %s: %v", why, took.Round(10*time.Millisecond), err))
	}
	r.mu.Unlock()
	return reply, took, err
}

// chaosLagLine is what trainq-worker logs for each job its lagging listing
// leaves out (activities.RegisterJobs).
const chaosLagLine = "test listing lag: recovery's listing leaves out"

// leftOut reads, from the log of trainq-worker's current process, the jobs
// its lagging listing left out.
func (r *chaosRun) leftOut() []string {
	var out []string
	for _, line := range strings.Split(r.main.p.LogTail(1<<30), "\n") {
		if !strings.Contains(line, chaosLagLine) {
			continue
		}
		for _, field := range strings.Fields(line) {
			if job, ok := strings.CutPrefix(field, "job="); ok && !slices.Contains(out, job) {
				out = append(out, job)
			}
		}
	}
	sort.Strings(out)
	return out
}

// listingLag: trainq-worker is killed and started again with its recovery
// listing lagging f.lag (and keeps it for the rest of the run); the
// fault's jobs are submitted; once one of them runs, the allocator is asked
// to recover. Both of recovery's listings, 2 s apart, miss what started
// within the lag. The follow-up, run aside, waits until every job left out
// is known to the allocator again (a fence found its worker, or it asked
// again) or has ended, and says how each came back.
func (r *chaosRun) listingLag(f chaosFault) (string, bool, func() string) {
	// A recovery already under way (one that waits out a job that cannot
	// answer) would take this fault's recover in its stead.
	idle := time.Now()
	if !r.waitFor(90*time.Second, func() bool { v, err := r.queue(); return err == nil && !v.Recovering }) {
		return "the allocator was still recovering after 90s; no lag", false, nil
	}
	waited := ""
	if d := time.Since(idle); d > time.Second {
		waited = fmt.Sprintf("after waiting %s for a recovery under way to end, ", d.Round(100*time.Millisecond))
	}
	desc := waited
	for _, j := range f.jobs {
		if !r.submit(j) {
			return desc + fmt.Sprintf("could not submit %s; no recovery", j.name), false, nil
		}
	}
	submitted := time.Now()
	// Recovery is to miss jobs the allocator had: wait until it has every
	// one of the fault's (running or waiting) and one of the high ones
	// runs. A request still on its way when the recovery begins waits for
	// it and is applied after, so it would not be missed.
	var known map[string]string
	runs := r.waitFor(20*time.Second, func() bool {
		v, err := r.queue()
		if err != nil {
			return false
		}
		known = chaosKnown(v)
		for _, j := range f.jobs {
			if known[j.name] == "" {
				return false
			}
		}
		for _, j := range f.jobs {
			if j.class == "high" && r.runsAttempt(j, 1) {
				return true
			}
		}
		return false
	})
	var had []string
	for _, j := range f.jobs {
		had = append(had, fmt.Sprintf("%s %s", j.name, chaosOrNone(known[j.name])))
	}
	desc += fmt.Sprintf("submitted %s; %s after, the allocator had %s", strings.Join(chaosJobNames(f.jobs), ", "),
		time.Since(submitted).Round(100*time.Millisecond), strings.Join(had, ", "))
	// A first recovery, before the listing lags, registers them: from then
	// on they answer to its epoch (a waiting job too, which no grant has
	// told one yet), as jobs that lived through an earlier recovery do.
	first, took, err := r.recoverAllocator("before the listing lags")
	if err != nil {
		return desc + fmt.Sprintf("; the first `trainq allocator recover` got no answer: %v", err), false, nil
	}
	desc += fmt.Sprintf("; a first `trainq allocator recover` (no lag) answered in %s: %d jobs listed; ", took.Round(10*time.Millisecond), first.Listed)
	r.mu.Lock()
	r.lag = f.lag
	r.main.env = []string{activities.EnvTestListingLag + "=" + f.lag.String()}
	r.mu.Unlock()
	desc += r.bounce(r.main, 500*time.Millisecond) + fmt.Sprintf(", now with %s=%s", activities.EnvTestListingLag, f.lag)
	// What the state the next recovery replaces has.
	r.waitFor(10*time.Second, func() bool {
		v, err := r.queue()
		if err == nil {
			known = chaosKnown(v)
		}
		return err == nil
	})
	recoverStart := time.Now()
	reply, took, err := r.recoverAllocator("after the listing began to lag")
	if err != nil {
		return desc + fmt.Sprintf("; `trainq allocator recover` got no answer: %v", err), false, nil
	}
	recovered := time.Now()
	var missed, late []string // the allocator had them before the recovery, or not
	for _, job := range r.leftOut() {
		if known[job] != "" {
			missed = append(missed, fmt.Sprintf("%s (%s)", job, known[job]))
		} else {
			late = append(late, job)
		}
	}
	desc += fmt.Sprintf("; `trainq allocator recover` answered in %s: %d jobs listed, %d holding, %d waiting; "+
		"the listing missed %d jobs the allocator had: %s",
		took.Round(10*time.Millisecond), reply.Listed, reply.Running, reply.Waiting, len(missed), chaosOrNone(strings.Join(missed, ", ")))
	if len(late) > 0 {
		desc += fmt.Sprintf(" (and left out %d it did not have before: %s)", len(late), strings.Join(late, ", "))
	}
	if !runs {
		desc += " (the fault's jobs were not all known, one running, within 20s)"
	}
	var names []string
	for _, m := range missed {
		name, _, _ := strings.Cut(m, " ")
		names = append(names, name)
		var attempt int
		if _, err := fmt.Sscanf(known[name], "running attempt %d", &attempt); err == nil {
			r.mu.Lock()
			r.lagMissed = append(r.lagMissed, chaosMissed{job: name, attempt: attempt, from: recoverStart, until: recovered.Add(chaosRecoveryFences)})
			r.mu.Unlock()
		}
	}
	follow := func() string { return r.backInView(names, recovered) }
	return desc, runs && len(missed) > 0, follow
}

// chaosMissed is a running job's attempt that a lagging recovery listing
// missed: no fence scheduled in [from, until] (the recovery's own fences)
// may stop its workers, which its job holds.
type chaosMissed struct {
	job         string
	attempt     int
	from, until time.Time
}

// chaosRecoveryFences bounds, after a recovery answered, when the fences it
// set off are scheduled (its own workflow task, or the next): a fence
// scheduled later is a lost node's, which may stop a worker legitimately.
const chaosRecoveryFences = 5 * time.Second

// fencedHealthy lists the workers of missed running attempts that a
// recovery fence stopped.
func fencedHealthy(missed []chaosMissed, stops []chaosFenceStop) []string {
	var out []string
	for _, m := range missed {
		for _, st := range stops {
			if st.id.Job == m.job && st.id.Attempt == m.attempt && !st.scheduled.Before(m.from) && !st.scheduled.After(m.until) {
				out = append(out, fmt.Sprintf("%s on %s: stopped by a fence scheduled %s after the recovery began (answered %s)",
					st.id, st.node, st.scheduled.Sub(m.from).Round(10*time.Millisecond), st.answered.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// chaosKnown says, for each job the allocator has, whether it holds
// ("running attempt N") or waits ("waiting attempt N").
func chaosKnown(v protocol.QueueView) map[string]string {
	out := map[string]string{}
	for _, run := range v.Running {
		out[run.Job] = fmt.Sprintf("running attempt %d", run.Attempt)
	}
	for _, w := range v.Waiting {
		out[w.Job] = fmt.Sprintf("waiting attempt %d", w.Attempt)
	}
	return out
}

// backInView waits (bounded) until each job in missed is known to the
// allocator (running or waiting) or has ended, and says when and at which
// attempt each came back: a running job found by a fence comes back at its
// attempt, one whose worker the fence stopped at a later one.
func (r *chaosRun) backInView(missed []string, since time.Time) string {
	bound := 3*r.plan.size.requestCheck + 30*time.Second
	back := map[string]string{}
	r.waitFor(bound, func() bool {
		v, err := r.queue()
		if err != nil {
			return false
		}
		for _, job := range missed {
			if back[job] != "" {
				continue
			}
			at := time.Since(since).Round(100 * time.Millisecond)
			for _, run := range v.Running {
				if run.Job == job {
					back[job] = fmt.Sprintf("%s holding attempt %d after %s", job, run.Attempt, at)
				}
			}
			for _, w := range v.Waiting {
				if w.Job == job {
					back[job] = fmt.Sprintf("%s waiting with attempt %d after %s", job, w.Attempt, at)
				}
			}
			if back[job] == "" {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ji, err := r.describeJob(ctx, job)
				cancel()
				if err == nil && (ji.closed || !ji.found) {
					back[job] = fmt.Sprintf("%s ended (%s) after %s", job, chaosOrNone(ji.state), at)
				}
			}
		}
		return len(back) == len(missed)
	})
	var parts []string
	for _, job := range missed {
		if back[job] == "" {
			parts = append(parts, fmt.Sprintf("%s NOT known to the allocator %s after the recovery", job, bound))
		} else {
			parts = append(parts, back[job])
		}
	}
	return "what the lagging listing missed came back: " + chaosOrNone(strings.Join(parts, "; "))
}

func chaosJobNames(jobs []chaosJob) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.name)
	}
	return out
}

// chaosDeadQueue is a task queue no worker polls.
const chaosDeadQueue = "trainq-chaos-nobody-polls"

// deadJob starts a job workflow of the allocation on a task queue no worker
// polls: its workflow task never runs, so it answers no register update,
// though visibility lists it as a running job of the allocation. The
// allocator is asked to recover: the recovery must complete without it,
// name it unanswered, and ask it again later (askUnansweredAgain); then it
// is terminated, as an operator would.
func (r *chaosRun) deadJob(n int) (string, bool) {
	name := fmt.Sprintf("chaos-dead-%d", n)
	j := chaosJob{name: name, class: "low", workers: 1, gpus: 1, sleeps: []float64{1}}
	spec := r.spec(j)
	if _, err := tqclient.Check(r.cfg, &spec); err != nil {
		return fmt.Sprintf("%s's spec: %v", name, err), false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: name, TaskQueue: chaosDeadQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			protocol.KeyState.ValueSet(string(protocol.StatePending)),
			protocol.KeyPriority.ValueSet(spec.PriorityClass),
			protocol.KeyAllocation.ValueSet(chaosAllocation),
			protocol.KeyRegion.ValueSet(chaosRegion),
			protocol.KeyKind.ValueSet(string(spec.Kind)),
			protocol.KeyAttempt.ValueSet(1),
			protocol.KeyGPUs.ValueSet(1),
		),
	}, protocol.JobWorkflowName, protocol.JobInput{Name: name, Spec: spec})
	cancel()
	if err != nil {
		r.problem("start %s on %s: %v", name, chaosDeadQueue, err)
		return fmt.Sprintf("could not start %s: %v", name, err), false
	}
	started := time.Now()
	defer r.terminate(name)
	// A lagging listing (faultListingLag) would hide a job started within
	// the lag: this fault is about a job recovery finds and cannot ask, so
	// it waits until the lag no longer hides it.
	r.mu.Lock()
	lag := r.lag
	r.mu.Unlock()
	if lag > 0 {
		time.Sleep(time.Until(started.Add(lag + 500*time.Millisecond)))
	}
	desc := fmt.Sprintf("%s started on task queue %s (no worker polls it)", name, chaosDeadQueue)
	reply, took, err := r.recoverAllocator("with " + name + " unable to answer")
	if err != nil {
		return desc + fmt.Sprintf("; `trainq allocator recover` got no answer after %s: %v", took.Round(10*time.Millisecond), err), false
	}
	answered := time.Now()
	named := slices.Contains(reply.Unanswered, name)
	desc += fmt.Sprintf("; `trainq allocator recover` answered in %s: %d jobs listed, %d holding, %d waiting, unanswered %v",
		took.Round(10*time.Millisecond), reply.Listed, reply.Running, reply.Waiting, reply.Unanswered)
	// The allocator asks it again every reclaim_interval (each try waits
	// out the register update's timeout).
	asked := false
	deadline := time.Now().Add(90 * time.Second)
	for !asked && time.Now().Before(deadline) && !r.isOver() {
		asked = r.allocatorAskedAgain(name, answered)
		if !asked {
			time.Sleep(time.Second)
		}
	}
	if asked {
		desc += fmt.Sprintf("; the allocator asked it again %s after the recovery", time.Since(answered).Round(100*time.Millisecond))
	} else {
		desc += "; the allocator did NOT ask it again within 90s"
	}
	desc += "; then terminated"
	return desc, named && asked
}

// allocatorAskedAgain says whether the allocator's current run has
// scheduled, since since, a RegisterJobs naming job.
func (r *chaosRun) allocatorAskedAgain(job string, since time.Time) bool {
	events, err := chaosHistory(r.c, protocol.AllocatorWorkflowID(chaosRegion, chaosAllocation), "")
	if err != nil {
		return false
	}
	for _, e := range events {
		a := e.GetActivityTaskScheduledEventAttributes()
		if a == nil || a.GetActivityType().GetName() != "RegisterJobs" || e.GetEventTime().AsTime().Before(since) {
			continue
		}
		var in activities.RegisterJobsInput
		if decodeFirst(a.GetInput(), &in) == nil && slices.Contains(in.Jobs, job) {
			return true
		}
	}
	return false
}

// terminate ends a workflow the harness started (and the run must not leave
// behind).
func (r *chaosRun) terminate(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.c.TerminateWorkflow(ctx, id, "", "chaos test: a fault's workflow is done"); err != nil {
		r.problem("terminate %s: %v", id, err)
	}
}
