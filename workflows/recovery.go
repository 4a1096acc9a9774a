package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/allocation"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// recoverySettle is how long recovery waits before it lists the jobs a second
// time: a job started just before the allocator was lost may not be in
// visibility yet at the first listing.
const recoverySettle = 2 * time.Second

// recoveryRegisterLife bounds one try of recovery's registration of every
// job (it heartbeats, and registers 5,000 jobs in well under a minute).
const recoveryRegisterLife = 20 * time.Minute

// recoveryRetryPause is how long recovery waits before it registers the jobs
// again after a try that did not end.
const recoveryRetryPause = 10 * time.Second

// recoverState rebuilds the allocator's state from the jobs themselves and
// the node agents, so that an allocator that lost its state (terminated,
// failed, reset, or asked by an operator) never grants capacity a job still
// holds:
//
//  1. A new epoch is drawn. Every running job of the allocation (listed
//     through visibility, twice, because visibility lags) is sent the
//     register update: it answers what it holds or waits for, and from then
//     on ignores grants of any older epoch, so a late grant of the lost
//     allocator cannot start workers its successor does not know of.
//  2. The pool is rebuilt from the answers (allocation.State.Recovered).
//  3. Every node is fenced until its agent has stopped the workers nobody
//     holds (orphans of vanished jobs, the lost allocator's reclaims) and
//     confirmed the rest. A node whose agent does not answer stays fenced
//     and counts as lost.
//
// Requests, releases and withdrawals that arrive meanwhile as signals wait
// (see AllocatorWorkflow), and those that arrive as updates are kept
// (heldRequests, heldReleases, heldWithdrawals) and taken in at the end, so
// none is lost or applied to the old state.
func (a *allocator) recoverState(ctx workflow.Context) protocol.RecoverReply {
	a.recovering = true
	workflow.SetCurrentDetails(ctx, a.details())
	if a.noticesResets && a.recoveryNotesRun {
		// Whatever asked for it, this recovery is the one a reset since
		// the run last looked calls for.
		a.runID = a.currentRun(ctx)
	}
	var (
		epoch string
		drawn time.Time
		reg   activities.RegisterJobsReply
	)
	for {
		epoch, drawn, reg = a.registerJobs(ctx)
		// A reset whose point lies within the registration runs it again
		// under the same epoch, and the jobs answer an update ID they have
		// seen with their first answer, which may be hours old: the pool
		// must not be rebuilt from it (see versionRegisterAgainAfterReset).
		if !a.registersAgainAfterReset || !a.resetSince(ctx) {
			break
		}
		workflow.GetLogger(ctx).Warn("the allocator was reset during its recovery's registration; registering the jobs again under a new epoch", "stale_epoch", epoch)
	}
	reply, cmds, err := a.st.Recovered(epoch, drawn, allocation.Registered{Holds: reg.Holds, Listed: reg.Listed, Unanswered: reg.Unanswered})
	if err != nil {
		panic(fmt.Sprintf("recover allocator %s: %v", a.st.Name(), err))
	}
	// Reclaims under way were for the state replaced; each fence of the
	// rebuilt state stops whatever nobody holds.
	a.reclaims = map[string]bool{}
	a.execute(ctx, cmds)
	a.recovering = false
	for _, s := range a.heldReleases {
		a.onRelease(ctx, s)
	}
	a.heldReleases = nil
	for _, req := range a.heldRequests {
		a.onRequest(ctx, req)
	}
	a.heldRequests = nil
	for _, w := range a.heldWithdrawals {
		a.onWithdraw(ctx, w)
	}
	a.heldWithdrawals = nil
	workflow.GetLogger(ctx).Info("allocator recovered", "epoch", epoch, "listed", reply.Listed,
		"running", reply.Running, "waiting", reply.Waiting, "conflicts", reply.Conflicts)
	a.schedule(ctx)
	a.lastRecovery = &reply
	return reply
}

