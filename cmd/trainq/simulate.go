package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
	"github.com/trainq/trainq/simulate"
)

// simFlags are trainq simulate's flags.
type simFlags struct {
	trace, pods, nodeList, times, workload, alloc, region, classes, only, flood *string
	estimates                                                                   *string
	etaSample                                                                   *float64
	etaSeed                                                                     *uint64
	rateWindow                                                                  *time.Duration
	nodes, minGPUs, teams, racks, blocks                                        *int
	cohort, lendingLimit, borrowingLimit                                        *int
	cohortSeed                                                                  *uint64
	frac, gangs                                                                 *float64
	gangSeed                                                                    *uint64
	stop, ckpt, notice, save                                                    *time.Duration
	honor                                                                       *float64
	honorSeed, teamSeed                                                         *uint64
	retry                                                                       *int
	burst, eventsOnly                                                           *bool
	policies                                                                    specsFlag
}

func defineSimFlags(fs *flag.FlagSet) *simFlags {
	f := &simFlags{
		trace:          fs.String("trace", os.Getenv("TRAINQ_TRACE_DIR"), "`dir`ectory of the Alibaba GPU v2023 openb CSVs (default $TRAINQ_TRACE_DIR)"),
		pods:           fs.String("pods", "default", "openb pod `list`: default, multigpu50, or a CSV path"),
		nodeList:       fs.String("node-list", "", "openb node list CSV (default: openb_node_list_gpu_node.csv in --trace)"),
		times:          fs.String("times", "", "pod list with qos and times, for a pod list without them (default: openb_pod_list_default.csv in --trace)"),
		workload:       fs.String("workload", "", "our own workload `file` (.json or .csv: id, arrival, class, instance_type, n_workers, runtime, optional kind, nodes and workspace) instead of the trace"),
		alloc:          fs.String("allocation", "", "take nodes (for --workload without nodes) and the base policy from this config allocation"),
		region:         fs.String("region", "", "region of --allocation (default: the config's)"),
		nodes:          fs.Int("nodes", 0, "keep N nodes, chosen evenly over the node list"),
		frac:           fs.Float64("nodes-frac", 0, "keep this fraction of the nodes, chosen evenly (e.g. 0.01)"),
		classes:        fs.String("classes", "LS=high,Guaranteed=medium,Burstable=medium,BE=low", "openb qos to priority class"),
		only:           fs.String("only", "", "keep only the jobs of these `classes` (e.g. high, or high,medium): the best any policy could do for them"),
		minGPUs:        fs.Int("min-gpus", 0, "keep only the jobs of at least `N` GPUs: the best any policy could do for them"),
		stop:           fs.Duration("stop-delay", 30*time.Second, "how long a preempted job's workers take to stop"),
		ckpt:           fs.Duration("checkpoint", 0, "a preempted job resumes from its last checkpoint, taken this often (0: it reruns from zero)"),
		notice:         fs.Duration("notice", 0, "preemption_notice: a victim is told this long before it is stopped (default: --allocation's, else 0: none)"),
		honor:          fs.Float64("honor", 0, "the `share` of jobs (0 to 1) that honour a notice: told, they save and exit --save-time later, losing nothing"),
		save:           fs.Duration("save-time", simulate.DefaultSaveTime, "how long a job that honours a notice takes to save and exit (shorter than --notice)"),
		honorSeed:      fs.Uint64("honor-seed", 1, "which jobs honour notices: a hash of this `seed` and the job id"),
		retry:          fs.Int("max-retry", -1, "reruns a job gets after preemptions (negative: unlimited)"),
		burst:          fs.Bool("burst", false, "every job arrives at time 0, in arrival order"),
		eventsOnly:     fs.Bool("events-only", false, "schedule after events only, without the allocator's wake timer (by default passes also run when the pool's next time-driven change comes, as in the allocator)"),
		teams:          fs.Int("teams", 0, "put every job without a workspace in one of `N` synthetic teams, team-1..team-N, by a hash of --team-seed and its id (the policies' cap.CLASS knobs cap each)"),
		teamSeed:       fs.Uint64("team-seed", 1, "which team each job is in (--teams): a hash of this `seed` and the job id"),
		racks:          fs.Int("racks", 0, "put the nodes in racks of up to `N` nodes of one family, and the racks in blocks (--blocks): the policies place gangs in the fewest racks, then blocks (knob topology=off: as without)"),
		blocks:         fs.Int("blocks", 4, "racks per block, with --racks"),
		gangs:          fs.Float64("gangs", 0, "make this `share` of the whole-node jobs gangs of 2 to 4 workers, each running for its runtime ÷ workers (the same GPU-hours)"),
		gangSeed:       fs.Uint64("gang-seed", 1, "which jobs --gangs makes gangs, and their sizes: a hash of this `seed` and the job id"),
		flood:          fs.String("flood-team", "", "this `workspace` (e.g. team-1) submits all its jobs high"),
		estimates:      fs.String("estimates", "learned", "runtime estimates that backfill decides by and whose expected starts are measured, comma-separated `models`: learned (p90 of the last 20 completed jobs of the same shape, what a cluster has; the default), limit:Kx (a time limit K × the true runtime, e.g. limit:2x), exact (the true runtime: an upper bound no cluster reaches); none: no estimates, nothing measured"),
		etaSample:      fs.Float64("eta-sample", 1, "measure the expected starts of this `share` of the jobs (0 to 1), drawn from a hash of --eta-seed and the job id"),
		etaSeed:        fs.Uint64("eta-seed", 1, "which jobs --eta-sample measures: a hash of this `seed` and the job id"),
		rateWindow:     fs.Duration("rate-window", simulate.DefaultRateWindow, "the position÷rate baseline's admission rate is the starts over this last `window`"),
		cohort:         fs.Int("cohort", 0, "split the nodes and jobs into `N` allocations (each every N-th node of each kind, the jobs by a hash of --cohort-seed and their id) and compare them as islands with the same allocations in a cohort that lends idle nodes"),
		cohortSeed:     fs.Uint64("cohort-seed", 1, "which allocation of --cohort each job is in: a hash of this `seed` and the job id"),
		lendingLimit:   fs.Int("lending-limit", simulate.NoLimit, "with --cohort, the `GPUs` of its own nodes each allocation may lend at once (-1: no limit)"),
		borrowingLimit: fs.Int("borrowing-limit", simulate.NoLimit, "with --cohort, the `GPUs` of others' nodes each allocation may hold at once (-1: no limit)"),
	}
	fs.Var(&f.policies, "policy", "a policy to compare, `NAME[:knob=value,...]` (repeatable; default fifo, best-effort, strict-fifo); knobs: "+knobList())
	return f
}

