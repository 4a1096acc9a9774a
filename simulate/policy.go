package simulate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// Knobs lists the policy knobs a spec may set, with what each means.
var Knobs = []struct{ Name, Help string }{
	{"queueing", "best-effort-fifo or strict-fifo"},
	{"min_runtime", "min_runtime_before_preemption: a job that has run less is never preempted (e.g. 1h)"},
	{"reserve_after", "the first request of a class that waited this long reserves nodes to drain for it (0: never)"},
	{"max_preemptions", "a job preempted this many times is not preempted again (0: the default, 3; -1: no limit)"},
	{"max_loss", "max_loss_gpu_hours: a job whose preemption would lose more GPU-hours of work is not preempted (0: the default, 24; -1: no limit)"},
	{"priorities", "on, or off: every job is submitted as medium (plain FIFO, no preemption)"},
	{"notice", "preemption_notice: a victim is told this long before it is stopped (0: none; default --notice)"},
	{"honor", "the share of jobs, 0 to 1, that save and exit when told (default --honor)"},
	{"honors_notice", "on, or off: requests never say HonorsNotice (the policy counts every victim's loss from its last checkpoint, as before)"},
	{"cap.CLASS", "each workspace's max GPUs held in CLASS (high, medium or low), e.g. cap.high=16 (limit CLASS.max_gpus for every workspace); none removes it; one knob per class"},
	{"cap.CLASS@WORKSPACE", "that workspace's own cap in CLASS, over cap.CLASS, e.g. cap.high@team-1=14"},
	{"ordering", "fifo (submission order within a class) or fair-share (least recently used workspace first; give jobs workspaces with --teams)"},
	{"half_life", "fair_share_half_life: how fast fair-share forgets usage (e.g. 24h; default 168h)"},
	{"starvation_after", "the first request of a class that waited this long may preempt lower-class jobs that max_loss and min_runtime protect, and those at max_preemptions once more (0: never, the default)"},
	{"topology", "on (default, with --racks): gangs are placed in the fewest racks, then blocks; off: as if the nodes had no topology"},
	{"required_topology", "rack or block (with --racks): every gang starts only inside one domain of that level, and waits or preempts for it"},
	{"defragment_after", "how long a gang that requires a level waits before it moves smaller jobs out of one domain (default 15m; never: it waits)"},
	{"preferred_topology", "rack or block (with --racks): gangs go to one domain of that level where one has room (rack: the default)"},
	{"loss_within_wait", "on: starvation and overruns may preempt past max_loss only jobs that lose at most the GPU-hours the preemptor has waited; off (default)"},
	{"strict_max_preemptions", "on: a starving request may not preempt a job at max_preemptions once more; off (default)"},
	{"backfill", "on: a reservation gets a start from the RunLimits of --estimates (give one model) and others start on its nodes only if they end by then; off (default)"},
}

// MaxNotice bounds a simulated notice, as config.MaxPreemptionNotice bounds preemption_notice.
const MaxNotice = time.Hour

// DefaultPolicies are compared when no policy is named: plain FIFO as the baseline, then the
// two queueing strategies with priorities.
var DefaultPolicies = []string{"fifo", "best-effort", "strict-fifo"}

