package workflows

// A started attempt is watched until it ends: the shell around its rules
// (package attempts).

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// addInterrupts makes sel wake up for a preemption of this attempt or a
// cancellation, and hands them to on. When the attempt's stops give notices
// (noticeStops) it goes on after a cancellation while its workers act on
// their notice, and a closed Done channel is ready at every Select: the
// cancellation then comes through a channel that carries it once.
func (j *job) addInterrupts(ctx workflow.Context, sel workflow.Selector, attempt int, noticeStops bool,
	watchEnded workflow.ReceiveChannel, on func(attempts.Event)) {
	sel.AddReceive(j.alloc.preempts, func(c workflow.ReceiveChannel, _ bool) {
		var p protocol.PreemptSignal
		c.Receive(ctx, &p)
		if p.Attempt != attempt {
			return // meant for an attempt that has already ended
		}
		if p.Epoch != "" && j.epoch != "" && p.Epoch != j.epoch {
			if !j.movesToEpoch(p.Epoch) {
				return // from an allocator that has since been replaced
			}
			j.epoch = p.Epoch
		}
		on(attempts.Preempt{Preemptor: p.Preemptor, Reason: p.Reason, Drain: p.Drain, Loan: p.Loan, Move: p.Move, Notice: p.Notice})
	})
	if !noticeStops {
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { on(attempts.Cancel{}) })
		return
	}
	once := workflow.NewBufferedChannel(ctx, 1)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(gctx workflow.Context) {
		wait := workflow.NewSelector(gctx)
		wait.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { once.Send(gctx, true) })
		wait.AddReceive(watchEnded, func(workflow.ReceiveChannel, bool) {})
		wait.Select(gctx)
	})
	sel.AddReceive(once, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(dctx, nil)
		on(attempts.Cancel{})
	})
}

// watch runs the attempt while its workers run: it turns preemptions, a
// cancellation, the time limit, notices' deadlines, autoshutdown and each
// worker's watch into events for the attempt's rules (attempts.Running) and
// carries out the commands they return, in order, until the attempt ends.
func (j *job) watch(ctx workflow.Context, attempt int, grant protocol.GrantSignal) attempts.Outcome {
	// The attempt's own stops (a cancel, its time limit, stuck) give its
	// workers a notice first when the grant gives one.
	noticeStops := grant.Notice > 0
	base := ctx
	if noticeStops {
		// A cancellation must not cancel the watches: they see the workers
		// exit on their notice.
		base, _ = workflow.NewDisconnectedContext(ctx)
	}
	wctx, stopWatching := workflow.WithCancel(base)
	defer stopWatching()
	w := &watcher{j: j, ctx: ctx, wctx: wctx, sel: workflow.NewSelector(ctx), attempt: attempt, grant: grant,
		run:       attempts.NewRunning(workersOf(grant), grant.Notice, j.cur.nodeTimeout, j.spec.Health),
		releaseTo: j.releaseTo(), registrations: j.registrations}
	for _, p := range grant.Placement {
		w.watchWorker(p, p.Worker == 0)
	}
	j.addInterrupts(ctx, w.sel, attempt, noticeStops, wctx.Done(), w.on)
	j.addTimeLimit(wctx, w.sel, w.on)
	j.addAutoshutdown(wctx, w.sel, attempt, grant, w.on)
	for !w.run.Done {
		w.sel.Select(ctx)
		if w.run.Done || len(w.ended) == 0 {
			continue
		}
		last := w.ended[len(w.ended)-1]
		w.ended = w.ended[:len(w.ended)-1]
		w.on(last)
	}
	return w.run.Out
}

// watcher is the shell around a running attempt's rules: what watch's
// selector, watches and commands share.
type watcher struct {
	j         *job
	ctx, wctx workflow.Context // the attempt's; the watches' (cancelled when the attempt ends)
	sel       workflow.Selector
	attempt   int
	grant     protocol.GrantSignal
	run       *attempts.Running
	ended     []attempts.WatchEnded
	releaseTo string
	// registrations is the job's count when the watches began (see releaseAfterNode).
	registrations int
}

// on applies an event to the attempt's rules and executes their commands.
func (w *watcher) on(e attempts.Event) {
	for _, c := range w.run.On(workflow.Now(w.ctx), e) {
		w.execute(c)
	}
}

