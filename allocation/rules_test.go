package allocation

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

const (
	low    = scheduler.Low
	medium = scheduler.Medium
	high   = scheduler.High
)

// ruleCase is one row of a rule table: the state a case starts from (nodes
// and steps), the message (when), the commands wanted, and what else must
// hold of the state after.
type ruleCase struct {
	name  string
	nodes int
	given []step
	when  func(s *State) []Command
	want  []string
	then  func(t *testing.T, s *State)
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := c.nodes
			if n == 0 {
				n = 1
			}
			s := newState(t, n)
			given(t, s, c.given...)
			got := c.when(s)
			assert.Equal(t, c.want, rendered(got), "commands; notes:\n%s", notes(got))
			if c.then != nil {
				c.then(t, s)
			}
		})
	}
}

func request(r protocol.CapacityRequest) func(s *State) []Command {
	return func(s *State) []Command { return s.Request(r, t0) }
}

func isWaiting(job string, attempt int) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		w, ok := s.Pool.Waiting(job)
		require.True(t, ok, "%s waits", job)
		assert.Equal(t, attempt, w.Attempt)
	}
}

func notWaiting(job string) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		_, ok := s.Pool.Waiting(job)
		assert.False(t, ok, "%s does not wait", job)
	}
}

func isHeld(job string, attempt int) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		r, ok := s.Pool.Running(job)
		require.True(t, ok, "%s holds capacity", job)
		assert.Equal(t, attempt, r.Attempt)
	}
}

func notHeld(job string) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		_, ok := s.Pool.Running(job)
		assert.False(t, ok, "%s holds nothing", job)
	}
}

func all(checks ...func(t *testing.T, s *State)) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		for _, c := range checks {
			c(t, s)
		}
	}
}

