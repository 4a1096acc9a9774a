package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func runQueue(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "queue")
	region := fs.String("region", "", "region (default: the config's default region)")
	limit := fs.Int("limit", protocol.DefaultQueuePageLimit, fmt.Sprintf("list at most this many waiting jobs (1 to %d)", protocol.MaxQueuePageLimit))
	offset := fs.Int("offset", 0, "skip this many waiting jobs (in launch order)")
	eta := fs.Bool("eta", false, "also show when each listed job is expected to start, and on what assumption (the allocator plays its pool forward: running jobs end by their time limits)")
	pos, err := parseArgs(g, fs, args, 0, 1)
	if err != nil {
		return err
	}
	page := protocol.QueuePage{Limit: *limit, Offset: *offset, ExpectedStarts: *eta}
	if *eta {
		page.Now = time.Now().UTC()
	}
	if *limit < 1 {
		return usageErr("--limit must be between 1 and %d, got %d", protocol.MaxQueuePageLimit, *limit)
	}
	if err := page.Validate(); err != nil {
		return usageErr("--%v", err)
	}
	fetch, err := queueFetcher(ctx, g, *region, pos, page)
	if err != nil {
		return err
	}
	v, err := fetch(ctx)
	if err != nil {
		return err
	}
	if g.json() {
		return g.printJSON(queueOutput(v))
	}
	printQueue(g, v)
	return nil
}

// queueFetcher finds the allocation named by the optional positional
// argument (default: the config's) and returns what queries a page of its
// queue; it says so when the allocator does not answer in time.
func queueFetcher(ctx context.Context, g *globals, region string, pos []string, page protocol.QueuePage) (func(context.Context) (protocol.QueueView, error), error) {
	cfg, err := g.Config()
	if err != nil {
		return nil, err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	r, a, err := cfg.Allocation(region, name)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (protocol.QueueView, error) {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		v, err := c.QueuePage(qctx, r.Name, a.Name, page)
		if err != nil && ctx.Err() == nil && (qctx.Err() != nil || isDeadline(err)) {
			return v, fmt.Errorf("the allocator of %s/%s did not answer within %s; is trainq-worker running?", r.Name, a.Name, queryTimeout)
		}
		return v, err
	}, nil
}

// classLabel is a job's priority class, saying when it is a Jupyter server.
func classLabel(class scheduler.Class, kind scheduler.Kind) string {
	if kind == scheduler.KindNotebook {
		return class.String() + " (Jupyter)"
	}
	return class.String()
}

// waitReason is why a job waits, and whose capacity is reserved for it.
func waitReason(q scheduler.WaitingInfo) string {
	if len(q.Nominated) > 0 {
		return q.Reason + " (capacity of " + strings.Join(q.Nominated, ", ") + " is reserved for it)"
	}
	return q.Reason
}

func printQueue(g *globals, v protocol.QueueView) {
	w := g.Stdout
	gpus := v.GPUTotals()
	fmt.Fprintf(w, "Allocation %s/%s: %d GPUs, %d free, %d allocated, %d releasing; %s, %s\n\n",
		v.Region, v.Allocation, gpus.Total, gpus.Free, gpus.Allocated, gpus.Releasing,
		plural(len(v.Running), "job running", "jobs running"), plural(waitingTotal(v), "waiting", "waiting"))

	if v.Recovering {
		fmt.Fprintln(w, "The allocator is recovering its state from the jobs and node agents; it grants nothing until it is done.")
		fmt.Fprintln(w)
	}
	fenced := map[string]string{}
	for _, f := range v.Fenced {
		why := f.Reason
		if f.Cause != "drained" {
			why = "fenced: " + why
		}
		if was, ok := fenced[f.Node]; ok {
			why = was + "; " + why
		}
		fenced[f.Node] = why
	}
	tw := newTable(w)
	racked := slices.ContainsFunc(v.Nodes, func(n scheduler.NodeInfo) bool { return len(n.Topology) > 0 })
	place := ""
	if racked {
		place = "\tPLACE"
	}
	fmt.Fprintln(tw, "NODE\tFAMILY\tGPUS\tFREE\tALLOCATED\tRELEASING"+place+"\tSTATE")
	for _, n := range v.Nodes {
		state := "ok"
		if n.ReservedFor != "" {
			state = "reserved for " + n.ReservedFor + " (draining: no later job starts here)"
		}
		if why, ok := fenced[n.Name]; ok {
			state = why
		}
		where := ""
		if racked {
			where = "\t" + placeText(n.Topology)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d%s\t%s\n", n.Name, n.Family, n.GPUs, n.FreeGPUs, n.AllocatedGPUs, n.ReleasingGPUs, where, state)
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
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.Job, r.Attempt, classLabel(r.Class, r.Kind), r.GPUs,
				startedAt(r.StartedAt), state, scheduler.PlacementText(r.Placement))
		}
		tw.Flush()
	}

	printFairShare(w, v)

	if n := waitingTotal(v); n > len(v.Waiting) && len(v.Waiting) > 0 {
		fmt.Fprintf(w, "\nWaiting, in launch order (%d to %d of %d; --offset and --limit show others):\n", v.Offset+1, v.Offset+len(v.Waiting), n)
	} else if n > len(v.Waiting) {
		fmt.Fprintf(w, "\nWaiting, in launch order (none from %d; %d in all):\n", v.Offset+1, n)
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
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%d\t%s\t%s\n", q.Position, q.Job, q.Attempt, classLabel(q.Class, q.Kind), q.GPUs,
			waited(q.SubmittedAt), orDash(waitReason(q)))
	}
	tw.Flush()
	printExpected(w, v.Waiting)
}