func (w *watcher) execute(c attempts.Command) {
	j := w.j
	switch c := c.(type) {
	case attempts.GiveNotice:
		j.giveNotice(w.wctx, w.sel, w.attempt, w.grant, c, func() { w.on(attempts.DeadlinePassed{}) })
	case attempts.Release:
		// The worker's processes are gone: its capacity is free now,
		// whatever the other workers do.
		j.releaseAfterNode(w.ctx, w.attempt, c.Worker, c.Reported, w.registrations)
	case attempts.WatchForExit:
		for _, p := range w.grant.Placement {
			if p.Worker == c.Worker {
				w.watchWorker(p, false)
			}
		}
	case attempts.MarkNodeLost:
		j.cur.lostNodes[c.Node] = true
	case attempts.NotifyStuck:
		j.notifyStuck(w.ctx)
	case attempts.ExitedOnNotice:
		now := workflow.Now(w.ctx)
		j.current().ExitedOnNoticeAt = &now
	}
}

// watchWorker watches a worker until it exits; judges says its watch also
// judges whether the whole attempt is stuck.
func (w *watcher) watchWorker(p scheduler.WorkerPlacement, judges bool) {
	j := w.j
	in := activities.WatchWorkerInput{WorkerID: cluster.WorkerID{Job: j.name, Attempt: w.attempt, Worker: p.Worker}, ReleaseTo: w.releaseTo, Run: workflow.GetInfo(w.ctx).WorkflowExecution.RunID}
	if j.spec.Health != nil && judges {
		// Worker 0's watch judges the whole attempt: the job is stuck only
		// when none of its workers writes (often only rank 0 logs).
		in.LogPeriod, in.Workers = j.spec.Health.LogPeriod, len(w.grant.Placement)
	}
	worker := p.Worker
	f := workflow.ExecuteActivity(j.nodeOptions(w.wctx, p.Node, fmt.Sprintf("watch worker %d on %s", p.Worker, p.Node), watchOptions), (*activities.Activities).WatchWorker, in)
	w.sel.AddFuture(f, func(f workflow.Future) {
		var st cluster.WorkerStatus
		err := f.Get(w.ctx, &st)
		w.ended = append(w.ended, watchEnd(worker, st, err, errors.Is(w.ctx.Err(), workflow.ErrCanceled)))
	})
}

// workersOf lists the grant's workers and their nodes for the attempt's rules.
func workersOf(grant protocol.GrantSignal) []attempts.Worker {
	ws := make([]attempts.Worker, 0, len(grant.Placement))
	for _, p := range grant.Placement {
		ws = append(ws, attempts.Worker{ID: p.Worker, Node: p.Node})
	}
	return ws
}

// watchEnd says how a worker's watch ended, for the attempt's rules;
// cancelled says the job was being cancelled then.
func watchEnd(worker int, st cluster.WorkerStatus, err error, cancelled bool) attempts.WatchEnded {
	w := attempts.WatchEnded{Worker: worker, Cancelled: cancelled}
	switch {
	case err == nil:
		w.End, w.Code, w.Reason, w.Reported = attempts.WorkerGone, st.ExitCode, st.Reason, st.ReleaseReported
		return w
	case isNodeTimeout(err):
		w.End = attempts.NodeSilent
	case isStuck(err):
		w.End = attempts.Silent
	case isNodeLost(err):
		w.End = attempts.NodeLostTrack
	default:
		w.End = attempts.WatchFailed
	}
	w.Error = errorText(err)
	return w
}

// watchOptions are a worker watch's: it lasts as long as the worker.
var watchOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * 365 * 24 * time.Hour, // notebooks run until stopped
	HeartbeatTimeout:    15 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: []string{"WorkerNotFound"}},
}

