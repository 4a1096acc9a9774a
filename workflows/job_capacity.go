package workflows

// An attempt asks its allocator for capacity and waits for the grant, a
// refusal or a cancellation; a recovering allocator asks it what it holds.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// waitForCapacity queues the attempt and waits for the grant. ok is false if
// the attempt ended before it started (refused, or cancelled while waiting).
func (j *job) waitForCapacity(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 30 * time.Second, NonRetryableErrorTypes: []string{activities.ErrTypeCapacityRefused}},
		Summary:             fmt.Sprintf("queue attempt %d in %s/%s", attempt, j.spec.Region, j.spec.AllocationName),
	})
	most, least := j.spec.GangSize()
	var runLimit, runEstimate time.Duration
	if j.spec.TimeLimit > 0 {
		runLimit = max(j.spec.TimeLimit-j.runTime(workflow.Now(ctx)), time.Millisecond)
	} else if e := j.status.Estimate; e != nil {
		runEstimate = scheduler.EstimatedRunLimit(e.Runtime, j.runTime(workflow.Now(ctx)))
	}
	j.cur.request = protocol.CapacityRequest{
		Job: j.name, Attempt: attempt, Kind: j.spec.Kind, Class: j.spec.Class(), InstanceType: j.spec.InstanceType,
		Workers: most, Seq: j.seq, SubmittedAt: j.status.CreatedAt, Preemptions: j.preemptions(),
		HonorsNotice: j.honorsNotices(), Nodes: j.spec.AllowedNodes, MinWorkers: least, Topology: j.spec.Topology, NoMove: j.spec.NoMove, Workspace: j.spec.Workspace, RunLimit: runLimit,
		RunEstimate: runEstimate, User: j.spec.Author, Demand: new(j.spec.Demand()),
	}
	j.cur.phase, j.cur.grant = protocol.HoldWaiting, nil
	req := activities.RequestCapacityInput{Region: j.spec.Region, Allocation: j.spec.AllocationName, Request: j.cur.request, Learn: j.learnInput()}
	registrations := j.registrations
	var reply protocol.CapacityReply
	if err := j.requestCapacity(ctx, actx, req).Get(ctx, &reply); err != nil {
		if errors.Is(ctx.Err(), workflow.ErrCanceled) {
			return j.withdraw(ctx, attempt)
		}
		j.cur.phase = protocol.HoldNone
		var appErr *temporal.ApplicationError
		msg := err.Error()
		if errors.As(err, &appErr) {
			msg = appErr.Message()
		}
		return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Failed, Message: msg, Final: true}, false
	}
	if j.seq == 0 {
		j.seq = reply.Seq
		j.cur.request.Seq = reply.Seq
	}
	j.learned(reply.Estimate)
	// A recovering allocator that registered this job meanwhile is newer
	// than the one that answered.
	// Nor may an answer move the epoch back: a run reset to before its
	// recovery answers with the epoch the recovery replaced.
	if reply.Epoch != "" && j.registrations == registrations && j.cur.grant == nil && !protocol.NewerEpoch(j.epoch, reply.Epoch) {
		j.epoch = reply.Epoch
	}
	if !reply.Granted && reply.Reason != "" && j.cur.grant == nil {
		// Show where the attempt was queued and why it waits. The job is not
		// told when its place changes; the allocator's current details and
		// `trainq status` have the live position.
		j.status.Position, j.status.Reason = reply.Position, reply.Reason
		workflow.SetCurrentDetails(ctx, j.details())
	}
	j.askWhy = 0
	if !reply.Granted && reply.Reason == "" && j.cur.grant == nil &&
		workflow.GetVersion(ctx, versionAskWhyAgain, workflow.DefaultVersion, 1) >= 1 {
		j.askWhy = askWhyFirst
	}
	return j.awaitGrant(ctx, attempt)
}

// askWhyFirst is how soon an attempt queued without learning where and why it waits asks again;
// each unanswered ask doubles it, until the request check (requestCheck) comes sooner. The
// answer is a courtesy that a busy allocator may not give at once, but a user who looks at a
// waiting job should not be left without a reason for half an hour.
const askWhyFirst = 15 * time.Second

