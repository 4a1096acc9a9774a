package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// queryTimeout bounds a status or queue query; a query waits for a worker,
// so without trainq-worker it would hang.
const queryTimeout = 10 * time.Second

// errNoAnswer means a status query got no answer: it timed out (most likely
// no trainq-worker runs) or Temporal was busy; watch and logs --follow ask again.
var errNoAnswer = errors.New("no answer")

// jobStatus queries a job's status with a timeout and turns errors into the
// CLI's sentences.
func jobStatus(ctx context.Context, c *client.Client, name string) (protocol.JobStatus, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	st, err := c.Status(qctx, name)
	if err != nil {
		if errors.Is(err, client.ErrJobNotFound) {
			return st, notFound(name, err)
		}
		if ctx.Err() == nil && (qctx.Err() != nil || isDeadline(err)) {
			return st, fmt.Errorf("%w: job %s did not answer the status query within %s; is trainq-worker running?", errNoAnswer, name, queryTimeout)
		}
		if ctx.Err() == nil && client.Unavailable(err) {
			// Temporal is busy or restarting: watch and logs --follow ask again.
			return st, fmt.Errorf("%w: Temporal did not give the status of job %s (%v)", errNoAnswer, name, err)
		}
		return st, fmt.Errorf("status of job %s: %w", name, err)
	}
	return st, nil
}

func isDeadline(err error) bool {
	var dl *serviceerror.DeadlineExceeded
	return errors.As(err, &dl) || errors.Is(err, context.DeadlineExceeded)
}

func runStatus(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "status")
	eta := fs.Bool("eta", false, "for a pending job, also ask when it is expected to start (the allocator plays its queue forward)")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	st, err := jobStatus(ctx, c, pos[0])
	if err != nil {
		return err
	}
	var expected *scheduler.ExpectedStart
	if *eta && st.State == protocol.StatePending {
		if expected, err = c.ExpectedStart(ctx, st.Region, st.Allocation, st.JobName); err != nil {
			expected = &scheduler.ExpectedStart{Because: "unknown: the allocator did not answer: " + err.Error()}
		}
	}
	if g.json() {
		return g.printJSON(statusOutput(st, expected))
	}
	printStatus(g.Stdout, st)
	if expected != nil {
		printExpectedStart(g.Stdout, expected)
	}
	return nil
}

// printExpectedStart is the status's expected-start line.
func printExpectedStart(w io.Writer, e *scheduler.ExpectedStart) {
	fmt.Fprintf(w, "  expected start  %s; %s\n", expectedWhen(e), e.Because)
}

