package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/joblogs"
	"github.com/trainq/trainq/protocol"
)

// logLine is one line of `logs --output json` (one object per line).
type logLine struct {
	JobName string `json:"job_name"`
	Attempt int    `json:"attempt"`
	Worker  int    `json:"worker"`
	Line    string `json:"line"`
}

func (g *globals) logWriter(job string, attempt, worker int, prefix bool) *joblogs.LineWriter {
	return joblogs.NewLineWriter(func(line string) error {
		if g.json() {
			return g.printJSONLine(logLine{JobName: job, Attempt: attempt, Worker: worker, Line: line})
		}
		if prefix {
			line = fmt.Sprintf("[worker %d] %s", worker, line)
		}
		_, err := fmt.Fprintln(g.Stdout, line)
		return err
	})
}

func runLogs(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "logs")
	tail := fs.Int("tail", 0, "print only the last `N` lines of each worker (0 = all)")
	follow := fs.Bool("follow", false, "keep printing new lines until the job ends")
	fs.BoolVar(follow, "f", false, "short for --follow")
	attempt := fs.Int("attempt", 0, "attempt `N` (default: the latest)")
	worker := fs.Int("worker", -1, "only worker `N` (0-based; default: all workers)")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	switch {
	case *tail < 0:
		return usageErr("logs: --tail must be 0 or more, got %d", *tail)
	case *attempt < 0:
		return usageErr("logs: --attempt must be 1 or more, got %d", *attempt)
	case *worker < -1:
		return usageErr("logs: --worker must be 0 or more, got %d", *worker)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	source, err := c.LogSource()
	if err != nil {
		return err
	}
	if err := source.Reachable(); err != nil {
		return err
	}
	st, err := jobStatus(ctx, c, name)
	if err != nil {
		return err
	}
	l := &logsRun{g: g, source: source, job: name, tail: *tail, worker: *worker, pinned: *attempt}
	if *attempt > 0 && joblogs.FindAttempt(st, *attempt) == nil {
		return usageErr("job %s has no attempt %d; it is at attempt %d", name, *attempt, st.Attempt)
	}
	if !*follow {
		return l.printOnce(ctx, st)
	}
	return l.follow(ctx, st, func(ctx context.Context) (protocol.JobStatus, error) { return jobStatus(ctx, c, name) })
}

type logsRun struct {
	g      *globals
	source client.LogSource
	job    string
	tail   int
	worker int // -1 = all
	pinned int // attempt asked for, 0 = latest
}

// reader reads the logs asked for and prints their lines.
func (l *logsRun) reader() *joblogs.Reader {
	r := &joblogs.Reader{Source: l.source, Job: l.job, Tail: l.tail, Worker: l.worker, Attempt: l.pinned}
	r.Out = func(a *protocol.AttemptRecord, w int) *joblogs.LineWriter {
		return l.g.logWriter(l.job, a.Number, w, r.Prefixed(a))
	}
	return r
}

// noWorker is the error for a worker asked for that attempt a does not have.
func (l *logsRun) noWorker(a *protocol.AttemptRecord, ws []int) error {
	if l.worker >= 0 && len(ws) == 0 && len(a.Placement) > 0 {
		return usageErr("attempt %d of job %s has no worker %d; its workers are 0..%d", a.Number, l.job, l.worker, len(a.Placement)-1)
	}
	return nil
}

func (l *logsRun) printOnce(ctx context.Context, st protocol.JobStatus) error {
	r := l.reader()
	a := r.Shown(st)
	if cur := r.Current(st); a != cur {
		// The latest attempt waits: show the last one that ran.
		fmt.Fprintf(l.g.Stderr, "note: attempt %d of job %s has not started yet (%s); showing attempt %d\n", cur.Number, l.job, st.State, a.Number)
	}
	if a == nil || len(a.Placement) == 0 {
		n := st.Attempt
		if a != nil {
			n = a.Number
		}
		fmt.Fprintf(l.g.Stderr, "note: attempt %d of job %s has not started yet (%s), so it has no logs; use --follow to wait for them\n", n, l.job, st.State)
		return nil
	}
	ws := r.Workers(a)
	if err := l.noWorker(a, ws); err != nil {
		return err
	}
	for _, w := range ws {
		if err := r.Copy(ctx, a, w); err != nil {
			if errors.Is(err, cluster.ErrNotFound) {
				fmt.Fprintf(l.g.Stderr, "note: no log for worker %d of attempt %d: %v\n", w, a.Number, err)
				continue
			}
			return fmt.Errorf("logs of worker %d: %w", w, err)
		}
	}
	return nil
}

// follow prints the logs, then new lines as they are written, until the job
// reaches a terminal state. Without --attempt it moves on to each new attempt.
func (l *logsRun) follow(ctx context.Context, st protocol.JobStatus, status func(context.Context) (protocol.JobStatus, error)) error {
	return l.reader().Follow(ctx, st, joblogs.Follow{
		Poll:   l.g.PollInterval,
		Status: status,
		Retry:  func(err error) bool { return errors.Is(err, errNoAnswer) },
		Attempt: func(a *protocol.AttemptRecord, ws []int, next bool) error {
			if next && !l.g.json() {
				fmt.Fprintf(l.g.Stdout, "--- attempt %d ---\n", a.Number)
			}
			return l.noWorker(a, ws)
		},
		End: func(st protocol.JobStatus) {
			if st.State.Terminal() {
				fmt.Fprintf(l.g.Stderr, "note: job %s ended %s\n", l.job, st.State)
			}
		},
	})
}
