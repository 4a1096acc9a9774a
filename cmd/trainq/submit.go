package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// decodeJobRequest strictly decodes one RunJobRequest JSON object into a
// JobSpec with the decoder the REST API uses too. Errors name the bad field.
// Notes say which fields are ignored.
func decodeJobRequest(data []byte, source string) (protocol.JobSpec, []string, error) {
	spec, notes, err := protocol.DecodeRunJobRequest(data)
	if err != nil {
		return spec, nil, jsonError(source, err)
	}
	return spec, notes, nil
}

// jsonError turns the decoder's errors into the CLI's sentences.
func jsonError(source string, err error) error {
	var je *protocol.JSONError
	if !errors.As(err, &je) {
		return err // a *protocol.FieldError
	}
	switch je.Reason {
	case protocol.JSONWrongType, protocol.JSONDuplicate:
		return &protocol.FieldError{Field: je.Field, Message: je.Message}
	case protocol.JSONSyntax:
		if je.Line > 0 {
			msg := je.Message
			if _, after, ok := strings.Cut(msg, ": "); ok {
				msg = after
			}
			return usageErr("%s:%d:%d: invalid JSON: %s", source, je.Line, je.Column, msg)
		}
	case protocol.JSONEmpty:
		return usageErr("%s is empty; it should hold one RunJobRequest JSON object", source)
	case protocol.JSONTrailingData:
		return usageErr("%s: unexpected data after the JSON object; give one job per file", source)
	}
	return usageErr("%s: %s", source, je.Message)
}

// readJobFile reads -f FILE ("-" is stdin).
func readJobFile(g *globals, path string) ([]byte, string, error) {
	if path == "-" {
		b, err := io.ReadAll(g.Stdin)
		return b, "stdin", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, path, usageErr("job file %s does not exist", path)
		}
		return nil, path, usageErr("cannot read job file: %v", err)
	}
	return b, path, nil
}

// submitOptions are what submit and notebook start share after parsing.
type submitOptions struct {
	name   string
	spec   protocol.JobSpec
	notes  []string
	dryRun bool
	// testOnly asks the allocator what the job would get, and starts nothing.
	testOnly bool
	wait     bool
}

