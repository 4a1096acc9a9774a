package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDefragment: given racks r1 (n1, n2) and r2 (n3, n4) of 8-GPU nodes, a 1-GPU job s on n1
// and a medium gang of two 8-GPU workers that requires a rack, when the gang has waited long
// enough, then s is moved out of r1 (it fits on r2) and the gang starts on n1 and n2 once s has
// stopped; and in each case where a rule forbids the move, nothing is moved.
func TestDefragment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pol      Policy
		running  []runSpec
		noMove   bool
		gangAt   int // minute the gang is submitted; the pass is at minute 100
		wantMove []string
	}{{
		name:     "a 1-GPU job is moved out of the rack the gang needs",
		running:  []runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")},
		gangAt:   80,
		wantMove: []string{"s"},
	}, {
		name:    "not before the gang has waited defragment_after",
		running: []runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")},
		gangAt:  90,
	}, {
		name:    "never with defragment_after negative",
		pol:     Policy{DefragmentAfter: -1},
		running: []runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")},
		gangAt:  80,
	}, {
		name:    "not a job that started less than an hour ago",
		running: []runSpec{running("s").GPUs(1).On("n1").StartedAt(50), running("big").Class(High).GPUs(8).On("n3")},
		gangAt:  80,
	}, {
		name:    "not a job that opted out",
		running: []runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")},
		noMove:  true,
		gangAt:  80,
	}, {
		name:    "not a job of a higher class than the gang",
		running: []runSpec{running("s").Class(High).GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")},
		gangAt:  80,
	}, {
		name:    "not a job that would find no free capacity outside the rack",
		running: []runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3"), running("big2").Class(High).GPUs(8).On("n4")},
		gangAt:  80,
	}, {
		name: "the rack whose movers hold the fewest GPUs",
		running: []runSpec{running("s2").GPUs(2).On("n1"), running("s1").GPUs(1).On("n3"),
			running("t").GPUs(1).On("n2"), running("u").GPUs(1).On("n4")},
		gangAt: 80,
		// r1: s2 (2) and t (1); r2: s1 (1) and u (1); each mover fits in the other rack.
		wantMove: []string{"s1", "u"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := defragPool(t, []string{"b1/r1", "b1/r1", "b1/r2", "b1/r2"}, tc.pol, tc.running)
			for _, rs := range tc.running {
				p.running[rs.name].r.NoMove = tc.noMove
			}
			g := makeJob("g", "a").GPUs(8).Workers(2).Seq(1).Topology(rackOf("rack", true)).Obj()
			g.SubmittedAt = at(tc.gangAt)
			mustEnqueue(t, p, g)
			d := sched(t, p, at(100))
			var moved []string
			for _, pr := range d.Preemptions {
				if !pr.Move || pr.Preemptor.Job != "g" || !strings.Contains(pr.Reason, "moved out of rack") {
					t.Fatalf("a preemption that is not a move for g: %+v", pr)
				}
				moved = append(moved, pr.Victim)
			}
			slices.Sort(moved)
			if !slices.Equal(moved, tc.wantMove) {
				wi, _ := p.Explain("g")
				t.Fatalf("moved %v, want %v (g: %s)", moved, tc.wantMove, wi.Reason)
			}
			checkInvariants(t, p)
			roundTrip(t, p)
			if len(moved) == 0 {
				return
			}
			// The movers stop and rerun elsewhere; the gang starts in the rack they left.
			for _, m := range moved {
				p.Release(m, 0, 0)
			}
			d = sched(t, p, at(101))
			var started []string
			for _, gr := range d.Grants {
				if gr.Job == "g" {
					started = grantNodes(gr)
				}
			}
			if len(started) != 2 || p.topo.domain[1][p.nodeIdx[started[0]]] != p.topo.domain[1][p.nodeIdx[started[1]]] {
				t.Fatalf("g did not start in one rack once its movers stopped: %v", d.Grants)
			}
			for i, m := range moved {
				r := makeJob(m, "a").GPUs(1).Seq(int64(-100 + i)).Attempt(1).Obj()
				mustEnqueue(t, p, r)
			}
			d = sched(t, p, at(102))
			if len(d.Grants) != len(moved) {
				t.Fatalf("the moved jobs did not start again elsewhere: %v", d.Grants)
			}
			checkInvariants(t, p)
		})
	}
}

