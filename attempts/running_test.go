package attempts

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// runningCase is one row of the running attempt's rule table: the grant's
// notice and the job's health_params, the events that came before (given,
// a minute apart), the event (when, a minute after them), the commands
// wanted, and what must hold of the attempt after.
type runningCase struct {
	name   string
	notice time.Duration
	health *protocol.JobHealth
	given  []Event
	when   Event
	want   []string
	then   func(t *testing.T, r *Running)
}

func runRunning(t *testing.T, cases []runningCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRunning([]Worker{{ID: 0, Node: "n1"}, {ID: 1, Node: "n2"}}, c.notice, time.Minute, c.health)
			now := t0
			for _, e := range c.given {
				r.On(now, e)
				now = now.Add(time.Minute)
			}
			assert.Equal(t, c.want, rendered(r.On(now, c.when)))
			if c.then != nil {
				c.then(t, r)
			}
		})
	}
}

func rendered(cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		switch c := c.(type) {
		case GiveNotice:
			by := ""
			if c.By != nil {
				by = fmt.Sprintf(" by %s %s", c.By.Class, c.By.Kind)
			}
			out = append(out, fmt.Sprintf("notice %s %s%s", c.Reason, c.Notice, by))
		case Release:
			s := fmt.Sprintf("release %d", c.Worker)
			if c.Reported {
				s += " reported"
			}
			out = append(out, s)
		case WatchForExit:
			out = append(out, fmt.Sprintf("watch %d for its exit", c.Worker))
		case MarkNodeLost:
			out = append(out, "node lost "+c.Node)
		case NotifyStuck:
			out = append(out, "notify stuck")
		case ExitedOnNotice:
			out = append(out, "exited on notice")
		default:
			out = append(out, fmt.Sprintf("%T", c))
		}
	}
	return out
}

// ends says the attempt ends now with an outcome of kind whose message holds text.
func ends(kind Kind, text string) func(t *testing.T, r *Running) {
	return func(t *testing.T, r *Running) {
		t.Helper()
		assert.True(t, r.Done, "the attempt ends now")
		assert.Equal(t, kind, r.Out.Kind, "outcome %+v", r.Out)
		assert.Contains(t, r.Out.Message, text)
	}
}

// endsAtDeadline says the attempt will end with kind at the deadline the
// workers were told of, deadlineIn after t0 (0: none given).
func endsAtDeadline(kind Kind, text string, deadlineIn time.Duration) func(t *testing.T, r *Running) {
	return func(t *testing.T, r *Running) {
		t.Helper()
		assert.False(t, r.Done, "the attempt goes on until its workers exit or the deadline")
		assert.True(t, r.Decided)
		assert.Equal(t, kind, r.Out.Kind, "outcome %+v", r.Out)
		assert.Contains(t, r.Out.Message, text)
		require.NotNil(t, r.Deadline, "the workers were told")
		assert.Equal(t, t0.Add(deadlineIn), *r.Deadline)
	}
}

func goesOn(t *testing.T, r *Running) {
	t.Helper()
	assert.False(t, r.Done)
	assert.False(t, r.Decided)
}

var (
	byHigh   = scheduler.Preemptor{Job: "urgent", Class: scheduler.High, Kind: scheduler.KindJob}
	byOther  = scheduler.Preemptor{Job: "other", Class: scheduler.High, Kind: scheduler.KindJob}
	restart  = &protocol.JobHealth{LogPeriod: 10 * time.Minute, Action: protocol.HealthActionRestart, Notify: true}
	deleteIt = &protocol.JobHealth{LogPeriod: 10 * time.Minute, Action: protocol.HealthActionDelete}
)

func preempt(notice time.Duration) Preempt {
	return Preempt{Preemptor: byHigh, Reason: "a high job needs the capacity", Notice: notice}
}

func gone(worker, code int) WatchEnded {
	return WatchEnded{Worker: worker, End: WorkerGone, Code: code}
}

