package allocation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// drained: an operator drains node.
func drained(node string) step {
	return func(t *testing.T, s *State) { s.Drain(protocol.DrainRequest{Node: node, Reason: "disk swap"}) }
}

//nolint:unparam // the call names the node drained; the tests all drain n1 today
func drain(node string) func(s *State) []Command {
	return func(s *State) []Command {
		_, cmds := s.Drain(protocol.DrainRequest{Node: node, Reason: "disk swap"})
		return cmds
	}
}

func undrain(node string) func(s *State) []Command {
	return func(s *State) []Command {
		_, cmds := s.Drain(protocol.DrainRequest{Node: node, Undrain: true})
		return cmds
	}
}

// grantsNothingOn says a pass grants nothing on node to a fresh request.
func grantsNothingOn(node string) func(t *testing.T, s *State) {
	return func(t *testing.T, s *State) {
		t.Helper()
		s.Request(fixture.Request{Job: "probe", Attempt: 1, Class: high, GPUs: 8}.Capacity(), t0)
		s.Pass(t0)
		if r, ok := s.Pool.Running("probe"); ok {
			for _, p := range r.Placement {
				assert.NotEqual(t, node, p.Node, "granted on drained node %s", node)
			}
		}
	}
}

func TestDrainRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "a drain tells the jobs on the node to leave, with their class's notice, and nothing starts there",
			nodes: 2,
			given: []step{granted(fixture.Request{Job: "a", Attempt: 1, Class: low, GPUs: 8}.Capacity()), granted(fixture.Request{Job: "b", Attempt: 1, Class: medium, GPUs: 8}.Capacity()),
				func(t *testing.T, s *State) {
					s.Config.PreemptionNotice = time.Minute
					s.Config.ClassPreemptionNotice = map[string]time.Duration{"low": 10 * time.Second}
				}},
			when: drain("n1"), want: []string{"preempt a#1", "schedule"},
			then: func(t *testing.T, s *State) {
				assert.Equal(t, []string{"n1"}, s.Pool.LostNodes())
				assert.Empty(t, s.Fenced(), "a drain is no fence")
				require.Len(t, s.Drained(), 1)
				assert.Equal(t, "drained: disk swap", s.Drained()[0].Reason)
				grantsNothingOn("n1")(t, s)
			}},
		{name: "the preempt signal of a drain names the node and carries the notice, no preemptor",
			given: []step{granted(fixture.Request{Job: "a", Attempt: 1, Class: low, GPUs: 8}.Capacity()), func(t *testing.T, s *State) { s.Config.PreemptionNotice = time.Minute }},
			when: func(s *State) []Command {
				cmds := drain("n1")(s)
				for _, c := range cmds {
					if sig, ok := c.(Signal); ok {
						p := sig.Arg.(protocol.PreemptSignal)
						if p.Drain != "n1" || p.Notice != time.Minute || p.Preemptor != (scheduler.Preemptor{}) || sig.IfGone != GoneReclaim {
							panic("the drain's signal is wrong")
						}
					}
				}
				return cmds
			}, want: []string{"preempt a#1", "schedule"}},
		{name: "draining a drained node tells nobody again",
			given: []step{granted(fixture.Request{Job: "a", Attempt: 1, Class: low, GPUs: 8}.Capacity()), drained("n1")},
			when:  drain("n1"), want: []string{}},
		{name: "a releasing job is not told",
			given: []step{granted(fixture.Request{Job: "a", Attempt: 1, Class: low, GPUs: 8}.Capacity()), stopping("a", 1)},
			when:  drain("n1"), want: []string{"schedule"}},
		{name: "an undrained node grants again",
			given: []step{drained("n1"), queued(fixture.Request{Job: "w", Attempt: 1, Class: medium, GPUs: 8}.Capacity())},
			when:  undrain("n1"), want: []string{"schedule"},
			then: func(t *testing.T, s *State) {
				assert.Empty(t, s.Pool.LostNodes())
				assert.Contains(t, rendered(s.Pass(t0)), "grant w#1")
			}},
		{name: "undraining a node that is not drained changes nothing",
			when: undrain("n1"), want: []string{}},
		{name: "an undrained node that is fenced stays out until its agent answers",
			given: []step{drained("n1"), func(t *testing.T, s *State) { s.NodeLost("n1", "gone") }},
			when:  undrain("n1"), want: []string{},
			then: func(t *testing.T, s *State) { assert.Equal(t, []string{"n1"}, s.Pool.LostNodes()) }},
		{name: "a drained node whose agent is lost is fenced",
			given: []step{drained("n1")},
			when:  func(s *State) []Command { return s.NodeLost("n1", "gone") }, want: []string{"fence n1"},
			then: func(t *testing.T, s *State) { assert.Len(t, s.Fenced(), 1) }},
		{name: "a drained node whose fence is answered stays drained",
			given: []step{drained("n1"), func(t *testing.T, s *State) { s.NodeLost("n1", "gone") }},
			when:  func(s *State) []Command { return s.NodeBack("n1", 0) }, want: []string{},
			then: func(t *testing.T, s *State) {
				assert.Equal(t, []string{"n1"}, s.Pool.LostNodes())
				assert.Empty(t, s.Fenced())
				grantsNothingOn("n1")(t, s)
			}},
		{name: "carried fences leave a drained node alone",
			given: []step{drained("n1")},
			when:  func(s *State) []Command { return s.FencesCarried() }, want: []string{}},
		{name: "a reconfigure that removes a drained node forgets its drain",
			nodes: 2,
			given: []step{drained("n2"), configured(input(1))},
			when:  undrain("n2"), want: []string{},
			then: func(t *testing.T, s *State) { assert.Empty(t, s.Drains) }},
	})
}