// awaitGrant waits for the attempt's grant, a refusal, or a cancellation.
func (j *job) awaitGrant(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	for {
		// Grants arrive through takeGrant. A refusal says the allocation was
		// reconfigured and can no longer run this job; the allocator has
		// already dropped the request.
		// Every requestCheck the attempt makes sure the allocator has its
		// request (a recovered allocator may not).
		settled := func() bool { return j.cur.grant != nil || j.alloc.refusals.Len() > 0 }
		wait := j.requestCheck
		if j.askWhy > 0 {
			wait = min(wait, j.askWhy)
		}
		ok, err := workflow.AwaitWithTimeout(ctx, wait, settled)
		if err == nil && !ok {
			if j.askWhy > 0 {
				if j.askWhy *= 2; j.askWhy >= j.requestCheck {
					j.askWhy = 0
				}
			}
			j.checkRequest(ctx, attempt)
			continue
		}
		if j.cur.grant != nil {
			return *j.cur.grant, attempts.Outcome{}, true
		}
		if err != nil {
			return j.withdraw(ctx, attempt)
		}
		var refusal protocol.RefuseSignal
		j.alloc.refusals.ReceiveAsync(&refusal)
		if refusal.Attempt == attempt {
			j.cur.phase = protocol.HoldNone
			if refusal.Rerun {
				return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Yielded, Message: refusal.Reason}, false
			}
			return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Failed, Message: refusal.Reason, Final: true}, false
		}
		// Otherwise meant for an attempt that has already ended.
	}
}

// requestCheckInterval is how long a job waits for its grant before it makes
// sure the allocator still has its request (see checkRequest).
const requestCheckInterval = 30 * time.Minute

// checkRequest asks the allocator whether it has the attempt's request and
// sends it again if not: a recovering allocator that missed this job (its
// listing lagged, the job did not answer in time) never queues it otherwise,
// and the job would wait for ever.
func (j *job) checkRequest(ctx workflow.Context, attempt int) {
	// The check is a query (10 s at most) and perhaps one signal: 20 s is
	// ample, and a check whose worker died is tried again that soon.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 20 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             fmt.Sprintf("make sure %s/%s still has attempt %d's request", j.spec.Region, j.spec.AllocationName, attempt),
	})
	in := activities.RequestCapacityInput{Region: j.spec.Region, Allocation: j.spec.AllocationName, Request: j.cur.request}
	var check activities.RequestCheck
	if err := workflow.ExecuteActivity(actx, (*activities.Activities).CheckRequest, in).Get(ctx, &check); err != nil {
		workflow.GetLogger(ctx).Warn("could not make sure the allocator has the request; asking again later", "attempt", attempt, "error", err)
		return
	}
	if check.Resent {
		workflow.GetLogger(ctx).Warn("the allocator did not have the request, or had granted it and the grant never came; sent it again", "attempt", attempt)
	}
	if r := check.Reply; !r.Granted && r.Reason != "" && j.status.Reason == "" && j.cur.grant == nil && j.cur.request.Attempt == attempt {
		j.askWhy = 0
		j.status.Position, j.status.Reason = r.Position, r.Reason
		workflow.SetCurrentDetails(ctx, j.details())
	}
}

// requestCapacity sends the attempt's capacity request as a local activity:
// an update (or a signal-with-start) from the workflow's own worker, without
// a round trip through the server's activity queue (activities.SendRequest).
// The allocator takes a request once per attempt, so a local activity run
// again after a worker crash does no harm.
func (j *job) requestCapacity(ctx, actx workflow.Context, req activities.RequestCapacityInput) workflow.Future {
	opts := workflow.GetActivityOptions(actx)
	req.Brief = true
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy, Summary: opts.Summary,
	})
	// By name: the replayer, which registers no activities, then replays
	// the local activity from its marker (a method expression would need
	// the registration).
	return workflow.ExecuteLocalActivity(lctx, activities.RequestCapacityName, req)
}

// takeGrant takes in a grant signal. A grant counts only for the attempt
// that waits for it, and only from the allocator epoch the job answers to:
// a grant of an allocator that has since been replaced by a recovered one
// was never known to its successor, so using it would double-book GPUs.
func (j *job) takeGrant(ctx workflow.Context, g protocol.GrantSignal) {
	switch {
	case g.Attempt < j.status.Attempt:
		j.releaseStaleGrant(ctx, g)
		return
	case j.cur.phase != protocol.HoldWaiting || g.Attempt != j.status.Attempt:
		// A grant repeated for the attempt that holds it, or one for an
		// attempt that has ended: nothing to take.
		return
	case g.Epoch != "" && j.epoch != "" && g.Epoch != j.epoch && !j.movesToEpoch(g.Epoch):
		workflow.GetLogger(ctx).Warn("ignoring a grant of a replaced allocator", "attempt", g.Attempt, "grant_epoch", g.Epoch, "epoch", j.epoch)
		return
	}
	if g.Epoch != "" {
		j.epoch = g.Epoch
	}
	if j.seq == 0 && g.Seq != 0 {
		// A rerun asks with it, to keep its place in the queue.
		j.seq, j.cur.request.Seq = g.Seq, g.Seq
	}
	j.cur.grant, j.cur.phase = &g, protocol.HoldHolding
}