func TestPreemptions(t *testing.T) {
	runRunning(t, []runningCase{
		{name: "a preemption without a notice ends the attempt at once",
			when: preempt(0), want: nil,
			then: ends(Preempted, "preempted by urgent (high job): a high job needs the capacity")},
		{name: "a preemption with a notice tells the workers and ends at its deadline",
			when: preempt(5 * time.Minute), want: []string{"notice preempted 5m0s by high job"},
			then: endsAtDeadline(Preempted, "preempted by urgent", 5*time.Minute)},
		{name: "the deadline ends a noticed preemption",
			given: []Event{preempt(5 * time.Minute)}, when: DeadlinePassed{}, want: nil,
			then: ends(Preempted, "preempted by urgent")},
		{name: "a second preemption during a notice changes nothing",
			notice: 5 * time.Minute, given: []Event{preempt(5 * time.Minute)},
			when: Preempt{Preemptor: byOther, Reason: "another", Notice: 5 * time.Minute}, want: nil,
			then: endsAtDeadline(Preempted, "preempted by urgent", 5*time.Minute)},
		{name: "a loan due yields with the loan's notice reason",
			when: Preempt{Preemptor: byHigh, Reason: "its reservation starts", Loan: true, Notice: time.Minute},
			want: []string{"notice loan_due 1m0s by high job"},
			then: endsAtDeadline(Yielded, "yielded its loan to urgent (high job): its reservation starts", time.Minute)},
		{name: "a move for a gang yields with the defragment notice reason",
			when: Preempt{Preemptor: byHigh, Reason: "moved out of rack r1", Move: true, Notice: time.Minute},
			want: []string{"notice defragment 1m0s by high job"},
			then: endsAtDeadline(Yielded, "moved to make room for urgent (high job): moved out of rack r1", time.Minute)},
		{name: "a drain with a notice moves the job at the deadline",
			when: Preempt{Drain: "n1", Reason: "node n1 is drained", Notice: 2 * time.Minute},
			want: []string{"notice node_drain 2m0s"},
			then: endsAtDeadline(NodeDrained, "moved: node n1 is drained", 2*time.Minute)},
		{name: "a drain without a notice moves the job at once",
			when: Preempt{Drain: "n1", Reason: "node n1 is drained"}, want: nil,
			then: ends(NodeDrained, "moved: node n1 is drained")},
		{name: "a grant without notices: a preemption during another's notice ends the attempt at once",
			given: []Event{preempt(5 * time.Minute)}, when: Preempt{Preemptor: byOther, Reason: "another"}, want: nil,
			then: ends(Preempted, "preempted by other")},
		{name: "a preemption during a stuck notice changes nothing",
			notice: 5 * time.Minute, health: restart, given: []Event{WatchEnded{Worker: 0, End: Silent}},
			when: preempt(5 * time.Minute), want: nil,
			then: endsAtDeadline(Failed, "stuck", 5*time.Minute)},
	})
}

func TestCancellations(t *testing.T) {
	runRunning(t, []runningCase{
		{name: "a cancel without notices stops at once",
			when: Cancel{}, want: nil, then: ends(Cancelled, "stopped by the user")},
		{name: "a cancel where the grant gives notices tells the workers",
			notice: 3 * time.Minute, when: Cancel{}, want: []string{"notice cancelled 3m0s"},
			then: endsAtDeadline(Cancelled, "stopped by the user", 3*time.Minute)},
		{name: "a cancel during a preemption's notice keeps its deadline and ends as a cancel",
			notice: 5 * time.Minute, given: []Event{preempt(5 * time.Minute)}, when: Cancel{}, want: nil,
			then: endsAtDeadline(Cancelled, "stopped by the user", 5*time.Minute)},
		{name: "a watch that fails while the job is cancelled ends as a cancel",
			when: WatchEnded{Worker: 1, End: WatchFailed, Error: "context canceled", Cancelled: true}, want: nil,
			then: ends(Cancelled, "stopped by the user")},
	})
}

