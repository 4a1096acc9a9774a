// Package joblogs reads the logs of a job's workers, attempt by attempt: as
// they are now, or followed as they grow until the job ends. The REST API
// (GET /jobs/{job_name}/logs) and the CLI (trainq logs) show them through it;
// each decides how lines, notes and errors look.
package joblogs

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// Reader says which logs of a job to read and where their lines go.
type Reader struct {
	Source  cluster.LogReader // client.LogSource
	Job     string
	Tail    int // the last Tail lines of each worker's log, 0 = all
	Worker  int // only this worker, -1 = every worker
	Attempt int // only this attempt, 0 = the latest (and then each new one)
	// Out is where the lines of a worker of attempt a go. It is called once
	// per worker and attempt, before the worker's first line.
	Out func(a *protocol.AttemptRecord, worker int) *LineWriter
}

// FindAttempt returns attempt n of the job, or nil.
func FindAttempt(st protocol.JobStatus, n int) *protocol.AttemptRecord {
	for i := range st.Attempts {
		if st.Attempts[i].Number == n {
			return &st.Attempts[i]
		}
	}
	return nil
}

// Current is the attempt to show: the pinned one, else the latest.
func (r *Reader) Current(st protocol.JobStatus) *protocol.AttemptRecord {
	if r.Attempt > 0 {
		return FindAttempt(st, r.Attempt)
	}
	if len(st.Attempts) == 0 {
		return nil
	}
	return &st.Attempts[len(st.Attempts)-1]
}

// Shown is the attempt whose logs are shown as they are now: Current, or,
// when the latest attempt waits to be placed, the last one that ran. It has
// no placement (or is nil) when no attempt ran yet.
func (r *Reader) Shown(st protocol.JobStatus) *protocol.AttemptRecord {
	a := r.Current(st)
	if r.Attempt == 0 && a != nil && len(a.Placement) == 0 {
		for i := len(st.Attempts) - 1; i >= 0; i-- {
			if len(st.Attempts[i].Placement) > 0 {
				return &st.Attempts[i]
			}
		}
	}
	return a
}

// Workers lists the workers of a to show, by worker number. It is empty
// when the one asked for is not among them.
func (r *Reader) Workers(a *protocol.AttemptRecord) []int {
	var ws []int
	for _, p := range a.Placement {
		if r.Worker < 0 || p.Worker == r.Worker {
			ws = append(ws, p.Worker)
		}
	}
	sort.Ints(ws)
	return ws
}

// Prefixed reports whether lines of a should say their worker: when more
// than one worker's lines are shown together.
func (r *Reader) Prefixed(a *protocol.AttemptRecord) bool {
	return len(a.Placement) > 1 && r.Worker < 0
}

// Copy writes the log of one worker of a as it is now (its last Tail lines)
// to Out, unterminated last line included. The error wraps
// cluster.ErrNotFound when the worker has no log on this machine.
func (r *Reader) Copy(ctx context.Context, a *protocol.AttemptRecord, worker int) error {
	out := r.Out(a, worker)
	req := r.request(a, worker)
	req.Tail = r.Tail
	if _, err := cluster.CopyLog(ctx, r.Source, req, out); err != nil {
		return err
	}
	return out.Flush()
}

// request asks for the log of one worker of a, from the node it ran on.
func (r *Reader) request(a *protocol.AttemptRecord, worker int) cluster.LogRequest {
	req := cluster.LogRequest{ID: cluster.WorkerID{Job: r.Job, Attempt: a.Number, Worker: worker}}
	for _, p := range a.Placement {
		if p.Worker == worker {
			req.Node = p.Node
		}
	}
	return req
}