func TestRequestRules(t *testing.T) {
	fullPool := []step{granted(fixture.Request{Job: "big", Attempt: 1, Class: high, GPUs: 8}.Capacity())} // one node, all 8 GPUs held
	runRules(t, []ruleCase{
		{name: "a new request is queued and a pass asked for",
			when: request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"}, then: isWaiting("j", 1)},
		{name: "a request its job withdrew first is refused, not queued",
			given: []step{withdrawn("j", 1)},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"refuse j#1"}, then: notWaiting("j")},
		{name: "a withdrawal of an earlier attempt does not refuse a later one",
			given: []step{withdrawn("j", 1)},
			when:  request(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"}, then: isWaiting("j", 2)},
		{name: "a request that can never fit is refused",
			when: request(fixture.Request{Job: "huge", Attempt: 1, Class: medium, Workers: 5}.Capacity()), want: []string{"refuse huge#1"}, then: notWaiting("huge")},
		{name: "a request without a job is dropped without an answer",
			when: request(fixture.Request{Job: "", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{}},
		{name: "a repeated request of a waiting attempt keeps its place",
			given: append(slices.Clone(fullPool), queued(fixture.Request{Job: "a", Attempt: 1, Class: medium, Workers: 1}.Capacity()), queued(fixture.Request{Job: "b", Attempt: 1, Class: medium, Workers: 1}.Capacity())),
			when:  request(fixture.Request{Job: "a", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"},
			then: func(t *testing.T, s *State) {
				a, _ := s.Pool.Waiting("a")
				b, _ := s.Pool.Waiting("b")
				assert.Less(t, a.Seq, b.Seq, "a keeps the place before b")
			}},
		{name: "a repeated request of a granted attempt gets its grant again",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"grant j#1"}, then: isHeld("j", 1)},
		{name: "a repeated request of a stopping attempt gets no grant (runs before the gate: left waiting)",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), stopping("j", 1)},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"}, then: isHeld("j", 1)},
		{name: "a repeated request of a stopping attempt asks the job whether it forgot it",
			given: []step{reclaimsForgotten, granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), stopping("j", 1)},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"check-forgotten j#1"}, then: isHeld("j", 1)},
		{name: "so does one of a preempted attempt",
			given: []step{reclaimsForgotten, granted(fixture.Request{Job: "j", Attempt: 1, Class: low, GPUs: 8}.Capacity()),
				queued(fixture.Request{Job: "h", Attempt: 1, Class: high, GPUs: 8}.Capacity()), passed},
			when: request(fixture.Request{Job: "j", Attempt: 1, Class: low, GPUs: 8}.Capacity()), want: []string{"check-forgotten j#1"}, then: isWaiting("h", 1)},
		{name: "a repeated request of a granted attempt is not asked about",
			given: []step{reclaimsForgotten, granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"grant j#1"}, then: isHeld("j", 1)},
		{name: "a repeated request of a held attempt is no new job: a full queue does not refuse it",
			given: []step{func(t *testing.T, s *State) { s.Config.MaxWaiting = 1 }, reclaimsForgotten,
				granted(fixture.Request{Job: "j", Attempt: 1, Class: low, GPUs: 8}.Capacity()),
				queued(fixture.Request{Job: "h", Attempt: 1, Class: high, GPUs: 8}.Capacity()), passed},
			when: request(fixture.Request{Job: "j", Attempt: 1, Class: low, GPUs: 8}.Capacity()), want: []string{"check-forgotten j#1"}},
		{name: "a request older than the held attempt asks the job whether it was reset",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"check-reset j#1"}, then: isHeld("j", 2)},
		{name: "a request older than the waiting attempt asks the job too",
			given: append(slices.Clone(fullPool), queued(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())),
			when:  request(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"check-reset j#1"}, then: isWaiting("j", 2)},
	})
}

func reclaimsForgotten(t *testing.T, s *State) { s.ReclaimsForgotten, s.Epoch = true, "e1" }

// TestForgottenRules: what a job's answer to CheckForgotten does, the pool
// releasing its attempt 1 (it was told to stop).
func TestForgottenRules(t *testing.T) {
	req := fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()
	req2 := fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity()
	releasing := []step{reclaimsForgotten, granted(req), stopping("j", 1)}
	answer := func(hold *protocol.JobHold, err error) func(s *State) []Command {
		return func(s *State) []Command { return s.ForgottenAnswered(req, hold, err) }
	}
	waits := &protocol.JobHold{Job: "j", Phase: protocol.HoldWaiting, Request: req}
	holds := &protocol.JobHold{Job: "j", Phase: protocol.HoldHolding, Request: req}
	movedOn := &protocol.JobHold{Job: "j", Phase: protocol.HoldWaiting, Request: fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity()}
	refusesLateCopies := func(t *testing.T, s *State) {
		late := s.Request(req, t0)
		assert.Equal(t, []string{"refuse j#1"}, rendered(late), "a late copy of the request is told to rerun, not granted again")
		assert.True(t, late[0].(Signal).Arg.(protocol.RefuseSignal).Rerun, "told to rerun, not to fail")
		assert.Equal(t, []string{"schedule"}, rendered(s.Request(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity(), t0)), "the rerun is queued")
	}
	reclaimed := func(t *testing.T, s *State) {
		t.Helper()
		plan, _, ok := s.BeginReclaim("j")
		require.True(t, ok)
		s.ReclaimDone("j", plan)
	}
	runRules(t, []ruleCase{
		{name: "the job waits for the attempt: forgotten, so it is reclaimed and the job told to rerun",
			given: releasing, when: answer(waits, nil), want: []string{"reclaim j", "refuse j#1"},
			then: all(isHeld("j", 1), func(t *testing.T, s *State) {
				var refusal protocol.RefuseSignal
				for _, c := range s.ForgottenAnswered(req, waits, nil) {
					if sig, ok := c.(Signal); ok {
						refusal = sig.Arg.(protocol.RefuseSignal)
					}
				}
				assert.True(t, refusal.Rerun, "the refusal tells the job to rerun, not to fail")
			}, refusesLateCopies)},
		{name: "the job holds the attempt: the request was a copy, dropped",
			given: releasing, when: answer(holds, nil), want: []string{}, then: isHeld("j", 1)},
		{name: "the job has moved on to another attempt: dropped",
			given: releasing, when: answer(movedOn, nil), want: []string{}, then: isHeld("j", 1)},
		{name: "the job's run has ended (or a reset closed it under the question): reclaimed, and its attempt remembered",
			given: releasing, when: answer(nil, nil), want: []string{"reclaim j"}, then: refusesLateCopies},
		{name: "a run reset to an earlier attempt than one given up is told to rerun too, once the reclaim is done",
			given: []step{reclaimsForgotten, granted(req2), stopping("j", 2), func(t *testing.T, s *State) {
				s.ForgottenAnswered(req2, &protocol.JobHold{Job: "j", Phase: protocol.HoldWaiting, Request: req2}, nil)
			}, reclaimed},
			when: request(req), want: []string{"refuse j#1"},
			then: func(t *testing.T, s *State) {
				r := s.Request(req, t0)
				assert.True(t, r[0].(Signal).Arg.(protocol.RefuseSignal).Rerun, "told to rerun as a later attempt, not to fail")
				assert.Equal(t, []string{"schedule"}, rendered(s.Request(fixture.Request{Job: "j", Attempt: 3, Class: medium, Workers: 1}.Capacity(), t0)),
					"an attempt past the one given up is queued")
			}},
		{name: "no answer: dropped, the job's next request check asks again",
			given: releasing, when: answer(nil, errors.New("update timed out")), want: []string{}, then: isHeld("j", 1)},
		{name: "the attempt was released meanwhile: the question is moot",
			given: append(slices.Clone(releasing), func(t *testing.T, s *State) {
				s.Release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}})
			}), when: answer(waits, nil), want: []string{}},
		{name: "an allocator before the gate does not ask",
			given: []step{granted(req), stopping("j", 1)},
			when:  request(req), want: []string{"schedule"}, then: isHeld("j", 1)},
	})
}

