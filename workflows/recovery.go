package workflows

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// recoverySettle is how long recovery waits before it lists the jobs a second
// time: a job started just before the allocator was lost may not be in
// visibility yet at the first listing.
const recoverySettle = 2 * time.Second

// fenceCause is why a node is fenced: what the allocator decides by (the
// reason beside it is for people).
type fenceCause string

const (
	// fenceRecovering: every node after a recovery, until its agent says
	// what runs there; it turns into fenceLost if the agent does not answer.
	fenceRecovering fenceCause = "recovering"
	// fenceLost: the node's agent did not answer, so its workers may run on.
	fenceLost fenceCause = "lost"
	// fenceAdded: a reconfigure added the node.
	fenceAdded fenceCause = "added"
)

// recoveringReason is a node's reason while a recovery fences it.
const recoveringReason = "waiting for its agent to report which workers run there (recovery)"

// fenceState is why one node is fenced.
type fenceState struct {
	cause fenceCause
	why   string
}

// carriedFence reads a fenced node from the carried state; one written
// before causes were kept is told by its reason.
func carriedFence(f protocol.FencedNode) fenceState {
	cause := fenceCause(f.Cause)
	if cause == "" {
		cause = fenceLost
		if f.Reason == recoveringReason {
			cause = fenceRecovering
		}
	}
	return fenceState{cause: cause, why: f.Reason}
}

// recoverState rebuilds the allocator's state from the jobs themselves and
// the node agents, so that an allocator that lost its state (terminated,
// failed, reset, or asked by an operator) never grants capacity a job still
// holds:
//
//  1. A new epoch is drawn. Every running job of the allocation (listed
//     through visibility, twice, because visibility lags) is sent the
//     register update: it answers what it holds or waits for, and from then
//     on ignores grants of any other epoch, so a late grant of the lost
//     allocator cannot start workers its successor does not know of.
//  2. The pool is rebuilt from the answers: held placements (running or
//     releasing, worker by worker) are adopted, waiting requests re-queued
//     with their original sequence.
//  3. Every node is fenced until its agent has stopped the workers nobody
//     holds (orphans of vanished jobs, the lost allocator's reclaims) and
//     confirmed the rest. A node whose agent does not answer stays fenced
//     and counts as lost.
//
// Requests, releases and withdrawals that arrive meanwhile wait (see
// AllocatorWorkflow), so none is lost or applied to the old state.
func (a *allocator) recoverState(ctx workflow.Context) protocol.RecoverReply {
	a.recovering = true
	workflow.SetCurrentDetails(ctx, a.details())
	var epoch string
	drawn := workflow.Now(ctx)
	a.recoveredAt = drawn
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return protocol.NewEpoch(drawn, uuid.NewString()) }).Get(&epoch); err != nil {
		panic(fmt.Sprintf("draw a recovery epoch: %v", err))
	}
	a.epoch = epoch
	// Signals decided from the state being replaced are not sent: the
	// rebuilt pool decides anew, and grants of the old epoch would be
	// ignored by the registered jobs anyway.
	a.outbox = nil
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		// The activity heartbeats at least every second while it works, so
		// a trainq-worker that dies mid-recovery delays it by seconds only.
		HeartbeatTimeout: 10 * time.Second,
		RetryPolicy:      &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
		Summary:          fmt.Sprintf("recover: register the jobs of %s/%s", a.in.Region, a.in.Allocation),
	})
	var reg activities.RegisterJobsReply
	in := activities.RegisterJobsInput{Region: a.in.Region, Allocation: a.in.Allocation, Epoch: epoch, Settle: recoverySettle}
	if err := workflow.ExecuteActivity(actx, (*activities.Activities).RegisterJobs, in).Get(ctx, &reg); err != nil {
		// Retries are unlimited: this fails only when the workflow itself
		// is going away. Granting from a partial picture is never safe.
		panic(fmt.Sprintf("recover allocator %s/%s: %v", a.in.Region, a.in.Allocation, err))
	}
	pool, err := scheduler.NewPool(a.pool.Nodes(), a.pool.Policy())
	if err != nil {
		panic(fmt.Sprintf("recover allocator %s/%s: %v", a.in.Region, a.in.Allocation, err))
	}
	reply := protocol.RecoverReply{Epoch: epoch, Listed: reg.Listed, Unanswered: reg.Unanswered}
	var refused []protocol.JobHold
	reply.Conflicts, refused = a.rebuild(pool, reg.Holds)
	a.pool = pool
	for _, h := range refused {
		reason := fmt.Sprintf("allocation %s/%s can no longer run this job", a.in.Region, a.in.Allocation)
		a.send(ctx, h.Job, protocol.SignalRefuse, protocol.RefuseSignal{Attempt: h.Request.Attempt, Reason: reason}, func(workflow.Context) {})
	}
	// The old state's orphans, fences and requests waiting for a reclaim
	// are superseded: every node is fenced below, its agent stops whatever
	// nobody holds, and each job answered for itself.
	a.orphans, a.reclaims, a.afterReclaim = nil, map[string]bool{}, nil
	a.unanswered = reg.Unanswered
	a.counters.Recoveries++
	for _, n := range pool.Nodes() {
		a.fence(ctx, n.Name, fenceRecovering, recoveringReason)
		reply.Fenced = append(reply.Fenced, n.Name)
	}
	reply.Running, reply.Waiting = len(pool.RunningJobs()), pool.WaitingCount()
	a.recovering = false
	note := fmt.Sprintf("recovered epoch %s: %d jobs listed, %d holding, %d waiting", epoch, reply.Listed, reply.Running, reply.Waiting)
	if len(reply.Conflicts) > 0 {
		note += fmt.Sprintf("; %d conflicting holds: %v", len(reply.Conflicts), reply.Conflicts)
	}
	if len(reply.Unanswered) > 0 {
		note += fmt.Sprintf("; %d job(s) did not answer, their nodes stay fenced until they do: %v", len(reply.Unanswered), reply.Unanswered)
	}
	a.note(note)
	workflow.GetLogger(ctx).Info("allocator recovered", "epoch", epoch, "listed", reply.Listed,
		"running", reply.Running, "waiting", reply.Waiting, "conflicts", reply.Conflicts)
	a.schedule(ctx)
	a.lastRecovery = &reply
	return reply
}