// Follow says how Reader.Follow learns about the job and tells about it.
type Follow struct {
	// Poll is how long to wait between reads of the logs.
	Poll time.Duration
	// Status asks for the job's status again after each Poll.
	Status func(context.Context) (protocol.JobStatus, error)
	// Retry reports whether a failed Status is tried again at the next poll,
	// keeping the last status; otherwise Follow returns the error. Nil: never.
	Retry func(error) bool
	// Attempt, if set, is called when the logs of attempt a are opened, after
	// those of the previous attempt (next: there was one) were drained; ws
	// are its workers to show. An error ends Follow.
	Attempt func(a *protocol.AttemptRecord, ws []int, next bool) error
	// Flush, if set, is called after each read of the logs.
	Flush func()
	// End, if set, is called when the job (or the pinned attempt) ended and
	// every line was shown, before the last Flush.
	End func(st protocol.JobStatus)
}

// Follow shows the logs, then new lines as they are written, until the job
// reaches a terminal state (or the pinned attempt ends). Without a pinned
// attempt it moves on to each new attempt. st is the job's status now.
func (r *Reader) Follow(ctx context.Context, st protocol.JobStatus, f Follow) error {
	var files []*followed
	shown := 0 // attempt whose files are open
	for {
		if a := r.Current(st); a != nil && a.Number != shown && len(a.Placement) > 0 {
			// A new attempt started: finish the old files, open the new ones.
			if err := r.drain(ctx, files); err != nil {
				return err
			}
			ws := r.Workers(a)
			if f.Attempt != nil {
				if err := f.Attempt(a, ws, shown != 0); err != nil {
					return err
				}
			}
			files = nil
			for _, w := range ws {
				files = append(files, &followed{req: r.request(a, w), out: r.Out(a, w)})
			}
			shown = a.Number
		}
		if err := r.readNew(ctx, files); err != nil {
			return err
		}
		over := st.State.Terminal()
		if a := r.Current(st); r.Attempt > 0 && a != nil && a.EndedAt != nil {
			over = true
		}
		if over {
			if err := r.drain(ctx, files); err != nil {
				return err
			}
			if f.End != nil {
				f.End(st)
			}
			if f.Flush != nil {
				f.Flush()
			}
			return nil
		}
		if f.Flush != nil {
			f.Flush()
		}
		select {
		case <-ctx.Done():
			_ = r.drain(context.WithoutCancel(ctx), files)
			return ctx.Err()
		case <-time.After(f.Poll):
		}
		next, err := f.Status(ctx)
		if err != nil {
			if f.Retry != nil && f.Retry(err) {
				continue // keep the last status; the worker may be restarting
			}
			return err
		}
		st = next
	}
}

// followed is one worker's log being followed.
type followed struct {
	req     cluster.LogRequest // Offset: where the next read starts
	started bool               // something was read: later reads take every new line, not the last Tail
	out     *LineWriter
}

// readNew shows what was appended to each log since the last read.
func (r *Reader) readNew(ctx context.Context, files []*followed) error {
	for _, f := range files {
		req := f.req
		if !f.started {
			req.Tail = r.Tail
		}
		next, err := cluster.CopyLog(ctx, r.Source, req, f.out)
		if errors.Is(err, cluster.ErrNotFound) {
			continue // the worker has not been started yet
		}
		if err != nil {
			return err
		}
		f.started = f.started || next > 0
		f.req.Offset = next
	}
	return nil
}

// drain reads the logs one last time and shows unterminated last lines.
func (r *Reader) drain(ctx context.Context, files []*followed) error {
	if err := r.readNew(ctx, files); err != nil {
		return err
	}
	for _, f := range files {
		if err := f.out.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// LineWriter splits what is written into lines and emits each complete one.
type LineWriter struct {
	buf  []byte
	emit func(line string) error
}

// NewLineWriter returns a LineWriter that hands each line, without its
// newline, to emit.
func NewLineWriter(emit func(line string) error) *LineWriter {
	return &LineWriter{emit: emit}
}

func (w *LineWriter) Write(p []byte) (int, error) {
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

// Flush emits a final line that has no newline yet.
func (w *LineWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	line := string(w.buf)
	w.buf = nil
	return w.emit(line)
}
