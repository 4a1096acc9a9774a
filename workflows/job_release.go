package workflows

// An attempt gives its capacity back worker by worker, as each one stops.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// releaseTo names the allocator the node activities report releases to: the
// node activity that sees a worker gone reports its release a workflow task
// before the job could.
func (j *job) releaseTo() string {
	return j.alloc.id
}

// release reports one stopped worker to the allocator. The first report of
// an attempt also marks the job as stopping, so that the capacity its other
// workers still hold counts as releasing, not free.
func (j *job) release(ctx workflow.Context, attempt, worker int) {
	j.releaseWorkers(ctx, attempt, []int{worker}, nil)
}

// releaseAfterNode takes in a worker the node activity saw gone. When that
// activity says it reported the release to the allocator itself, the job
// only records it; otherwise, or when a
// recovering allocator registered the job since the activity was
// scheduled (registrations then moved: the report may have gone to the
// allocator it replaced, and the register answer said the worker still
// held its capacity), the job reports the release, which the allocator
// applies once.
func (j *job) releaseAfterNode(ctx workflow.Context, attempt, worker int, reported bool, registrations int) {
	if !reported || j.registrations != registrations {
		j.release(ctx, attempt, worker)
		return
	}
	j.markReleased(ctx, attempt, worker)
	j.cur.stopping = true
}

// markReleased records that a worker's capacity is released, and when (the
// attempt's Released, which the UI's timeline draws worker by worker).
func (j *job) markReleased(ctx workflow.Context, attempt, worker int) {
	j.cur.released[worker] = true
	for i := len(j.status.Attempts) - 1; i >= 0; i-- {
		if a := &j.status.Attempts[i]; a.Number == attempt {
			a.Released = append(a.Released, protocol.WorkerRelease{Worker: worker, At: workflow.Now(ctx).UTC()})
			return
		}
	}
}

// releaseLost reports workers whose node's agent did not answer: nobody can
// confirm they stopped, so the allocator fences their node until its agent
// is back and has stopped them.
func (j *job) releaseLost(ctx workflow.Context, attempt int, workers []int, node string) {
	j.releaseWorkers(ctx, attempt, workers, []string{node})
}

func (j *job) releaseWorkers(ctx workflow.Context, attempt int, workers []int, lostNodes []string) {
	workers = slices.DeleteFunc(slices.Clone(workers), func(w int) bool { return j.cur.released[w] })
	if len(workers) == 0 {
		return
	}
	for _, w := range workers {
		j.markReleased(ctx, attempt, w)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	s := protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Workers: workers, Stopping: !j.cur.stopping, LostNodes: lostNodes}
	for _, node := range lostNodes {
		if j.cur.busyNodes[node] {
			s.GPUsBusy = append(s.GPUsBusy, node)
		}
	}
	j.cur.stopping = true
	j.sendRelease(dctx, s)
}

// jobActivityBudget is protocol.JobActivityBudget; tests lower it to see the
// bound at work with fewer workers than the test environment runs in a second.
var jobActivityBudget = protocol.JobActivityBudget

// sentRelease is a release signal sent to the allocator and its delivery.
type sentRelease struct {
	signal    protocol.ReleaseSignal
	delivered workflow.Future
}

// sendRelease sends s to the allocator. The releases a workflow task makes
// go as one signal per attempt when the task's other work is done
// (flushReleases): a gang whose node agents could not report (an allocator
// too busy to take their updates) ends worker by worker within a task or
// two, and a signal each would come in as a burst that can get the
// allocator's task force-closed.
func (j *job) sendRelease(ctx workflow.Context, s protocol.ReleaseSignal) {
	if !j.coalescesReleases(ctx) {
		j.signalRelease(ctx, s)
		return
	}
	j.cur.unsent = append(j.cur.unsent, s)
}

func (j *job) signalRelease(ctx workflow.Context, s protocol.ReleaseSignal) {
	j.cur.signals = append(j.cur.signals, sentRelease{signal: s,
		delivered: workflow.SignalExternalWorkflow(ctx, j.alloc.id, "", protocol.SignalRelease, s)})
}