func runSubmit(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "submit")
	var (
		file      = fs.String("f", "", "RunJobRequest JSON `file` (\"-\" reads stdin); flags override its fields")
		script    = fs.String("script", "", "script path, or a command line for --type binary")
		image     = fs.String("base-image", "", "container image (recorded; the local backend runs on this machine)")
		instance  = fs.String("instance-type", "", "per-worker instance type, e.g. a100plus.8gpu.80vG.96C.768G")
		region    = fs.String("region", "", "region (default: the config's default region)")
		alloc     = fs.String("allocation", "", "allocation (GPU pool) name (default: the config's default allocation)")
		nWorkers  = fs.Int("n-workers", 1, "number of workers, each on its own node")
		jobType   = fs.String("type", "", "job type: "+strings.Join(protocol.JobTypes, ", ")+" (default binary)")
		procs     procsFlag
		desc      = fs.String("job-desc", "", "free-text description")
		class     = fs.String("priority-class", "", "priority class: low, medium (default) or high")
		maxRetry  = fs.Int("max-retry", 0, "how many times the job is rerun after a failure or preemption (0..100)")
		timeLimit = fs.Duration("time-limit", 0, "stop the job after this long running, counted over its attempts, e.g. 90m (ML Space's stop_timer; 0: the allocation's default)")
		env       = kvFlag{name: "env"}
		flags     = kvFlag{name: "flag"}
		ckpt      = fs.String("checkpoint-dir", "", "checkpoint directory (default: one under the data dir, shared by attempts)")
		author    = fs.String("author", os.Getenv("USER"), "author recorded on the job")
		workspace = fs.String("workspace", "", "workspace recorded on the job")
		name      = fs.String("name", "", "job name (default lm-mpi-job-<uuid>); submitting a name twice starts one job")
		queue     = fs.String("queue", "", "the allocation's queue (ML Space's queue_name; default: its default queue)")
		include   = fs.String("include-nodes", "", "comma-separated nodes the workers may run on (ML Space's include_nodes)")
		exclude   = fs.String("exclude-nodes", "", "comma-separated nodes the workers must not run on (ML Space's exclude_nodes)")
		requireTo = fs.String("required-topology", "", "a topology `level` (e.g. rack) the gang's workers must share: they start only inside one domain of it")
		preferTo  = fs.String("preferred-topology", "", "a topology `level` the gang's workers should share where one domain has room")
		noMove    = fs.Bool("no-move", false, "never move this job out of a rack to make room for a gang that requires one (it then waits or runs where it is)")
		dryRun    = fs.Bool("dry-run", false, "validate and print the normalized job, start nothing (offline)")
		testOnly  = fs.Bool("test-only", false, "validate, then ask the allocator where the job would start now or whom it would preempt, or why it would wait; start nothing (as sbatch --test-only)")
		wait      = fs.Bool("wait", false, "after submitting, watch the job until it ends (exit code as for trainq watch)")
	)
	fs.Var(&procs, "processes-per-worker", "processes per worker: a number, or \"default\" (one per GPU)")
	fs.Var(&env, "env", "environment variable `KEY=VALUE` (repeatable)")
	fs.Var(&flags, "flag", "script flag `KEY=VALUE`, passed as --KEY=VALUE (repeatable)")
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	set := setFlags(fs)

	var spec protocol.JobSpec
	var notes []string
	if *file != "" {
		data, source, err := readJobFile(g, *file)
		if err != nil {
			return err
		}
		if spec, notes, err = decodeJobRequest(data, source); err != nil {
			return err
		}
	}
	// Flags given on the command line override the file.
	str := func(flag string, dst *string, v string) {
		if set[flag] {
			*dst = v
		}
	}
	str("script", &spec.Script, *script)
	str("base-image", &spec.BaseImage, *image)
	str("instance-type", &spec.InstanceType, *instance)
	str("region", &spec.Region, *region)
	str("allocation", &spec.AllocationName, *alloc)
	str("type", &spec.Type, *jobType)
	str("job-desc", &spec.JobDesc, *desc)
	str("priority-class", &spec.PriorityClass, *class)
	str("checkpoint-dir", &spec.CheckpointDir, *ckpt)
	str("queue", &spec.QueueName, *queue)
	for _, l := range []struct {
		flag  string
		value string
		dst   *[]string
	}{{"include-nodes", *include, &spec.IncludeNodes}, {"exclude-nodes", *exclude, &spec.ExcludeNodes}} {
		if set[l.flag] {
			*l.dst = nil
			for _, n := range strings.Split(l.value, ",") {
				if n = strings.TrimSpace(n); n != "" {
					*l.dst = append(*l.dst, n)
				}
			}
		}
	}
	if set["required-topology"] || set["preferred-topology"] {
		t, err := protocol.ParseGangTopology(*requireTo, *preferTo)
		if err != nil {
			return err
		}
		spec.Topology = t
	}
	if set["no-move"] {
		spec.NoMove = *noMove
	}
	if set["n-workers"] {
		if *nWorkers < 1 {
			return &protocol.FieldError{Field: "n_workers", Message: fmt.Sprintf("must be at least 1, got %d", *nWorkers)}
		}
		spec.NWorkers = *nWorkers
	}
	if set["processes-per-worker"] {
		spec.ProcessesPerWorker = procs.n
	}
	if set["max-retry"] {
		spec.MaxRetry = *maxRetry
	}
	if set["time-limit"] {
		if *timeLimit < 0 || *timeLimit > protocol.MaxStopTimerMinutes*time.Minute {
			return &protocol.FieldError{Field: "time_limit", Message: fmt.Sprintf("must be between 0 and %d minutes, got %s", protocol.MaxStopTimerMinutes, *timeLimit)}
		}
		spec.TimeLimit = *timeLimit
	}
	spec.EnvVariables = mergeMaps(spec.EnvVariables, env.m)
	spec.Flags = mergeMaps(spec.Flags, flags.m)
	spec.Author = *author
	spec.Workspace = *workspace
	spec.Kind = scheduler.KindJob
	jobFlags := 0
	for f := range set {
		switch f {
		case "config", "output", "o", "author", "workspace", "name", "dry-run", "test-only", "wait":
		default:
			jobFlags++
		}
	}
	if *file == "" && jobFlags == 0 {
		return usageErr("submit: give the job with -f job.json or with flags (at least --script and --instance-type); run `trainq help submit`")
	}
	if *dryRun && *testOnly {
		return usageErr("submit: give --dry-run (offline) or --test-only (asks the allocator), not both")
	}
	return submit(ctx, g, submitOptions{name: *name, spec: spec, notes: notes, dryRun: *dryRun, testOnly: *testOnly, wait: *wait})
}

