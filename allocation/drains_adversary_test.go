package allocation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/internal/fixture"
)

func TestDrainedJobsAreLeaving(t *testing.T) {
	wide := fixture.Request{Job: "a", Attempt: 1, Class: low, Workers: 2, GPUs: 8}.Capacity() // on n1 and n2
	runRules(t, []ruleCase{
		{name: "a job told to leave a drained node is leaving: a high request waits for its capacity elsewhere instead of preempting another job",
			nodes: 3,
			given: []step{granted(wide), granted(fixture.Request{Job: "c", Attempt: 1, Class: low, GPUs: 8}.Capacity()), drained("n1"),
				func(t *testing.T, s *State) {
					s.Request(fixture.Request{Job: "hi", Attempt: 1, Class: high, GPUs: 8}.Capacity(), t0.Add(time.Hour))
				}},
			when: func(s *State) []Command { return s.Pass(t0.Add(time.Hour)) }, want: []string{},
			then: func(t *testing.T, s *State) {
				r, _ := s.Pool.Running("a")
				assert.True(t, r.Releasing, "a counts as releasing")
				isHeld("c", 1)(t, s)
				isWaiting("hi", 1)(t, s)
			}},
	})
}

// A recovery (trainq allocator recover) rebuilds the pool from the jobs but
// keeps the run's drains: the drained node is fenced like every node, and
// its agent's answer leaves it drained. Only a fresh run forgets them.
func TestARecoveryKeepsTheDrains(t *testing.T) {
	s := newState(t, 2)
	given(t, s, drained("n1"), recovered())
	assert.Equal(t, map[string]string{"n1": "disk swap"}, s.Drains)
	s.NodeBack("n1", 0)
	s.NodeBack("n2", 0)
	assert.Equal(t, []string{"n1"}, s.Pool.LostNodes(), "still out of service")
	assert.Len(t, s.Drained(), 1)
	assert.Empty(t, s.Fenced())
}
