package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// jobLogs answers GET /jobs/{job_name}/logs as plain text: the log of the
// latest attempt that ran (or ?attempt=N), every worker or ?worker=N, the
// last ?tail=N lines of each (0 = all). ?verbose=true adds a header per
// worker with its node and the attempt's times. ?follow=true keeps the
// answer open and streams new lines, moving on to new attempts, until the
// job ends. Logs are files under the data dir, so the server must run on the
// machine (or share the directory) where trainq-worker runs.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request, p Principal) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "tail", "verbose", "follow", "attempt", "worker":
		default:
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: tail, verbose, follow, attempt, worker", k)))
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
	l := &logStream{s: s, w: w}
	var err error
	if l.tail, err = num("tail", 0, 0); err == nil {
		if l.pinned, err = num("attempt", 0, 1); err == nil {
			if l.worker, err = num("worker", -1, 0); err == nil {
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
	if s.logs == nil {
		s.fail(w, r, &Error{Status: http.StatusServiceUnavailable, Code: "logs_unavailable", Message: "this server cannot read the data dir: " + s.logsErr.Error()})
		return
	}
	l.job = r.PathValue("job_name")
	ctx, cancel := s.call(r)
	_, st, err := s.visibleStatus(ctx, p, l.job)
	cancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if l.pinned > 0 && findAttempt(st, l.pinned) == nil {
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "attempt", fmt.Sprintf("job %s has no attempt %d; it is at attempt %d", l.job, l.pinned, st.Attempt)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Trainq-Job-Status", string(st.State))
	if !l.followed {
		if err := l.once(r.Context(), st); err != nil {
			s.fail(w, r, err)
		}
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	l.flush()
	if err := l.follow(r.Context(), st); err != nil && r.Context().Err() == nil {
		s.log.Warn("log stream ended early", "job", l.job, "err", err)
	}
}

type logStream struct {
	s        *Server
	w        http.ResponseWriter
	job      string
	tail     int
	worker   int // -1: all
	pinned   int // 0: latest
	verbose  bool
	followed bool
}

func (l *logStream) flush() { _ = http.NewResponseController(l.w).Flush() }

func findAttempt(st protocol.JobStatus, n int) *protocol.AttemptRecord {
	for i := range st.Attempts {
		if st.Attempts[i].Number == n {
			return &st.Attempts[i]
		}
	}
	return nil
}

// current is the attempt to show: the pinned one, else the latest.
func (l *logStream) current(st protocol.JobStatus) *protocol.AttemptRecord {
	if l.pinned > 0 {
		return findAttempt(st, l.pinned)
	}
	if len(st.Attempts) == 0 {
		return nil
	}
	return &st.Attempts[len(st.Attempts)-1]
}

func (l *logStream) workers(a *protocol.AttemptRecord) []int {
	var ws []int
	for _, p := range a.Placement {
		if l.worker < 0 || p.Worker == l.worker {
			ws = append(ws, p.Worker)
		}
	}
	sort.Ints(ws)
	return ws
}

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
	fmt.Fprintf(l.w, "==> job %s attempt %d worker %d on %s; queued %s, started %s, ended %s", l.job, a.Number, worker, node,
		a.QueuedAt.UTC().Format(time.RFC3339), stamp(a.StartedAt), stamp(a.EndedAt))
	if a.EndReason != "" {
		fmt.Fprintf(l.w, " (%s)", a.EndReason)
	}
	fmt.Fprintln(l.w, " <==")
}

func (l *logStream) out(a *protocol.AttemptRecord, worker int) *lineWriter {
	prefix := ""
	if len(a.Placement) > 1 && l.worker < 0 {
		prefix = fmt.Sprintf("[worker %d] ", worker)
	}
	return &lineWriter{emit: func(line []byte) error {
		_, err := fmt.Fprintf(l.w, "%s%s\n", prefix, line)
		return err
	}}
}

// once writes the logs as they are now. A waiting attempt shows the last one
// that ran.
func (l *logStream) once(ctx context.Context, st protocol.JobStatus) error {
	a := l.current(st)
	if l.pinned == 0 && a != nil && len(a.Placement) == 0 {
		for i := len(st.Attempts) - 1; i >= 0; i-- {
			if len(st.Attempts[i].Placement) > 0 {
				a = &st.Attempts[i]
				break
			}
		}
	}
	if a == nil || len(a.Placement) == 0 {
		l.w.WriteHeader(http.StatusOK) // no log yet: an empty answer
		return nil
	}
	ws := l.workers(a)
	if l.worker >= 0 && len(ws) == 0 {
		return errorf(http.StatusUnprocessableEntity, codeInvalidParam, "worker", fmt.Sprintf("attempt %d has no worker %d; its workers are 0..%d", a.Number, l.worker, len(a.Placement)-1))
	}
	for _, wk := range ws {
		l.header(a, wk)
		lw := l.out(a, wk)
		err := l.s.logs.Logs(ctx, cluster.WorkerID{Job: l.job, Attempt: a.Number, Worker: wk}, l.tail, lw)
		if err != nil && !errors.Is(err, cluster.ErrNotFound) {
			return err
		}
		if err := lw.close(); err != nil {
			return err
		}
	}
	return nil
}

// followedFile is one log file being followed.
type followedFile struct {
	path   string
	offset int64
	first  bool
	out    *lineWriter
}

func (l *logStream) follow(ctx context.Context, st protocol.JobStatus) error {
	var files []*followedFile
	shown := 0
	for {
		if a := l.current(st); a != nil && a.Number != shown && len(a.Placement) > 0 {
			if err := l.drain(files); err != nil {
				return err
			}
			files = nil
			for _, wk := range l.workers(a) {
				path, err := l.s.logs.LogPath(cluster.WorkerID{Job: l.job, Attempt: a.Number, Worker: wk})
				if err != nil {
					return err
				}
				l.header(a, wk)
				files = append(files, &followedFile{path: path, first: true, out: l.out(a, wk)})
			}
			shown = a.Number
		}
		if err := l.readNew(files); err != nil {
			return err
		}
		over := st.State.Terminal()
		if a := l.current(st); l.pinned > 0 && a != nil && a.EndedAt != nil {
			over = true
		}
		if over {
			if err := l.drain(files); err != nil {
				return err
			}
			if l.verbose {
				fmt.Fprintf(l.w, "==> job %s ended %s <==\n", l.job, st.State)
			}
			l.flush()
			return nil
		}
		l.flush()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.s.opts.PollInterval):
		}
		qctx, cancel := context.WithTimeout(ctx, l.s.opts.CallTimeout)
		next, err := l.s.backend.Status(qctx, l.job)
		cancel()
		switch {
		case errors.Is(err, workflows.ErrJobNotFound):
			return err
		case err != nil:
			continue // Temporal or the worker is away for a moment: keep going
		}
		st = next
	}
}

func (l *logStream) readNew(files []*followedFile) error {
	for _, f := range files {
		if err := f.read(l.tail); err != nil {
			return err
		}
	}
	return nil
}

func (l *logStream) drain(files []*followedFile) error {
	if err := l.readNew(files); err != nil {
		return err
	}
	for _, f := range files {
		if err := f.out.close(); err != nil {
			return err
		}
	}
	return nil
}

func (f *followedFile) read(tail int) error {
	fh, err := os.Open(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the worker has not written yet
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
	if size < f.offset {
		f.offset = 0
	}
	if f.first {
		f.first = false
		if tail > 0 {
			f.offset = tailStart(fh, size, tail)
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

// tailStart is where the last n lines of r[0:size] begin.
func tailStart(r io.ReaderAt, size int64, n int) int64 {
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	end := size
	if size > 0 {
		if _, err := r.ReadAt(buf[:1], size-1); err == nil && buf[0] == '\n' {
			end = size - 1
		}
	}
	lines := 0
	for pos := end; pos > 0; {
		m := min(int64(chunk), pos)
		pos -= m
		if _, err := r.ReadAt(buf[:m], pos); err != nil && err != io.EOF {
			return 0
		}
		for i := m - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				lines++
				if lines == n {
					return pos + i + 1
				}
			}
		}
	}
	return 0
}

// lineWriter emits complete lines; close emits an unterminated last line.
type lineWriter struct {
	buf  []byte
	emit func(line []byte) error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := w.buf[:i]
		if err := w.emit(line); err != nil {
			return len(p), err
		}
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) close() error {
	if len(w.buf) == 0 {
		return nil
	}
	line := w.buf
	w.buf = nil
	return w.emit(line)
}