func printStatus(w io.Writer, st protocol.JobStatus) {
	kind := "training job"
	if st.Kind == scheduler.KindNotebook {
		kind = "Jupyter server"
	}
	fmt.Fprintf(w, "%s  %s\n", st.JobName, st.State)
	tw := newTable(w)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprintf(format, args...))
	}
	row("kind", "%s, %s priority", kind, st.Priority)
	row("allocation", "%s/%s", st.Region, st.Allocation)
	row("resources", "%d × %s = %s", st.NWorkers, st.InstanceType, plural(st.GPUs, "GPU", "GPUs"))
	retries := fmt.Sprintf("max_retry %d", st.MaxRetry)
	if st.NodeLosses > 0 {
		retries += fmt.Sprintf("; %s after lost nodes, which do not count", plural(st.NodeLosses, "rerun", "reruns"))
	}
	row("attempt", "%d (%s, %s)", st.Attempt, plural(st.Restarts, "restart", "restarts"), retries)
	if st.Spec.Author != "" {
		row("author", "%s", st.Spec.Author)
	}
	if st.Spec.JobDesc != "" {
		row("description", "%s", st.Spec.JobDesc)
	}
	if st.State == protocol.StatePending {
		if st.Position > 0 {
			row("position", "%d in the launch order of %s/%s", st.Position, st.Region, st.Allocation)
		}
		if st.Reason != "" {
			row("reason", "%s", st.Reason)
		}
		if len(st.WaitingFor) > 0 {
			row("waiting for", "%s", strings.Join(st.WaitingFor, ", "))
		}
	}
	switch {
	case st.Spec.TimeLimit > 0:
		row("time limit", "%s (stopped then)", st.Spec.TimeLimit)
	case st.Estimate != nil:
		row("runtime", "%s", st.Estimate)
	}
	if st.Message != "" {
		row("message", "%s", st.Message)
	}
	if st.Warning != "" {
		row("warning", "%s", st.Warning)
	}
	if n := len(st.Attempts); n > 0 && st.Attempts[n-1].OnLoan && st.Attempts[n-1].EndedAt == nil {
		row("on loan", "%s", "it started on capacity reserved for a job that has waited longer, because its time limit or runtime estimate ends it first; if it is still running past that, it gets a notice and gives the capacity back, then reruns without spending max_retry")
	}
	if u := st.URL(); u != "" {
		row("url", "%s", u)
	}
	row("created", "%s (%s)", stamp(st.CreatedAt), ago(st.CreatedAt))
	timeRow := func(k string, t *time.Time) {
		if t != nil {
			row(k, "%s (%s)", stamp(*t), ago(*t))
		} else {
			row(k, "-")
		}
	}
	timeRow("pending", st.PendingAt)
	timeRow("running", st.RunningAt)
	timeRow("completed", st.CompletedAt)
	if len(st.Preemptors) > 0 {
		var ps []string
		for i := range st.Preemptors {
			ps = append(ps, preemptor(&st.Preemptors[i]))
		}
		row("preempted by", "%s", strings.Join(ps, ", "))
	}
	tw.Flush()
	if len(st.Attempts) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "ATTEMPT\tQUEUED\tSTARTED\tENDED\tRAN\tRESULT\tPREEMPTOR\tNOTICE\tCHECKPOINT\tPLACEMENT")
	var reasons []string
	for _, a := range st.Attempts {
		ran := "-"
		if a.StartedAt != nil {
			end := time.Now()
			if a.EndedAt != nil {
				end = *a.EndedAt
			}
			ran = human(end.Sub(*a.StartedAt))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, stamp(a.QueuedAt), stampPtr(a.StartedAt),
			stampPtr(a.EndedAt), ran, attemptResult(a), orDash(preemptor(a.Preemptor)), attemptNotice(a), attemptCheckpoint(a),
			scheduler.PlacementText(a.Placement))
		if a.EndReason != "" {
			reasons = append(reasons, fmt.Sprintf("  attempt %d: %s", a.Number, a.EndReason))
		}
	}
	tw.Flush()
	if len(reasons) > 0 {
		fmt.Fprintln(w, "\nHow attempts ended:")
		fmt.Fprintln(w, strings.Join(reasons, "\n"))
	}
}

// attemptNotice shows the notice an attempt's workers were given: its
// reason, and how early they released their capacity (or that they were
// stopped at the deadline).
func attemptNotice(a protocol.AttemptRecord) string {
	if a.NoticeDeadline == nil {
		return "-"
	}
	reason := a.NoticeReason
	if reason == "" {
		reason = protocol.NoticeReasonPreempted // recorded before notices had other reasons
	}
	switch {
	case a.ExitedOnNoticeAt != nil:
		return fmt.Sprintf("%s, exited %s early", reason, human(a.NoticeDeadline.Sub(*a.ExitedOnNoticeAt)))
	case a.EndedAt != nil:
		return reason + ", stopped at the deadline"
	}
	return fmt.Sprintf("%s, deadline %s", reason, stamp(*a.NoticeDeadline))
}

// attemptCheckpoint shows an attempt's last checkpoint, and whether it
// came within its notice's window.
func attemptCheckpoint(a protocol.AttemptRecord) string {
	if a.CheckpointAt == nil {
		return "-"
	}
	if a.HonouredNotice() {
		return stamp(*a.CheckpointAt) + " (on notice)"
	}
	return stamp(*a.CheckpointAt)
}