func mergeMaps(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// submit validates the job against the configuration before dialing
// Temporal, so bad input fails fast and starts nothing.
func submit(ctx context.Context, g *globals, o submitOptions) error {
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	if o.name != "" {
		if err := cluster.ValidJobName(o.name); err != nil {
			return usageErr("--name: %v", err)
		}
	}
	checked, notes, err := client.CheckSpec(cfg, o.spec)
	if err != nil {
		return err
	}
	if o.dryRun {
		for _, n := range append(o.notes, notes...) {
			g.note("%s", n)
		}
		if g.json() {
			return g.printJSON(checked)
		}
		fmt.Fprintf(g.Stdout, "the job is valid (dry run, nothing started):\n")
		printSpec(g.Stdout, checked.JobSpec)
		return nil
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	if o.testOnly {
		return testOnly(ctx, g, c, checked, append(o.notes, notes...))
	}
	sub, err := c.SubmitChecked(ctx, checked, client.SubmitOptions{Name: o.name})
	if err != nil {
		return err
	}
	sub.Notes = append(append(o.notes, notes...), sub.Notes...)
	if g.json() {
		if err := g.printJSON(sub); err != nil {
			return err
		}
	} else {
		for _, n := range sub.Notes {
			g.note("%s", n)
		}
		fmt.Fprintln(g.Stdout, sub.JobName)
	}
	if o.wait {
		return watch(ctx, g, sub.JobName, false)
	}
	return nil
}

// testOnly prints what the allocator says the checked job would get now.
func testOnly(ctx context.Context, g *globals, c *client.Client, checked protocol.CheckedSpec, notes []string) error {
	d, err := c.DryRun(ctx, checked)
	if err != nil {
		return err
	}
	if g.json() {
		return g.printJSON(dryRunOutput(d))
	}
	for _, n := range notes {
		g.note("%s", n)
	}
	where := d.Region + "/" + d.Allocation
	if d.Idle {
		g.note("allocation %s has no allocator yet: this is the empty allocation's answer", where)
	}
	switch {
	case d.Start:
		var nodes []string
		for _, w := range d.Placement {
			nodes = append(nodes, fmt.Sprintf("%s (GPUs %s)", w.Node, joinInts(w.GPUs)))
		}
		fmt.Fprintf(g.Stdout, "would start now in %s on %s (test only, nothing started)\n", where, strings.Join(nodes, ", "))
	case len(d.Preempts) > 0:
		fmt.Fprintf(g.Stdout, "would preempt %s in %s and start once %s (test only, nothing started)\n",
			strings.Join(d.Preempts, ", "), where, plural(len(d.Preempts), "it stops", "they stop"))
		if d.Waiting != nil {
			fmt.Fprintf(g.Stdout, "  %s\n", d.Waiting.Reason)
		}
	case d.Waiting != nil:
		fmt.Fprintf(g.Stdout, "would wait in %s at position %d: %s (test only, nothing started)\n", where, d.Waiting.Position, d.Waiting.Reason)
	}
	if e := d.ExpectedStart; e != nil {
		fmt.Fprintf(g.Stdout, "  expected start  %s; %s\n", expectedWhen(e), e.Because)
	}
	return nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func printSpec(w io.Writer, s protocol.JobSpec) {
	tw := newTable(w)
	row := func(k string, v any) {
		if str := fmt.Sprint(v); str != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, str)
		}
	}
	row("kind", s.Kind)
	for _, f := range s.Fields() {
		row(f.Name, f.Value)
		if f.Name == "processes_per_worker" {
			row("gpus", s.GPUs())
		}
	}
	tw.Flush()
}

// Notebooks.

func runNotebook(ctx context.Context, g *globals, args []string) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "start":
		return runNotebookStart(ctx, g, args)
	case "stop":
		return runNotebookStop(ctx, g, args)
	case "":
		fs := newFlagSet(g, "notebook")
		if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
			return err
		}
		return usageErr("notebook: say start or stop; usage: trainq notebook start [flags] | trainq notebook stop NAME")
	}
	return usageErr("notebook: %q is not a notebook command; use start or stop", sub)
}

