package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// logLine is one line of `logs --output json` (one object per line).
type logLine struct {
	JobName string `json:"job_name"`
	Attempt int    `json:"attempt"`
	Worker  int    `json:"worker"`
	Line    string `json:"line"`
}

// lineWriter splits what is written into lines and emits each complete one.
type lineWriter struct {
	buf  []byte
	emit func(line string) error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if err := w.emit(line); err != nil {
			return len(p), err
		}
	}
}

// flush emits a final line that has no newline yet.
func (w *lineWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	line := string(w.buf)
	w.buf = nil
	return w.emit(line)
}

func (g *globals) logWriter(job string, attempt, worker int, prefix bool) *lineWriter {
	return &lineWriter{emit: func(line string) error {
		if g.json() {
			return g.printJSONLine(logLine{JobName: job, Attempt: attempt, Worker: worker, Line: line})
		}
		if prefix {
			line = fmt.Sprintf("[worker %d] %s", worker, line)
		}
		_, err := fmt.Fprintln(g.Stdout, line)
		return err
	}}
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
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.DataDir); err != nil {
		return fmt.Errorf("no logs on this machine: the data dir %s does not exist; logs live where trainq-worker runs, under its data_dir (run trainq from the same directory, or set data_dir to an absolute path)", cfg.DataDir)
	}
	backend, err := local.New(local.Options{DataDir: cfg.DataDir})
	if err != nil {
		return err
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	st, err := jobStatus(ctx, c, name)
	if err != nil {
		return err
	}
	l := &logsRun{g: g, backend: backend, job: name, tail: *tail, worker: *worker, pinned: *attempt}
	if *attempt > 0 && findAttempt(st, *attempt) == nil {
		return usageErr("job %s has no attempt %d; it is at attempt %d", name, *attempt, st.Attempt)
	}
	if !*follow {
		return l.printOnce(ctx, st)
	}
	return l.follow(ctx, st, func(ctx context.Context) (protocol.JobStatus, error) { return jobStatus(ctx, c, name) })
}

type logsRun struct {
	g       *globals
	backend *local.Backend
	job     string
	tail    int
	worker  int // -1 = all
	pinned  int // attempt asked for, 0 = latest
}

func findAttempt(st protocol.JobStatus, n int) *protocol.AttemptRecord {
	for i := range st.Attempts {
		if st.Attempts[i].Number == n {
			return &st.Attempts[i]
		}
	}
	return nil
}

// current returns the attempt to show: the pinned one, else the latest.
func (l *logsRun) current(st protocol.JobStatus) *protocol.AttemptRecord {
	if l.pinned > 0 {
		return findAttempt(st, l.pinned)
	}
	if len(st.Attempts) == 0 {
		return nil
	}
	return &st.Attempts[len(st.Attempts)-1]
}

// workers lists the workers of an attempt to show, by worker number.
func (l *logsRun) workers(a *protocol.AttemptRecord) ([]int, error) {
	ps := append([]scheduler.WorkerPlacement(nil), a.Placement...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Worker < ps[j].Worker })
	var ws []int
	for _, p := range ps {
		if l.worker < 0 || p.Worker == l.worker {
			ws = append(ws, p.Worker)
		}
	}
	if l.worker >= 0 && len(ws) == 0 && len(ps) > 0 {
		return nil, usageErr("attempt %d of job %s has no worker %d; its workers are 0..%d", a.Number, l.job, l.worker, len(ps)-1)
	}
	return ws, nil
}

func (l *logsRun) printOnce(ctx context.Context, st protocol.JobStatus) error {
	a := l.current(st)
	if l.pinned == 0 && a != nil && len(a.Placement) == 0 {
		// The latest attempt waits: show the last one that ran.
		for i := len(st.Attempts) - 1; i >= 0; i-- {
			if len(st.Attempts[i].Placement) > 0 {
				fmt.Fprintf(l.g.Stderr, "note: attempt %d of job %s has not started yet (%s); showing attempt %d\n", a.Number, l.job, st.State, st.Attempts[i].Number)
				a = &st.Attempts[i]
				break
			}
		}
	}
	if a == nil || len(a.Placement) == 0 {
		n := st.Attempt
		if a != nil {
			n = a.Number
		}
		fmt.Fprintf(l.g.Stderr, "note: attempt %d of job %s has not started yet (%s), so it has no logs; use --follow to wait for them\n", n, l.job, st.State)
		return nil
	}
	ws, err := l.workers(a)
	if err != nil {
		return err
	}
	for _, w := range ws {
		lw := l.g.logWriter(l.job, a.Number, w, len(a.Placement) > 1 && l.worker < 0)
		id := cluster.WorkerID{Job: l.job, Attempt: a.Number, Worker: w}
		if err := l.backend.Logs(ctx, id, l.tail, lw); err != nil {
			if errors.Is(err, cluster.ErrNotFound) {
				fmt.Fprintf(l.g.Stderr, "note: no log for worker %d of attempt %d on this machine (%s)\n", w, a.Number, l.g.cfg.DataDir)
				continue
			}
			return fmt.Errorf("logs of worker %d: %w", w, err)
		}
		if err := lw.flush(); err != nil {
			return err
		}
	}
	return nil
}