// runSimulate replays a workload through the scheduler under each policy and prints the tables.
func runSimulate(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "simulate")
	f := defineSimFlags(fs)
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	set := setFlags(fs)
	if set["nodes"] && set["nodes-frac"] {
		return usageErr("simulate: give --nodes or --nodes-frac, not both")
	}
	if set["teams"] && *f.teams < 1 {
		return usageErr("simulate: --teams must be at least 1, got %d", *f.teams)
	}
	if set["team-seed"] && !set["teams"] {
		return usageErr("simulate: --team-seed needs --teams")
	}
	if set["racks"] && *f.racks < 1 || *f.blocks < 1 {
		return usageErr("simulate: --racks and --blocks must be at least 1, got %d and %d", *f.racks, *f.blocks)
	}
	if set["blocks"] && !set["racks"] {
		return usageErr("simulate: --blocks needs --racks")
	}
	if !(*f.gangs >= 0 && *f.gangs <= 1) {
		return usageErr("simulate: --gangs must be a share from 0 to 1, got %g", *f.gangs)
	}
	if set["gang-seed"] && !set["gangs"] {
		return usageErr("simulate: --gang-seed needs --gangs")
	}
	if err := f.checkNotice(); err != nil {
		return err
	}
	if err := f.checkCohort(set); err != nil {
		return err
	}
	ests, err := simulate.ParseEstimates(*f.estimates)
	if err != nil {
		return usageErr("simulate: --estimates: %v", err)
	}
	if !(*f.etaSample > 0 && *f.etaSample <= 1) {
		return usageErr("simulate: --eta-sample must be a share above 0 and at most 1, got %g", *f.etaSample)
	}
	if *f.rateWindow <= 0 {
		return usageErr("simulate: --rate-window must be positive, got %s", *f.rateWindow)
	}
	base, allocNodes, err := f.allocation(g)
	if err != nil {
		return err
	}
	if set["notice"] {
		base.PreemptionNotice = *f.notice
	}
	w, err := f.loadWorkload(g, allocNodes, set)
	if err != nil {
		return err
	}
	pols, err := f.parsePolicies(base)
	if err != nil {
		return err
	}
	opt := simulate.Options{StopDelay: *f.stop, Checkpoint: *f.ckpt, MaxRetry: *f.retry, Burst: *f.burst, EventsOnly: *f.eventsOnly,
		Honor: *f.honor, SaveTime: *f.save, HonorSeed: *f.honorSeed, Estimates: ests, RateWindow: *f.rateWindow}
	if ests != nil {
		opt.ETASample, opt.ETASeed = *f.etaSample, *f.etaSeed
	}
	for _, p := range pols {
		if n := p.Scheduler.PreemptionNotice; n > 0 && p.HonorShare(opt) > 0 && !p.NoPriorities && *f.save >= n {
			return usageErr("simulate: --save-time %s must be shorter than the notice %s (policy %s)", *f.save, n, p.Name)
		}
	}
	if !g.json() {
		for _, n := range w.Notes {
			g.note("%s", n)
		}
	}
	if *f.cohort > 0 {
		return runCohorts(ctx, g, w, pols, opt, simulate.CohortOptions{Members: *f.cohort, Seed: *f.cohortSeed,
			LendingLimit: *f.lendingLimit, BorrowingLimit: *f.borrowingLimit})
	}
	results, err := runPolicies(ctx, g, w, pols, opt)
	if err != nil {
		return err
	}
	if g.json() {
		return g.printJSON(struct {
			Notes   []string           `json:"notes,omitempty"`
			Results []*simulate.Result `json:"results"`
		}{w.Notes, results})
	}
	simulate.WriteMarkdown(g.Stdout, results)
	return nil
}

