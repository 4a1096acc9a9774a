package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// GPU bar cells: one per GPU (scaled down on big nodes).
const (
	cellAllocated = "█"
	cellReleasing = "▒"
	cellFree      = "░"
	maxBar        = 16
)

// ANSI: cursor home, clear screen; hide and show the cursor.
const (
	ansiClear      = "\x1b[H\x1b[2J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

func runTop(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "top")
	region := fs.String("region", "", "region (default: the config's default region)")
	once := fs.Bool("once", false, "print one snapshot and exit (the default when stdout is not a terminal)")
	interval := fs.Duration("interval", time.Second, "refresh interval")
	pos, err := parseArgs(g, fs, args, 0, 1)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usageErr("top: --interval must be positive")
	}
	fetch, err := queueFetcher(ctx, g, *region, pos, protocol.QueuePage{})
	if err != nil {
		return err
	}
	t := &top{g: g, fetch: fetch, interval: *interval, live: g.TTY && !*once && !g.json(), size: terminalSize(g.Stdout)}
	return t.run(ctx)
}

// top is the live view of one allocation.
type top struct {
	g        *globals
	fetch    func(context.Context) (protocol.QueueView, error)
	interval time.Duration
	// live redraws the screen every interval; otherwise one snapshot is printed.
	live bool
	// size returns the terminal's columns and rows (0 = unknown).
	size func() (int, int)
}

