package scheduler

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Fair share (Policy.Ordering fair-share): the tests of the usage accounting and of the order it
// gives each class.

// By says who in the workspace submits the request.
func (b jobBuilder) By(user string) jobBuilder { b.r.User = user; return b }

var fairHour = Policy{Ordering: FairShare, FairShareHalfLife: time.Hour}

func TestHalfPowMatchesExp2(t *testing.T) {
	for _, x := range []float64{0, 1e-9, 0.001, 0.25, 0.5, 0.999999, 1, 1.5, 2.75, 10, 33.3, 700, 1000} {
		got, want := halfPow(x), math.Exp2(-x)
		if want == 0 && got != 0 || want != 0 && math.Abs(got-want)/want > 1e-14 {
			t.Errorf("halfPow(%g) = %.17g, want %.17g", x, got, want)
		}
	}
	if halfPow(-1) != 1 || halfPow(math.NaN()) != 1 || halfPow(5000) != 0 {
		t.Fatalf("halfPow out of range: %g %g %g", halfPow(-1), halfPow(math.NaN()), halfPow(5000))
	}
}

// usagePool is one 4-GPU node on which team-a's user ann runs a 4-GPU job from minute 0.
func usagePool(t *testing.T, pol Policy) *Pool {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), pol)
	mustEnqueue(t, p, makeJob("a0", "a").Of("team-a").By("ann").GPUs(4).Seq(1).Obj())
	if d := sched(t, p, at(0)); !slices.Equal(grantedJobs(d), []string{"a0"}) {
		t.Fatalf("setup: grants %v", grantedJobs(d))
	}
	return p
}

//nolint:unparam // the call names the workspace whose usage is read; the tests all read team-a today
func usageOf(p *Pool, ws string) WorkspaceUsage {
	for _, u := range p.Usage() {
		if u.Workspace == ws {
			return u
		}
	}
	return WorkspaceUsage{}
}

func TestFairShareUsageDecays(t *testing.T) {
	p := usagePool(t, fairHour)
	sched(t, p, at(60))
	// 4 GPUs for one half-life: ∫ 4·2^-(s/H) ds over one H = 4·H/ln2·(1/2) GPU-seconds.
	want := 4 * 3600 / math.Ln2 * 0.5 / 3600
	if u := usageOf(p, "team-a"); math.Abs(u.GPUHours-want) > 1e-9 || u.GPUs != 4 || u.Share != 1 {
		t.Fatalf("after 1h at 4 GPUs: %+v, want %.6f GPU-hours, 4 GPUs, all the share", u, want)
	}
	p.Cancel("a0")
	sched(t, p, at(60))
	sched(t, p, at(120))
	if u := usageOf(p, "team-a"); math.Abs(u.GPUHours-want/2) > 1e-9 || u.GPUs != 0 {
		t.Fatalf("one half-life after it ended: %+v, want %.6f GPU-hours", u, want/2)
	}
	// The same usage whether the pool was asked in between or not.
	q := usagePool(t, fairHour)
	for m := 5; m <= 60; m += 5 {
		sched(t, q, at(m))
	}
	q.Cancel("a0")
	sched(t, q, at(60))
	sched(t, q, at(120))
	if a, b := usageOf(p, "team-a").GPUHours, usageOf(q, "team-a").GPUHours; math.Abs(a-b) > 1e-9 {
		t.Fatalf("usage depends on how often the pool ran: %.12f vs %.12f", a, b)
	}
}

// TestFairShareOrder: after team-a used the pool for an hour, the waiting jobs of each class
// are taken least-used workspace first, then least-used user, then in submission order.
func TestFairShareOrder(t *testing.T) {
	job := func(name, ws, user string, seq int64) jobBuilder {
		return makeJob(name, "a").Of(ws).By(user).GPUs(4).Seq(seq)
	}
	for _, tc := range []struct {
		name  string
		pol   Policy
		queue []Request // submitted at minute 30, while a0 runs
		order []string  // launch order at minute 60
	}{{
		name:  "fifo ignores usage",
		pol:   Policy{},
		queue: []Request{job("a1", "team-a", "ann", 2).Obj(), job("b1", "team-b", "bob", 3).Obj()},
		order: []string{"a1", "b1"},
	}, {
		name:  "the least-used workspace first",
		pol:   fairHour,
		queue: []Request{job("a1", "team-a", "ann", 2).Obj(), job("a2", "team-a", "ann", 3).Obj(), job("b1", "team-b", "bob", 4).Obj()},
		order: []string{"b1", "a1", "a2"},
	}, {
		name:  "class first",
		pol:   fairHour,
		queue: []Request{job("a1", "team-a", "ann", 2).Class(High).Obj(), job("b1", "team-b", "bob", 3).Obj()},
		order: []string{"a1", "b1"},
	}, {
		name: "the least-used user within a workspace",
		pol:  fairHour,
		queue: []Request{job("a1", "team-a", "ann", 2).Obj(), job("a2", "team-a", "amy", 3).Obj(),
			job("a3", "team-a", "ann", 4).Obj()},
		order: []string{"a2", "a1", "a3"},
	}, {
		name: "unused workspaces in submission order",
		pol:  fairHour,
		queue: []Request{job("b1", "team-b", "bob", 2).Obj(), job("c1", "team-c", "cid", 3).Obj(),
			job("b2", "team-b", "bob", 4).Obj(), job("a1", "team-a", "ann", 5).Obj()},
		order: []string{"b1", "c1", "b2", "a1"},
	}, {
		name:  "no workspace is an account too",
		pol:   fairHour,
		queue: []Request{job("a1", "team-a", "ann", 2).Obj(), job("x1", "", "", 3).Obj()},
		order: []string{"x1", "a1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := usagePool(t, tc.pol)
			sched(t, p, at(30))
			mustEnqueue(t, p, tc.queue...)
			sched(t, p, at(60))
			var got []string
			for _, w := range p.View().Waiting {
				got = append(got, w.Job)
			}
			if !slices.Equal(got, tc.order) {
				t.Fatalf("launch order %v, want %v", got, tc.order)
			}
			// The next free capacity goes to the first of them.
			p.Cancel("a0")
			if d := sched(t, p, at(61)); len(d.Grants) == 0 || d.Grants[0].Job != tc.order[0] {
				t.Fatalf("after a0 ended: grants %v, want %s first", grantedJobs(d), tc.order[0])
			}
		})
	}
}