// checkCohort validates --cohort and the flags that need it.
func (f *simFlags) checkCohort(set map[string]bool) error {
	switch {
	case set["cohort"] && *f.cohort < 2:
		return usageErr("simulate: --cohort must be at least 2 allocations, got %d", *f.cohort)
	case !set["cohort"] && (set["cohort-seed"] || set["lending-limit"] || set["borrowing-limit"]):
		return usageErr("simulate: --cohort-seed, --lending-limit and --borrowing-limit need --cohort")
	case *f.lendingLimit < simulate.NoLimit || *f.borrowingLimit < simulate.NoLimit:
		return usageErr("simulate: --lending-limit and --borrowing-limit are GPUs (0 or more), or -1 for no limit; got %d and %d", *f.lendingLimit, *f.borrowingLimit)
	case set["cohort"] && set["teams"]:
		return usageErr("simulate: --cohort puts the jobs in its allocations; give it without --teams")
	}
	return nil
}

// runCohorts replays the workload's allocations as islands and as a cohort under each policy.
func runCohorts(ctx context.Context, g *globals, w *simulate.Workload, pols []simulate.Policy, opt simulate.Options, co simulate.CohortOptions) error {
	var results []*simulate.CohortResult
	for _, p := range pols {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		r, err := simulate.RunCohort(w, p, opt, co)
		if err != nil {
			return fmt.Errorf("simulate %s: %w", p.Name, err)
		}
		if !g.json() {
			g.note("%s: islands and cohort simulated in %s", p.Name, time.Since(start).Round(time.Millisecond))
		}
		results = append(results, r)
	}
	if g.json() {
		return g.printJSON(struct {
			Notes   []string                 `json:"notes,omitempty"`
			Cohorts []*simulate.CohortResult `json:"cohorts"`
		}{w.Notes, results})
	}
	simulate.WriteCohortMarkdown(g.Stdout, w, results)
	return nil
}