func TestTimeLimits(t *testing.T) {
	runRunning(t, []runningCase{
		{name: "the time limit stops at once without notices",
			when: TimeLimitReached{Minutes: 90}, want: nil,
			then: ends(TimeLimit, "stopped by its stop_timer after 90 minutes of running")},
		{name: "the time limit tells the workers where the grant gives notices",
			notice: 5 * time.Minute, when: TimeLimitReached{Minutes: 90}, want: []string{"notice time_limit 5m0s"},
			then: endsAtDeadline(TimeLimit, "stop_timer", 5*time.Minute)},
		{name: "the time limit during a preemption's notice: no rerun, the deadline stands",
			notice: 5 * time.Minute, given: []Event{preempt(5 * time.Minute)}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(TimeLimit, "stop_timer", 5*time.Minute)},
		{name: "the time limit during a stuck notice that would rerun: no rerun",
			notice: 5 * time.Minute, health: restart, given: []Event{WatchEnded{Worker: 0, End: Silent}}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(TimeLimit, "stop_timer", 5*time.Minute)},
		{name: "the time limit during a loan's notice: no rerun",
			notice: 5 * time.Minute, given: []Event{Preempt{Preemptor: byHigh, Loan: true, Notice: 5 * time.Minute}}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(TimeLimit, "stop_timer", 5*time.Minute)},
		{name: "the time limit during a drain's notice: no rerun",
			notice: 5 * time.Minute, given: []Event{Preempt{Drain: "n1", Reason: "drained", Notice: 5 * time.Minute}}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(TimeLimit, "stop_timer", 5*time.Minute)},
		{name: "the time limit during a stuck notice that ends the job anyway keeps its end",
			notice: 5 * time.Minute, health: deleteIt, given: []Event{WatchEnded{Worker: 0, End: Silent}}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(Failed, "action is delete", 5*time.Minute)},
		{name: "a grant without notices: the time limit during a preemption's notice stops at once",
			given: []Event{preempt(5 * time.Minute)}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: ends(TimeLimit, "stop_timer")},
		{name: "the time limit during a cancel's notice stays a cancel",
			notice: 5 * time.Minute, given: []Event{Cancel{}}, when: TimeLimitReached{Minutes: 90}, want: nil,
			then: endsAtDeadline(Cancelled, "stopped by the user", 5*time.Minute)},
		{name: "a notebook's shutdown stops it as a time limit",
			when: Shutdown{Message: "stopped: idle for 1h"}, want: nil, then: ends(TimeLimit, "stopped: idle for 1h")},
		{name: "a shutdown after the attempt's end was decided changes nothing",
			notice: 5 * time.Minute, given: []Event{preempt(5 * time.Minute)}, when: Shutdown{Message: "stopped: idle for 1h"}, want: nil,
			then: endsAtDeadline(Preempted, "preempted by urgent", 5*time.Minute)},
	})
}

func TestWorkerExits(t *testing.T) {
	runRunning(t, []runningCase{
		{name: "a worker that exits 0 is released; the others run on",
			when: gone(0, 0), want: []string{"release 0"}, then: goesOn},
		{name: "a release the node reported is not reported again",
			when: WatchEnded{Worker: 0, End: WorkerGone, Reported: true}, want: []string{"release 0 reported"}, then: goesOn},
		{name: "the last worker to exit 0 completes the attempt",
			given: []Event{gone(1, 0)}, when: gone(0, 0), want: []string{"release 0"},
			then: ends(Completed, "all workers exited with code 0")},
		{name: "a worker that fails ends the attempt",
			when: WatchEnded{Worker: 1, End: WorkerGone, Code: 3, Reason: "OOMKilled"}, want: []string{"release 1"},
			then: func(t *testing.T, r *Running) {
				ends(Failed, "worker 1 exited with code 3 (OOMKilled)")(t, r)
				require.NotNil(t, r.Out.ExitCode)
				assert.Equal(t, 3, *r.Out.ExitCode)
			}},
		{name: "workers that exit on their notice end the attempt once all have, before the deadline",
			given: []Event{preempt(5 * time.Minute), gone(1, 143)}, when: gone(0, 1),
			want: []string{"release 0", "exited on notice"},
			then: ends(Preempted, "its workers exited on the notice, 3m0s before the deadline")},
		{name: "a worker that exits on its notice, whatever its code, is not a failure",
			given: []Event{preempt(5 * time.Minute)}, when: gone(1, 1), want: []string{"release 1"},
			then: endsAtDeadline(Preempted, "preempted by urgent", 5*time.Minute)},
		{name: "a node whose agent is silent is lost",
			when: WatchEnded{Worker: 1, End: NodeSilent, Error: "timeout"}, want: []string{"node lost n2"},
			then: ends(NodeLost, "node n2 lost: its agent did not answer for 1m0s")},
		{name: "a node that lost track of its worker is lost",
			when: WatchEnded{Worker: 0, End: NodeLostTrack, Error: "pod phase Unknown"}, want: []string{"node lost n1"},
			then: ends(NodeLost, "node n1 lost: pod phase Unknown")},
		{name: "a worker that exits non-zero while the job is cancelled fails the attempt",
			when: WatchEnded{Worker: 1, End: WorkerGone, Code: 2, Cancelled: true}, want: []string{"release 1"},
			then: ends(Failed, "worker 1 exited with code 2")},
		{name: "a watch that fails otherwise fails the attempt",
			when: WatchEnded{Worker: 0, End: WatchFailed, Error: "worker not found"}, want: nil,
			then: ends(Failed, "lost track of worker 0: worker not found")},
	})
}

