package config

import (
	"fmt"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Limit caps what a workspace may have in one class of an allocation:
// max_gpus the GPUs it may hold (scheduler.Limit: its running jobs of that
// class plus the capacity nominated to its waiting ones; a job over the cap
// waits, and its reason names the cap), max_waiting the jobs it may have
// waiting (protocol.WaitingLimit: a submission past it is refused). Without
// a workspace, the limit caps every workspace, each on its own, that has no
// limit of its own for the class; each of the two caps falls back on its
// own.
type Limit struct {
	Workspace  string `json:"workspace,omitempty"`
	Class      string `json:"class"`
	MaxGPUs    *int   `json:"max_gpus,omitempty"`
	MaxWaiting *int   `json:"max_waiting,omitempty"`
}

// policyLimits is the allocation's limits as the scheduler takes them
// (they passed validateLimits).
func (a *Allocation) policyLimits() []scheduler.Limit {
	if len(a.Limits) == 0 {
		return nil
	}
	var out []scheduler.Limit
	for _, l := range a.Limits {
		if l.MaxGPUs != nil {
			c, _ := scheduler.ParseClass(l.Class)
			out = append(out, scheduler.Limit{Workspace: l.Workspace, Class: c, MaxGPUs: *l.MaxGPUs})
		}
	}
	return out
}

// WaitingLimits is the allocation's limits with max_waiting (they passed
// validateLimits).
func (a *Allocation) WaitingLimits() protocol.WaitingLimits {
	var out protocol.WaitingLimits
	for _, l := range a.Limits {
		if l.MaxWaiting != nil {
			c, _ := scheduler.ParseClass(l.Class)
			out = append(out, protocol.WaitingLimit{Workspace: l.Workspace, Class: c, MaxWaiting: *l.MaxWaiting})
		}
	}
	return out
}

// validateLimits checks an allocation's limits: a known class, a workspace
// name, a cap of 0 or more, one limit per workspace and class.
func (a *Allocation) validateLimits(field string) error {
	type key struct{ ws, class string }
	seen := map[key]bool{}
	for li, l := range a.Limits {
		lf := fmt.Sprintf("%s.limits[%d]", field, li)
		c, err := scheduler.ParseClass(l.Class)
		if err != nil || l.Class == "" {
			return fmt.Errorf("%s.class: %q is not a class; use low, medium or high", lf, l.Class)
		}
		if l.Workspace != "" && !protocol.ValidName(l.Workspace) {
			return fmt.Errorf("%s.workspace: %q is not a valid name (letters, digits, '-', '_', '.')", lf, l.Workspace)
		}
		if l.MaxGPUs == nil && l.MaxWaiting == nil {
			return fmt.Errorf("%s: say how many %s GPUs the workspace may hold (max_gpus), how many %s jobs it may have waiting (max_waiting), or both", lf, c, c)
		}
		if l.MaxGPUs != nil && *l.MaxGPUs < 0 {
			return fmt.Errorf("%s.max_gpus: must be 0 or more, got %d", lf, *l.MaxGPUs)
		}
		if l.MaxWaiting != nil && (*l.MaxWaiting < 0 || *l.MaxWaiting > MaxMaxWaiting) {
			return fmt.Errorf("%s.max_waiting: must be between 0 and %d, got %d", lf, MaxMaxWaiting, *l.MaxWaiting)
		}
		k := key{l.Workspace, c.String()}
		if seen[k] {
			who := "every workspace"
			if l.Workspace != "" {
				who = "workspace " + l.Workspace
			}
			return fmt.Errorf("%s: %s has a second %s limit in allocation %s", lf, who, c, a.Name)
		}
		seen[k] = true
	}
	return nil
}