// followed is one log file being followed.
type followed struct {
	worker int
	path   string
	offset int64
	first  bool // the first read prints only the last tail lines
	out    *lineWriter
}

// follow prints the logs, then new lines as they are written, until the job
// reaches a terminal state. Without --attempt it moves on to each new attempt.
func (l *logsRun) follow(ctx context.Context, st protocol.JobStatus, status func(context.Context) (protocol.JobStatus, error)) error {
	var files []*followed
	shown := 0 // attempt whose files are open
	for {
		if a := l.current(st); a != nil && a.Number != shown && len(a.Placement) > 0 {
			// A new attempt started: finish the old files, open the new ones.
			if err := l.drain(files); err != nil {
				return err
			}
			if shown != 0 && !l.g.json() {
				fmt.Fprintf(l.g.Stdout, "--- attempt %d ---\n", a.Number)
			}
			ws, err := l.workers(a)
			if err != nil {
				return err
			}
			files = nil
			for _, w := range ws {
				path, err := l.backend.LogPath(cluster.WorkerID{Job: l.job, Attempt: a.Number, Worker: w})
				if err != nil {
					return err
				}
				files = append(files, &followed{worker: w, path: path, first: true,
					out: l.g.logWriter(l.job, a.Number, w, len(a.Placement) > 1 && l.worker < 0)})
			}
			shown = a.Number
		}
		if err := l.readNew(files); err != nil {
			return err
		}
		attemptOver := false
		if l.pinned > 0 {
			if a := l.current(st); a != nil && a.EndedAt != nil {
				attemptOver = true
			}
		}
		if st.State.Terminal() || attemptOver {
			if err := l.drain(files); err != nil {
				return err
			}
			if st.State.Terminal() {
				fmt.Fprintf(l.g.Stderr, "note: job %s ended %s\n", l.job, st.State)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			_ = l.drain(files)
			return ctx.Err()
		case <-time.After(l.g.PollInterval):
		}
		next, err := status(ctx)
		if err != nil {
			if errors.Is(err, errNoAnswer) {
				continue // keep the last status; the worker may be restarting
			}
			return err
		}
		st = next
	}
}

// readNew prints what was appended to each file since the last read.
func (l *logsRun) readNew(files []*followed) error {
	for _, f := range files {
		if err := f.read(l.tail); err != nil {
			return err
		}
	}
	return nil
}

// drain reads the files one last time and prints unterminated last lines.
func (l *logsRun) drain(files []*followed) error {
	if err := l.readNew(files); err != nil {
		return err
	}
	for _, f := range files {
		if err := f.out.flush(); err != nil {
			return err
		}
	}
	return nil
}

func (f *followed) read(tail int) error {
	fh, err := os.Open(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the worker has not started writing yet
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size < f.offset { // truncated or replaced
		f.offset = 0
	}
	if f.first {
		f.first = false
		if tail > 0 {
			start, err := tailStart(fh, size, tail)
			if err != nil {
				return err
			}
			f.offset = start
		}
	}
	if size == f.offset {
		return nil
	}
	if _, err := io.Copy(f.out, io.NewSectionReader(fh, f.offset, size-f.offset)); err != nil {
		return err
	}
	f.offset = size
	return nil
}

// tailStart returns the offset where the last n lines of r[0:size] begin.
// A final newline ends the last line; it does not start a new one.
func tailStart(r io.ReaderAt, size int64, n int) (int64, error) {
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	end := size
	if size > 0 {
		if _, err := r.ReadAt(buf[:1], size-1); err != nil && err != io.EOF {
			return 0, err
		}
		if buf[0] == '\n' {
			end = size - 1
		}
	}
	lines := 0
	for pos := end; pos > 0; {
		m := min(int64(chunk), pos)
		pos -= m
		if _, err := r.ReadAt(buf[:m], pos); err != nil && err != io.EOF {
			return 0, err
		}
		for i := m - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				lines++
				if lines == n {
					return pos + i + 1, nil
				}
			}
		}
	}
	return 0, nil
}