// checkNotice validates --notice, --honor and --save-time.
func (f *simFlags) checkNotice() error {
	switch {
	case *f.notice < 0 || *f.notice > simulate.MaxNotice:
		return usageErr("simulate: --notice must be between 0 and %s, got %s", simulate.MaxNotice, *f.notice)
	case !(*f.honor >= 0 && *f.honor <= 1):
		return usageErr("simulate: --honor must be a share between 0 and 1 (e.g. 0.8), got %g", *f.honor)
	case *f.save <= 0:
		return usageErr("simulate: --save-time must be positive, got %s", *f.save)
	}
	return nil
}

// allocation is the base policy (and the nodes) of --allocation, or the defaults without it.
func (f *simFlags) allocation(g *globals) (scheduler.Policy, []scheduler.Node, error) {
	base := scheduler.Policy{Queueing: scheduler.BestEffortFIFO, ReserveAfter: 30 * time.Minute}
	if *f.alloc == "" {
		return base, nil, nil
	}
	cfg, err := g.Config()
	if err != nil {
		return base, nil, err
	}
	_, a, err := cfg.Allocation(*f.region, *f.alloc)
	if err != nil {
		return base, nil, usageErr("simulate: %v", err)
	}
	pol := a.Policy()
	pol.PreemptionNotice = a.PreemptionNotice.D()
	return pol, a.Nodes, nil
}

// loadWorkload reads --workload (on the allocation's nodes if it has none) or the trace, and
// shrinks its node list as --nodes or --nodes-frac say.
func (f *simFlags) loadWorkload(g *globals, allocNodes []scheduler.Node, set map[string]bool) (*simulate.Workload, error) {
	only, err := parseOnly(*f.only)
	if err != nil {
		return nil, usageErr("simulate: --only: %v", err)
	}
	var w *simulate.Workload
	switch {
	case *f.workload != "":
		w, err = loadOwnWorkload(*f.workload)
		if err == nil && len(w.Nodes) == 0 {
			if allocNodes == nil {
				cfg, cerr := g.Config()
				if cerr != nil {
					return nil, cerr
				}
				_, a, aerr := cfg.Allocation(*f.region, "")
				if aerr != nil {
					return nil, usageErr("simulate: %v", aerr)
				}
				allocNodes = a.Nodes
			}
			w.Nodes = allocNodes
		}
	default:
		w, err = loadTrace(*f.trace, *f.pods, *f.nodeList, *f.times, *f.classes)
	}
	if err != nil {
		return nil, usageErr("simulate: %v", err)
	}
	switch {
	case set["nodes"]:
		err = w.Shrink(*f.nodes)
	case set["nodes-frac"]:
		err = w.ShrinkFrac(*f.frac)
	}
	if err != nil {
		return nil, usageErr("simulate: %v", err)
	}
	if *f.racks > 0 {
		if err := w.Rack(*f.racks, *f.blocks); err != nil {
			return nil, usageErr("simulate: --racks: %v", err)
		}
	}
	if *f.gangs > 0 {
		if err := w.Gangs(*f.gangs, *f.gangSeed); err != nil {
			return nil, usageErr("simulate: --gangs: %v", err)
		}
	}
	if *f.teams > 0 {
		if err := w.AssignTeams(*f.teams, *f.teamSeed); err != nil {
			return nil, usageErr("simulate: --teams: %v", err)
		}
	}
	if *f.flood != "" {
		if err := w.Flood(*f.flood); err != nil {
			return nil, usageErr("simulate: --flood-team %s: %v", *f.flood, err)
		}
	}
	if only != nil {
		w.KeepClasses(only)
	}
	if *f.minGPUs > 0 {
		w.KeepMinGPUs(*f.minGPUs)
	}
	return w, nil
}