// rebuild adopts the holds into pool: held placements first (so that no
// waiting request can be placed on them), then the waiting requests, each
// with its original sequence; requests the lost allocator never answered get
// sequences after every known one. It returns the holds it could not adopt,
// and among them the waiting ones, whose jobs are told so (a config change
// may have left them unable to fit).
func (a *allocator) rebuild(pool *scheduler.Pool, holds []protocol.JobHold) (conflicts []string, refused []protocol.JobHold) {
	maxSeq := a.nextSeq - 1
	for _, h := range holds {
		maxSeq = max(maxSeq, h.Request.Seq)
	}
	a.nextSeq = maxSeq + 1
	for _, h := range holds {
		if h.Phase != protocol.HoldHolding {
			continue
		}
		r, err := requestFor(pool, h.Request)
		if err == nil {
			err = pool.Adopt(scheduler.Adoption{Request: r, Placement: h.Placement, StartedAt: h.StartedAt,
				Releasing: h.Releasing, Released: h.Released})
		}
		if err != nil {
			conflicts = append(conflicts, fmt.Sprintf("%s attempt %d: %v", h.Job, h.Request.Attempt, err))
		}
	}
	for _, h := range holds {
		if h.Phase != protocol.HoldWaiting {
			continue
		}
		r, err := requestFor(pool, h.Request)
		if err == nil {
			if r.Seq == 0 {
				r.Seq = a.nextSeq
				a.nextSeq++
			}
			err = pool.Enqueue(r)
		}
		if err != nil {
			conflicts = append(conflicts, fmt.Sprintf("%s attempt %d: %v", h.Job, h.Request.Attempt, err))
			refused = append(refused, h)
		}
	}
	return conflicts, refused
}

// requestFor turns a job's capacity request into the scheduler's form,
// checked against pool.
func requestFor(pool *scheduler.Pool, req protocol.CapacityRequest) (scheduler.Request, error) {
	demand, err := scheduler.ParseInstanceType(req.InstanceType)
	if err != nil {
		return scheduler.Request{}, err
	}
	r := scheduler.Request{
		Job: req.Job, Attempt: req.Attempt, Kind: req.Kind, Class: req.Class,
		Demand: demand, Workers: req.Workers, Seq: req.Seq, SubmittedAt: req.SubmittedAt, Preemptions: req.Preemptions,
	}
	return r, pool.Admit(r)
}

// nodeLost fences a node whose agent did not answer.
func (a *allocator) nodeLost(ctx workflow.Context, node, why string) {
	if slices.Contains(a.pool.LostNodes(), node) && a.fenceWhy[node].cause != fenceRecovering {
		return
	}
	a.counters.NodesLost++
	a.note(fmt.Sprintf("node %s lost: %s", node, why))
	workflow.GetLogger(ctx).Warn("node lost; fencing it until its agent answers", "node", node, "reason", why)
	a.fence(ctx, node, fenceLost, "lost: "+why)
}

