package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The demo plays the worked example of ML Space's priorities page on the
// `demo` allocation (four 2-GPU nodes), then shows a Jupyter server and a low
// job preempted by a high one and rerun under max_retry. Worker scripts wait
// on gate files that the demo opens, so that the story unfolds in the
// document's order.

const demoAllocation = "demo"

type demo struct {
	ctx     context.Context
	c       *client.Client
	cfg     *config.Config
	out     io.Writer
	json    bool
	region  string
	gates   string
	start   time.Time
	labels  map[string]string // job name -> label
	order   []string          // job names in the order they were submitted
	seen    map[string]demoSeen
	preempt map[string]bool
}

type demoSeen struct {
	state    protocol.JobState
	attempt  int
	released int
	reason   string
}

// demoEvent is one line of the timeline.
type demoEvent struct {
	At     float64 `json:"t_seconds"`
	Job    string  `json:"job,omitempty"`
	Label  string  `json:"label,omitempty"`
	Event  string  `json:"event"`
	Detail string  `json:"detail,omitempty"`
}

func playDemo(ctx context.Context, c *client.Client, cfg *config.Config, out io.Writer, jsonOut bool) error {
	region, _, err := cfg.Allocation("", demoAllocation)
	if err != nil {
		return fmt.Errorf("the demo needs an allocation named %q in the config: %w", demoAllocation, err)
	}
	gates, err := filepath.Abs(filepath.Join(cfg.DataDir, "demo", time.Now().UTC().Format("20060102-150405")))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(gates, 0o755); err != nil {
		return err
	}
	d := &demo{ctx: ctx, c: c, cfg: cfg, out: out, json: jsonOut, region: region.Name, gates: gates, start: time.Now(),
		labels: map[string]string{}, seen: map[string]demoSeen{}, preempt: map[string]bool{}}
	if v, err := c.Queue(ctx, d.region, demoAllocation); err == nil && (len(v.Running) > 0 || len(v.Waiting) > 0) {
		return fmt.Errorf("the demo allocation is busy (%d running, %d waiting); wait for those jobs or cancel them first", len(v.Running), len(v.Waiting))
	}
	if err := d.workedExample(); err != nil {
		return err
	}
	if err := d.notebookAndPreemption(); err != nil {
		return err
	}
	d.say("The demo is over. Every job above is a workflow in the Web UI: filter with TrainqAllocation=\"demo\".")
	return nil
}

func (d *demo) workedExample() error {
	d.say("Part 1 — the worked example: 8 GPUs on four 2-GPU nodes; Job 0 (low) and Job 1 (high) fill them.")
	// Job 0's workers, once told to stop, take their time (they wait for
	// their gate); Job 1's workers finish one at a time, as their gates open.
	slowToStop := fmt.Sprintf("trap '%s; echo stopped; exit 143' TERM; %s", d.gateLoop("job0"), d.announce("job0")+"while true; do sleep 0.05; done")
	job0, err := d.submit("Job 0", "low", 2, slowToStop, 0)
	if err != nil {
		return err
	}
	if err := d.until(job0, isState(protocol.StateRunning)); err != nil {
		return err
	}
	job1, err := d.submit("Job 1", "high", 2, d.announce("job1")+d.gateLoop("job1"), 0)
	if err != nil {
		return err
	}
	if err := d.until(job1, isState(protocol.StateRunning)); err != nil {
		return err
	}
	d.say("Job 2 (low) is submitted: nothing is free, and it may not preempt Job 0 (same class) or Job 1 (higher).")
	job2, err := d.submit("Job 2", "low", 1, "echo Job 2 ran; sleep 1", 0)
	if err != nil {
		return err
	}
	if err := d.until(job2, hasReason); err != nil {
		return err
	}
	d.say("Job 3 (medium) is submitted: it preempts Job 0 (low) and claims the 4 GPUs Job 0 is releasing. Job 0's workers stop slowly.")
	job3, err := d.submit("Job 3", "medium", 2, d.announce("job3")+d.gateLoop("job3"), 0)
	if err != nil {
		return err
	}
	if err := d.until(job3, func(st protocol.JobStatus) bool { return slices.Contains(st.WaitingFor, job0) }); err != nil {
		return err
	}
	d.say("Job 4 (high) is submitted. Nothing is free yet, and it may not preempt Job 1 (same class).")
	job4, err := d.submit("Job 4", "high", 1, d.announce("job4")+d.gateLoop("job4"), 0)
	if err != nil {
		return err
	}
	if err := d.until(job4, hasReason); err != nil {
		return err
	}
	d.say("Job 1 finishes, but its workers stop one at a time. Job 4 starts on the partially freed capacity; Job 3 keeps waiting for two whole nodes; Job 2 does not get ahead.")
	d.open("job1-w0")
	if err := d.until(job4, isState(protocol.StateRunning)); err != nil {
		return err
	}
	d.say("Job 0's workers have stopped: Job 3 starts on the two nodes they held.")
	d.open("job0-w0", "job0-w1")
	if err := d.until(job3, isState(protocol.StateRunning)); err != nil {
		return err
	}
	d.say("Job 1's last worker stops: now Job 2, older but lowest, runs.")
	d.open("job1-w1")
	if err := d.until(job2, isState(protocol.StateCompleted)); err != nil {
		return err
	}
	d.open("job3-w0", "job3-w1", "job4-w0")
	for _, j := range []string{job1, job3, job4} {
		if err := d.until(j, isState(protocol.StateCompleted)); err != nil {
			return err
		}
	}
	d.say("Start order: Job 0, Job 1, Job 4, Job 3, Job 2 — as the priorities page describes. Nothing ever started on capacity that was still being released.")
	return nil
}

