package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/joblogs"
	"github.com/trainq/trainq/protocol"
)

// jobLogs answers GET /jobs/{job_name}/logs as plain text: the log of the
// latest attempt that ran (or ?attempt=N), every worker or ?worker=N, the
// last ?tail=N lines of each (0 = all). ?verbose=true adds a header per
// worker with its node and the attempt's times. ?follow=true keeps the
// answer open and streams new lines, moving on to new attempts, until the
// job ends. A log this machine's data dir does not have is read through the
// agent of the worker's node (see client.LogSource), so the server may run
// on any machine that reaches Temporal.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request, p Principal) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "tail", "verbose", "follow", "attempt", "worker", "region":
		default:
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: tail, verbose, follow, attempt, worker, region", k)))
			return
		}
	}
	num := func(param string, def, lo int) (int, error) {
		v := q.Get(param)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > 1<<24 {
			return 0, errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, fmt.Sprintf("%q is not allowed; use a whole number, at least %d", v, lo))
		}
		return n, nil
	}
	flag := func(param string) (bool, error) {
		v := q.Get(param)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, fmt.Sprintf("%q is not allowed; use true or false", v))
		}
		return b, nil
	}
	l := &logStream{s: s, w: &deadlineWriter{w: w, rc: http.NewResponseController(w)}, rw: w, rd: s.redactor(p), ctx: r.Context()}
	var err error
	if l.r.Tail, err = num("tail", 0, 0); err == nil {
		if l.r.Attempt, err = num("attempt", 0, 1); err == nil {
			if l.r.Worker, err = num("worker", -1, 0); err == nil {
				if l.verbose, err = flag("verbose"); err == nil {
					l.followed, err = flag("follow")
				}
			}
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	source, err := s.backend.LogSource()
	if err != nil {
		s.fail(w, r, &Error{Status: http.StatusServiceUnavailable, Code: "logs_unavailable", Message: "this server cannot read the logs: " + err.Error()})
		return
	}
	l.r.Source, l.r.Job, l.r.Out = source, r.PathValue("job_name"), l.out
	ctx, cancel := s.call(r)
	info, st, err := s.visibleStatus(ctx, p, l.r.Job)
	cancel()
	if err == nil {
		err = checkRegion(r, info, st) // ML Space's clients send the job's region
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	l.rd.know(l.r.Job)
	if l.r.Attempt > 0 && joblogs.FindAttempt(st, l.r.Attempt) == nil {
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "attempt", fmt.Sprintf("job %s has no attempt %d; it is at attempt %d", l.r.Job, l.r.Attempt, st.Attempt)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Trainq-Job-Status", string(st.State))
	if !l.followed {
		if err := l.once(r.Context(), st); err != nil {
			l.failed(r, err)
		}
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	l.flush()
	if err := l.follow(r.Context(), st); err != nil && r.Context().Err() == nil {
		s.log.Warn("log stream ended early", "job", l.r.Job, "err", err)
	}
}

type logStream struct {
	s        *Server
	w        *deadlineWriter
	rw       http.ResponseWriter
	r        joblogs.Reader
	rd       *redactor
	ctx      context.Context
	verbose  bool
	followed bool
}

func (l *logStream) flush() { _ = http.NewResponseController(l.rw).Flush() }

// failed answers an error of reading the logs: as an error if nothing was
// written yet (a log the data dir cannot give is 503, not 500), else by
// ending the answer early.
func (l *logStream) failed(r *http.Request, err error) {
	var ae *Error
	if l.w.n > 0 {
		l.s.log.Warn("log answer ended early", "job", l.r.Job, "err", err)
		return
	}
	if !errors.As(err, &ae) && !client.Unavailable(err) {
		l.s.log.Warn("cannot read logs", "job", l.r.Job, "err", err)
		err = &Error{Status: http.StatusServiceUnavailable, Code: "logs_unavailable",
			Message: "the job's logs cannot be read now (from the data dir or the node's agent); try again"}
	}
	l.s.fail(l.rw, r, err)
}

// logWriteTimeout is how long one write of a log answer may take: a client
// that reads nothing for this long loses the answer.
const logWriteTimeout = time.Minute

// deadlineWriter writes a long answer (a log) with a fresh write deadline
// for each write, instead of the server's WriteTimeout for the whole answer.
type deadlineWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	n     int64
	stamp time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(d.stamp) > time.Second {
		d.stamp = now
		_ = d.rc.SetWriteDeadline(now.Add(logWriteTimeout)) // not all writers support it (httptest)
	}
	n, err := d.w.Write(p)
	d.n += int64(n)
	return n, err
}

// header says, with verbose, which worker's log follows.
func (l *logStream) header(a *protocol.AttemptRecord, worker int) {
	if !l.verbose {
		return
	}
	node := ""
	for _, p := range a.Placement {
		if p.Worker == worker {
			node = p.Node
		}
	}
	stamp := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	line := fmt.Sprintf("==> job %s attempt %d worker %d on %s; queued %s, started %s, ended %s", l.r.Job, a.Number, worker, node,
		a.QueuedAt.UTC().Format(time.RFC3339), stamp(a.StartedAt), stamp(a.EndedAt))
	if a.EndReason != "" {
		line += " (" + a.EndReason + ")"
	}
	// The end reason may name another workspace's job (its preemptor).
	names := namesIn(a.EndReason)
	if a.Preemptor != nil {
		names = append(names, a.Preemptor.Job)
	}
	if err := l.rd.learn(l.ctx, names); err != nil {
		l.rd.hide(names...) // cannot look them up now: hide them
	}
	_, _ = fmt.Fprintln(l.w, l.rd.text(line)+" <==")
}

// out writes the header of a worker's log and returns where its lines go.
func (l *logStream) out(a *protocol.AttemptRecord, worker int) *joblogs.LineWriter {
	l.header(a, worker)
	prefix := ""
	if l.r.Prefixed(a) {
		prefix = fmt.Sprintf("[worker %d] ", worker)
	}
	return joblogs.NewLineWriter(func(line string) error {
		_, err := fmt.Fprintf(l.w, "%s%s\n", prefix, line)
		return err
	})
}

// once writes the logs as they are now. A waiting attempt shows the last one
// that ran.
func (l *logStream) once(ctx context.Context, st protocol.JobStatus) error {
	a := l.r.Shown(st)
	if a == nil || len(a.Placement) == 0 {
		l.rw.WriteHeader(http.StatusOK) // no log yet: an empty answer
		return nil
	}
	ws := l.r.Workers(a)
	if l.r.Worker >= 0 && len(ws) == 0 {
		return errorf(http.StatusUnprocessableEntity, codeInvalidParam, "worker", fmt.Sprintf("attempt %d has no worker %d; its workers are 0..%d", a.Number, l.r.Worker, len(a.Placement)-1))
	}
	for _, wk := range ws {
		if err := l.r.Copy(ctx, a, wk); err != nil && !errors.Is(err, cluster.ErrNotFound) {
			return err
		}
	}
	return nil
}

// follow streams the logs until the job ends, checking it every poll.
func (l *logStream) follow(ctx context.Context, st protocol.JobStatus) error {
	return l.r.Follow(ctx, st, joblogs.Follow{
		Poll: l.s.opts.PollInterval,
		Status: func(ctx context.Context) (protocol.JobStatus, error) {
			qctx, cancel := context.WithTimeout(ctx, l.s.opts.CallTimeout)
			defer cancel()
			return l.s.backend.Status(qctx, l.r.Job)
		},
		// Temporal or the worker is away for a moment: keep going.
		Retry: func(err error) bool { return !errors.Is(err, client.ErrJobNotFound) },
		Flush: l.flush,
		End: func(st protocol.JobStatus) {
			if l.verbose {
				_, _ = fmt.Fprintf(l.w, "==> job %s ended %s <==\n", l.r.Job, st.State)
			}
		},
	})
}
