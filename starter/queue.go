package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

func runQueue(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "queue")
	region := fs.String("region", "", "region (default: the config's default region)")
	pos, err := parseArgs(g, fs, args, 0, 1)
	if err != nil {
		return err
	}
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	r, a, err := cfg.Allocation(*region, name)
	if err != nil {
		return usageErr("%v", err)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	v, err := workflows.Queue(qctx, c, r.Name, a.Name)
	if err != nil {
		if ctx.Err() == nil && (qctx.Err() != nil || isDeadline(err)) {
			return fmt.Errorf("the allocator of %s/%s did not answer within %s; is trainq-worker running?", r.Name, a.Name, queryTimeout)
		}
		return err
	}
	if g.json() {
		return g.printJSON(v)
	}
	printQueue(g, v)
	return nil
}

func printQueue(g *globals, v protocol.QueueView) {
	w := g.Stdout
	total, free, allocated, releasing := 0, 0, 0, 0
	for _, n := range v.Nodes {
		total += n.GPUs
		free += n.FreeGPUs
		allocated += n.AllocatedGPUs
		releasing += n.ReleasingGPUs
	}
	fmt.Fprintf(w, "Allocation %s/%s: %d GPUs, %d free, %d allocated, %d releasing; %s, %s\n\n",
		v.Region, v.Allocation, total, free, allocated, releasing,
		plural(len(v.Running), "job running", "jobs running"), plural(waitingTotal(v), "waiting", "waiting"))

	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tFAMILY\tGPUS\tFREE\tALLOCATED\tRELEASING")
	for _, n := range v.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", n.Name, n.Family, n.GPUs, n.FreeGPUs, n.AllocatedGPUs, n.ReleasingGPUs)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nRunning:")
	if len(v.Running) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw = newTable(w)
		fmt.Fprintln(tw, "  JOB\tATTEMPT\tCLASS\tGPUS\tSTARTED\tSTATE\tPLACEMENT")
		for _, r := range v.Running {
			state := "running"
			if r.Releasing {
				state = fmt.Sprintf("releasing (%d of %d workers stopped)", len(r.Released), len(r.Placement))
				if r.PreemptedBy != nil {
					state += ", preempted by " + preemptor(r.PreemptedBy)
				}
			}
			class := r.Class.String()
			if r.Kind == "notebook" {
				class += " (Jupyter)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.Job, r.Attempt, class, r.GPUs,
				startedAt(r.StartedAt), state, placement(r.Placement))
		}
		tw.Flush()
	}

	if n := waitingTotal(v); n > len(v.Waiting) {
		fmt.Fprintf(w, "\nWaiting, in launch order (the first %d of %d):\n", len(v.Waiting), n)
	} else {
		fmt.Fprintln(w, "\nWaiting, in launch order:")
	}
	if len(v.Waiting) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	tw = newTable(w)
	fmt.Fprintln(tw, "  #\tJOB\tATTEMPT\tCLASS\tGPUS\tWAITING\tREASON")
	for _, q := range v.Waiting {
		class := q.Class.String()
		if q.Kind == "notebook" {
			class += " (Jupyter)"
		}
		reason := q.Reason
		if len(q.Nominated) > 0 {
			reason += " (capacity of " + strings.Join(q.Nominated, ", ") + " is reserved for it)"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%d\t%s\t%s\n", q.Position, q.Job, q.Attempt, class, q.GPUs,
			waited(q.SubmittedAt), orDash(reason))
	}
	tw.Flush()
}

func startedAt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return stamp(t) + " (" + human(time.Since(t)) + ")"
}

func waited(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return human(time.Since(t))
}

// waitingTotal counts every waiting job; the view lists only the head of a long queue.
func waitingTotal(v protocol.QueueView) int {
	return max(v.WaitingTotal, len(v.Waiting))
}
