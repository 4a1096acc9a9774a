package config

import (
	"fmt"
	"time"
)

// MinIdleTimeout is the shortest idle_timeout: the idle check reads a
// Jupyter server's /api/status about every idle_timeout/4 (at most every
// minute), and a shorter timeout would stop a server between two clicks.
const MinIdleTimeout = time.Second

// IdleRule is the idle_timeout that applies to the Jupyter servers of a
// queue: the queue's own when it sets one, else the allocation's.
type IdleRule struct {
	// Timeout 0: idle servers are not stopped.
	Timeout time.Duration
	// Warning is how long before the stop the user is warned (0: the
	// default, see protocol.NotebookShutdown.WarningFor).
	Warning time.Duration
	// Source names where Timeout comes from, for reasons: "allocation X"
	// or "queue Q of allocation X".
	Source string
}

// IdleRule is the idle rule of q's Jupyter servers (q one of a's queues).
func (a *Allocation) IdleRule(q Queue) IdleRule {
	r := IdleRule{Timeout: a.IdleTimeout.D(), Warning: a.IdleWarning.D(), Source: "allocation " + a.Name}
	if q.IdleTimeout != nil {
		r.Timeout, r.Source = q.IdleTimeout.D(), fmt.Sprintf("queue %s of allocation %s", q.Name, a.Name)
	}
	if q.IdleWarning != nil {
		r.Warning = q.IdleWarning.D()
	}
	if r.Timeout <= 0 {
		return IdleRule{}
	}
	return r
}

// validateIdle checks idle_timeout and idle_warning of the allocation and
// of each queue: a timeout of at least MinIdleTimeout (or 0: off), and a
// warning shorter than the timeout it warns of.
func (a *Allocation) validateIdle(field string) error {
	check := func(f string, timeout, warning *Duration) error {
		if timeout != nil && *timeout != 0 && timeout.D() < MinIdleTimeout {
			return fmt.Errorf("%s.idle_timeout: must be at least %s (or 0s: idle Jupyter servers are not stopped), got %s", f, MinIdleTimeout, timeout.D())
		}
		if warning != nil && *warning < 0 {
			return fmt.Errorf("%s.idle_warning: must not be negative, got %s", f, warning.D())
		}
		return nil
	}
	if err := check(field, &a.IdleTimeout, &a.IdleWarning); err != nil {
		return err
	}
	if r := a.IdleRule(Queue{}); a.IdleWarning > 0 && r.Timeout > 0 && r.Warning >= r.Timeout {
		return fmt.Errorf("%s.idle_warning: %s must be shorter than idle_timeout %s", field, r.Warning, r.Timeout)
	}
	for qi, q := range a.Queues {
		qf := fmt.Sprintf("%s.queues[%d]", field, qi)
		if err := check(qf, q.IdleTimeout, q.IdleWarning); err != nil {
			return err
		}
		if r := a.IdleRule(q); r.Warning > 0 && r.Warning >= r.Timeout {
			return fmt.Errorf("%s.idle_warning: %s must be shorter than the queue's idle_timeout %s (%s)", qf, r.Warning, r.Timeout, r.Source)
		}
	}
	return nil
}