// registerJobs draws a new epoch and registers every job of the allocation
// under it (RegisterJobs, asked again until it ends: see recoverState).
func (a *allocator) registerJobs(ctx workflow.Context) (epoch string, drawn time.Time, reg activities.RegisterJobsReply) {
	drawn = workflow.Now(ctx)
	a.st.RecoveredAt = drawn
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return protocol.NewEpoch(drawn, uuid.NewString()) }).Get(&epoch); err != nil {
		panic(fmt.Sprintf("draw a recovery epoch: %v", err))
	}
	a.st.Epoch = epoch
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
		Summary:          fmt.Sprintf("recover: register the jobs of %s", a.st.Name()),
	})
	guarded := a.guarded(ctx)
	if guarded {
		// Bounded, so that the guard can give it up (and recovery ask
		// again) if the server never times it out.
		actx = workflow.WithScheduleToCloseTimeout(actx, recoveryRegisterLife)
	}
	in := activities.RegisterJobsInput{Region: a.st.Config.Region, Allocation: a.st.Config.Allocation, Epoch: epoch, Settle: recoverySettle}
	for {
		err := a.executeGuarded(actx, (*activities.Activities).RegisterJobs, in).Get(ctx, &reg)
		if err == nil {
			break
		}
		if !guarded || ctx.Err() != nil {
			// The workflow itself is going away (or, unguarded, retries
			// are unlimited and nothing else ends it). Granting from a
			// partial picture is never safe.
			panic(fmt.Sprintf("recover allocator %s: %v", a.st.Name(), err))
		}
		// Out of time (its schedule-to-close, with the last try's error,
		// say visibility down for 20 minutes) or given up by the guard:
		// asked again, after a pause, under the same epoch (jobs answer a
		// register update of one epoch alike).
		workflow.GetLogger(ctx).Warn("recovery's registration did not end; asking again", "error", err)
		if workflow.NewTimerWithOptions(ctx, recoveryRetryPause, workflow.TimerOptions{Summary: "register the jobs again"}).Get(ctx, nil) != nil {
			panic(fmt.Sprintf("recover allocator %s: %v", a.st.Name(), ctx.Err()))
		}
	}
	return epoch, drawn, reg
}

// fence runs the fence of a node a rule has fenced: until the node's agent
// has stopped every worker the pool does not hold, and so confirmed the rest
// (activity FenceNode), nothing is granted there. It tries once per reclaim
// interval: a try that fails ends, and the fence loop's tick fences the node again
// (fenceAgain; before versionBoundedArrivals each node waited on a timer of
// its own, and timers armed together fire together). A recovery supersedes
// it from the moment it draws its epoch, and a fence that starts while one
// runs ends at once: the keep list would come from the pool the recovery
// replaces (see versionFenceEndsWithItsEpoch). The recovery fences every
// node again once it has rebuilt the pool; those fences first run after it
// has ended.
func (a *allocator) fence(ctx workflow.Context, node string) {
	generation := a.st.Counters.Recoveries
	if g, ok := a.fencing[node]; ok && g == generation {
		return // already being fenced
	}
	a.fencing[node] = generation
	epoch := a.st.Epoch
	current := func() bool {
		return a.fencing[node] == generation && a.st.Counters.Recoveries == generation &&
			(!a.fencesEndWithEpoch || a.st.Epoch == epoch && !a.recovering)
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for current() {
			// waited is how long the activity that fails, if one does, waited for the agent.
			waited := a.probeTimeout(node)
			err := a.registerStrangers(ctx, node, waited, current)
			var reply activities.FenceNodeReply
			if err == nil && current() {
				waited = a.st.NodeTimeout()
				keep := a.st.WorkersOn(node)
				actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					TaskQueue:              protocol.NodeTaskQueue(node),
					ScheduleToStartTimeout: a.st.NodeTimeout(),
					StartToCloseTimeout:    a.st.Config.StopGracePeriod + time.Minute,
					HeartbeatTimeout:       20 * time.Second,
					RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
					Summary:                fmt.Sprintf("fence %s: stop every worker but the %d it holds", node, len(keep)),
				})
				err = a.executeFenceActivity(actx, (*activities.Activities).FenceNode,
					activities.FenceNodeInput{Keep: keep, Grace: a.st.Config.StopGracePeriod}).Get(ctx, &reply)
				if err == nil {
					if cmds, stale := a.st.FenceAnswerStale(node, keep); stale {
						a.execute(ctx, cmds)
						continue
					}
				}
			}
			if !current() {
				return // a recovery rebuilt the state meanwhile and fences anew
			}
			unanswered := isNodeTimeout(err) || isUnanswered(err)
			if !unanswered {
				delete(a.unansweredTries, node) // its agent answered
			}
			if err == nil {
				delete(a.fencing, node)
				a.execute(ctx, a.st.NodeBack(node, len(reply.Stopped)))
				return
			}
			if unanswered {
				a.unansweredTries[node]++
			}
			if unanswered && waited >= a.st.NodeTimeout() {
				if cmds, changed := a.st.FenceTimedOut(node); changed {
					a.execute(ctx, cmds)
					workflow.SetCurrentDetails(ctx, a.details())
				}
			}
			workflow.GetLogger(ctx).Warn("could not fence node; trying again", "node", node, "error", err)
			if a.boundsArrivals {
				delete(a.fencing, node)
				return
			}
			if workflow.NewTimerWithOptions(ctx, a.st.ReclaimInterval(), workflow.TimerOptions{Summary: "fence " + node + " again"}).Get(ctx, nil) != nil {
				return
			}
		}
	})
}

