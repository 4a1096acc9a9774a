package protocol

import (
	"fmt"
	"strconv"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// NotebookShutdown is when a Jupyter server stops by itself, as ML Space's
// notebook autoshutdown rules say: by timer (ShutdownIn), by schedule
// (ShutdownAt), and when its server reports no activity for IdleTimeout.
// Each stop ends the server Stopped, with a reason that names the rule,
// after a warning Warning before (see WarningFor).
type NotebookShutdown struct {
	// ShutdownIn is ML Space's shutdown_in: the server is stopped after this
	// many seconds of running, counted over its attempts (nil: none; it
	// must be positive).
	ShutdownIn *int64 `json:"shutdown_in,omitempty"`
	// ShutdownAt is ML Space's shutdown_at: a 5-field cron expression (UTC);
	// the server is stopped at the first time it matches after the server
	// began running ("": none).
	ShutdownAt string `json:"shutdown_at,omitempty"`
	// IdleTimeout is the idle_timeout of the server's queue or allocation:
	// it is stopped once its Jupyter server's /api/status has said, for
	// this long, that nothing happened (0: never). IdleRule names where it
	// came from ("allocation X", "queue Q of allocation X").
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	IdleRule    string        `json:"idle_rule,omitempty"`
	// Warning is how long before a stop the user is warned: the queue's or
	// allocation's idle_warning (0: see WarningFor).
	Warning time.Duration `json:"warning,omitempty"`
}

// DefaultShutdownWarning is how long before an autoshutdown stop the user is
// warned when the allocation sets no idle_warning, for a stop at least four
// times as far away (nearer ones are warned a quarter of the way before).
const DefaultShutdownWarning = 5 * time.Minute

// MaxShutdownIn bounds shutdown_in (a year, in seconds): a Temporal timer
// needs a duration it can hold, and a longer timer is no timer.
const MaxShutdownIn = 366 * 24 * 3600

// WarningFor is how long before a stop that comes span after the start
// the user is warned: Warning when set (at most half of span), else
// DefaultShutdownWarning, at most a quarter of span.
func (n *NotebookShutdown) WarningFor(span time.Duration) time.Duration {
	if n != nil && n.Warning > 0 {
		return min(n.Warning, span/2)
	}
	return min(DefaultShutdownWarning, span/4)
}

// Any says whether a rule is set.
func (n *NotebookShutdown) Any() bool {
	return n != nil && (n.ShutdownIn != nil || n.ShutdownAt != "" || n.IdleTimeout > 0)
}

// ShutdownInDuration is ShutdownIn as a duration (0: none).
func (n *NotebookShutdown) ShutdownInDuration() time.Duration {
	if n == nil || n.ShutdownIn == nil {
		return 0
	}
	return time.Duration(*n.ShutdownIn) * time.Second
}

func (n *NotebookShutdown) shutdownInText() string {
	if n == nil || n.ShutdownIn == nil {
		return ""
	}
	return strconv.FormatInt(*n.ShutdownIn, 10) + "s"
}

func (n *NotebookShutdown) shutdownAtText() string {
	if n == nil || n.ShutdownAt == "" {
		return ""
	}
	return n.ShutdownAt + " (UTC)"
}

func (n *NotebookShutdown) idleText() string {
	if n == nil || n.IdleTimeout <= 0 {
		return ""
	}
	return fmt.Sprintf("%s (%s)", n.IdleTimeout, n.IdleRule)
}

// validate checks the request's own rules: shutdown_in positive seconds,
// shutdown_at a cron expression; only a Jupyter server has them.
func (n *NotebookShutdown) validate(kind scheduler.Kind) error {
	if n == nil {
		return nil
	}
	if kind != scheduler.KindNotebook && n.Any() {
		field := "shutdown_in"
		if n.ShutdownIn == nil {
			field = "shutdown_at"
		}
		return fieldErr(field, "only a Jupyter server (POST /notebooks, trainq notebook start) stops by autoshutdown; a job has stop_timer")
	}
	if n.ShutdownIn != nil && (*n.ShutdownIn < 1 || *n.ShutdownIn > MaxShutdownIn) {
		return fieldErr("shutdown_in", "must be a positive number of seconds, at most %d (a year), got %d", MaxShutdownIn, *n.ShutdownIn)
	}
	if n.ShutdownAt != "" {
		if _, err := ParseCron(n.ShutdownAt); err != nil {
			return fieldErr("shutdown_at", "%v", err)
		}
	}
	if n.IdleTimeout < 0 || n.Warning < 0 {
		return fieldErr("idle_timeout", "must not be negative")
	}
	return nil
}