// ParsePolicy reads a policy spec: a name, optionally followed by ":" and comma-separated
// knob=value settings, applied on top of base. The names fifo (no priorities), best-effort and
// strict-fifo preset the queueing; any other name starts from base as it is. Examples:
//
//	fifo
//	best-effort
//	strict-fifo
//	min1h:min_runtime=1h
//	strict-nopri:queueing=strict-fifo,priorities=off
func ParsePolicy(spec string, base scheduler.Policy) (Policy, error) {
	name, knobs, _ := strings.Cut(strings.TrimSpace(spec), ":")
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "=,") {
		return Policy{}, fmt.Errorf("policy %q has no name; write NAME[:knob=value,...]", spec)
	}
	p := Policy{Name: name, Scheduler: base}
	switch name {
	case "fifo":
		p.Scheduler.Queueing, p.NoPriorities = scheduler.BestEffortFIFO, true
	case "best-effort", "best-effort-fifo":
		p.Scheduler.Queueing = scheduler.BestEffortFIFO
	case "strict-fifo", "strict":
		p.Scheduler.Queueing = scheduler.StrictFIFO
	}
	for _, kv := range strings.Split(knobs, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return Policy{}, fmt.Errorf("policy %s: %q is not knob=value", name, kv)
		}
		if err := setKnob(&p, k, v); err != nil {
			return Policy{}, fmt.Errorf("policy %s: %s: %w", name, k, err)
		}
	}
	if _, err := scheduler.NewPool(nil, p.Scheduler); err != nil {
		return Policy{}, fmt.Errorf("policy %s: %w", name, err)
	}
	return p, nil
}

func knobDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 10m or 1h", v)
	}
	return d, nil
}

// knobOnOff reads a knob that is on or off.
func knobOnOff(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not on or off", v)
}

func setKnob(p *Policy, k, v string) error {
	var err error
	switch k {
	case "queueing":
		switch scheduler.Queueing(v) {
		case scheduler.BestEffortFIFO, scheduler.StrictFIFO:
			p.Scheduler.Queueing = scheduler.Queueing(v)
		default:
			return fmt.Errorf("%q is not best-effort-fifo or strict-fifo", v)
		}
	case "min_runtime", "min_runtime_before_preemption":
		p.Scheduler.MinRuntimeBeforePreemption, err = knobDuration(v)
	case "max_preemptions":
		n, perr := strconv.Atoi(v)
		if perr != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		p.Scheduler.MaxPreemptions = n
	case "max_loss", "max_loss_gpu_hours":
		n, perr := strconv.Atoi(v)
		if perr != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		p.Scheduler.MaxLossGPUHours = n
	case "reserve_after":
		p.Scheduler.ReserveAfter, err = knobDuration(v)
	case "starvation_after":
		p.Scheduler.StarvationAfter, err = knobDuration(v)
	case "backfill":
		p.Scheduler.Backfill, err = knobOnOff(v)
	case "loss_within_wait":
		p.Scheduler.LossWithinWait, err = knobOnOff(v)
	case "strict_max_preemptions":
		p.Scheduler.StrictMaxPreemptions, err = knobOnOff(v)
	case "ordering":
		switch o := scheduler.Ordering(v); o {
		case scheduler.SubmissionOrder, scheduler.FairShare:
			p.Scheduler.Ordering = o
		default:
			return fmt.Errorf("%q is not %s or %s", v, scheduler.SubmissionOrder, scheduler.FairShare)
		}
	case "half_life", "fair_share_half_life":
		p.Scheduler.FairShareHalfLife, err = knobDuration(v)
	case "notice", "preemption_notice":
		var d time.Duration
		if d, err = knobDuration(v); err == nil && d > MaxNotice {
			err = fmt.Errorf("%s is longer than %s", v, MaxNotice)
		}
		p.Scheduler.PreemptionNotice = d
	case "honor":
		f, perr := strconv.ParseFloat(v, 64)
		if perr != nil || !(f >= 0 && f <= 1) {
			return fmt.Errorf("%q is not a share between 0 and 1 (e.g. 0.8)", v)
		}
		p.Honor = &f
	case "honors_notice":
		var on bool
		on, err = knobOnOff(v)
		p.NoHonorsNotice = !on
	case "topology":
		var on bool
		on, err = knobOnOff(v)
		p.NoTopology = !on
	case "defragment_after":
		if v == "never" {
			p.Scheduler.DefragmentAfter = -1
			break
		}
		if p.Scheduler.DefragmentAfter, err = knobDuration(v); err == nil && p.Scheduler.DefragmentAfter == 0 {
			p.Scheduler.DefragmentAfter = scheduler.DefaultDefragmentAfter
		}
	case "required_topology", "preferred_topology":
		if v != LevelRack && v != LevelBlock {
			return fmt.Errorf("%q is not a level of --racks' topology: use %s or %s", v, LevelRack, LevelBlock)
		}
		p.GangTopology = scheduler.GangTopology{Level: v, Required: k == "required_topology"}
	case "priorities":
		var on bool
		on, err = knobOnOff(v)
		p.NoPriorities = !on
	default:
		if class, ok := strings.CutPrefix(k, "cap."); ok {
			return setCap(p, class, v)
		}
		names := make([]string, len(Knobs))
		for i, kn := range Knobs {
			names[i] = kn.Name
		}
		return fmt.Errorf("unknown knob; the knobs are %s", strings.Join(names, ", "))
	}
	return err
}