// fence takes node out of scheduling until its agent has stopped every worker
// the pool does not know of and so confirmed the rest (activity FenceNode).
// It tries once per reclaim interval; a later recovery supersedes it.
func (a *allocator) fence(ctx workflow.Context, node string, cause fenceCause, why string) {
	a.pool.MarkNodeLost(node)
	a.fenceWhy[node] = fenceState{cause: cause, why: why}
	generation := a.counters.Recoveries
	if g, ok := a.fencing[node]; ok && g == generation {
		return // already being fenced
	}
	a.fencing[node] = generation
	workflow.Go(ctx, func(ctx workflow.Context) {
		for a.fencing[node] == generation && a.counters.Recoveries == generation {
			var err error
			if a.registersStrangers {
				err = a.registerStrangers(ctx, node)
			}
			var reply activities.FenceNodeReply
			if err == nil && a.fencing[node] == generation && a.counters.Recoveries == generation {
				keep := a.workersOn(node)
				actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					TaskQueue:              protocol.NodeTaskQueue(node),
					ScheduleToStartTimeout: a.nodeTimeout(),
					StartToCloseTimeout:    a.in.StopGracePeriod + time.Minute,
					HeartbeatTimeout:       20 * time.Second,
					RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
					Summary:                fmt.Sprintf("fence %s: stop every worker but the %d it holds", node, len(keep)),
				})
				err = a.executeFenceActivity(actx, (*activities.Activities).FenceNode,
					activities.FenceNodeInput{Keep: keep, Grace: a.in.StopGracePeriod}).Get(ctx, &reply)
				if err == nil && !stillHeld(keep, a.workersOn(node)) && a.refencesStaleKeeps(ctx) {
					// The agent kept a worker whose job has since given it up (a
					// second watch lost while this fence waited, a reclaim): that
					// worker may still run, so the answer proves nothing. Fence
					// again at once with what is held now.
					a.note(fmt.Sprintf("node %s: its agent answered a fence that kept workers no longer held; fencing it again", node))
					continue
				}
			}
			if a.fencing[node] != generation || a.counters.Recoveries != generation {
				return // a recovery rebuilt the state meanwhile and fences anew
			}
			if err == nil {
				delete(a.fencing, node)
				delete(a.fenceWhy, node)
				a.pool.MarkNodeUp(node)
				a.note(fmt.Sprintf("node %s is back: its agent stopped %d stray worker(s)", node, len(reply.Stopped)))
				a.schedule(ctx)
				return
			}
			if isNodeTimeout(err) && a.fenceWhy[node].cause == fenceRecovering {
				a.counters.NodesLost++
				a.fenceWhy[node] = fenceState{cause: fenceLost, why: fmt.Sprintf("lost: its agent did not answer for %s", a.nodeTimeout())}
				a.note(fmt.Sprintf("node %s lost: its agent did not answer for %s", node, a.nodeTimeout()))
				workflow.SetCurrentDetails(ctx, a.details())
			}
			workflow.GetLogger(ctx).Warn("could not fence node; trying again", "node", node, "error", err)
			if workflow.NewTimerWithOptions(ctx, a.reclaimInterval(), workflow.TimerOptions{Summary: "fence " + node + " again"}).Get(ctx, nil) != nil {
				return
			}
		}
	})
}

// registerStrangers asks node's agent which workers are live there and, for
// every one the pool does not hold, asks its job what it holds (the register
// update): recovery finds jobs through visibility, which lags and can miss a
// job, and a job that did not answer recovery's update is not in the pool
// either. A job that holds the worker is adopted, so the fence keeps it; a
// job that ended or holds something else leaves the worker to the fence. It
// fails while such a job does not answer, so that the node stays fenced and
// is asked again at the next try, while the rest of the allocation goes on.
func (a *allocator) registerStrangers(ctx workflow.Context, node string) error {
	nctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              protocol.NodeTaskQueue(node),
		ScheduleToStartTimeout: a.nodeTimeout(),
		StartToCloseTimeout:    time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                "list the live workers on " + node,
	})
	var inv activities.NodeInventoryReply
	if err := a.executeFenceActivity(nctx, (*activities.Activities).NodeInventory).Get(ctx, &inv); err != nil {
		return err
	}
	held := a.workersOn(node)
	var jobs []string
	found := map[string][]cluster.WorkerID{}
	for _, w := range inv.Workers {
		if !slices.Contains(held, w.ID) && !slices.Contains(jobs, w.ID.Job) {
			jobs = append(jobs, w.ID.Job)
		}
		found[w.ID.Job] = append(found[w.ID.Job], w.ID)
	}
	if len(jobs) == 0 || a.epoch == "" {
		// An allocation that never recovered has no epoch to register
		// jobs with: its fence stops strangers, as before.
		return nil
	}
	reg, err := a.registerNamed(ctx, fenceActivities, jobs,
		fmt.Sprintf("ask the %d job(s) with unknown workers on %s what they hold", len(jobs), node))
	if err != nil {
		return err
	}
	for _, h := range reg.Holds {
		a.adoptStranger(ctx, node, h, found[h.Job])
	}
	if len(reg.Unanswered) > 0 {
		a.note(fmt.Sprintf("node %s stays fenced: job(s) %v with live workers there did not answer", node, reg.Unanswered))
		return fmt.Errorf("job(s) %v with live workers on %s did not answer", reg.Unanswered, node)
	}
	return nil
}

