package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// versionAutoshutdown: a Jupyter server with autoshutdown rules
// (shutdown_in, shutdown_at, idle_timeout) is stopped by them, after a
// warning; asked only for such a server, so that no history from before
// the rules changes.
const versionAutoshutdown = "job-notebook-autoshutdown"

// idleWatchOptions are the idle watch's: it lasts until a verdict, which
// may be never (a server that is always used, or never answers); a dead
// agent is noticed by the heartbeat and the watch is tried again.
var idleWatchOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * 365 * 24 * time.Hour,
	HeartbeatTimeout:    15 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{MaximumInterval: 10 * time.Second,
		NonRetryableErrorTypes: []string{activities.ErrTypeUnsupported, activities.ErrTypeWorkerNotFound}},
}

// addAutoshutdown makes sel end a Jupyter server's attempt when one of its
// autoshutdown rules says so, as a time limit does (the job ends Stopped;
// its capacity is released worker by worker): at shutdown_in of running
// or at the next shutdown_at, and once its server has been idle for
// idle_timeout. Each stop is warned of first (see warn). stop decides the
// attempt's end unless something else did first.
func (j *job) addAutoshutdown(ctx workflow.Context, sel workflow.Selector, attempt int, grant protocol.GrantSignal, on func(attempts.Event)) {
	a := j.spec.Autoshutdown
	if j.spec.Kind != scheduler.KindNotebook || !a.Any() || len(grant.Placement) == 0 {
		return
	}
	if workflow.GetVersion(ctx, versionAutoshutdown, workflow.DefaultVersion, 1) < 1 {
		return
	}
	stop := func(message string) { on(attempts.Shutdown{Message: message}) }
	j.addShutdownTimer(ctx, sel, stop)
	if a.IdleTimeout > 0 {
		j.watchIdle(ctx, sel, attempt, grant.Placement[0], stop)
	}
}

// addShutdownTimer arms the nearer of shutdown_in (counted over the
// server's attempts, as stop_timer is) and the next shutdown_at after the
// server first ran, and a warning before it.
func (j *job) addShutdownTimer(ctx workflow.Context, sel workflow.Selector, stop func(string)) {
	a := j.spec.Autoshutdown
	now := workflow.Now(ctx)
	var at time.Time
	var rule, reason string
	if d := a.ShutdownInDuration(); d > 0 {
		at = now.Add(max(d-j.runTime(now), 0))
		rule = fmt.Sprintf("shutdown_in %ds", *a.ShutdownIn)
		reason = fmt.Sprintf("stopped: ran for %s (shutdown_in %ds)", d, *a.ShutdownIn)
	}
	if a.ShutdownAt != "" {
		if c, err := protocol.ParseCron(a.ShutdownAt); err == nil {
			from := now
			if j.status.RunningAt != nil {
				from = *j.status.RunningAt
			}
			if next := c.Next(from); !next.IsZero() && (at.IsZero() || next.Before(at)) {
				at = next
				rule = fmt.Sprintf("shutdown_at %q (UTC)", a.ShutdownAt)
				reason = fmt.Sprintf("stopped: shutdown_at %q came at %s UTC", a.ShutdownAt, next.UTC().Format("2006-01-02 15:04"))
			}
		}
	}
	if at.IsZero() {
		return
	}
	left := max(at.Sub(now), time.Millisecond)
	if lead := a.WarningFor(left); lead > 0 {
		warning := workflow.NewTimerWithOptions(ctx, left-lead, workflow.TimerOptions{Summary: "warn of the coming stop: " + rule})
		sel.AddFuture(warning, func(f workflow.Future) {
			if f.Get(ctx, nil) == nil {
				j.warn(ctx, fmt.Sprintf("this Jupyter server will be stopped at %s UTC, in %s (%s)",
					at.UTC().Format(time.TimeOnly), lead.Round(time.Second), rule))
			}
		})
	}
	timer := workflow.NewTimerWithOptions(ctx, left, workflow.TimerOptions{Summary: "autoshutdown: " + rule})
	sel.AddFuture(timer, func(f workflow.Future) {
		if f.Get(ctx, nil) == nil {
			stop(reason)
		}
	})
}

// watchIdle runs the idle watch of the server's worker (see
// activities.WatchNotebookIdle) on its node, one verdict at a time: a
// warning, then the stop or, once the server is used again, the warning
// lifted and a fresh watch. A watch that fails for good (a backend that
// cannot read the server) leaves the server running: being unable to tell
// is not being idle.
//
// Each verdict costs the history one activity (about six events with its
// workflow task); a verdict needs idle_timeout less idle_warning of
// idleness first, so a server whose user comes back at every warning adds
// some 12 events per such cycle, and nothing for the reads in between.
func (j *job) watchIdle(ctx workflow.Context, sel workflow.Selector, attempt int, p scheduler.WorkerPlacement, stop func(string)) {
	a := j.spec.Autoshutdown
	in := activities.WatchNotebookIdleInput{ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker},
		IdleTimeout: a.IdleTimeout, Warning: a.WarningFor(a.IdleTimeout), Rule: a.IdleRule}
	var watch func()
	watch = func() {
		summary := fmt.Sprintf("watch the Jupyter server on %s for %s idle (idle_timeout of %s)", p.Node, a.IdleTimeout, a.IdleRule)
		if in.Warned != nil {
			summary = fmt.Sprintf("warned: stop the Jupyter server on %s if it stays idle, or lift the warning", p.Node)
		}
		f := workflow.ExecuteActivity(j.nodeOptions(ctx, p.Node, summary, idleWatchOptions), (*activities.Activities).WatchNotebookIdle, in)
		sel.AddFuture(f, func(f workflow.Future) {
			var r activities.NotebookIdleReply
			if err := f.Get(ctx, &r); err != nil {
				if ctx.Err() == nil {
					workflow.GetLogger(ctx).Warn("cannot watch the Jupyter server for idleness; idle_timeout is not enforced for this attempt",
						"attempt", attempt, "error", err)
				}
				return
			}
			switch r.Verdict {
			case activities.IdleWarn:
				in.Warned = &r
				j.warn(ctx, fmt.Sprintf("idle since %s UTC: this Jupyter server will be stopped in %s, at about %s UTC, unless it is used (idle_timeout %s of %s)",
					r.LastActivity.UTC().Format(time.TimeOnly), max(r.Left, in.Warning).Round(time.Second),
					workflow.Now(ctx).Add(max(r.Left, in.Warning)).UTC().Format(time.TimeOnly), a.IdleTimeout, a.IdleRule))
			case activities.IdleActive:
				in.Warned = nil
				j.status.Warning = ""
				workflow.SetCurrentDetails(ctx, j.details())
			case activities.IdleStop:
				stop(fmt.Sprintf("stopped: idle for %s (idle_timeout of %s)", a.IdleTimeout, a.IdleRule))
				return
			default:
				workflow.GetLogger(ctx).Warn("unknown idle verdict; idle_timeout is not enforced for this attempt", "verdict", r.Verdict)
				return
			}
			watch()
		})
	}
	watch()
}

// warn tells the user that the running attempt is about to be stopped:
// the status's warning (trainq status, the REST API, the Web UI's
// details) and the attempt's record, which keeps it after the stop.
func (j *job) warn(ctx workflow.Context, text string) {
	now := workflow.Now(ctx)
	rec := j.current()
	rec.Warning, rec.WarnedAt = text, &now
	j.status.Warning = text
	workflow.GetLogger(ctx).Info("warned of a coming stop", "warning", text)
	workflow.SetCurrentDetails(ctx, j.details())
}