func hasReason(st protocol.JobStatus) bool {
	return st.State == protocol.StatePending && st.Reason != ""
}

// announce is a script fragment in which a worker says where it runs.
func (d *demo) announce(job string) string {
	return fmt.Sprintf("echo worker $NODE_RANK of %s runs on $TRAINQ_NODE with CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; ", job)
}

// gateLoop is a script fragment that blocks until the worker's gate opens.
func (d *demo) gateLoop(job string) string {
	return fmt.Sprintf("while [ ! -e %s/%s-w$NODE_RANK ]; do sleep 0.05; done", d.gates, job)
}

func (d *demo) notebookAndPreemption() error {
	d.say("Part 2 — a Jupyter server (always high) and a low job preempted by a high one, then rerun (max_retry 1).")
	nb, err := d.submitSpec("Jupyter", protocol.JobSpec{Kind: scheduler.KindNotebook, Script: "exec sleep 100000", InstanceType: "a100.2gpu", NWorkers: 1, Type: "binary"})
	if err != nil {
		return err
	}
	if err := d.until(nb, isState(protocol.StateRunning)); err != nil {
		return err
	}
	victim := `if [ "$TRAINQ_ATTEMPT" = 1 ]; then trap 'echo "SIGTERM: saving a checkpoint and stopping"; exit 143' TERM; while true; do sleep 0.1; done; fi; echo "attempt $TRAINQ_ATTEMPT resumes and finishes"; sleep 2`
	low, err := d.submit("Low job", "low", 3, victim, 1)
	if err != nil {
		return err
	}
	if err := d.until(low, isState(protocol.StateRunning)); err != nil {
		return err
	}
	d.say("A high job needs three nodes: it preempts the low job, never the Jupyter server.")
	high, err := d.submit("High job", "high", 3, "echo urgent work; sleep 3", 0)
	if err != nil {
		return err
	}
	if err := d.until(high, isState(protocol.StateCompleted)); err != nil {
		return err
	}
	if err := d.until(low, isState(protocol.StateCompleted)); err != nil {
		return err
	}
	d.say("The low job completed on its second attempt. Stopping the Jupyter server.")
	if err := d.c.Cancel(d.ctx, nb); err != nil {
		return err
	}
	return d.until(nb, isState(protocol.StateStopped))
}

func (d *demo) open(names ...string) {
	for _, n := range names {
		_ = os.WriteFile(filepath.Join(d.gates, n), nil, 0o644)
	}
}

func (d *demo) submit(label, class string, workers int, script string, maxRetry int) (string, error) {
	return d.submitSpec(label, protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", NWorkers: workers, Type: "binary",
		PriorityClass: class, MaxRetry: maxRetry, JobDesc: "trainq demo: " + label})
}

func (d *demo) submitSpec(label string, spec protocol.JobSpec) (string, error) {
	spec.Region, spec.AllocationName, spec.Author = d.region, demoAllocation, "demo"
	sub, err := d.c.Submit(d.ctx, spec, client.SubmitOptions{})
	if err != nil {
		return "", fmt.Errorf("submit %s: %w", label, err)
	}
	d.labels[sub.JobName] = label
	d.order = append(d.order, sub.JobName)
	class := spec.PriorityClass
	if spec.Kind == scheduler.KindNotebook {
		class = "Jupyter server, always high"
	}
	d.emit(sub.JobName, "submitted", fmt.Sprintf("%s, %d×%s", class, spec.NWorkers, spec.InstanceType))
	return sub.JobName, nil
}

func isState(s protocol.JobState) func(protocol.JobStatus) bool {
	return func(st protocol.JobStatus) bool { return st.State == s }
}