func TestStuck(t *testing.T) {
	runRunning(t, []runningCase{
		{name: "stuck without notices ends the attempt to rerun, and notifies",
			health: restart, when: WatchEnded{Worker: 0, End: Silent}, want: []string{"notify stuck"},
			then: func(t *testing.T, r *Running) {
				ends(Failed, "health_params.action is restart")(t, r)
				assert.True(t, r.Out.Stuck)
				assert.False(t, r.Out.Final)
			}},
		{name: "stuck with action delete ends the job for good",
			health: deleteIt, when: WatchEnded{Worker: 0, End: Silent}, want: nil,
			then: func(t *testing.T, r *Running) {
				ends(Failed, "action is delete")(t, r)
				assert.True(t, r.Out.Final)
			}},
		{name: "stuck where the grant gives notices tells the workers and watches the silent one for its exit",
			notice: 5 * time.Minute, health: restart, when: WatchEnded{Worker: 0, End: Silent},
			want: []string{"notify stuck", "notice stuck 5m0s", "watch 0 for its exit"},
			then: endsAtDeadline(Failed, "stuck", 5*time.Minute)},
		{name: "silent during a notice: watched again for its exit, the deadline stands",
			notice: 5 * time.Minute, given: []Event{preempt(5 * time.Minute)}, when: WatchEnded{Worker: 0, End: Silent},
			want: []string{"watch 0 for its exit"}, then: endsAtDeadline(Preempted, "preempted by urgent", 5*time.Minute)},
		{name: "silent as the job is cancelled, where the grant gives notices: the cancel's end after a notice",
			notice: 5 * time.Minute, health: restart, when: WatchEnded{Worker: 0, End: Silent, Cancelled: true},
			want: []string{"notice stuck 5m0s", "watch 0 for its exit"},
			then: endsAtDeadline(Cancelled, "stopped by the user", 5*time.Minute)},
		{name: "stuck after a cancel that gave no notice yet: the cancel's end stands",
			health: restart, given: []Event{Cancel{}}, when: WatchEnded{Worker: 0, End: Silent, Cancelled: true}, want: nil,
			then: ends(Cancelled, "stopped by the user")},
	})
}

// TestRulesKeepTheirDeadline: whatever two events come in whatever order, a
// deadline once given never moves, the deadline ends the attempt, and an
// attempt that ends says why.
func TestRulesKeepTheirDeadline(t *testing.T) {
	events := []Event{preempt(5 * time.Minute), preempt(0), Cancel{}, TimeLimitReached{Minutes: 1},
		Shutdown{Message: "idle"}, gone(0, 0), gone(1, 2), WatchEnded{Worker: 0, End: Silent}, WatchEnded{Worker: 1, End: NodeSilent},
		Preempt{Drain: "n1", Notice: time.Minute}}
	for _, notice := range []time.Duration{0, 5 * time.Minute} {
		for _, first := range events {
			for _, second := range events {
				r := NewRunning([]Worker{{ID: 0, Node: "n1"}, {ID: 1, Node: "n2"}}, notice, time.Minute, restart)
				r.On(t0, first)
				deadline := r.Deadline
				if !r.Done {
					r.On(t0.Add(time.Minute), second) // the shell stops at Done
				}
				if r.Deadline != nil && !r.Done {
					r.On(*r.Deadline, DeadlinePassed{}) // the shell's timer, only once the workers were told
					assert.True(t, r.Done)
				}
				if deadline != nil {
					require.NotNil(t, r.Deadline)
					assert.Equal(t, *deadline, *r.Deadline, "notice %s: %T then %T moved the deadline", notice, first, second)
				}
				if r.Done {
					assert.NotEmpty(t, r.Out.Message, "notice %s: %T then %T: done without a why", notice, first, second)
				}
			}
		}
	}
}