// attemptResult is a one-word summary of how an attempt ended.
func attemptResult(a protocol.AttemptRecord) string {
	switch {
	case a.EndedAt == nil && a.StartedAt == nil:
		return "waiting"
	case a.EndedAt == nil:
		return "running"
	case a.Preemptor != nil:
		return "preempted"
	case a.ExitCode != nil && *a.ExitCode == 0:
		return "succeeded"
	case a.ExitCode != nil:
		return fmt.Sprintf("exit %d", *a.ExitCode)
	case strings.Contains(strings.ToLower(a.EndReason), "stop"), strings.Contains(strings.ToLower(a.EndReason), "cancel"):
		return "stopped"
	}
	return "ended"
}

func parseState(s string) (protocol.JobState, error) {
	st, err := protocol.ParseJobState(s)
	if err != nil {
		return "", usageErr("list: --status %v", err)
	}
	return st, nil
}

func runList(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "list")
	var statuses multiFlag
	fs.Var(&statuses, "status", "only jobs in this `state` (repeatable, or comma-separated), e.g. Pending,Running")
	alloc := fs.String("allocation", "", "only jobs of this allocation")
	region := fs.String("region", "", "only jobs of this region")
	author := fs.String("author", "", "only jobs of this author")
	limit := fs.Int("limit", 50, "at most this many jobs")
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	f := client.ListFilter{Allocation: *alloc, Region: *region, Author: *author, Limit: *limit}
	for _, s := range statuses {
		st, err := parseState(s)
		if err != nil {
			return err
		}
		f.States = append(f.States, string(st))
	}
	if *limit < 1 {
		return usageErr("list: --limit must be at least 1, got %d", *limit)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	jobs, err := c.List(ctx, f)
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	if g.json() {
		return g.printJSON(listOutput(jobs))
	}
	if len(jobs) == 0 {
		fmt.Fprintln(g.Stdout, "no jobs")
		return nil
	}
	tw := newTable(g.Stdout)
	fmt.Fprintln(tw, "JOB\tSTATUS\tKIND\tCLASS\tALLOCATION\tGPUS\tATTEMPT\tAUTHOR\tCREATED\tENDED")
	for _, j := range jobs {
		ended := "-"
		if j.ClosedAt != nil {
			ended = stamp(*j.ClosedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%s\t%d\t%d\t%s\t%s\t%s\n", j.JobName, orDash(j.Status), orDash(j.Kind), orDash(j.Priority),
			j.Region, j.Allocation, j.GPUs, j.Attempt, orDash(j.Author), stamp(j.CreatedAt), ended)
	}
	tw.Flush()
	if len(jobs) == *limit {
		fmt.Fprintf(g.Stderr, "note: showing the newest %d jobs; use --limit for more\n", *limit)
	}
	return nil
}

func runRestart(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "restart")
	wait := fs.Bool("wait", false, "then watch the new job until it ends (exit 0 only if it completed)")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	sub, err := c.Restart(ctx, pos[0], client.SubmitOptions{})
	if err != nil {
		return notFound(pos[0], err)
	}
	if g.json() {
		if err := g.printJSON(restartResult{Submission: sub, RestartedFrom: pos[0]}); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(g.Stdout, sub.JobName)
	}
	if *wait {
		return watch(ctx, g, sub.JobName, false)
	}
	return nil
}

// restartResult is the answer of restart --output json.
type restartResult struct {
	client.Submission
	RestartedFrom string `json:"restarted_from"`
}

func runCancel(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "cancel")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	return cancel(ctx, g, pos[0])
}

type cancelResult struct {
	JobName string `json:"job_name"`
	// Result is "stopping" or "already-finished".
	Result string `json:"result"`
	Status string `json:"status,omitempty"`
}

