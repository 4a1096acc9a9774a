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

// A recovery after a reset rebuilds from the pool of the reset point: the
// usage it charges for the time since must be that of the jobs it adopts,
// not that of whatever held GPUs at the reset point. Light held 8 GPUs at
// the reset point and ended a minute later; heavy then ran 16 GPUs for two
// days in the history the reset threw away.
func TestARecoveryChargesTheJobsItAdopts(t *testing.T) {
	usageAfterReset := func(t *testing.T, charges bool) map[string]float64 {
		in := input(2)
		in.Policy.Ordering = scheduler.FairShare
		s, err := New(in)
		require.NoError(t, err)
		s.ChargesAdopted = charges
		s.Request(fixture.Request{Job: "l", Attempt: 1, Class: medium, GPUs: 8, Workspace: "light", User: "u"}.Capacity(), t0)
		s.Pass(t0) // the reset point: light holds n1
		h := fixture.Request{Job: "h", Attempt: 1, Class: medium, Workers: 2, GPUs: 8, Workspace: "heavy", User: "v"}.Capacity()
		h.Seq = 2
		all := []int{0, 1, 2, 3, 4, 5, 6, 7}
		hold := protocol.JobHold{Job: "h", Phase: protocol.HoldHolding, Request: h, StartedAt: t0.Add(time.Minute),
			Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "n1", GPUs: all}, {Worker: 1, Node: "n2", GPUs: all}}}
		now := t0.Add(48 * time.Hour)
		_, _, err = s.Recovered("e2", now, Registered{Holds: []protocol.JobHold{hold}, Listed: 1})
		require.NoError(t, err)
		s.Pass(now)
		out := map[string]float64{}
		for _, u := range s.Pool.Usage() {
			out[u.Workspace] = u.GPUHours
		}
		return out
	}
	got := usageAfterReset(t, true)
	// 16 GPUs for 48 h less a minute, decayed with the default half-life,
	// against nothing: heavy's is the usage, light's none.
	assert.Greater(t, got["heavy"], 300.0, "heavy ran 16 GPUs for two days: %v", got)
	assert.Less(t, got["light"], 1.0, "light held 8 GPUs for a minute before the reset point's pass: %v", got)

	old := usageAfterReset(t, false)
	assert.Less(t, old["heavy"], 1.0, "runs of older code (no gate) charge the reset point's holders: %v", old)
	assert.Greater(t, old["light"], 300.0, "%v", old)
}

// A live recovery (the old pool was current) charges what the old pool would
// have: the same jobs held the same GPUs since it last accrued.
func TestALiveRecoveryChargesAsTheOldPoolWould(t *testing.T) {
	build := func() *State {
		in := input(2)
		in.Policy.Ordering = scheduler.FairShare
		s, err := New(in)
		require.NoError(t, err)
		s.ChargesAdopted = true
		s.Request(fixture.Request{Job: "x", Attempt: 1, Class: medium, GPUs: 8, Workspace: "team", User: "u"}.Capacity(), t0)
		s.Pass(t0)
		s.Pass(t0.Add(time.Hour))
		return s
	}
	now := t0.Add(5 * time.Hour)
	kept := build()
	kept.Pass(now)

	recovered := build()
	x, ok := recovered.Pool.Running("x")
	require.True(t, ok)
	hold := protocol.JobHold{Job: "x", Phase: protocol.HoldHolding, Request: fixture.Request{Job: "x", Attempt: 1, Class: medium, GPUs: 8, Workspace: "team", User: "u"}.Capacity(),
		StartedAt: x.StartedAt, Placement: x.Placement}
	hold.Request.Seq = x.Seq
	_, _, err := recovered.Recovered("e2", now, Registered{Holds: []protocol.JobHold{hold}, Listed: 1})
	require.NoError(t, err)
	recovered.Pass(now)

	want, got := kept.Pool.Usage(), recovered.Pool.Usage()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].Workspace, got[i].Workspace)
		assert.InDelta(t, want[i].GPUHours, got[i].GPUHours, 1e-6, "%s", want[i].Workspace)
	}
	assert.InDelta(t, 40.0, got[0].GPUHours, 2.0, "8 GPUs for 5 hours, a little decayed")
}