func (f *simFlags) parsePolicies(base scheduler.Policy) ([]simulate.Policy, error) {
	specs := f.policies
	if len(specs) == 0 {
		specs = simulate.DefaultPolicies
	}
	var pols []simulate.Policy
	for _, spec := range specs {
		p, err := simulate.ParsePolicy(spec, base)
		if err != nil {
			return nil, usageErr("simulate: %v", err)
		}
		pols = append(pols, p)
	}
	return pols, nil
}

// runPolicies simulates w under each policy in turn.
func runPolicies(ctx context.Context, g *globals, w *simulate.Workload, pols []simulate.Policy, opt simulate.Options) ([]*simulate.Result, error) {
	var results []*simulate.Result
	for _, p := range pols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		r, err := simulate.Run(w, p, opt)
		if err != nil {
			return nil, fmt.Errorf("simulate %s: %w", p.Name, err)
		}
		if !g.json() {
			g.note("%s: simulated in %s", p.Name, time.Since(start).Round(time.Millisecond))
		}
		results = append(results, r)
	}
	return results, nil
}

// specsFlag is a repeatable flag whose values may contain commas.
type specsFlag []string

func (f *specsFlag) String() string { return strings.Join(*f, " ") }

func (f *specsFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}

func knobList() string {
	var names []string
	for _, k := range simulate.Knobs {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

func loadOwnWorkload(path string) (*simulate.Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		return simulate.LoadCSV(path, f)
	}
	return simulate.LoadJSON(path, f)
}

// loadTrace reads an openb pod list (a name such as "default" or a path) and the node list.
func loadTrace(dir, pods, nodeList, times, classSpec string) (*simulate.Workload, error) {
	in := func(name string) (string, error) {
		if dir == "" {
			return "", fmt.Errorf("give --trace DIR (the Alibaba GPU v2023 openb CSVs), or --workload FILE")
		}
		return filepath.Join(dir, name), nil
	}
	var err error
	if !strings.ContainsAny(pods, "/.") {
		if pods, err = in("openb_pod_list_" + pods + ".csv"); err != nil {
			return nil, err
		}
	}
	if nodeList == "" {
		if nodeList, err = in("openb_node_list_gpu_node.csv"); err != nil {
			return nil, err
		}
	}
	classes, err := simulate.ParseClasses(classSpec)
	if err != nil {
		return nil, fmt.Errorf("--classes: %v", err)
	}
	pf, err := os.Open(pods)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	nf, err := os.Open(nodeList)
	if err != nil {
		return nil, err
	}
	defer nf.Close()
	o := simulate.OpenB{Pods: pf, PodsName: filepath.Base(pods), Nodes: nf, NodeName: filepath.Base(nodeList), Classes: classes}
	if times == "" && dir != "" {
		if t := filepath.Join(dir, "openb_pod_list_default.csv"); t != pods {
			times = t
		}
	}
	if times != "" && times != pods {
		tf, err := os.Open(times)
		if err != nil {
			return nil, err
		}
		defer tf.Close()
		o.Times, o.TimesName = tf, filepath.Base(times)
	}
	return simulate.LoadOpenB(o)
}

// parseOnly parses --only: priority classes separated by commas (none: nil).
func parseOnly(s string) ([]scheduler.Class, error) {
	if s == "" {
		return nil, nil
	}
	var out []scheduler.Class
	for _, v := range strings.Split(s, ",") {
		c, err := scheduler.ParseClass(strings.TrimSpace(v))
		if err != nil || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("%q is not low, medium or high", v)
		}
		out = append(out, c)
	}
	return out, nil
}