// coalescesReleases says whether this run sends its releases through
// flushReleases (versionCoalesceReleases), and starts it the first time.
func (j *job) coalescesReleases(ctx workflow.Context) bool {
	if j.flushing {
		return true
	}
	if workflow.GetVersion(ctx, versionCoalesceReleases, workflow.DefaultVersion, 1) < 1 {
		return false
	}
	j.flushing = true
	fctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(fctx, j.flushReleases)
	return true
}

// flushReleases sends the releases queued by sendRelease when the
// coroutine that queued them blocks (the releases one pass of the job's
// loop makes go together; a task whose loop yields partway sends two or
// three signals), merged into one per attempt.
func (j *job) flushReleases(ctx workflow.Context) {
	for {
		if workflow.Await(ctx, func() bool { return len(j.cur.unsent) > 0 }) != nil {
			return
		}
		j.sendUnsent(ctx)
	}
}

func (j *job) sendUnsent(ctx workflow.Context) {
	for _, s := range mergeReleases(j.cur.unsent) {
		j.signalRelease(ctx, s)
	}
	j.cur.unsent = nil
}

// mergeReleases merges releases of one attempt into one, in the order the
// attempts first appear: the workers, lost nodes and busy nodes of all, and
// stopping if any marks the job stopping.
func mergeReleases(rs []protocol.ReleaseSignal) []protocol.ReleaseSignal {
	var out []protocol.ReleaseSignal
	for _, r := range rs {
		i := slices.IndexFunc(out, func(m protocol.ReleaseSignal) bool { return m.Attempt == r.Attempt })
		if i < 0 {
			r.Workers = slices.Clone(r.Workers)
			r.LostNodes = slices.Clone(r.LostNodes)
			r.GPUsBusy = slices.Clone(r.GPUsBusy)
			out = append(out, r)
			continue
		}
		m := &out[i]
		m.Workers = appendNew(m.Workers, r.Workers...)
		m.LostNodes = appendNew(m.LostNodes, r.LostNodes...)
		m.GPUsBusy = appendNew(m.GPUsBusy, r.GPUsBusy...)
		m.Stopping = m.Stopping || r.Stopping
	}
	return out
}

// appendNew appends the values of vs that list does not hold yet.
func appendNew[T comparable](list []T, vs ...T) []T {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

// deliverRelease waits until the allocator has r. The server refuses a
// signal to a run that has taken its TemporalSignalsPerRun (an allocator
// that recovers while releases pile up): dropping it would leave the
// attempt's capacity held for ever, so it is sent again, backing off, until
// the allocator takes it. An allocator that does not exist needs no
// release: the one started next recovers from the jobs.
func (j *job) deliverRelease(ctx workflow.Context, r sentRelease) {
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		err := r.delivered.Get(ctx, nil)
		if err == nil {
			return
		}
		var gone *temporal.UnknownExternalWorkflowExecutionError
		if errors.As(err, &gone) {
			workflow.GetLogger(ctx).Warn("could not report a release to the allocator", "error", err)
			return
		}
		workflow.GetLogger(ctx).Warn("the allocator refused a release; sending it again", "workers", r.signal.Workers, "in", delay, "error", err)
		if workflow.NewTimerWithOptions(ctx, delay, workflow.TimerOptions{Summary: "report a release again"}).Get(ctx, nil) != nil {
			return
		}
		r.delivered = workflow.SignalExternalWorkflow(ctx, j.alloc.id, "", protocol.SignalRelease, r.signal)
	}
}