// registerNamed sends the register update of this epoch to the named jobs
// of the allocation (one try: its callers ask again on their own schedule).
// Each call is a round of its own: a job answers an update ID it has seen
// with its first answer, which recovery's may be, long out of date.
func (a *allocator) registerNamed(ctx workflow.Context, share int, jobs []string, summary string) (activities.RegisterJobsReply, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	})
	in := activities.RegisterJobsInput{Region: a.in.Region, Allocation: a.in.Allocation, Epoch: a.epoch, Jobs: jobs,
		Round: workflow.Now(ctx).UnixNano()}
	var reg activities.RegisterJobsReply
	err := a.executeActivityOf(actx, share, (*activities.Activities).RegisterJobs, in).Get(ctx, &reg)
	return reg, err
}

// adoptStranger takes in what a job found through its workers on node holds
// or waits for, unless the pool already has it (then its worker there is
// stale, and the fence stops it). A hold is adopted only if it holds one of
// the workers found (none are given for a job asked again after recovery):
// a job whose worker of an ended attempt lingers must not be adopted for it.
func (a *allocator) adoptStranger(ctx workflow.Context, node string, h protocol.JobHold, workers []cluster.WorkerID) {
	if _, ok := a.pool.Running(h.Job); ok {
		return
	}
	if _, ok := a.pool.Waiting(h.Job); ok {
		return
	}
	if a.withdrawnFirst(h.Request) != nil {
		return
	}
	if workers != nil && h.Phase == protocol.HoldHolding && !holdsAnyOf(h, workers) {
		return
	}
	_, refused := a.rebuild(a.pool, []protocol.JobHold{h})
	switch {
	case len(refused) > 0:
		return
	case h.Phase == protocol.HoldHolding:
		if _, ok := a.pool.Running(h.Job); ok {
			a.note(fmt.Sprintf("adopted %s attempt %d, found through its worker on %s", h.Job, h.Request.Attempt, node))
			workflow.GetLogger(ctx).Warn("adopted a job recovery missed", "job", h.Job, "attempt", h.Request.Attempt, "node", node)
		}
	case h.Phase == protocol.HoldWaiting:
		a.schedule(ctx)
	}
}

// holdsAnyOf says whether h holds one of workers (same attempt, not released).
func holdsAnyOf(h protocol.JobHold, workers []cluster.WorkerID) bool {
	for _, w := range workers {
		if w.Job != h.Job || w.Attempt != h.Request.Attempt || slices.Contains(h.Released, w.Worker) {
			continue
		}
		for _, p := range h.Placement {
			if p.Worker == w.Worker {
				return true
			}
		}
	}
	return false
}

// stillHeld says whether every worker in kept is among held.
func stillHeld(kept, held []cluster.WorkerID) bool {
	for _, w := range kept {
		if !slices.Contains(held, w) {
			return false
		}
	}
	return true
}

// refencesStaleKeeps asks versionRefenceStaleKeep, only when a fence's
// answer kept a worker no longer held, so that histories without one
// record no marker.
func (a *allocator) refencesStaleKeeps(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionRefenceStaleKeep, workflow.DefaultVersion, 1) >= 1
}

// workersOn lists the workers the pool holds on node (not yet released).
func (a *allocator) workersOn(node string) []cluster.WorkerID {
	var keep []cluster.WorkerID
	for _, job := range a.pool.RunningJobs() {
		r, _ := a.pool.Running(job)
		for _, p := range r.Placement {
			if p.Node == node && !slices.Contains(r.Released, p.Worker) {
				keep = append(keep, cluster.WorkerID{Job: job, Attempt: r.Attempt, Worker: p.Worker})
			}
		}
	}
	return keep
}

// fenced lists the fenced nodes in config order, with why.
func (a *allocator) fenced() []protocol.FencedNode {
	var out []protocol.FencedNode
	for _, node := range a.pool.LostNodes() {
		st := a.fenceOf(node)
		out = append(out, protocol.FencedNode{Node: node, Reason: st.why, Cause: string(st.cause)})
	}
	return out
}

// fenceOf is why node is fenced; a node marked lost without a recorded
// reason counts as lost.
func (a *allocator) fenceOf(node string) fenceState {
	if st, ok := a.fenceWhy[node]; ok && st.why != "" {
		return st
	}
	return fenceState{cause: fenceLost, why: "lost: its agent did not answer"}
}
