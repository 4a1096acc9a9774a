package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
)

// Verdicts of WatchNotebookIdle.
const (
	// IdleWarn: the server has been idle for IdleTimeout less Warning; the
	// user is to be warned.
	IdleWarn = "warn"
	// IdleStop: warned, the server stayed idle for IdleTimeout; it is to be
	// stopped.
	IdleStop = "idle"
	// IdleActive: warned, the server was used again; the warning is off.
	IdleActive = "active"
)

// WatchNotebookIdleInput says which Jupyter server to watch, and for what.
type WatchNotebookIdleInput struct {
	ID cluster.WorkerID `json:"id"`
	// IdleTimeout is how long the server may be idle; Warning how long
	// before the stop the user is warned; Rule names where the timeout
	// comes from (for the log).
	IdleTimeout time.Duration `json:"idle_timeout"`
	Warning     time.Duration `json:"warning"`
	Rule        string        `json:"rule,omitempty"`
	// Warned, when set, is the reply that warned the user: the watch then
	// ends IdleActive once the server's last_activity is later than the
	// one it warned of (or a kernel is busy), or IdleStop once the server
	// has been idle for IdleTimeout and Warning has passed since the
	// warning, on the server's clock.
	Warned *NotebookIdleReply `json:"warned,omitempty"`
}

// NotebookIdleReply is how a watch ended.
type NotebookIdleReply struct {
	Verdict string `json:"verdict"`
	// LastActivity is the server's last_activity, and At the server's
	// clock, when it was read; IdleFor how long it had been idle then, and
	// Left how long it could stay idle before it would be stopped.
	LastActivity time.Time     `json:"last_activity"`
	At           time.Time     `json:"at"`
	IdleFor      time.Duration `json:"idle_for"`
	Left         time.Duration `json:"left"`
}

// idlePollInterval is how often WatchNotebookIdle reads the server's
// status: a quarter of the timeout or half the warning, whichever is less,
// between 250ms and a minute. The reads cost the workflow nothing; only a
// verdict does.
func idlePollInterval(in WatchNotebookIdleInput) time.Duration {
	d := in.IdleTimeout / 4
	if in.Warning > 0 {
		d = min(d, in.Warning/2)
	}
	return min(max(d, 250*time.Millisecond), time.Minute)
}

// idleVerdict judges one status read at now (this machine's clock, used
// only where the server sent no clock of its own): the verdict, or "" to
// go on watching.
func idleVerdict(in WatchNotebookIdleInput, st cluster.JupyterStatus, now time.Time) (NotebookIdleReply, bool) {
	idle := st.IdleFor(now)
	at := st.ServerTime
	if at.IsZero() {
		at = now
	}
	r := NotebookIdleReply{LastActivity: st.LastActivity, At: at, IdleFor: idle, Left: max(in.IdleTimeout-idle, 0)}
	if in.Warned == nil {
		if idle >= in.IdleTimeout-in.Warning {
			r.Verdict = IdleWarn
			return r, true
		}
		return r, false
	}
	if st.BusyKernels > 0 || st.LastActivity.After(in.Warned.LastActivity) {
		r.Verdict = IdleActive
		return r, true
	}
	// The warning stands for Warning at least, even if it came late (the
	// agent was down when the server crossed the threshold).
	if idle >= in.IdleTimeout && at.Sub(in.Warned.At) >= in.Warning {
		r.Verdict = IdleStop
		return r, true
	}
	return r, false
}

// WatchNotebookIdle watches a Jupyter server's own account of its
// activity (its /api/status last_activity, through the backend's
// cluster.NotebookProber) until the user is to be warned, the server is to
// be stopped, or, once warned, it was used again; it heartbeats meanwhile,
// so that however long the server stays busy, the job's history gets one
// event for the watch, not one per read.
//
// Idleness is measured on the server's clock (its Date header) from what
// the server says, so that a watch retried after this agent died, on any
// clock, judges the same as the first one. A server that does not answer
// (not started yet, not a Jupyter server, another token) is not idle: the
// watch goes on, and logs why it cannot tell. Only a backend without
// NotebookProber ends it, with a non-retryable ErrTypeUnsupported.
func (a *Activities) WatchNotebookIdle(ctx context.Context, in WatchNotebookIdleInput) (NotebookIdleReply, error) {
	if in.IdleTimeout <= 0 {
		return NotebookIdleReply{}, temporal.NewNonRetryableApplicationError("idle_timeout must be positive", ErrTypeUnsupported, nil)
	}
	prober, ok := a.Backend.(cluster.NotebookProber)
	if !ok {
		return NotebookIdleReply{}, temporal.NewNonRetryableApplicationError(
			"the cluster backend cannot read a Jupyter server's status: idle_timeout is not enforced", ErrTypeUnsupported, nil)
	}
	defer heartbeatEvery(ctx, "watching "+in.ID.String()+" for idleness")()
	log := activity.GetLogger(ctx)
	var lastErr string
	var lastLogged time.Time
	tick := time.NewTicker(idlePollInterval(in))
	defer tick.Stop()
	for {
		st, err := prober.NotebookStatus(ctx, in.ID)
		switch {
		case errors.Is(err, cluster.ErrNotFound):
			return NotebookIdleReply{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeWorkerNotFound, err)
		case err != nil && ctx.Err() != nil:
			return NotebookIdleReply{}, ctx.Err()
		case err != nil:
			// Not an answer: the server is not idle. Said once per kind of
			// failure, and again every ten minutes.
			if err.Error() != lastErr || time.Since(lastLogged) > 10*time.Minute {
				log.Warn("cannot read the Jupyter server's status; it is not counted as idle", "worker", in.ID.String(), "error", err)
				lastErr, lastLogged = err.Error(), time.Now()
			}
		default:
			lastErr = ""
			if r, done := idleVerdict(in, st, time.Now()); done {
				a.noteIdle(ctx, in, r)
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
			return NotebookIdleReply{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// noteIdle puts the verdict in the server's log, where its user looks.
func (a *Activities) noteIdle(ctx context.Context, in WatchNotebookIdleInput, r NotebookIdleReply) {
	n, ok := a.Backend.(cluster.LogNoter)
	if !ok {
		return
	}
	var line string
	switch r.Verdict {
	case IdleWarn:
		line = fmt.Sprintf("this Jupyter server has shown no activity since %s UTC: it will be stopped in %s unless it is used (idle_timeout %s of %s)",
			r.LastActivity.UTC().Format(time.DateTime), r.Left.Round(time.Second), in.IdleTimeout, in.Rule)
	case IdleActive:
		line = "this Jupyter server was used again: it will not be stopped for being idle now"
	case IdleStop:
		line = fmt.Sprintf("stopping this Jupyter server: idle for %s (idle_timeout of %s)", in.IdleTimeout, in.Rule)
	}
	if err := n.NoteLog(ctx, in.ID, line); err != nil {
		activity.GetLogger(ctx).Warn("could not write to the Jupyter server's log", "worker", in.ID.String(), "error", err)
	}
}
