package config

import (
	"fmt"

	"github.com/trainq/trainq/scheduler"
)

// Limit caps the GPUs a workspace may hold in one class of an allocation
// (scheduler.Limit): its running jobs of that class plus the capacity
// nominated to its waiting ones. A job over the cap waits, and its reason
// names the cap; it is never refused for it. Without a workspace, the
// limit caps every workspace, each on its own, that has no limit of its
// own for the class.
type Limit struct {
	Workspace string `json:"workspace,omitempty"`
	Class     string `json:"class"`
	MaxGPUs   *int   `json:"max_gpus"`
}

// policyLimits is the allocation's limits as the scheduler takes them
// (they passed validateLimits).
func (a *Allocation) policyLimits() []scheduler.Limit {
	if len(a.Limits) == 0 {
		return nil
	}
	out := make([]scheduler.Limit, 0, len(a.Limits))
	for _, l := range a.Limits {
		c, _ := scheduler.ParseClass(l.Class)
		out = append(out, scheduler.Limit{Workspace: l.Workspace, Class: c, MaxGPUs: *l.MaxGPUs})
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
		if l.Workspace != "" && !validName(l.Workspace) {
			return fmt.Errorf("%s.workspace: %q is not a valid name (letters, digits, '-', '_', '.')", lf, l.Workspace)
		}
		if l.MaxGPUs == nil {
			return fmt.Errorf("%s.max_gpus: missing: say how many %s GPUs the workspace may hold", lf, c)
		}
		if *l.MaxGPUs < 0 {
			return fmt.Errorf("%s.max_gpus: must be 0 or more, got %d", lf, *l.MaxGPUs)
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