// A job the recovery missed (it did not answer) held its GPUs all along:
// adopted later, it is charged as if the recovery had adopted it, so its
// workspace ends as it would have had no recovery happened. Runs of older
// code (no gate) charged it from its adoption only.
func TestAStrangerAdoptedAfterARecoveryIsChargedAsTheRecoveryWould(t *testing.T) {
	req := func(job, ws string) protocol.CapacityRequest {
		return fixture.Request{Job: job, Attempt: 1, Class: medium, GPUs: 8, Workspace: ws, User: "u"}.Capacity()
	}
	build := func(charges bool) *State {
		in := input(2)
		in.Policy.Ordering = scheduler.FairShare
		s, err := New(in)
		require.NoError(t, err)
		s.ChargesAdopted, s.ChargesStrangers = true, charges
		s.Request(req("x", "missed"), t0)
		s.Request(req("y", "answered"), t0)
		s.Pass(t0)
		s.Pass(t0.Add(time.Hour))
		return s
	}
	holdOf := func(s *State, job, ws string) protocol.JobHold {
		r, ok := s.Pool.Running(job)
		require.True(t, ok)
		h := protocol.JobHold{Job: job, Phase: protocol.HoldHolding, Request: req(job, ws), StartedAt: r.StartedAt, Placement: r.Placement}
		h.Request.Seq = r.Seq
		return h
	}
	recoveredAt, adoptedAt, end := t0.Add(5*time.Hour), t0.Add(8*time.Hour), t0.Add(9*time.Hour)
	usage := func(s *State) map[string]float64 {
		out := map[string]float64{}
		for _, u := range s.Pool.Usage() {
			out[u.Workspace] = u.GPUHours
		}
		return out
	}
	recoverMissingX := func(charges bool) map[string]float64 {
		s := build(charges)
		x, y := holdOf(s, "x", "missed"), holdOf(s, "y", "answered")
		_, _, err := s.Recovered("e2", recoveredAt, Registered{Holds: []protocol.JobHold{y}, Listed: 2, Unanswered: []string{"x"}})
		require.NoError(t, err)
		s.Pass(recoveredAt)
		others := usage(s)
		s.AdoptStranger("", x, nil)
		_, held := s.Pool.Running("x")
		require.True(t, held, "x is adopted")
		// A reset run may adopt before it notices the reset: its next
		// recovery charges from the last accrual, which must not move.
		assert.Equal(t, others["answered"], usage(s)["answered"], "the adoption charges nobody else")
		s.Pass(adoptedAt)
		s.Pass(end)
		return usage(s)
	}
	kept := build(true)
	kept.Pass(end)
	want := usage(kept)
	require.InDelta(t, 72.0, want["missed"], 2.0, "8 GPUs for 9 hours, a little decayed")

	got := recoverMissingX(true)
	assert.InDelta(t, want["missed"], got["missed"], 1e-6, "the missed job is charged as if no recovery had happened")
	assert.InDelta(t, want["answered"], got["answered"], 1e-6)

	old := recoverMissingX(false)
	assert.InDelta(t, 16.0, old["missed"], 0.5,
		"without the gate it is charged until the old pool's last accrual (1 h) and from its adoption (1 h) only, not the 7 h between")
}

// Switching fair share off and on again starts every account afresh: a job
// the last recovery missed, adopted after that, is not charged for the time
// before (its workspace would start days ahead of the others).
func TestAStrangerAdoptedAfterFairShareWasSwitchedOffAndOnIsChargedFromItsAdoption(t *testing.T) {
	in := input(2)
	in.Policy.Ordering = scheduler.FairShare
	s, err := New(in)
	require.NoError(t, err)
	s.ChargesAdopted, s.ChargesStrangers = true, true
	x := fixture.Request{Job: "x", Attempt: 1, Class: medium, GPUs: 8, Workspace: "missed", User: "u"}.Capacity()
	s.Request(x, t0)
	s.Pass(t0)
	r, ok := s.Pool.Running("x")
	require.True(t, ok)
	hold := protocol.JobHold{Job: "x", Phase: protocol.HoldHolding, Request: x, StartedAt: r.StartedAt, Placement: r.Placement}
	hold.Request.Seq = r.Seq
	_, _, err = s.Recovered("e2", t0.Add(5*time.Hour), Registered{Listed: 1, Unanswered: []string{"x"}})
	require.NoError(t, err)
	require.False(t, s.ChargedFrom.IsZero())

	for _, ordering := range []scheduler.Ordering{scheduler.SubmissionOrder, scheduler.FairShare} {
		next := s.Config
		next.Policy.Ordering = ordering
		_, _, err := s.Reconfigure(next)
		require.NoError(t, err)
	}
	assert.True(t, s.ChargedFrom.IsZero(), "the usage the recovery charged from is gone")
	s.Pass(t0.Add(6 * time.Hour))
	s.AdoptStranger("", hold, nil)
	s.Pass(t0.Add(7 * time.Hour))
	for _, u := range s.Pool.Usage() {
		if u.Workspace == "missed" {
			assert.InDelta(t, 8.0, u.GPUHours, 0.5, "charged from its adoption (the last accrual): 8 GPUs for an hour")
		}
	}
}