// TestDefragmentWakes: the pool asks to be woken when a gang that requires a rack reaches
// defragment_after, and then when a job that could be moved reaches min_runtime_before_move:
// no event need come for a move to happen.
func TestDefragmentWakes(t *testing.T) {
	p := mustPool(t, racked("b1/r1", "b1/r1", "b1/r2"), Policy{Topology: blockRack.Topology, GangTopology: rackOf("rack", true)})
	startRunning(t, p, []runSpec{running("s").GPUs(1).On("n1").StartedAt(10)})
	p.running["s"].r.Nodes = nil
	g := makeJob("g", "a").GPUs(8).Workers(2).Seq(1).Obj()
	g.SubmittedAt = at(20)
	mustEnqueue(t, p, g)
	if d := sched(t, p, at(20)); len(d.Preemptions)+len(d.Grants) > 0 {
		t.Fatalf("decided %+v at once", d)
	}
	if got, _ := p.NextWake(); !got.Equal(at(20).Add(DefaultDefragmentAfter)) {
		want := at(20).Add(DefaultDefragmentAfter)
		t.Fatalf("next wake %s, want %s (the gang reaches defragment_after)", got, want)
	}
	if d := sched(t, p, at(35)); len(d.Preemptions) > 0 {
		t.Fatalf("moved %v before s ran an hour", d.Preemptions)
	}
	if got, _ := p.NextWake(); !got.Equal(at(10).Add(DefaultMinRuntimeBeforeMove)) {
		want := at(10).Add(DefaultMinRuntimeBeforeMove)
		t.Fatalf("next wake %s, want %s (s reaches min_runtime_before_move)", got, want)
	}
	if d := sched(t, p, at(70)); !slices.Equal(victims(d), []string{"s"}) || !d.Preemptions[0].Move {
		t.Fatalf("at the wake: %+v, want s moved", d.Preemptions)
	}
}

// defragPool is racked nodes with the given jobs started (at minute 0 unless they say) and free
// to move (their allowed nodes only placed them).
func defragPool(t *testing.T, places []string, pol Policy, running []runSpec) *Pool {
	t.Helper()
	pol.Topology = blockRack.Topology
	p := mustPool(t, racked(places...), pol)
	startRunning(t, p, running)
	for _, rs := range running {
		p.running[rs.name].r.Nodes = nil
	}
	return p
}

// TestDefragmentOneGangAtATime: given two gangs that each could move a job out of a rack, when
// the first has moved its job, then the second moves nothing, in this pass or the next at the same
// instant (sched checks both), until the first's mover has stopped: no two gangs count one free
// node as their movers' landing place (found by a review: the second pass moved s2).
func TestDefragmentOneGangAtATime(t *testing.T) {
	p := defragPool(t, []string{"b1/r1", "b1/r1", "b1/r2", "b1/r2", "b1/r3"}, Policy{},
		[]runSpec{running("s1").GPUs(1).On("n1"), running("s2").GPUs(1).On("n3")})
	for i, name := range []string{"g1", "g2"} {
		mustEnqueue(t, p, makeJob(name, "a").GPUs(8).Workers(2).Seq(int64(1+i)).Topology(rackOf("rack", true)).Obj())
	}
	if d := sched(t, p, at(100)); !slices.Equal(victims(d), []string{"s1"}) {
		t.Fatalf("moved %v, want [s1] for g1 alone", victims(d))
	}
	p.Release("s1", 0, 0)
	d := sched(t, p, at(101))
	if !slices.Equal(grantedJobs(d), []string{"g1"}) || !slices.Equal(victims(d), []string{"s2"}) {
		t.Fatalf("once s1 stopped: granted %v, moved %v; want g1 started and s2 moved for g2", grantedJobs(d), victims(d))
	}
}