// TestFairShareRanksEveryInterval: the order follows usage as it is ranked every
// DefaultFairShareInterval, not at every pass, and a pass between rankings decides nothing new.
func TestFairShareRanksEveryInterval(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), fairHour)
	mustEnqueue(t, p, makeJob("a0", "a").Of("team-a").GPUs(4).Seq(1).Obj(), makeJob("b0", "a").Of("team-b").GPUs(2).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("a1", "a").Of("team-a").GPUs(4).Seq(3).Obj(), makeJob("b1", "a").Of("team-b").GPUs(4).Seq(4).Obj())
	sched(t, p, at(1))
	first := func() string { return p.View().Waiting[0].Job }
	if first() != "a1" {
		t.Fatalf("before any usage is ranked: %s first, want a1 (submission order)", first())
	}
	wake, ok := p.NextWake()
	if !ok || !wake.Equal(at(5)) {
		t.Fatalf("next wake %v %v, want the next ranking at minute 5", wake, ok)
	}
	if d := p.Schedule(at(4)); len(d.Grants)+len(d.Preemptions) > 0 || first() != "a1" {
		t.Fatalf("a pass before the ranking reordered or decided: %v, %s first", d, first())
	}
	sched(t, p, at(5))
	if first() != "b1" {
		t.Fatalf("after the ranking at minute 5: %s first, want b1 (team-b held 2 GPUs, team-a 4)", first())
	}
}

func TestFairShareSurvivesSnapshotAndRecovery(t *testing.T) {
	p := usagePool(t, fairHour)
	sched(t, p, at(30))
	mustEnqueue(t, p, makeJob("a1", "a").Of("team-a").By("ann").GPUs(4).Seq(2).Obj(), makeJob("b1", "a").Of("team-b").By("bob").GPUs(4).Seq(3).Obj())
	sched(t, p, at(60))
	q := roundTrip(t, p)
	if a, b := mustJSON(t, p.Usage()), mustJSON(t, q.Usage()); a != b {
		t.Fatalf("usage after a snapshot:\n%s\nwant\n%s", b, a)
	}
	r := rebuilt(t, p, true)
	sched(t, r, at(60)) // (the allocator's first pass after a rebuild: the time the reasons say how long jobs ran by)
	if a, b := mustJSON(t, p.View().Waiting), mustJSON(t, r.View().Waiting); a != b {
		t.Fatalf("queue after a rebuild that carried the usage:\n%s\nwant\n%s", b, a)
	}
	// Without the usage carried over, the rebuilt queue is back in submission order.
	fresh := mustPool(t, p.Nodes(), p.Policy())
	for _, w := range p.waiting {
		mustEnqueue(t, fresh, w.r)
	}
	if got := fresh.View().Waiting[0].Job; got != "a1" {
		t.Fatalf("a rebuild without usage: %s first, want a1", got)
	}
}

func TestFairShareReconfigure(t *testing.T) {
	p := usagePool(t, Policy{})
	mustEnqueue(t, p, makeJob("a1", "a").Of("team-a").GPUs(4).Seq(2).Obj(), makeJob("b1", "a").Of("team-b").GPUs(4).Seq(3).Obj())
	sched(t, p, at(30))
	if _, err := p.Reconfigure(p.Nodes(), fairHour); err != nil {
		t.Fatal(err)
	}
	if got := p.Policy().Changes(Policy{}); !slices.Contains(got, "ordering fair-share -> fifo") || !slices.Contains(got, "fair_share_half_life 1h0m0s -> 168h0m0s") {
		t.Fatalf("changes %v", got)
	}
	// Usage counts from the switch on: team-a's running job makes it the heavier one.
	sched(t, p, at(31))
	sched(t, p, at(40))
	if got := p.View().Waiting[0].Job; got != "b1" {
		t.Fatalf("after fair share was switched on: %s first, want b1", got)
	}
	if _, err := p.Reconfigure(p.Nodes(), Policy{}); err != nil {
		t.Fatal(err)
	}
	if got := p.View().Waiting[0].Job; got != "a1" || p.Usage() != nil {
		t.Fatalf("after fair share was switched off: %s first (want a1), usage %v", got, p.Usage())
	}
}

func TestFairSharePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		pol  Policy
		want string
	}{
		{Policy{Ordering: "round-robin"}, `unknown ordering "round-robin": allowed values are fifo, fair-share`},
		{Policy{Ordering: FairShare, FairShareHalfLife: -time.Hour}, "fair_share_half_life must not be negative"},
		{Policy{Ordering: FairShare, FairShareHalfLife: time.Second}, "fair_share_half_life must be at least 1m0s"},
	} {
		if _, err := NewPool(nodesOf("n", "a", 1, 1, 0, 0), tc.pol); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPool(%+v): %v, want %q", tc.pol, err, tc.want)
		}
	}
}