func TestQueueCapRules(t *testing.T) {
	capped := func(t *testing.T, s *State) { s.Config.MaxWaiting = 1 }
	fullPool := []step{granted(fixture.Request{Job: "big", Attempt: 1, Class: high, GPUs: 8}.Capacity()), capped, queued(fixture.Request{Job: "first", Attempt: 1, Class: medium, Workers: 1}.Capacity())}
	runRules(t, []ruleCase{
		{name: "a new job past max_waiting is refused",
			given: fullPool, when: request(fixture.Request{Job: "late", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"refuse late#1"}, then: notWaiting("late")},
		{name: "a rerun of an admitted job is not",
			given: fullPool, when: request(fixture.Request{Job: "rerun", Attempt: 2, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"}, then: isWaiting("rerun", 2)},
		{name: "nor a repeated request of a waiting job",
			given: fullPool, when: request(fixture.Request{Job: "first", Attempt: 1, Class: medium, Workers: 1}.Capacity()), want: []string{"schedule"}, then: isWaiting("first", 1)},
	})
}

// TestWorkspaceWaitingLimitRules: team-a may have one medium job waiting.
func TestWorkspaceWaitingLimitRules(t *testing.T) {
	of := func(ws string, r protocol.CapacityRequest) protocol.CapacityRequest { r.Workspace = ws; return r }
	limited := func(t *testing.T, s *State) {
		s.Config.WaitingLimits = protocol.WaitingLimits{{Workspace: "team-a", Class: medium, MaxWaiting: 1}}
	}
	fullPool := []step{granted(fixture.Request{Job: "big", Attempt: 1, Class: high, GPUs: 8}.Capacity()), limited, queued(of("team-a", fixture.Request{Job: "first", Attempt: 1, Class: medium, Workers: 1}.Capacity()))}
	refused := func(t *testing.T, s *State) {
		err := s.Validate(of("team-a", fixture.Request{Job: "late", Attempt: 1, Class: medium, Workers: 1}.Capacity()))
		var full *protocol.WorkspaceQueueFullError
		require.ErrorAs(t, err, &full)
		assert.Equal(t, "team-a has 1 medium job waiting in T/a, its limit (medium.max_waiting 1); try later", full.Error())
	}
	runRules(t, []ruleCase{
		{name: "team-a's second waiting medium job is refused",
			given: fullPool, when: request(of("team-a", fixture.Request{Job: "late", Attempt: 1, Class: medium, Workers: 1}.Capacity())), want: []string{"refuse late#1"}, then: refused},
		{name: "another workspace's is not",
			given: fullPool, when: request(of("team-b", fixture.Request{Job: "other", Attempt: 1, Class: medium, Workers: 1}.Capacity())), want: []string{"schedule"}, then: isWaiting("other", 1)},
		{name: "nor team-a's job of another class",
			given: fullPool, when: request(of("team-a", fixture.Request{Job: "low", Attempt: 1, Class: low, Workers: 1}.Capacity())), want: []string{"schedule"}, then: isWaiting("low", 1)},
		{name: "nor a rerun of team-a's admitted job",
			given: fullPool, when: request(of("team-a", fixture.Request{Job: "rerun", Attempt: 2, Class: medium, Workers: 1}.Capacity())), want: []string{"schedule"}, then: isWaiting("rerun", 2)},
		{name: "once its job starts, team-a may queue another",
			given: append(slices.Clone(fullPool), func(t *testing.T, s *State) { s.Pool.Cancel("big"); s.Pool.Schedule(t0) }),
			when:  request(of("team-a", fixture.Request{Job: "next", Attempt: 1, Class: medium, Workers: 1}.Capacity())), want: []string{"schedule"}, then: isWaiting("next", 1)},
	})
}

func TestResetRules(t *testing.T) {
	answered := func(r protocol.CapacityRequest, attempts []int, err error) func(s *State) []Command {
		return func(s *State) []Command { return s.ResetAnswered(r, attempts, err) }
	}
	fullPool := granted(fixture.Request{Job: "big", Attempt: 1, Class: high, GPUs: 8}.Capacity())
	runRules(t, []ruleCase{
		{name: "a job back at its attempt: the newer held attempt is reclaimed and the request waits for it",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  answered(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity(), []int{1}, nil), want: []string{"reclaim j"},
			then: func(t *testing.T, s *State) {
				require.Len(t, s.AfterReclaim, 1)
				assert.Equal(t, 1, s.AfterReclaim[0].Attempt)
			}},
		{name: "a job at another attempt sent a late duplicate: dropped",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  answered(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity(), []int{2}, nil), want: []string{}, then: isHeld("j", 2)},
		{name: "no answer: dropped, the newer attempt keeps its capacity",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  answered(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity(), nil, assert.AnError), want: []string{}, then: isHeld("j", 2)},
		{name: "the newer attempt ended meanwhile: the request is taken as new",
			when: answered(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity(), []int{1}, nil), want: []string{"requeue j#1"}},
		{name: "a newer waiting attempt is dropped and the request taken",
			given: []step{fullPool, queued(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  answered(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity(), []int{1}, nil), want: []string{"requeue j#1"}, then: notWaiting("j")},
	})
}

func TestWithdrawRules(t *testing.T) {
	withdraw := func(job string, attempt int) func(s *State) []Command {
		return func(s *State) []Command { return s.Withdraw(protocol.WithdrawSignal{Job: job, Attempt: attempt}) }
	}
	fullPool := granted(fixture.Request{Job: "big", Attempt: 1, Class: high, GPUs: 8}.Capacity())
	runRules(t, []ruleCase{
		{name: "a waiting request is dropped",
			given: []step{fullPool, queued(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  withdraw("j", 1), want: []string{}, then: notWaiting("j")},
		{name: "a grant the job never used is freed at once",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  withdraw("j", 1), want: []string{}, then: notHeld("j")},
		{name: "a withdrawal before its request is remembered",
			when: withdraw("j", 1), want: []string{},
			then: func(t *testing.T, s *State) {
				assert.Error(t, s.WithdrawnFirst(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()))
				assert.NoError(t, s.WithdrawnFirst(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity()))
			}},
		{name: "a withdrawal of another attempt leaves the held one alone",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  withdraw("j", 1), want: []string{}, then: isHeld("j", 2)},
	})
}

func TestReleaseAndLostNodeRules(t *testing.T) {
	release := func(r protocol.ReleaseSignal) func(s *State) []Command {
		return func(s *State) []Command { return s.Release(r) }
	}
	fenced := func(node string, cause FenceCause) func(t *testing.T, s *State) {
		return func(t *testing.T, s *State) {
			assert.Contains(t, s.Pool.LostNodes(), node)
			assert.Equal(t, cause, s.FenceOf(node).Cause)
		}
	}
	runRules(t, []ruleCase{
		{name: "a release frees the released workers only",
			nodes: 2,
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 2}.Capacity())},
			when:  release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}}), want: []string{},
			then: func(t *testing.T, s *State) {
				r, _ := s.Pool.Running("j")
				assert.Equal(t, []int{0}, r.Released)
			}},
		{name: "a release of an attempt not held is ignored",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}, LostNodes: []string{"n1"}}),
			want:  []string{}, then: func(t *testing.T, s *State) { assert.Empty(t, s.Pool.LostNodes()) }},
		{name: "a node where workers could not be confirmed stopped is fenced before the release",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}, LostNodes: []string{"n1"}}),
			want:  []string{"fence n1"},
			then: all(fenced("n1", FenceLost), func(t *testing.T, s *State) {
				assert.EqualValues(t, 1, s.Counters.NodesLost)
				assert.Empty(t, s.Pool.Schedule(t0).Grants, "nothing is granted on the fenced node")
			})},
		{name: "a node where the job found its GPUs in use is fenced, saying so",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when: release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Workers: []int{0}, Stopping: true,
				LostNodes: []string{"n1"}, GPUsBusy: []string{"n1"}}),
			want: []string{"fence n1"},
			then: all(fenced("n1", FenceLost), notHeld("j"), func(t *testing.T, s *State) {
				assert.Contains(t, s.FenceOf("n1").Why, "used by a live worker the allocation did not know of")
			})},
		{name: "a node already lost is not fenced twice",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity()), granted(fixture.Request{Job: "k", Attempt: 1, Class: medium, Workers: 1}.Capacity()),
				func(t *testing.T, s *State) { s.NodeLost("n1", "first") }},
			when: func(s *State) []Command { return s.NodeLost("n1", "second") }, want: []string{},
			then: func(t *testing.T, s *State) { assert.EqualValues(t, 1, s.Counters.NodesLost) }},
		{name: "a node a recovery fences turns lost when a worker there is lost",
			given: []step{recovered(holding("j", 1, "n1"))},
			when:  func(s *State) []Command { return s.NodeLost("n1", "agent gone") }, want: []string{"fence n1"},
			then: fenced("n1", FenceLost)},
	})
}