// releaseStaleGrant gives back a grant for an attempt that has already
// ended. Most such grants are late copies of capacity released already (the
// allocator ignores the release then), but an allocator whose view lagged (a
// reset of it or of the job, a recovery) can grant an attempt after the job
// moved on; it would hold that capacity for ever while the job's next attempt
// waits "for its previous attempt to release". The job started nothing for
// this grant, but workers of that attempt may have run on its nodes earlier,
// so the release names every node of the grant as lost: the allocator fences
// them until their agents say what runs there.
func (j *job) releaseStaleGrant(ctx workflow.Context, g protocol.GrantSignal) {
	if len(g.Placement) == 0 || workflow.GetVersion(ctx, versionReleaseStaleGrant, workflow.DefaultVersion, 1) < 1 {
		return
	}
	r := protocol.ReleaseSignal{Job: j.name, Attempt: g.Attempt, Stopping: true}
	for _, p := range g.Placement {
		r.Workers = append(r.Workers, p.Worker)
		if !slices.Contains(r.LostNodes, p.Node) {
			r.LostNodes = append(r.LostNodes, p.Node)
		}
	}
	workflow.GetLogger(ctx).Warn("a grant for an attempt that has ended; giving it back", "attempt", g.Attempt, "current", j.status.Attempt)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.SignalExternalWorkflow(dctx, j.alloc.id, "", protocol.SignalRelease, r)
}

// movesToEpoch says whether a grant or preemption of epoch e, which is not
// the job's, comes from a newer allocator state: the allocator that drew e
// knows the job (it grants only requests it has, and preempts only holds it
// has), so the job answers to it from now on. Its grant could otherwise
// arrive just before the capacity reply that names the new epoch, be
// ignored, and leave the job waiting while the allocator holds its GPUs. A
// message of an older epoch is a dead allocator's and stays ignored.
func (j *job) movesToEpoch(e string) bool {
	return protocol.NewerEpoch(e, j.epoch)
}

// hold says what the job holds or waits for (the register update's answer).
func (j *job) hold() protocol.JobHold {
	h := protocol.JobHold{Job: j.name, Phase: j.cur.phase, Request: j.cur.request}
	if j.cur.phase != protocol.HoldHolding || j.cur.grant == nil {
		return h
	}
	h.Placement = j.cur.grant.Placement
	if rec := j.current(); rec.StartedAt != nil {
		h.StartedAt = *rec.StartedAt
	}
	h.Releasing = j.cur.stopping
	for _, p := range j.cur.grant.Placement {
		if j.cur.released[p.Worker] {
			h.Released = append(h.Released, p.Worker)
		}
	}
	return h
}

// withdraw tells the allocator that this attempt holds nothing any more: it
// was cancelled while pending.
func (j *job) withdraw(ctx workflow.Context, attempt int) (protocol.GrantSignal, attempts.Outcome, bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	w := protocol.WithdrawSignal{Job: j.name, Attempt: attempt}
	if workflow.GetVersion(dctx, versionWithdrawByUpdate, workflow.DefaultVersion, 1) < 1 {
		_ = workflow.SignalExternalWorkflow(dctx, j.alloc.id, "", protocol.SignalWithdraw, w).Get(dctx, nil)
	} else {
		// A busy allocator may take a while: the user sees the job stop.
		j.setState(dctx, protocol.StateStopping)
		actx := workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: time.Minute},
			Summary:             "withdraw the request",
		})
		in := activities.ReportWithdrawalInput{Allocator: j.alloc.id, Withdrawal: w, Run: workflow.GetInfo(ctx).WorkflowExecution.RunID}
		if err := workflow.ExecuteActivity(actx, (*activities.Activities).ReportWithdrawal, in).Get(dctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("could not withdraw the request", "attempt", attempt, "error", err)
		}
	}
	j.cur.phase, j.cur.grant = protocol.HoldNone, nil
	return protocol.GrantSignal{}, attempts.Outcome{Kind: attempts.Cancelled, Message: "stopped by the user while pending"}, false
}

// honorsNotices says whether the job honoured every preemption notice it
// was given, and was given at least one: each such attempt saved a
// checkpoint within the notice's window and its workers exited before the
// deadline. The policy then counts the job as losing nothing when preempted
// (scheduler.Request.HonorsNotice).
func (j *job) honorsNotices() bool {
	given := false
	for _, a := range j.status.Attempts {
		if a.Preemptor == nil || a.NoticeDeadline == nil {
			continue
		}
		if !a.HonouredNotice() || a.ExitedOnNoticeAt == nil {
			return false
		}
		given = true
	}
	return given
}

// preemptions counts the job's attempts that ended preempted. The request
// carries it, so that the policy's limit on preemptions of one job holds
// even after the allocator has forgotten the job (a recovery, or a long wait).
func (j *job) preemptions() int {
	n := 0
	for _, a := range j.status.Attempts {
		if a.Preemptor != nil {
			n++
		}
	}
	return n
}