// printFairShare lists each workspace's recent usage under the fair-share
// ordering, in the order its jobs are taken within a class.
func printFairShare(w io.Writer, v protocol.QueueView) {
	if len(v.FairShare) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFair share (within a class, the least-used workspace's jobs go first; usage halves every %s):\n", human(v.FairShareHalfLife))
	tw := newTable(w)
	fmt.Fprintln(tw, "  WORKSPACE\tGPU-HOURS\tSHARE\tGPUS HELD\tWAITING")
	for _, u := range v.FairShare {
		ws := u.Workspace
		if ws == "" {
			ws = "(none)"
		}
		fmt.Fprintf(tw, "  %s\t%.1f\t%.0f%%\t%d\t%d\n", ws, u.GPUHours, 100*u.Share, u.GPUs, u.Waiting)
	}
	tw.Flush()
}

// expectedWhen says when an expected start is: its time and how far off, or
// unknown.
func expectedWhen(e *scheduler.ExpectedStart) string {
	if e.At.IsZero() {
		return "unknown"
	}
	when := stamp(e.At)
	if d := time.Until(e.At); d > 0 {
		when += " (in " + human(d) + ")"
	}
	if !e.Earliest.IsZero() && !e.Latest.IsZero() {
		when += ", likely " + stamp(e.Earliest) + " to " + stamp(e.Latest)
	}
	return when
}

// printExpected lists the expected starts the view carries (trainq queue --eta).
func printExpected(w io.Writer, waiting []scheduler.WaitingInfo) {
	tw := newTable(w)
	header := false
	for _, q := range waiting {
		e := q.ExpectedStart
		if e == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nExpected starts (running jobs end by their time limits, corrected by how wrong past expected starts were; \"likely\": 8 in 10 jobs start in such a range):")
			fmt.Fprintln(tw, "  #\tJOB\tEXPECTED START\tASSUMING")
			header = true
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", q.Position, q.Job, expectedWhen(e), e.Because)
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

// placeText is a node's domains, level=domain by level name ("block=b1 rack=r3"); "-" for none.
func placeText(topology map[string]string) string {
	if len(topology) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(topology))
	for _, level := range slices.Sorted(maps.Keys(topology)) {
		parts = append(parts, level+"="+topology[level])
	}
	return strings.Join(parts, " ")
}