func runNotebookStart(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "notebook start")
	var (
		instance = fs.String("instance-type", "", "instance type (default: one GPU of the allocation's first GPU node family, e.g. a100.1gpu)")
		region   = fs.String("region", "", "region (default: the config's default region)")
		alloc    = fs.String("allocation", "", "allocation (default: the config's default allocation)")
		script   = fs.String("script", protocol.NotebookScript, "command the server runs")
		image    = fs.String("base-image", "", "container image (recorded)")
		class    = fs.String("priority-class", "", "ignored unless high: Jupyter servers always run with high priority")
		desc     = fs.String("job-desc", "", "free-text description")
		author   = fs.String("author", os.Getenv("USER"), "author recorded on the server")
		name     = fs.String("name", "", "server name (default jupyter-<uuid>)")
		dryRun   = fs.Bool("dry-run", false, "validate and print the normalized request, start nothing")
		queue    = fs.String("queue", "", "the allocation's queue (ML Space's queue_name; default: its default queue)")
		in       = fs.String("shutdown-in", "", "stop the server after this long running: `seconds` (ML Space's shutdown_in, e.g. 3600) or a duration such as 90m")
		at       = fs.String("shutdown-at", "", "stop the server when this 5-field `cron` expression (UTC) next matches (ML Space's shutdown_at, e.g. \"0 20 * * 1-5\")")
		env      = kvFlag{name: "env"}
	)
	fs.Var(&env, "env", "environment variable `KEY=VALUE` (repeatable)")
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	var shutdownIn *int64
	if setFlags(fs)["shutdown-in"] {
		secs, err := parseShutdownIn(*in)
		if err != nil {
			return usageErr("--shutdown-in: %v", err)
		}
		shutdownIn = &secs
	}
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	spec := client.NotebookSpec(cfg, client.NotebookRequest{
		Script: *script, BaseImage: *image, InstanceType: *instance, Region: *region, AllocationName: *alloc,
		PriorityClass: *class, JobDesc: *desc, EnvVariables: env.m, Author: *author,
		QueueName: *queue, ShutdownIn: shutdownIn, ShutdownAt: *at,
	})
	return submit(ctx, g, submitOptions{name: *name, spec: spec, dryRun: *dryRun})
}

// parseShutdownIn reads --shutdown-in: whole seconds ("3600", as ML Space's
// shutdown_in) or a duration of whole seconds ("90m"). Whether it is
// positive is checked with the request (shutdown_in).
func parseShutdownIn(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is neither seconds (e.g. 3600) nor a duration (e.g. 90m)", v)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%q is not a whole number of seconds", v)
	}
	return int64(d / time.Second), nil
}

func runNotebookStop(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "notebook stop")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	return cancel(ctx, g, pos[0])
}