// stopAndRelease stops the attempt's remaining workers and releases their
// capacity worker by worker, as each one is gone. Workers on a lost node
// are released as lost at once. It runs even after cancellation, and
// returns once the allocator has every release.
func (j *job) stopAndRelease(ctx workflow.Context, attempt int, grant protocol.GrantSignal) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	// Notices still in flight finish first where stops beside them could
	// pass the pending-activities budget (a job without notices waits for
	// nothing). An attempt of up to a third of the budget has room for its
	// watches, notices and stops together: a slow notice must not put off
	// the deadline's stops.
	if (j.notices.pending > 0 || j.notices.sending) && 3*len(grant.Placement) > jobActivityBudget {
		_ = workflow.Await(dctx, func() bool { return j.notices.pending == 0 && !j.notices.sending })
	}
	if !j.cur.stopping {
		j.cur.stopping = true
		j.sendRelease(dctx, protocol.ReleaseSignal{Job: j.name, Attempt: attempt, Stopping: true})
	}
	// The watches of the attempt's workers may still be pending (cancelled,
	// not yet acknowledged) while the stops run: with MaxNWorkers workers
	// both would pass TemporalPendingActivitiesLimit, so the stops in flight
	// are bounded to what JobActivityBudget leaves, the next one scheduled as
	// each ends. An attempt of up to half the budget stops all at once.
	st := &stopper{j: j, ctx: dctx, sel: workflow.NewSelector(dctx), attempt: attempt, grace: grant.StopGracePeriod,
		releaseTo: j.releaseTo(), registrations: j.registrations, atOnce: max(jobActivityBudget-len(grant.Placement), 1)}
	for _, p := range grant.Placement {
		if j.cur.released[p.Worker] {
			continue
		}
		if j.cur.lostNodes[p.Node] {
			j.releaseLost(dctx, attempt, []int{p.Worker}, p.Node)
			continue
		}
		st.stop(p.Worker, p.Node)
	}
	for st.pending > 0 {
		st.sel.Select(dctx)
	}
	// The releases still queued go now: the attempt ends once the
	// allocator has every one.
	j.sendUnsent(dctx)
	for _, r := range j.cur.signals {
		j.deliverRelease(dctx, r)
	}
}

// stopper stops an attempt's workers, at most atOnce at a time, and
// releases each one's capacity as it is gone.
type stopper struct {
	j         *job
	ctx       workflow.Context
	sel       workflow.Selector
	attempt   int
	grace     time.Duration
	releaseTo string
	// registrations is the job's count when the stops began (see releaseAfterNode).
	registrations   int
	atOnce, pending int
	queued          []func()
}

func (s *stopper) stop(worker int, node string) {
	if s.pending >= s.atOnce {
		s.queued = append(s.queued, func() { s.stop(worker, node) })
		return
	}
	j := s.j
	in := activities.StopWorkerInput{ID: cluster.WorkerID{Job: j.name, Attempt: s.attempt, Worker: worker}, Grace: s.grace, ReleaseTo: s.releaseTo, Run: workflow.GetInfo(s.ctx).WorkflowExecution.RunID}
	actx := j.nodeOptions(s.ctx, node, fmt.Sprintf("stop worker %d on %s (SIGTERM, SIGKILL after %s)", worker, node, s.grace), workflow.ActivityOptions{
		StartToCloseTimeout: s.grace + time.Minute,
		HeartbeatTimeout:    15 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
	})
	s.pending++
	s.sel.AddFuture(workflow.ExecuteActivity(actx, (*activities.Activities).StopWorker, in), func(f workflow.Future) {
		s.pending--
		if len(s.queued) > 0 {
			next := s.queued[0]
			s.queued = s.queued[1:]
			next()
		}
		s.stopped(worker, node, f)
	})
}

// stopped releases a worker whose stop ended.
func (s *stopper) stopped(worker int, node string, f workflow.Future) {
	j := s.j
	var st cluster.WorkerStatus
	if err := f.Get(s.ctx, &st); err != nil {
		// Retries end only when the node's agent stopped answering (or the
		// stop cannot be expressed): the worker may still run, so its node
		// is fenced rather than its GPUs freed.
		workflow.GetLogger(s.ctx).Error("could not stop worker; fencing its node", "worker", worker, "node", node, "error", err)
		j.cur.lostNodes[node] = true
		j.releaseLost(s.ctx, s.attempt, []int{worker}, node)
		return
	}
	j.releaseAfterNode(s.ctx, s.attempt, worker, st.ReleaseReported, s.registrations)
}