func TestPassRules(t *testing.T) {
	pass := func(s *State) []Command { return s.Pass(t0) }
	runRules(t, []ruleCase{
		{name: "what fits is granted, in queue order",
			given: []step{queued(fixture.Request{Job: "a", Attempt: 1, Class: medium, GPUs: 6}.Capacity()), queued(fixture.Request{Job: "b", Attempt: 1, Class: medium, GPUs: 2}.Capacity()), queued(fixture.Request{Job: "c", Attempt: 1, Class: medium, GPUs: 2}.Capacity())},
			when:  pass, want: []string{"grant a#1", "grant b#1"}, then: isWaiting("c", 1)},
		{name: "a higher class waiting preempts a lower one running",
			given: []step{granted(fixture.Request{Job: "lo", Attempt: 1, Class: low, GPUs: 8}.Capacity()), queued(fixture.Request{Job: "hi", Attempt: 1, Class: high, GPUs: 2}.Capacity())},
			when:  pass, want: []string{"preempt lo#1"},
			then: func(t *testing.T, s *State) { assert.EqualValues(t, 1, s.Counters.Preemptions) }},
		{name: "a preemption carries the allocation's notice",
			given: []step{granted(fixture.Request{Job: "lo", Attempt: 1, Class: low, GPUs: 8}.Capacity()), queued(fixture.Request{Job: "hi", Attempt: 1, Class: high, GPUs: 2}.Capacity()),
				func(t *testing.T, s *State) { s.Config.PreemptionNotice = time.Minute }},
			when: func(s *State) []Command {
				cmds := s.Pass(t0)
				for _, c := range cmds {
					if sig, ok := c.(Signal); ok && sig.Name == protocol.SignalPreempt && sig.Arg.(protocol.PreemptSignal).Notice != time.Minute {
						panic("the preemption lost its notice")
					}
				}
				return cmds
			}, want: []string{"preempt lo#1"}},
		{name: "a class's own notice goes to its victims, and to its grants for its own stops",
			given: []step{granted(fixture.Request{Job: "lo", Attempt: 1, Class: low, GPUs: 8}.Capacity()), queued(fixture.Request{Job: "hi", Attempt: 1, Class: high, GPUs: 2}.Capacity()),
				func(t *testing.T, s *State) {
					s.Config.PreemptionNotice, s.Config.NoticeSignal = time.Minute, "SIGUSR1"
					s.Config.ClassPreemptionNotice = map[string]time.Duration{"low": 10 * time.Second, "high": 0}
				}},
			when: func(s *State) []Command {
				cmds := s.Pass(t0)
				for _, c := range cmds {
					sig, ok := c.(Signal)
					if ok && sig.Name == protocol.SignalPreempt && sig.Arg.(protocol.PreemptSignal).Notice != 10*time.Second {
						panic("the low victim did not get low's notice")
					}
				}
				return cmds
			}, want: []string{"preempt lo#1"},
			then: func(t *testing.T, s *State) {
				s.Release(protocol.ReleaseSignal{Job: "lo", Attempt: 1, Workers: []int{0}})
				for _, c := range s.Pass(t0) {
					if sig, ok := c.(Signal); ok && sig.Name == protocol.SignalGrant {
						g := sig.Arg.(protocol.GrantSignal)
						assert.Zero(t, g.Notice, "high's own notice is 0")
						assert.Equal(t, "SIGUSR1", g.NoticeSignal)
					}
				}
			}},
		{name: "a grant carries the notice of the job's class; a Jupyter server's none",
			given: []step{queued(fixture.Request{Job: "job", Attempt: 1, Class: medium, GPUs: 2}.Capacity()), queued(fixture.Request{Job: "nb", Kind: scheduler.KindNotebook, Class: scheduler.High, GPUs: 2}.Capacity()),
				func(t *testing.T, s *State) { s.Config.PreemptionNotice = time.Minute }},
			when: func(s *State) []Command {
				cmds := s.Pass(t0)
				for _, c := range cmds {
					if sig, ok := c.(Signal); ok && sig.Name == protocol.SignalGrant {
						want := time.Minute
						if sig.Job == "nb" {
							want = 0
						}
						if sig.Arg.(protocol.GrantSignal).Notice != want {
							panic("grant of " + sig.Job + " has the wrong notice")
						}
					}
				}
				return cmds
			}, want: []string{"grant nb#1", "grant job#1"}},
		{name: "nothing on a fenced node",
			given: []step{func(t *testing.T, s *State) { s.NodeLost("n1", "gone") }, queued(fixture.Request{Job: "a", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  pass, want: []string{}, then: isWaiting("a", 1)},
	})
}

// TestPassAtMost: a pass of at most n signals stops after the n-th grant and
// says so; the next pass goes on where it stopped; a pass of at most 0
// decides nothing but says there is more; a preemption counts as a signal.
func TestPassAtMost(t *testing.T) {
	s := newState(t, 1)
	for _, j := range []string{"a", "b", "c", "d", "e"} {
		s.Request(fixture.Request{Job: j, Attempt: 1, Class: medium, GPUs: 2}.Capacity(), t0)
	}
	cmds, more := s.PassAtMost(t0, 0)
	assert.Equal(t, []string{}, rendered(cmds))
	assert.True(t, more)
	cmds, more = s.PassAtMost(t0, 2)
	assert.Equal(t, []string{"grant a#1", "grant b#1"}, rendered(cmds))
	assert.True(t, more)
	cmds, more = s.PassAtMost(t0, 2)
	assert.Equal(t, []string{"grant c#1", "grant d#1"}, rendered(cmds))
	assert.True(t, more, "e is yet to be looked at")
	cmds, more = s.PassAtMost(t0, 2)
	assert.Equal(t, []string{}, rendered(cmds), "the node is full")
	assert.False(t, more)
	assert.EqualValues(t, 4, s.Counters.Grants)
	isWaiting("e", 1)(t, s)

	s.Request(fixture.Request{Job: "hi", Attempt: 1, Class: high, GPUs: 2}.Capacity(), t0)
	s.Request(fixture.Request{Job: "hi2", Attempt: 1, Class: high, GPUs: 2}.Capacity(), t0)
	cmds, more = s.PassAtMost(t0, 1)
	assert.Equal(t, []string{"preempt a#1"}, rendered(cmds), "hi preempts one of the four, all alike: the first by job id")
	assert.True(t, more, "hi2 is yet to be looked at")
}

func TestGrantNotDeliveredRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "a grant whose job is gone is freed and a pass asked for",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  func(s *State) []Command { return s.GrantNotDelivered("j", 1) }, want: []string{"schedule"}, then: notHeld("j")},
		{name: "a later attempt is left alone",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  func(s *State) []Command { return s.GrantNotDelivered("j", 1) }, want: []string{}, then: isHeld("j", 2)},
	})
}