// cancel stops a job; cancelling a finished job is not an error.
func cancel(ctx context.Context, g *globals, name string) error {
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	info, err := c.Describe(ctx, name)
	switch {
	case errors.Is(err, client.ErrJobNotFound):
		return notFound(name, err)
	case err != nil:
		return fmt.Errorf("cannot stop job %s: %w", name, err)
	}
	res := cancelResult{JobName: name, Status: info.Status}
	if info.Running {
		if err := c.Cancel(ctx, name); err != nil {
			return notFound(name, err)
		}
		res.Result = "stopping"
	} else {
		res.Result = "already-finished"
	}
	if g.json() {
		return g.printJSON(res)
	}
	if res.Result == "stopping" {
		fmt.Fprintf(g.Stdout, "stopping %s\n", name)
	} else if res.Status != "" {
		fmt.Fprintf(g.Stdout, "%s has already finished (%s)\n", name, res.Status)
	} else {
		fmt.Fprintf(g.Stdout, "%s has already finished\n", name)
	}
	return nil
}

func runWatch(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "watch")
	eta := fs.Bool("eta", false, "while the job is pending, also show when it is expected to start (asked every "+etaRefresh.String()+" at most)")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	return watch(ctx, g, pos[0], *eta)
}

// etaRefresh is how often watch --eta asks the allocator for the expected start: each answer
// plays the allocation's queue forward, which is worth more than the poll's second.
const etaRefresh = 10 * time.Second