func (t *top) run(ctx context.Context) error {
	if !t.live {
		v, err := t.fetch(ctx)
		if err != nil {
			return err
		}
		if t.g.json() {
			return t.g.printJSON(queueOutput(v))
		}
		renderTop(t.g.Stdout, v, time.Now(), 0, 0)
		return nil
	}
	fmt.Fprint(t.g.Stdout, ansiHideCursor)
	defer fmt.Fprint(t.g.Stdout, ansiShowCursor)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		v, err := t.fetch(ctx)
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		cols, rows := t.size()
		var frame bytes.Buffer
		if err != nil {
			// Keep trying: the worker may be restarting.
			fmt.Fprintf(&frame, "trainq top · %s\n\n%s\n\nretrying every %s; Ctrl-C quits\n", time.Now().Format("15:04:05"), sentence(err.Error()), t.interval)
		} else {
			renderTop(&frame, v, time.Now(), cols, rows)
		}
		fmt.Fprint(t.g.Stdout, ansiClear+frame.String())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// renderTop draws one frame. With cols and rows (a terminal's size) lines are
// cut to fit and the lists are shortened to the screen; 0 means no limit.
func renderTop(w io.Writer, v protocol.QueueView, now time.Time, cols, rows int) {
	var b bytes.Buffer
	gpus := v.GPUTotals()
	fmt.Fprintf(&b, "trainq top · %s/%s · %s\n", v.Region, v.Allocation, now.Format("15:04:05"))
	fmt.Fprintf(&b, "GPUs %d: %d allocated %s, %d releasing %s, %d free %s · %s, %d waiting\n",
		gpus.Total, gpus.Allocated, cellAllocated, gpus.Releasing, cellReleasing, gpus.Free, cellFree, plural(len(v.Running), "job running", "jobs running"), waitingTotal(v))
	fmt.Fprintf(&b, "Since the allocator started: %d grants, %d preemptions, %d reclaimed\n\n", v.Counters.Grants, v.Counters.Preemptions, v.Counters.Reclaimed)

	tw := newTable(&b)
	fmt.Fprintln(tw, "NODE\tFAMILY\tGPUS\tUSE")
	for _, n := range v.Nodes {
		use := "cpu only"
		if n.GPUs > 0 {
			use = gpuBar(n.AllocatedGPUs, n.ReleasingGPUs, n.FreeGPUs) + fmt.Sprintf(" %d/%d", n.AllocatedGPUs+n.ReleasingGPUs, n.GPUs)
			if n.ReleasingGPUs > 0 {
				use += fmt.Sprintf(" (%d releasing)", n.ReleasingGPUs)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", n.Name, n.Family, n.GPUs, use)
	}
	tw.Flush()
	head := b.String()

	var run bytes.Buffer
	fmt.Fprintf(&run, "\nRunning (%d)\n", len(v.Running))
	if len(v.Running) > 0 {
		tw = newTable(&run)
		fmt.Fprintln(tw, "  JOB\tCLASS\tGPUS\tFOR\tSTATE\tPLACEMENT")
		for _, r := range v.Running {
			state := "running"
			if r.Releasing {
				state = fmt.Sprintf("releasing %d/%d", len(r.Released), len(r.Placement))
				if r.PreemptedBy != nil {
					state += ", preempted by " + r.PreemptedBy.Job
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\n", r.Job, classLabel(r.Class, r.Kind), r.GPUs, sinceAt(r.StartedAt, now), state, scheduler.PlacementText(r.Placement))
		}
		tw.Flush()
	}

	var wait bytes.Buffer
	fmt.Fprintf(&wait, "\nWaiting, in launch order (%d)\n", waitingTotal(v))
	if len(v.Waiting) > 0 {
		tw = newTable(&wait)
		fmt.Fprintln(tw, "  #\tJOB\tCLASS\tGPUS\tWAITING\tREASON")
		for _, q := range v.Waiting {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\n", q.Position, q.Job, classLabel(q.Class, q.Kind), q.GPUs, sinceAt(q.SubmittedAt, now), orDash(waitReason(q)))
		}
		tw.Flush()
	}

	lines := splitLines(head)
	runLines, waitLines := splitLines(run.String()), splitLines(wait.String())
	if rows > 0 {
		// Share the screen left under the nodes between the two lists,
		// keeping their headers and saying how many rows are hidden.
		room := rows - len(lines) - 1
		runLines, waitLines = fit(runLines, waitLines, room)
	}
	lines = append(append(lines, runLines...), waitLines...)
	for _, l := range lines {
		if cols > 0 && utf8.RuneCountInString(l) > cols {
			l = string([]rune(l)[:cols-1]) + "…"
		}
		fmt.Fprintln(w, l)
	}
}

// fit shortens two lists (each a title, a header and rows) to room lines.
func fit(a, b []string, room int) ([]string, []string) {
	if len(a)+len(b) <= room {
		return a, b
	}
	cut := func(l []string, n int) []string {
		const keep = 3 // blank, title, header
		if len(l) <= n || len(l) <= keep {
			return l
		}
		if n < keep+1 {
			n = keep + 1
		}
		hidden := len(l) - n + 1
		return append(l[:n-1:n-1], fmt.Sprintf("  … and %d more", hidden))
	}
	half := room / 2
	switch {
	case len(a) <= half:
		return a, cut(b, room-len(a))
	case len(b) <= room-half:
		return cut(a, room-len(b)), b
	}
	return cut(a, half), cut(b, room-half)
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// gpuBar draws one cell per GPU, scaled to at most maxBar cells.
func gpuBar(allocated, releasing, free int) string {
	total := allocated + releasing + free
	if total > maxBar {
		scale := func(n int) int { return (n*maxBar + total/2) / total }
		a, r := scale(allocated), scale(releasing)
		if allocated > 0 && a == 0 {
			a = 1
		}
		if releasing > 0 && r == 0 {
			r = 1
		}
		allocated, releasing, free = a, r, max(maxBar-a-r, 0)
	}
	return strings.Repeat(cellAllocated, allocated) + strings.Repeat(cellReleasing, releasing) + strings.Repeat(cellFree, free)
}

func sinceAt(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return human(now.Sub(t))
}

// terminalSize returns a function that reads w's terminal size, or 0, 0.
func terminalSize(w io.Writer) func() (int, int) {
	f, ok := w.(*os.File)
	return func() (int, int) {
		if !ok {
			return 0, 0
		}
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			return 0, 0
		}
		return int(ws.Col), int(ws.Row)
	}
}
