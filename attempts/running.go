package attempts

import (
	"fmt"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Worker is one worker of the attempt and the node it runs on.
type Worker struct {
	ID   int
	Node string
}

// Running is an attempt whose workers run: what its grant gave it, and what
// has been decided about its end. Done says the attempt ends now (its
// remaining workers are stopped and released by the shell); until then Out
// is how it will end, once Decided.
type Running struct {
	Workers []Worker
	// Notice is how long the grant gives the workers before a stop (0:
	// none). With one, the attempt's own stops (a cancellation, its time
	// limit, stuck) give a notice too, and after a notice the attempt ends
	// when its workers have exited or at the deadline.
	Notice time.Duration
	// NodeTimeout is how long a node's agent may leave work waiting; a lost
	// node's message says it.
	NodeTimeout time.Duration
	// Health is the job's health_params (nil: none).
	Health *protocol.JobHealth

	Out     Outcome
	Decided bool
	// Deadline is the notice's, once the workers were told.
	Deadline *time.Time
	Done     bool
	// exited are the workers whose watch saw them gone.
	exited map[int]bool
}

// NewRunning is the state of an attempt whose workers have all started.
func NewRunning(workers []Worker, notice, nodeTimeout time.Duration, health *protocol.JobHealth) *Running {
	return &Running{Workers: workers, Notice: notice, NodeTimeout: nodeTimeout, Health: health, exited: map[int]bool{}}
}

// noticeStops says whether the attempt's stops give its workers a notice.
func (r *Running) noticeStops() bool { return r.Notice > 0 }

// Event is something that happens to a running attempt.
type Event interface{ event() }

// Preempt is the allocator's preemption of this attempt (the shell drops
// one meant for another attempt or from a replaced allocator): by a job
// (Preemptor), to give back a loan (Loan), or to drain a node (Drain names
// it). Notice is the notice it gives (0: the workers are stopped at once).
type Preempt struct {
	Preemptor scheduler.Preemptor
	Reason    string
	Drain     string
	Loan      bool
	Move      bool
	Notice    time.Duration
}

// Cancel is the user's cancellation of the job.
type Cancel struct{}

// TimeLimitReached is the job's stop_timer running out (Minutes of running
// over all its attempts).
type TimeLimitReached struct{ Minutes int }

// DeadlinePassed is the notice's deadline coming.
type DeadlinePassed struct{}

// Shutdown is a notebook's autoshutdown rule stopping it, and why.
type Shutdown struct{ Message string }

// WatchEnd is how a worker's watch ended.
type WatchEnd int

const (
	// WorkerGone: the worker's processes are gone (Code says how it exited).
	WorkerGone WatchEnd = iota
	// NodeSilent: no agent of the worker's node took the watch in time.
	NodeSilent
	// Silent: no worker wrote a log line for health_params.log_period.
	Silent
	// NodeLostTrack: the worker's node lost track of it (a pod in phase Unknown).
	NodeLostTrack
	// WatchFailed: the watch failed otherwise.
	WatchFailed
)

// WatchEnded is one worker's watch ending.
type WatchEnded struct {
	Worker int
	End    WatchEnd
	// Error is the failure's text (End other than WorkerGone).
	Error string
	// Code and Reason are the worker's exit (WorkerGone).
	Code   int
	Reason string
	// Reported says the node told the allocator of the release itself.
	Reported bool
	// Cancelled says the job was being cancelled when the watch failed.
	Cancelled bool
}

func (Preempt) event()          {}
func (Cancel) event()           {}
func (TimeLimitReached) event() {}
func (DeadlinePassed) event()   {}
func (Shutdown) event()         {}
func (WatchEnded) event()       {}

// Command is something the shell does for a running attempt, in order.
type Command interface{ command() }

// GiveNotice tells the workers still running to exit by Notice from now, and
// ends the attempt at that deadline (the shell sends DeadlinePassed).
type GiveNotice struct {
	Reason string
	By     *protocol.NoticeBy
	Notice time.Duration
}

// Release gives a gone worker's capacity back; Reported: the node already
// told the allocator.
type Release struct {
	Worker   int
	Reported bool
}

// WatchForExit watches a worker again, only for its exit.
type WatchForExit struct{ Worker int }

// MarkNodeLost records a node whose agent did not answer, so that the
// release names it and the allocator fences it.
type MarkNodeLost struct{ Node string }

// NotifyStuck reports a stuck job as an event (health_params' notify).
type NotifyStuck struct{}

// ExitedOnNotice records that the workers all exited on their notice.
type ExitedOnNotice struct{}

func (GiveNotice) command()     {}
func (Release) command()        {}
func (WatchForExit) command()   {}
func (MarkNodeLost) command()   {}
func (NotifyStuck) command()    {}
func (ExitedOnNotice) command() {}

var stoppedByTheUser = Outcome{Kind: Cancelled, Message: "stopped by the user"}

// On applies an event at now and returns the commands it calls for.
func (r *Running) On(now time.Time, e Event) []Command {
	switch e := e.(type) {
	case Preempt:
		return r.preempt(now, e)
	case Cancel:
		return r.cancel(now)
	case TimeLimitReached:
		return r.timeLimit(now, e)
	case DeadlinePassed:
		r.Done = true
	case Shutdown:
		if !r.Decided {
			r.Out, r.Decided, r.Done = Outcome{Kind: TimeLimit, Message: e.Message}, true, true
		}
	case WatchEnded:
		return r.watchEnded(now, e)
	}
	return nil
}

// notice gives the workers a notice of d (0: the grant's), unless they were
// given one already: a second stop during a notice changes its outcome at
// most, never its deadline.
func (r *Running) notice(now time.Time, reason string, by *protocol.NoticeBy, d time.Duration) []Command {
	if d == 0 {
		d = r.Notice
	}
	if d <= 0 || r.Deadline != nil {
		return nil
	}
	deadline := now.Add(d)
	r.Deadline = &deadline
	return []Command{GiveNotice{Reason: reason, By: by, Notice: d}}
}

// preempt ends the attempt for a drain, a loan due or a preemptor; with a
// notice, at its deadline. During a notice of the attempt's own stop, a
// preemption changes nothing.
func (r *Running) preempt(now time.Time, p Preempt) []Command {
	if r.noticeStops() && r.Decided {
		return nil
	}
	if p.Drain != "" {
		r.Out, r.Decided, r.Done = Outcome{Kind: NodeDrained, Message: "moved: " + p.Reason}, true, true
		if p.Notice > 0 {
			r.Done = false
			return r.notice(now, protocol.NoticeReasonNodeDrain, nil, p.Notice)
		}
		return nil
	}
	pre := p.Preemptor
	kind, verb, reason := Preempted, "preempted by", protocol.NoticeReasonPreempted
	switch {
	case p.Loan:
		kind, verb, reason = Yielded, "yielded its loan to", protocol.NoticeReasonLoanDue
	case p.Move:
		kind, verb, reason = Yielded, "moved to make room for", protocol.NoticeReasonDefragment
	}
	r.Out = Outcome{Kind: kind, Message: fmt.Sprintf("%s %s (%s %s): %s", verb, pre.Job, pre.Class, pre.Kind, p.Reason), Preemptor: &pre}
	r.Decided, r.Done = true, true
	if p.Notice > 0 {
		r.Done = false
		return r.notice(now, reason, &protocol.NoticeBy{Class: pre.Class.String(), Kind: pre.Kind}, p.Notice)
	}
	return nil
}

// cancel ends the attempt as stopped by the user: at once, or when the grant
// gives notices, after one (a notice already given keeps its deadline: see
// notice).
func (r *Running) cancel(now time.Time) []Command {
	r.Out, r.Decided, r.Done = stoppedByTheUser, true, true
	if !r.noticeStops() {
		return nil
	}
	r.Done = false
	return r.notice(now, protocol.NoticeReasonCancelled, nil, 0)
}

// timeLimit ends the attempt for its stop_timer. An attempt already ending
// at a notice's deadline keeps the deadline, but an end that would rerun the
// job becomes the time limit's: the job has no time left to rerun in.
func (r *Running) timeLimit(now time.Time, e TimeLimitReached) []Command {
	limited := Outcome{Kind: TimeLimit, Message: fmt.Sprintf("stopped by its stop_timer after %d minutes of running", e.Minutes)}
	if r.noticeStops() && r.Decided {
		switch {
		case r.Out.Kind == Preempted, r.Out.Kind == NodeDrained, r.Out.Kind == Yielded, r.Out.Kind == Failed && !r.Out.Final:
			r.Out = limited
		}
		return nil
	}
	r.Out, r.Decided, r.Done = limited, true, true
	if !r.noticeStops() {
		return nil
	}
	r.Done = false
	return r.notice(now, protocol.NoticeReasonTimeLimit, nil, 0)
}

// watchEnded takes one worker's watch ending: a gone worker's capacity is
// released at once, whatever the others do. After a notice, workers that
// exit did what they were asked (the attempt ends once all have) and a
// silent one is only watched for its exit; otherwise the exit is judged.
func (r *Running) watchEnded(now time.Time, w WatchEnded) []Command {
	var cmds []Command
	if w.End == WorkerGone {
		r.exited[w.Worker] = true
		cmds = append(cmds, Release{Worker: w.Worker, Reported: w.Reported})
		if r.Deadline != nil {
			if r.allExited() {
				r.Out.Message += fmt.Sprintf("; its workers exited on the notice, %s before the deadline", r.Deadline.Sub(now).Round(time.Second))
				r.Done = true
				cmds = append(cmds, ExitedOnNotice{})
			}
			return cmds
		}
	}
	if r.Deadline != nil && w.End == Silent {
		return append(cmds, WatchForExit{Worker: w.Worker})
	}
	out, ends, judged := r.judge(w)
	cmds = append(cmds, judged...)
	switch {
	case !ends:
	case r.noticeStops() && w.End == Silent && r.Deadline == nil && !r.Decided:
		// Stuck: the workers are told, and the silent worker is watched
		// again, only for its exit, until they go or the deadline comes.
		r.Out, r.Decided = out, true
		cmds = append(cmds, r.notice(now, protocol.NoticeReasonStuck, nil, 0)...)
		cmds = append(cmds, WatchForExit{Worker: w.Worker})
	default:
		r.Out, r.Done = out, true
	}
	return cmds
}

// allExited says whether every worker of the attempt is gone.
func (r *Running) allExited() bool {
	for _, w := range r.Workers {
		if !r.exited[w.ID] {
			return false
		}
	}
	return true
}

func (r *Running) nodeOf(worker int) string {
	for _, w := range r.Workers {
		if w.ID == worker {
			return w.Node
		}
	}
	return ""
}

// judge says whether a watch's end ends the attempt, and how.
func (r *Running) judge(w WatchEnded) (Outcome, bool, []Command) {
	node := r.nodeOf(w.Worker)
	switch {
	case w.End != WorkerGone && w.Cancelled:
		return stoppedByTheUser, true, nil
	case w.End == NodeSilent:
		return NodeLostAfter(node, r.NodeTimeout), true, []Command{MarkNodeLost{Node: node}}
	case w.End == Silent:
		var cmds []Command
		if r.Health != nil && r.Health.Notify {
			cmds = append(cmds, NotifyStuck{})
		}
		return stuck(r.Health), true, cmds
	case w.End == NodeLostTrack:
		return Outcome{Kind: NodeLost, Message: fmt.Sprintf("node %s lost: %s", node, w.Error)}, true, []Command{MarkNodeLost{Node: node}}
	case w.End == WatchFailed:
		return Outcome{Kind: Failed, Message: fmt.Sprintf("lost track of worker %d: %s", w.Worker, w.Error)}, true, nil
	case w.Code != 0:
		code := w.Code
		msg := fmt.Sprintf("worker %d exited with code %d", w.Worker, code)
		if w.Reason != "" {
			msg += " (" + w.Reason + ")"
		}
		return Outcome{Kind: Failed, Message: msg, ExitCode: &code}, true, nil
	case r.allExited():
		zero := 0
		return Outcome{Kind: Completed, Message: "all workers exited with code 0", ExitCode: &zero}, true, nil
	}
	return Outcome{}, false, nil
}

// NodeLostAfter is the outcome of an attempt whose node's agent did not
// answer for timeout.
func NodeLostAfter(node string, timeout time.Duration) Outcome {
	return Outcome{Kind: NodeLost, Message: fmt.Sprintf("node %s lost: its agent did not answer for %s", node, timeout)}
}

// stuck is the outcome of an attempt whose workers all stopped writing logs
// (health_params): with action restart it reruns, counting against
// max_retry; with action delete the job ends Failed.
func stuck(h *protocol.JobHealth) Outcome {
	msg := fmt.Sprintf("stuck: no worker wrote a log line for %s (health_params.log_period)", h.LogPeriod)
	if h.Action == protocol.HealthActionDelete {
		return Outcome{Kind: Failed, Message: msg + "; health_params.action is delete, so the job is stopped", Final: true}
	}
	return Outcome{Kind: Failed, Message: msg + "; health_params.action is restart", Stuck: true}
}