// until polls the timeline until job satisfies cond, printing every change.
func (d *demo) until(job string, cond func(protocol.JobStatus) bool) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		statuses := d.poll()
		if st, ok := statuses[job]; ok {
			if cond(st) {
				return nil
			}
			if st.State.Terminal() && !cond(st) {
				return fmt.Errorf("%s ended %s unexpectedly: %s", d.labels[job], st.State, st.Message)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo stalled waiting for %s; is trainq-worker running?", d.labels[job])
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// poll reads every demo job and the allocation, and prints what changed.
func (d *demo) poll() map[string]protocol.JobStatus {
	out := map[string]protocol.JobStatus{}
	released := map[string]int{}
	if v, err := d.c.Queue(d.ctx, d.region, demoAllocation); err == nil {
		for _, r := range v.Running {
			released[r.Job] = len(r.Released)
		}
	}
	for _, job := range d.order {
		st, err := d.c.Status(d.ctx, job)
		if err != nil {
			continue
		}
		out[job] = st
		prev := d.seen[job]
		cur := demoSeen{state: st.State, attempt: st.Attempt, released: released[job], reason: st.Reason}
		if cur.released > prev.released && st.State != protocol.StatePending {
			d.emit(job, "released", fmt.Sprintf("%d of %d workers stopped; their GPUs are free", cur.released, st.NWorkers))
		}
		if cur.state != prev.state || cur.attempt != prev.attempt {
			d.emitState(job, st)
		} else if cur.state == protocol.StatePending && cur.reason != prev.reason && cur.reason != "" {
			d.emit(job, "waiting", fmt.Sprintf("#%d: %s", st.Position, d.relabel(st.Reason)))
		}
		d.seen[job] = cur
	}
	return out
}

func (d *demo) emitState(job string, st protocol.JobStatus) {
	rec := st.Attempts[len(st.Attempts)-1]
	switch st.State {
	case protocol.StatePending:
		detail := "queued"
		if st.Attempt > 1 {
			detail = fmt.Sprintf("queued again for attempt %d (keeps its place in the queue)", st.Attempt)
		}
		if st.Reason != "" {
			detail += fmt.Sprintf("; #%d: %s", st.Position, d.relabel(st.Reason))
		}
		d.emit(job, "queued", detail)
	case protocol.StateRunning:
		var nodes []string
		for _, p := range rec.Placement {
			nodes = append(nodes, fmt.Sprintf("%s GPUs %v", p.Node, p.GPUs))
		}
		d.emit(job, "started", fmt.Sprintf("attempt %d on %s", st.Attempt, strings.Join(nodes, ", ")))
	case protocol.StateRestarting:
		if rec.Preemptor != nil {
			d.emit(job, "preempted", fmt.Sprintf("by %s (%s); stopping gracefully, will rerun (%d/%d retries used)",
				d.label(rec.Preemptor.Job), rec.Preemptor.Class, st.Restarts, st.MaxRetry))
		} else {
			d.emit(job, "restarting", d.relabel(st.Message))
		}
	case protocol.StateCompleted, protocol.StateFailed, protocol.StateStopped, protocol.StatePreempted:
		d.emit(job, "finished", fmt.Sprintf("%s: %s", st.State, d.relabel(st.Message)))
	}
}

func (d *demo) label(job string) string {
	if l, ok := d.labels[job]; ok {
		return l
	}
	return job
}

// relabel replaces job names in a sentence by their demo labels.
func (d *demo) relabel(s string) string {
	names := make([]string, 0, len(d.labels))
	for n := range d.labels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s = strings.ReplaceAll(s, n, d.labels[n])
	}
	return s
}

func (d *demo) emit(job, event, detail string) {
	e := demoEvent{At: time.Since(d.start).Seconds(), Job: job, Label: d.label(job), Event: event, Detail: detail}
	if d.json {
		b, _ := json.Marshal(e)
		fmt.Fprintln(d.out, string(b))
		return
	}
	fmt.Fprintf(d.out, "%6.1fs  %-9s %-10s %s\n", e.At, e.Label, e.Event, e.Detail)
}

func (d *demo) say(text string) {
	if d.json {
		b, _ := json.Marshal(demoEvent{At: time.Since(d.start).Seconds(), Event: "note", Detail: text})
		fmt.Fprintln(d.out, string(b))
		return
	}
	fmt.Fprintf(d.out, "\n%s\n", text)
}

// runDemo is the `trainq demo` command.
func runDemo(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		return usageErr("demo takes no arguments")
	}
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	return playDemo(ctx, c, cfg, g.Stdout, g.json())
}