// watchEvent is one line of `watch` (one JSON object per line with --output json).
type watchEvent struct {
	Time     time.Time         `json:"time"`
	JobName  string            `json:"job_name"`
	Status   protocol.JobState `json:"status"`
	Attempt  int               `json:"attempt"`
	Restarts int               `json:"restarts"`
	Position int               `json:"position,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Message  string            `json:"message,omitempty"`
	// ExpectedStartAt and ExpectedStart, with --eta for a pending job: when
	// it is expected to start, to the minute (absent: unknown), and the
	// assumption, or why it is unknown.
	ExpectedStartAt *time.Time `json:"expected_start_at,omitempty"`
	ExpectedStart   string     `json:"expected_start,omitempty"`
}

func (e watchEvent) same(o watchEvent) bool {
	return e.Status == o.Status && e.Attempt == o.Attempt && e.Position == o.Position && e.Reason == o.Reason && e.Message == o.Message &&
		e.ExpectedStart == o.ExpectedStart && ptrTimeEqual(e.ExpectedStartAt, o.ExpectedStartAt)
}

func ptrTimeEqual(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

// withExpectedStart is ev with e, its time to the minute: a line a minute at most when an
// overdue estimate moves the start along with the clock.
func (e watchEvent) withExpectedStart(es *scheduler.ExpectedStart) watchEvent {
	if es == nil {
		return e
	}
	e.ExpectedStart = es.Because
	if !es.At.IsZero() {
		at := es.At.Truncate(time.Minute)
		e.ExpectedStartAt = &at
	}
	return e
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// watch prints a line per state change until the job ends: nil if it
// completed, an exitError with code 1 otherwise.
func watch(ctx context.Context, g *globals, name string, eta bool) error {
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	var expected *scheduler.ExpectedStart
	var askedAt time.Time
	tty := g.TTY && !g.json()
	var last *watchEvent
	var st protocol.JobStatus
	started := time.Now()
	frame := 0
	spinning := false
	clearSpinner := func() {
		if spinning {
			fmt.Fprint(g.Stdout, "\r\033[K")
			spinning = false
		}
	}
	warned := false
	for {
		st, err = jobStatus(ctx, c, name)
		switch {
		case errors.Is(err, errNoAnswer):
			if !warned {
				clearSpinner()
				fmt.Fprintf(g.Stderr, "note: %v; still trying\n", strings.TrimPrefix(err.Error(), errNoAnswer.Error()+": "))
				warned = true
			}
		case err != nil:
			clearSpinner()
			return err
		default:
			warned = false
			switch {
			case !eta || st.State != protocol.StatePending:
				expected = nil
			case expected == nil || time.Since(askedAt) >= etaRefresh:
				askedAt = time.Now()
				if expected, err = c.ExpectedStart(ctx, st.Region, st.Allocation, st.JobName); err != nil {
					expected = &scheduler.ExpectedStart{Because: "unknown: the allocator did not answer: " + err.Error()}
				}
			}
			ev := watchEvent{Time: time.Now(), JobName: name, Status: st.State, Attempt: st.Attempt, Restarts: st.Restarts,
				Position: st.Position, Reason: st.Reason, Message: st.Message}.withExpectedStart(expected)
			if last == nil || !ev.same(*last) {
				clearSpinner()
				if g.json() {
					if err := g.printJSONLine(ev); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(g.Stdout, eventLine(ev, st))
				}
				last = &ev
			}
			if st.State.Terminal() {
				clearSpinner()
				if st.State == protocol.StateCompleted {
					return nil
				}
				msg := fmt.Sprintf("job %s ended %s", name, st.State)
				if st.Message != "" {
					msg += ": " + st.Message
				}
				return &exitError{code: 1, msg: msg}
			}
		}
		// Sleep until the next poll; on a TTY, animate the progress line.
		next := time.Now().Add(g.PollInterval)
		for {
			if tty && last != nil {
				fmt.Fprintf(g.Stdout, "\r\033[K%s %s", spinnerFrames[frame%len(spinnerFrames)], progressLine(st, started))
				spinning = true
				frame++
			}
			step := time.Until(next)
			if tty && step > 200*time.Millisecond {
				step = 200 * time.Millisecond
			}
			if step <= 0 {
				break
			}
			select {
			case <-ctx.Done():
				clearSpinner()
				return ctx.Err()
			case <-time.After(step):
			}
		}
	}
}

func eventLine(ev watchEvent, st protocol.JobStatus) string {
	s := fmt.Sprintf("%s  %-10s  attempt %d", ev.Time.Local().Format("15:04:05"), ev.Status, ev.Attempt)
	var detail []string
	switch ev.Status {
	case protocol.StatePending:
		if ev.Position > 0 {
			detail = append(detail, fmt.Sprintf("#%d in queue", ev.Position))
		}
		if ev.Reason != "" {
			detail = append(detail, ev.Reason)
		}
		switch {
		case ev.ExpectedStartAt != nil:
			detail = append(detail, "expected start "+ev.ExpectedStartAt.Local().Format("15:04")+" ("+ev.ExpectedStart+")")
		case ev.ExpectedStart != "":
			detail = append(detail, "expected start unknown ("+strings.TrimPrefix(ev.ExpectedStart, "unknown: ")+")")
		}
	case protocol.StateRunning, protocol.StateStarting:
		if n := len(st.Attempts); n > 0 && len(st.Attempts[n-1].Placement) > 0 {
			detail = append(detail, "on "+scheduler.PlacementText(st.Attempts[n-1].Placement))
		}
	}
	// While waiting or running, Message still tells how the previous attempt
	// ended; show it only when the state itself is about it.
	if ev.Message != "" && ev.Status != protocol.StatePending && ev.Status != protocol.StateRunning && ev.Status != protocol.StateStarting {
		detail = append(detail, ev.Message)
	}
	if len(detail) > 0 {
		s += "  " + strings.Join(detail, ": ")
	}
	return s
}

// progressLine is the TTY status line: state, time in state, elapsed.
func progressLine(st protocol.JobStatus, watchStart time.Time) string {
	since := watchStart
	switch st.State {
	case protocol.StatePending:
		if st.PendingAt != nil {
			since = *st.PendingAt
		}
	case protocol.StateRunning, protocol.StateCompleting:
		if st.RunningAt != nil {
			since = *st.RunningAt
		}
	}
	s := fmt.Sprintf("%s for %s · attempt %d · %s since submit", st.State, human(time.Since(since)), st.Attempt, human(time.Since(st.CreatedAt)))
	if st.State == protocol.StatePending && st.Position > 0 {
		s += fmt.Sprintf(" · #%d in queue", st.Position)
	}
	return s
}