func TestReclaimRules(t *testing.T) {
	begin := func(job string) func(s *State) []Command {
		return func(s *State) []Command { _, cmds, _ := s.BeginReclaim(job); return cmds }
	}
	waitsForReclaim := func(r protocol.CapacityRequest) step {
		return func(t *testing.T, s *State) { s.AfterReclaim = append(s.AfterReclaim, r) }
	}
	runRules(t, []ruleCase{
		{name: "a vanished job that holds nothing is done at once, and what waited for it is taken",
			given: []step{func(t *testing.T, s *State) { s.Orphans = []string{"j"} }, waitsForReclaim(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when:  begin("j"), want: []string{"requeue j#1"},
			then: func(t *testing.T, s *State) { assert.Empty(t, s.Orphans); assert.Empty(t, s.AfterReclaim) }},
		{name: "a held one becomes an orphan until its workers stop",
			nodes: 2,
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 2}.Capacity())},
			when:  begin("j"), want: []string{},
			then: func(t *testing.T, s *State) { assert.Equal(t, []string{"j"}, s.Orphans) }},
		{name: "once stopped its capacity is freed and what waited is taken",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 2, Class: medium, Workers: 1}.Capacity()), waitsForReclaim(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when: func(s *State) []Command {
				plan, _, _ := s.BeginReclaim("j")
				cmds, counted := s.ReclaimDone("j", plan)
				if !counted {
					return nil
				}
				return cmds
			},
			want: []string{"requeue j#1", "schedule"},
			then: all(notHeld("j"), func(t *testing.T, s *State) {
				assert.Empty(t, s.Orphans)
				assert.EqualValues(t, 1, s.Counters.Reclaimed)
			})},
		{name: "a reclaim that outlived a recovery changes nothing in the rebuilt pool",
			given: []step{granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 1}.Capacity())},
			when: func(s *State) []Command {
				plan, _, _ := s.BeginReclaim("j")
				// The recovery finds j holding attempt 1 again (a new
				// run of it, with the same number).
				if _, _, err := s.Recovered("e2", t0, Registered{Holds: []protocol.JobHold{holding("j", 1, "n1")}}); err != nil {
					panic(err)
				}
				cmds, counted := s.ReclaimDone("j", plan)
				if counted {
					return append(cmds, Note{Text: "counted"})
				}
				return cmds
			},
			want: []string{}, then: isHeld("j", 1)},
	})
	t.Run("the plan skips released workers", func(t *testing.T) {
		s := newState(t, 3)
		given(t, s, granted(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 3}.Capacity()))
		s.Release(protocol.ReleaseSignal{Job: "j", Attempt: 1, Stopping: true, Workers: []int{1}})
		plan, _, ok := s.BeginReclaim("j")
		require.True(t, ok)
		assert.Equal(t, []int{0, 2}, []int{plan.Workers[0].Worker, plan.Workers[1].Worker})
		assert.Equal(t, []string{"n1", "n3"}, plan.Nodes)
	})
}