// fenceProbe is how long the first try of a node's fence waits for its agent
// to take the inventory (see versionBoundedArrivals): a dead node holds one of
// the few fence slots for that long. Each try in a row that the agent leaves
// untaken waits twice as long, up to node_timeout, so that a slow agent is
// still heard; a try that waited node_timeout unanswered counts the node
// lost, as every try did before.
const fenceProbe = 10 * time.Second

// probeTimeout is how long the next try of node's fence waits for its agent.
func (a *allocator) probeTimeout(node string) time.Duration {
	if !a.boundsArrivals {
		return a.st.NodeTimeout()
	}
	probe := fenceProbe
	for range a.unansweredTries[node] {
		if probe >= a.st.NodeTimeout() {
			break
		}
		probe *= 2
	}
	return min(a.st.NodeTimeout(), probe)
}

// fenceAgain fences again every fenced node whose last try failed (see
// fence), in config order.
func (a *allocator) fenceAgain(ctx workflow.Context) {
	for _, f := range a.st.Fenced() {
		if _, ok := a.fencing[f.Node]; !ok {
			a.fence(ctx, f.Node)
		}
	}
}

// registerStrangers asks node's agent which workers are live there and, for
// every one the pool does not hold, asks its job what it holds (the register
// update): recovery finds jobs through visibility, which lags and can miss a
// job, and a job that did not answer recovery's update is not in the pool
// either. A job that holds the worker is adopted, so the fence keeps it; a
// job that ended or holds something else leaves the worker to the fence. It
// fails while such a job does not answer, so that the node stays fenced and
// is asked again at the next try, while the rest of the allocation goes on.
// It adopts only while current says its fence is (see
// versionStrangersOfTheirEpoch): the jobs answered the epoch it asked in.
func (a *allocator) registerStrangers(ctx workflow.Context, node string, probe time.Duration, current func() bool) error {
	nctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              protocol.NodeTaskQueue(node),
		ScheduleToStartTimeout: probe,
		StartToCloseTimeout:    time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                "list the live workers on " + node,
	})
	var inv activities.NodeInventoryReply
	if err := a.executeFenceActivity(nctx, (*activities.Activities).NodeInventory).Get(ctx, &inv); err != nil {
		return err
	}
	live := make([]cluster.WorkerID, len(inv.Workers))
	for i, w := range inv.Workers {
		live[i] = w.ID
	}
	jobs, found := a.st.Strangers(node, live)
	if len(jobs) == 0 || a.st.Epoch == "" {
		// An allocation that never recovered has no epoch to register
		// jobs with: its fence stops strangers, as before.
		return nil
	}
	reg, err := a.registerNamed(ctx, fenceActivities, jobs,
		fmt.Sprintf("ask the %d job(s) with unknown workers on %s what they hold", len(jobs), node))
	if err != nil {
		return err
	}
	if a.strangersOfTheirEpoch && !current() {
		return errFenceSuperseded
	}
	for _, h := range reg.Holds {
		a.execute(ctx, a.st.AdoptStranger(node, h, found[h.Job]))
	}
	if len(reg.Unanswered) > 0 {
		a.lastEvent = fmt.Sprintf("node %s stays fenced: job(s) %v with live workers there did not answer", node, reg.Unanswered)
		return fmt.Errorf("job(s) %v with live workers on %s did not answer", reg.Unanswered, node)
	}
	return nil
}

// errFenceSuperseded ends a try of a fence that a recovery superseded while
// it waited for the jobs' answers.
var errFenceSuperseded = errors.New("a recovery superseded the fence")

// registerNamed sends the register update of this epoch to the named jobs
// of the allocation (one try: its callers ask again on their own schedule).
// Each call is a round of its own: a job answers an update ID it has seen
// with its first answer, which recovery's may be, long out of date.
func (a *allocator) registerNamed(ctx workflow.Context, share int, jobs []string, summary string) (activities.RegisterJobsReply, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// Bounded (see guard): its callers ask again on their own schedule.
		ScheduleToStartTimeout: time.Minute,
		StartToCloseTimeout:    2 * time.Minute,
		HeartbeatTimeout:       10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	})
	in := activities.RegisterJobsInput{Region: a.st.Config.Region, Allocation: a.st.Config.Allocation, Epoch: a.st.Epoch, Jobs: jobs,
		Round: workflow.Now(ctx).UnixNano()}
	var reg activities.RegisterJobsReply
	err := a.executeActivityOf(actx, share, (*activities.Activities).RegisterJobs, in).Get(ctx, &reg)
	return reg, err
}