// TestDefragmentLowGang: a low gang moves low jobs, as the rule says "of its class or below"
// (found by a review: low gangs went straight to reservations).
func TestDefragmentLowGang(t *testing.T) {
	p := defragPool(t, []string{"b1/r1", "b1/r1", "b1/r2", "b1/r2"}, Policy{},
		[]runSpec{running("s").Class(Low).GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")})
	mustEnqueue(t, p, makeJob("g", "a").Class(Low).GPUs(8).Workers(2).Seq(1).Topology(rackOf("rack", true)).Obj())
	if d := sched(t, p, at(100)); !slices.Equal(victims(d), []string{"s"}) || !d.Preemptions[0].Move {
		t.Fatalf("moved %v, want [s]", d.Preemptions)
	}
}

// TestMovedJobRerunsOutsideTheDomain: given racks r1 (n1, n2) and r2 (n3, n4) of 8-GPU nodes, a
// 1-GPU job s on n1, big on n3, and a gang g of two 8-GPU workers that requires a rack, when s has
// been moved for g and its next attempt (ahead of g in the queue) is placed, then while g waits it
// goes to n4, outside r1, and g starts on n1 and n2 in the same pass. Without that rule it took
// back n1 (ahead of g, it may take over capacity nominated to g), and g waited on; trainq
// simulate showed 17 of 46 moves undone so, and 15 gangs starting in another rack than the one
// cleared for them. Once g has left the queue, s may use r1 again.
func TestMovedJobRerunsOutsideTheDomain(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rerunFirst bool                              // s's next attempt waits before the move
		when       func(t *testing.T, p *Pool) *Pool // between the move and the rerun's pass
		wantS      string                            // where s's rerun starts ("": it waits)
		wantG      bool                              // g starts in that pass
		wantWhy    string                            // in Explain(s) before that pass
	}{{
		name:  "the rerun starts outside the rack while the gang waits",
		when:  func(t *testing.T, p *Pool) *Pool { return p },
		wantS: "n4", wantG: true,
	}, {
		name:  "a snapshot keeps it (continue-as-new, reconfigure)",
		when:  func(t *testing.T, p *Pool) *Pool { return roundTrip(t, p) },
		wantS: "n4", wantG: true,
	}, {
		name: "with no room outside, the rerun waits and says why",
		when: func(t *testing.T, p *Pool) *Pool {
			mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(8).Nodes("n4").Seq(2).Obj())
			return p
		},
		wantG:   true,
		wantWhy: "it was moved out of rack r1 of block b1 to make room for g and runs elsewhere while that gang waits: outside rack r1 of block b1",
	}, {
		name:       "a next attempt already waiting when the job is moved (found by a review)",
		rerunFirst: true,
		when:       func(t *testing.T, p *Pool) *Pool { return p },
		wantS:      "n4", wantG: true,
	}, {
		name: "a newer attempt of the gang keeps it (found by a review: its replacing let the movers go)",
		when: func(t *testing.T, p *Pool) *Pool {
			g := makeJob("g", "a").GPUs(8).Workers(2).Seq(1).Attempt(1).Topology(rackOf("rack", true)).Obj()
			g.SubmittedAt = at(80)
			mustEnqueue(t, p, g)
			return p
		},
		wantS: "n4", wantG: true,
	}, {
		name: "once the gang has left the queue, the rerun may use the rack",
		when: func(t *testing.T, p *Pool) *Pool {
			p.Cancel("g")
			return p
		},
		wantS: "n1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := defragPool(t, []string{"b1/r1", "b1/r1", "b1/r2", "b1/r2"}, Policy{},
				[]runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")})
			g := makeJob("g", "a").GPUs(8).Workers(2).Seq(1).Topology(rackOf("rack", true)).Obj()
			g.SubmittedAt = at(80)
			mustEnqueue(t, p, g)
			rerun := makeJob("s", "a").GPUs(1).Seq(-100).Attempt(1).Obj()
			if tc.rerunFirst {
				mustEnqueue(t, p, rerun)
			}
			if d := sched(t, p, at(100)); !slices.Equal(victims(d), []string{"s"}) {
				t.Fatalf("moved %v, want [s]", victims(d))
			}
			p.Release("s", 0, 0)
			mustEnqueue(t, p, rerun)
			p = tc.when(t, p)
			if tc.wantWhy != "" {
				if wi, _ := p.Explain("s"); !strings.Contains(wi.Reason, tc.wantWhy) {
					t.Fatalf("Explain(s) = %q, want it to contain %q", wi.Reason, tc.wantWhy)
				}
			}
			d := sched(t, p, at(101))
			var gotS []string
			gotG := false
			for _, gr := range d.Grants {
				switch gr.Job {
				case "s":
					gotS = grantNodes(gr)
				case "g":
					gotG = true
				}
			}
			if want := []string{tc.wantS}; tc.wantS == "" && gotS != nil || tc.wantS != "" && !slices.Equal(gotS, want) || gotG != tc.wantG {
				t.Fatalf("s started on %v (want %q), g started %v (want %v): %v", gotS, tc.wantS, gotG, tc.wantG, d.Grants)
			}
			if w, ok := p.Waiting("s"); ok {
				if _, kept := p.keptOut(&w); kept {
					t.Fatalf("s is still kept out of r1 after g started or left")
				}
			}
			checkInvariants(t, p)
			roundTrip(t, p)
		})
	}
}