// setCap sets (or, for "none", removes) a GPU cap in a class: of every workspace, each on its own
// (cap.CLASS: the policy's Limit for workspace ""), or of one (cap.CLASS@WORKSPACE).
func setCap(p *Policy, class, v string) error {
	class, ws, at := strings.Cut(class, "@")
	c, err := scheduler.ParseClass(class)
	if err != nil || class == "" {
		return fmt.Errorf("%q is not a class: write cap.high, cap.medium or cap.low (or cap.high@WORKSPACE)", class)
	}
	if at && ws == "" {
		return errors.New("no workspace after @: write cap.CLASS@WORKSPACE, e.g. cap.high@team-1")
	}
	ls := slices.DeleteFunc(slices.Clone(p.Scheduler.Limits), func(l scheduler.Limit) bool { return l.Workspace == ws && l.Class == c })
	if v != "none" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a number of GPUs (a whole number, 0 or more) nor none", v)
		}
		ls = append(ls, scheduler.Limit{Workspace: ws, Class: c, MaxGPUs: n})
	}
	p.Scheduler.Limits = ls
	return nil
}

func limitText(n int) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// policyKnobs describes a scheduler policy's settings that differ from the zero Policy (limits:
// from their defaults).
func policyKnobs(p scheduler.Policy) []string {
	var out []string
	if p.MinRuntimeBeforePreemption > 0 {
		out = append(out, "min_runtime_before_preemption "+Dur(p.MinRuntimeBeforePreemption))
	}
	if n := p.MaxPreemptionsInEffect(); n != scheduler.DefaultMaxPreemptions {
		out = append(out, fmt.Sprintf("max_preemptions %s", limitText(n)))
	}
	if n := p.MaxLossGPUHoursInEffect(); n != scheduler.DefaultMaxLossGPUHours {
		out = append(out, fmt.Sprintf("max_loss_gpu_hours %s", limitText(n)))
	}
	if p.ReserveAfter > 0 {
		out = append(out, "reserve_after "+Dur(p.ReserveAfter))
	}
	if p.Backfill {
		out = append(out, "backfill")
	}
	if p.StarvationAfter > 0 {
		out = append(out, "starvation_after "+Dur(p.StarvationAfter))
	}
	if p.LossWithinWait {
		out = append(out, "loss_within_wait")
	}
	if p.StrictMaxPreemptions {
		out = append(out, "strict_max_preemptions")
	}
	if p.PreemptionNotice > 0 {
		out = append(out, "preemption_notice "+Dur(p.PreemptionNotice))
	}
	if p.Ordering == scheduler.FairShare {
		out = append(out, "ordering fair-share, half-life "+Dur(p.FairShareHalfLifeInEffect()))
	}
	if t := p.GangTopology.Text(); t != "" {
		out = append(out, t)
	}
	for _, l := range p.Limits {
		who := "per workspace"
		if l.Workspace != "" {
			who = "for " + l.Workspace
		}
		out = append(out, fmt.Sprintf("%s.max_gpus %d %s", l.Class, l.MaxGPUs, who))
	}
	return out
}