func TestFenceRules(t *testing.T) {
	t.Run("an answer that kept a worker no longer held is stale", func(t *testing.T) {
		s := newState(t, 1)
		given(t, s, granted(fixture.Request{Job: "a", Attempt: 1, Class: medium, Workers: 1}.Capacity()), granted(fixture.Request{Job: "b", Attempt: 1, Class: medium, Workers: 1}.Capacity()))
		s.NodeLost("n1", "a's watch lost")
		keep := s.WorkersOn("n1")
		require.ElementsMatch(t, keep, []any{worker("a", 1, 0), worker("b", 1, 0)})
		// b's watch is lost too while the fence waits: b gives its worker up.
		s.Release(protocol.ReleaseSignal{Job: "b", Attempt: 1, Stopping: true, Workers: []int{0}, LostNodes: []string{"n1"}})
		_, stale := s.FenceAnswerStale("n1", keep)
		assert.True(t, stale, "the agent kept b's worker, which may still run")
		_, stale = s.FenceAnswerStale("n1", s.WorkersOn("n1"))
		assert.False(t, stale, "a fence that kept only what is held now counts")
	})
	runRules(t, []ruleCase{
		{name: "a node whose agent answered comes back and a pass is asked for",
			given: []step{func(t *testing.T, s *State) { s.NodeLost("n1", "gone") }},
			when:  func(s *State) []Command { return s.NodeBack("n1", 2) }, want: []string{"schedule"},
			then: func(t *testing.T, s *State) { assert.Empty(t, s.Pool.LostNodes()); assert.Empty(t, s.Fences) }},
		{name: "a recovery's fence that times out turns the node lost",
			given: []step{recovered()},
			when:  func(s *State) []Command { cmds, _ := s.FenceTimedOut("n1"); return cmds }, want: []string{},
			then: func(t *testing.T, s *State) {
				assert.Equal(t, FenceLost, s.FenceOf("n1").Cause)
				assert.EqualValues(t, 1, s.Counters.NodesLost)
			}},
		{name: "a lost node's fence timing out again changes nothing",
			given: []step{func(t *testing.T, s *State) { s.NodeLost("n1", "gone") }},
			when:  func(s *State) []Command { cmds, _ := s.FenceTimedOut("n1"); return cmds }, want: []string{},
			then: func(t *testing.T, s *State) { assert.EqualValues(t, 1, s.Counters.NodesLost) }},
		{name: "a run fences again what the previous run left fenced",
			nodes: 2,
			given: []step{func(t *testing.T, s *State) { s.NodeLost("n2", "gone") }},
			when:  func(s *State) []Command { return s.FencesCarried() }, want: []string{"fence n2"},
			then: func(t *testing.T, s *State) { assert.Equal(t, FenceLost, s.FenceOf("n2").Cause) }},
	})
}