// TestDefragmentPastHopelessGangs: given gangs first in the queue that no move can help (their
// allowed rack r2 holds a high job), each of another shape, and a later gang g of another shape
// that a move can help, when all have waited long enough, then g moves s out of r1 in the first
// pass, and a second pass at the same instant decides nothing new (sched checks it), with and
// without backfill reservations. When the first gang of a class to look stopped the others (found
// in trainq simulate: every gang of a class waited for weeks behind one whose rack a long gang
// held), g waited until r1 drained by chance; with a cap of four searches a pass (found by a
// review), four hopeless gangs did the same, and a reservation's owner, which does not look,
// let the second pass move.
func TestDefragmentPastHopelessGangs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hopeless int
		pol      Policy
	}{
		{name: "one hopeless gang", hopeless: 1},
		{name: "four hopeless gangs of four shapes", hopeless: 4},
		{name: "five, with backfill reservations", hopeless: 5, pol: Policy{Backfill: true, ReserveAfter: 10 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := defragPool(t, []string{"b1/r1", "b1/r1", "b1/r2", "b1/r2", "b1/r3"}, tc.pol,
				[]runSpec{running("s").GPUs(1).On("n1"), running("big").Class(High).GPUs(8).On("n3")})
			p.running["big"].r.RunLimit = 500 * time.Minute
			for i := range tc.hopeless {
				h := makeJob(fmt.Sprint("h", i), "a").GPUs(8-i).Workers(2).Nodes("n3", "n4").Seq(int64(1 + i)).Topology(rackOf("rack", true)).Obj()
				h.SubmittedAt = at(80)
				mustEnqueue(t, p, h)
			}
			g := makeJob("g", "a").GPUs(8).Workers(2).Seq(100).Topology(rackOf("rack", true)).Obj()
			g.SubmittedAt = at(80)
			mustEnqueue(t, p, g)
			if tc.pol.Backfill { // a pass before the gangs may move, so that the first reserves
				if d := schedChecked(t, p, at(85), false); len(d.Preemptions) > 0 {
					t.Fatalf("moved before defragment_after: %v", d.Preemptions)
				}
			}
			d := sched(t, p, at(100))
			if !slices.Equal(victims(d), []string{"s"}) || d.Preemptions[0].Preemptor.Job != "g" {
				wi, _ := p.Explain("g")
				t.Fatalf("moved %v, want s for g (g: %s)", d.Preemptions, wi.Reason)
			}
		})
	}
}