func TestDrainsTravelThroughContinueAsNew(t *testing.T) {
	s := newState(t, 2)
	given(t, s, drained("n2"))
	next, packed, err := s.Carry()
	require.NoError(t, err)
	r, err := Restore(next, packed)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"n2": "disk swap"}, r.Drains)
	assert.Equal(t, []string{"n2"}, r.Pool.LostNodes())
	assert.Empty(t, r.FencesCarried(), "not fenced again")
	assert.Len(t, r.View(protocol.QueuePage{Limit: 10}, false, time.Time{}).Fenced, 1, "the view shows it")
}

func TestValidateDrainNamesTheNodes(t *testing.T) {
	s := newState(t, 2)
	require.NoError(t, s.ValidateDrain(protocol.DrainRequest{Node: "n1"}))
	assert.EqualError(t, s.ValidateDrain(protocol.DrainRequest{Node: "n9"}), `allocation T/a has no node "n9"; its nodes are n1, n2`)
}

// TestNoticeChangesAreListedOnce: a reconfigure that changes the notice
// names it once, though the policy's notice (the longest) changes with it;
// one that changes only the policy's (an allocator started before the
// policy had one) still applies it.
func TestNoticeChangesAreListedOnce(t *testing.T) {
	s := newState(t, 1)
	in := input(1)
	in.PreemptionNotice, in.Policy.PreemptionNotice = time.Minute, time.Minute
	reply, _, err := s.Reconfigure(in)
	require.NoError(t, err)
	assert.Equal(t, "preemption_notice 0s -> 1m0s", reply.Summary)
	assert.Equal(t, time.Minute, s.Pool.Policy().PreemptionNotice)

	s = newState(t, 1)
	s.Config.PreemptionNotice = time.Minute
	in.Policy.PreemptionNotice = time.Minute
	reply, _, err = s.Reconfigure(in)
	require.NoError(t, err)
	assert.True(t, reply.Changed)
	assert.Equal(t, time.Minute, s.Pool.Policy().PreemptionNotice)
}

// TestAJobWaitingForADrainedNodeSaysSo: the reason a job waits names the
// drain, not a lost agent, also after continue-as-new.
func TestAJobWaitingForADrainedNodeSaysSo(t *testing.T) {
	s := newState(t, 1)
	given(t, s, drained("n1"), queued(fixture.Request{Job: "w", Attempt: 1, Class: medium, GPUs: 8}.Capacity()))
	s.Pass(t0)
	reason := func(s *State) string {
		info, ok := s.Pool.Explain("w")
		require.True(t, ok)
		return info.Reason
	}
	assert.Contains(t, reason(s), "node n1 is drained (disk swap)")
	assert.NotContains(t, reason(s), "not answering")
	next, packed, err := s.Carry()
	require.NoError(t, err)
	r, err := Restore(next, packed)
	require.NoError(t, err)
	assert.Contains(t, reason(r), "node n1 is drained (disk swap)")
	r.Drain(protocol.DrainRequest{Node: "n1", Undrain: true})
	r.NodeLost("n1", "gone")
	assert.Contains(t, reason(r), "not answering", "an undrained node that is lost is lost")
}

// tellsAdopted: the run's gate for telling adopted jobs on a drained node to leave.
func tellsAdopted(t *testing.T, s *State) { s.TellsAdoptedToLeave = true }

// signals keeps the signals of a rule's commands.
func signals(cmds []Command) []Command {
	var out []Command
	for _, c := range cmds {
		if _, ok := c.(Signal); ok {
			out = append(out, c)
		}
	}
	return out
}

// A drain's signal can be lost with the run that sent it (a recovery empties
// the allocator's outbox; a reset run never sent it) or never sent to a job a
// recovery missed: the jobs a recovery or an adoption takes in on a drained
// node are told to leave then, once.
func TestAdoptedJobsOnADrainedNodeAreToldToLeave(t *testing.T) {
	recovery := func(holds ...protocol.JobHold) func(s *State) []Command {
		return func(s *State) []Command {
			_, cmds, err := s.Recovered("e2", t0, Registered{Holds: holds, Listed: len(holds)})
			if err != nil {
				panic(err)
			}
			return signals(cmds)
		}
	}
	runRules(t, []ruleCase{
		{name: "a recovery that adopts a job on a drained node tells it to leave",
			nodes: 2, given: []step{tellsAdopted, drained("n1")},
			when: recovery(holding("k", 1, "n1")), want: []string{"preempt k#1"},
			then: func(t *testing.T, s *State) {
				r, ok := s.Pool.Running("k")
				require.True(t, ok)
				assert.True(t, r.Releasing, "k is leaving: a pass does not preempt for its capacity")
			}},
		{name: "a recovery leaves the jobs on other nodes alone",
			nodes: 2, given: []step{tellsAdopted, drained("n1")},
			when: recovery(holding("k", 1, "n2")), want: []string{}},
		{name: "a job a recovery missed, adopted on a drained node, is told to leave",
			nodes: 2, given: []step{tellsAdopted, recovered(), drained("n1")},
			when: func(s *State) []Command { return signals(s.AdoptStranger("n1", holding("k", 1, "n1"), nil)) },
			want: []string{"preempt k#1"}},
		{name: "an adoption tells nobody twice",
			nodes: 2, given: []step{tellsAdopted, drained("n1"), recovered(holding("k", 1, "n1"))},
			when: func(s *State) []Command { return signals(s.AdoptStranger("n1", holding("m", 1, "n2"), nil)) },
			want: []string{}},
		{name: "runs of older code (no gate) tell nobody",
			nodes: 2, given: []step{drained("n1")},
			when: recovery(holding("k", 1, "n1")), want: []string{}},
	})
}