func TestReconfigureRules(t *testing.T) {
	reconfigure := func(in protocol.AllocatorInput) func(s *State) []Command {
		return func(s *State) []Command {
			_, cmds, err := s.Reconfigure(in)
			if err != nil {
				panic(err)
			}
			return cmds
		}
	}
	twoNodes := input(2)
	oneNode := input(1)
	runRules(t, []ruleCase{
		{name: "the same config changes nothing",
			when: reconfigure(input(1)), want: []string{}},
		{name: "an added node is fenced until its agent confirms",
			when: reconfigure(twoNodes), want: []string{"fence n2", "schedule"},
			then: func(t *testing.T, s *State) { assert.Equal(t, FenceAdded, s.FenceOf("n2").Cause) }},
		{name: "a node removed while fenced is fenced when added back",
			nodes: 2,
			given: []step{func(t *testing.T, s *State) { s.NodeLost("n2", "gone") }, configured(oneNode)},
			when:  reconfigure(twoNodes), want: []string{"fence n2", "schedule"}},
		{name: "a waiting job that no longer fits is refused",
			nodes: 2,
			given: []step{queued(fixture.Request{Job: "j", Attempt: 1, Class: medium, Workers: 2}.Capacity())},
			when:  reconfigure(oneNode),
			want:  []string{"refuse j#1", "schedule"}, then: notWaiting("j")},
		{name: "a waiting job over a lowered workspace cap is refused; other workspaces and classes wait on",
			given: []step{
				queued(fixture.Request{Job: "j", Attempt: 1, Class: medium, GPUs: 4, Workspace: "team-a"}.Capacity()),
				queued(fixture.Request{Job: "k", Attempt: 1, Class: medium, GPUs: 4, Workspace: "team-b"}.Capacity()),
				queued(fixture.Request{Job: "l", Attempt: 1, Class: high, GPUs: 4, Workspace: "team-a"}.Capacity()),
			},
			when: func(s *State) []Command {
				s.RefusesOverCap = true
				in := input(1)
				in.Policy.Limits = []scheduler.Limit{{Workspace: "team-a", Class: medium, MaxGPUs: 2}}
				_, cmds, err := s.Reconfigure(in)
				if err != nil {
					panic(err)
				}
				_, refused := s.RefuseOverCap()
				return append(cmds, refused...)
			},
			want: []string{"schedule", "refuse j#1", "schedule"},
			then: func(t *testing.T, s *State) {
				notWaiting("j")(t, s)
				isWaiting("k", 1)(t, s)
				isWaiting("l", 1)(t, s)
			}},
		{name: "a changed preemption_notice takes effect",
			when: func(s *State) []Command {
				in := input(1)
				in.PreemptionNotice = 2 * time.Minute
				reply, cmds, _ := s.Reconfigure(in)
				if !reply.Changed || s.Config.PreemptionNotice != 2*time.Minute {
					panic("preemption_notice was not applied")
				}
				return cmds
			},
			want: []string{"schedule"}},
		{name: "a changed reserve_after alone takes effect",
			when: func(s *State) []Command {
				in := input(1)
				in.Policy.ReserveAfter = 7 * time.Minute
				reply, cmds, _ := s.Reconfigure(in)
				if !reply.Changed || s.Pool.Policy().ReserveAfter != 7*time.Minute {
					panic("reserve_after was not applied")
				}
				return cmds
			},
			want: []string{"schedule"}},
	})
}