// giveNotice tells the attempt's running workers that they are to be
// stopped, why, and by when they must have exited (the notice file, see
// activities.NoticeWorker), and makes sel end the attempt at that deadline,
// when whatever still runs is stopped as usual (sel calls atDeadline).
func (j *job) giveNotice(ctx workflow.Context, sel workflow.Selector, attempt int, grant protocol.GrantSignal,
	g attempts.GiveNotice, atDeadline func()) {
	reason, by, d := g.Reason, g.By, g.Notice
	now := workflow.Now(ctx)
	deadline := now.Add(d)
	rec := j.current()
	rec.NoticeDeadline = &deadline
	rec.NoticeReason, rec.NoticedAt = reason, &now
	notice := protocol.WorkerNotice{Reason: reason, Deadline: deadline, Job: j.name, Attempt: attempt, By: by}
	opts := workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}}
	// Beside the attempt's pending watches, at most what JobActivityBudget
	// leaves is in flight (an attempt of MaxNWorkers workers would otherwise
	// pass TemporalPendingActivitiesLimit); the stops wait for them (see
	// stopAndRelease), so notices and stops are never pending together.
	atOnce := max(jobActivityBudget-len(grant.Placement), 1)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	run := j.cur // this attempt's, whenever the loop below runs
	j.notices.sending = true
	workflow.Go(dctx, func(gctx workflow.Context) {
		defer func() { j.notices.sending = false }()
		for _, pl := range grant.Placement {
			if run.released[pl.Worker] {
				continue
			}
			if workflow.Await(gctx, func() bool { return j.notices.pending < atOnce }) != nil {
				return
			}
			in := activities.NoticeWorkerInput{ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: pl.Worker}, Notice: notice, Signal: grant.NoticeSignal}
			f := workflow.ExecuteActivity(j.nodeOptions(gctx, pl.Node, fmt.Sprintf("tell worker %d on %s %s (deadline in %s)", pl.Worker, pl.Node, noticeSummary(reason), d), opts),
				(*activities.Activities).NoticeWorker, in)
			j.notices.pending++
			worker := pl.Worker
			workflow.Go(gctx, func(fctx workflow.Context) {
				err := f.Get(fctx, nil)
				j.notices.pending--
				if err != nil {
					workflow.GetLogger(fctx).Warn("could not give a worker its notice; it is stopped at the deadline", "worker", worker, "error", err)
				}
			})
		}
	})
	summary := "the preemption notice's deadline"
	if reason != protocol.NoticeReasonPreempted {
		summary = "the notice's deadline: " + noticeSummary(reason)
	}
	timer := workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) == nil {
			atDeadline()
		}
	})
}

// noticeSummary names a notice's reason in the activity and timer
// summaries people read in the Web UI.
func noticeSummary(reason string) string {
	switch reason {
	case protocol.NoticeReasonPreempted:
		return "it is preempted"
	case protocol.NoticeReasonCancelled:
		return "the job is cancelled"
	case protocol.NoticeReasonTimeLimit:
		return "the job reached its time limit"
	case protocol.NoticeReasonStuck:
		return "the job is stuck"
	}
	return reason
}

// addTimeLimit makes sel wake up when the job has run for its stop_timer
// (JobSpec.TimeLimit), counting every attempt's time since its start. A job
// without one arms nothing, so histories from before the field replay as
// they were.
func (j *job) addTimeLimit(ctx workflow.Context, sel workflow.Selector, on func(attempts.Event)) {
	limit := j.spec.TimeLimit
	if limit <= 0 {
		return
	}
	left := max(limit-j.runTime(workflow.Now(ctx)), 0)
	minutes := int(limit / time.Minute)
	timer := workflow.NewTimerWithOptions(ctx, left, workflow.TimerOptions{Summary: fmt.Sprintf("stop_timer: %d minutes of running", minutes)})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) != nil {
			return // the watch ended first
		}
		on(attempts.TimeLimitReached{Minutes: minutes})
	})
}

// runTime is how long the job's attempts have run, up to now.
func (j *job) runTime(now time.Time) time.Duration {
	var d time.Duration
	for _, a := range j.status.Attempts {
		switch {
		case a.StartedAt == nil:
		case a.EndedAt != nil:
			d += a.EndedAt.Sub(*a.StartedAt)
		default:
			d += now.Sub(*a.StartedAt)
		}
	}
	return d
}

// isNodeLost tells whether a watch ended because the worker's node lost
// track of it (a pod stuck in phase Unknown).
func isNodeLost(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeNodeLost
}

func isStuck(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeWorkerStuck
}

// notifyStuck reports a stuck job as an event when its health_params ask
// for it (sub_actions [notify]): a warning in trainq-worker's log, which
// names the job, and the jobs-stuck counter operators can alert on.
func (j *job) notifyStuck(ctx workflow.Context) {
	if j.spec.Health == nil || !j.spec.Health.Notify {
		return
	}
	workflow.GetLogger(ctx).Warn("job stuck: no worker wrote a log line for its health_params.log_period", "job", j.name,
		"log_period", j.spec.Health.LogPeriod, "action", j.spec.Health.Action, "workspace", j.spec.Workspace)
	j.metrics(ctx).Counter(metrics.JobsStuckInstrument).Inc(1)
}