func TestRegisterRules(t *testing.T) {
	adopt := func(node string, h protocol.JobHold, found ...int) func(s *State) []Command {
		return func(s *State) []Command {
			var workers []cluster.WorkerID
			for _, w := range found {
				workers = append(workers, worker(h.Job, h.Request.Attempt, w))
			}
			return s.AdoptStranger(node, h, workers)
		}
	}
	runRules(t, []ruleCase{
		{name: "a recovery adopts the holds, queues the waiting and fences every node",
			nodes: 2,
			when: func(s *State) []Command {
				_, cmds, err := s.Recovered("e2", t0, Registered{Holds: []protocol.JobHold{
					holding("a", 1, "n1"), waitingHold(fixture.Request{Job: "w", Attempt: 1, Class: medium, Workers: 1}.Capacity()), waitingHold(fixture.Request{Job: "never", Attempt: 1, Class: medium, Workers: 5}.Capacity()),
				}})
				if err != nil {
					panic(err)
				}
				return cmds
			},
			want: []string{"refuse never#1", "fence n1", "fence n2"},
			then: all(isHeld("a", 1), isWaiting("w", 1), func(t *testing.T, s *State) {
				assert.Equal(t, "e2", s.Epoch)
				assert.EqualValues(t, 1, s.Counters.Recoveries)
				assert.Equal(t, FenceRecovering, s.FenceOf("n2").Cause)
			})},
		{name: "a recovery supersedes the old orphans and requests waiting for a reclaim",
			given: []step{func(t *testing.T, s *State) {
				s.Orphans = []string{"x"}
				s.AfterReclaim = []protocol.CapacityRequest{fixture.Request{Job: "x", Attempt: 1, Class: medium, Workers: 1}.Capacity()}
			}, recovered()},
			when: func(s *State) []Command { return nil }, want: []string{},
			then: func(t *testing.T, s *State) { assert.Empty(t, s.Orphans); assert.Empty(t, s.AfterReclaim) }},
		{name: "a stranger that holds the worker found is adopted",
			given: []step{recovered(), nodeUp("n1")},
			when:  adopt("n1", holding("s", 1, "n1"), 0), want: []string{}, then: isHeld("s", 1)},
		{name: "a stranger whose found worker is of another attempt is not",
			given: []step{recovered(), nodeUp("n1")},
			when: func(s *State) []Command {
				return s.AdoptStranger("n1", holding("s", 2, "n1"), []cluster.WorkerID{worker("s", 1, 0)})
			},
			want: []string{}, then: notHeld("s")},
		{name: "a stranger the pool already has is left to the fence",
			given: []step{granted(fixture.Request{Job: "s", Attempt: 2, Class: medium, Workers: 1}.Capacity())},
			when:  adopt("n1", holding("s", 1, "n1"), 0), want: []string{}, then: isHeld("s", 2)},
		{name: "a stranger that waits is queued and a pass asked for",
			when: adopt("", waitingHold(fixture.Request{Job: "w", Attempt: 1, Class: medium, Workers: 1}.Capacity())), want: []string{"schedule"}, then: isWaiting("w", 1)},
		{name: "a stranger that withdrew first is not adopted",
			given: []step{withdrawn("w", 1)},
			when:  adopt("", waitingHold(fixture.Request{Job: "w", Attempt: 1, Class: medium, Workers: 1}.Capacity())), want: []string{}, then: notWaiting("w")},
	})
}

// TestCarryRestoresTheSameState: what a run carries over reads back into the
// same state, fences and all.
func TestCarryRestoresTheSameState(t *testing.T) {
	s := newState(t, 2)
	given(t, s, granted(fixture.Request{Job: "a", Attempt: 1, Class: medium, GPUs: 2}.Capacity()), granted(fixture.Request{Job: "b", Attempt: 1, Class: medium, GPUs: 4}.Capacity()), queued(fixture.Request{Job: "c", Attempt: 1, Class: high, GPUs: 8}.Capacity()),
		withdrawn("late", 1), func(t *testing.T, s *State) { s.NodeLost("n2", "gone"); s.Orphans = []string{"b"} })
	next, packed, err := s.Carry()
	require.NoError(t, err)
	r, err := Restore(next, packed)
	require.NoError(t, err)
	again, packedAgain, err := r.Carry()
	require.NoError(t, err)
	assert.Equal(t, next, again)
	assert.Equal(t, packed, packedAgain)
	assert.Equal(t, s.Fences, r.Fences)
	assert.Equal(t, s.Explain("c"), r.Explain("c"))
}

// TestRulesDoNotImportTemporal keeps the rules pure: nothing in this package
// may call the Temporal SDK (it would make a rule depend on the workflow's
// context and its tests on the test environment).
func TestRulesDoNotImportTemporal(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			assert.False(t, strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), "go.temporal.io/"), "%s imports %s", f, imp.Path.Value)
		}
	}
}

func TestOrphansToResume(t *testing.T) {
	s := newState(t, 1)
	given(t, s, granted(fixture.Request{Job: "y", Attempt: 1, Class: medium, GPUs: 2}.Capacity()), granted(fixture.Request{Job: "z", Attempt: 1, Class: medium, GPUs: 2}.Capacity()))
	s.Orphans = []string{"x", "y", "z"} // x's capacity was freed meanwhile
	resumed := s.OrphansToResume()
	assert.Equal(t, []string{"x", "y", "z"}, resumed, "every orphan is reclaimed")
	for _, job := range resumed {
		s.BeginReclaim(job)
	}
	assert.Equal(t, []string{"x", "y", "z"}, resumed, "reclaiming an orphan that holds nothing does not change the list walked")
}

// TestNoteBuild: a run knows the builds its allocation ran on, so that two
// builds taking turns hand the run over once each, and the list stays short.
func TestNoteBuild(t *testing.T) {
	s := newState(t, 1)
	assert.True(t, s.RanOn(""), "an unnamed build is never new")
	s.NoteBuild("")
	assert.Empty(t, s.Builds)
	s.NoteBuild("a")
	s.NoteBuild("b")
	s.NoteBuild("a")
	assert.Equal(t, []string{"a", "b"}, s.Builds)
	assert.True(t, s.RanOn("a"))
	assert.False(t, s.RanOn("c"))
	for i := range 2 * maxBuildsKept {
		s.NoteBuild(fmt.Sprintf("build-%d", i))
	}
	assert.Len(t, s.Builds, maxBuildsKept)
	assert.Equal(t, fmt.Sprintf("build-%d", 2*maxBuildsKept-1), s.Builds[maxBuildsKept-1], "the latest is kept")
	next, packed, err := s.Carry()
	require.NoError(t, err)
	r, err := Restore(next, packed)
	require.NoError(t, err)
	assert.Equal(t, s.Builds, r.Builds, "carried through continue-as-new")
}
