package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWaitingAgreesWithExplain(t *testing.T) {
	p, err := NewPool([]Node{{Name: "n1", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}}, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := ParseInstanceType("a100.2gpu")
	for i, job := range []string{"a", "b", "c"} {
		if err := p.Enqueue(Request{Job: job, Attempt: i + 1, Class: Medium, Demand: d, Workers: 1, Seq: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Schedule(time.Unix(0, 0)) // a runs; b and c wait
	for _, job := range []string{"a", "b", "c", "nobody"} {
		w, okW := p.Waiting(job)
		e, okE := p.Explain(job)
		if okW != okE || (okW && (w.Attempt != e.Attempt || w.Seq != e.Seq)) {
			t.Errorf("%s: Waiting = %+v %v, Explain = attempt %d seq %d %v", job, w.Attempt, okW, e.Attempt, e.Seq, okE)
		}
	}
}

// With the default policy (no reservations for high requests) a request that can neither start
// nor preempt is told which jobs it may not preempt leave it no room, on the node where they
// leave it the least short: n-2, where a notebook alone is in the way (not the low job there,
// which it could preempt), not n-1 with two high jobs.
func TestExplainNamesTheJobsANoFitRequestWaitsFor(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{})
	on := func(r Request, node string) Request { r.Nodes = []string{node}; return r }
	for _, r := range []Request{
		on(bfJob("high-a", High, 1, time.Hour, 1), "n-1"),
		on(bfJob("high-b", High, 1, 3*time.Hour, 2), "n-1"),
		on(bfJob("low-a", Low, 6, 0, 3), "n-1"),
		on(makeJob("nb", "a").Class(High).Notebook().GPUs(1).Seq(4).Obj(), "n-2"),
		on(bfJob("low-b", Low, 7, 0, 5), "n-2"),
	} {
		r.RunEstimated = r.RunLimit > 0
		mustEnqueue(t, p, r)
	}
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", High, 8, 0, 6))
	sched(t, p, at(120))
	wi, ok := p.Explain("big")
	if !ok {
		t.Fatal("big is not waiting")
	}
	want := "; on n-2, where jobs it may not preempt leave it the least short, they are nb (high notebook, running 2h, no time limit)"
	if !strings.HasSuffix(wi.Reason, want) || !slices.Equal(wi.WaitingFor, []string{"nb"}) {
		t.Fatalf("want the reason to end %q and big waiting for nb, got %q, waiting for %v", want, wi.Reason, wi.WaitingFor)
	}
}

// The jobs a reason names are those the pass would not preempt for the request and that leave
// it no room: each row is one way to name the wrong job (found by review).
func TestExplainNamesOnlyTheJobsInTheWay(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodes      []Node
		policy     Policy
		running    []Request // started at minute 0, in order
		loan       *Request  // started on loan at minute 40
		wait       Request   // enqueued at minute 1
		at         []int     // passes after that
		named      []string  // want WaitingFor
		notInText  string
		wantInText string
	}{
		{name: "a job it fits beside is not named; a protected lower job is",
			nodes: nodesOf("n", "a", 1, 8, 0, 0), policy: Policy{MinRuntimeBeforePreemption: 10 * time.Hour},
			running: []Request{bfJob("high-a", High, 2, time.Hour, 1), bfJob("low-a", Low, 6, 0, 2)},
			wait:    bfJob("med", Medium, 4, 0, 3), at: []int{60},
			named: []string{"high-a", "low-a"}, wantInText: "low-a (low, running 1h, no time limit)"},
		{name: "a starving owner may preempt a job at max_preemptions once more",
			nodes:   nodesOf("n", "a", 1, 8, 0, 0),
			policy:  Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: 2 * time.Hour, MaxPreemptions: 1},
			running: []Request{bfJob("high-a", High, 4, 20*time.Hour, 1), makeJob("low-max", "a").Class(Low).GPUs(4).Seq(2).Preemptions(1).Obj()},
			wait:    bfJob("big", Medium, 8, 0, 3), at: []int{40, 200},
			named: []string{"high-a"}, notInText: "low-max"},
		{name: "a loan on the owner's nodes is not named: the owner takes it back",
			nodes: nodesOf("n", "a", 1, 8, 0, 0), policy: Policy{ReserveAfter: 30 * time.Minute, Backfill: true},
			running: []Request{bfJob("hold", High, 4, 60*time.Minute, 1)},
			loan:    &Request{Job: "x", Class: High, Demand: Demand{Family: "a", GPUs: 4}, Workers: 1, Seq: 9, RunLimit: 10 * time.Minute},
			wait:    bfJob("big", Medium, 8, 0, 2), at: []int{35},
			named: []string{"hold"}, notInText: "x ("},
		{name: "a gang that needs one rack is told nothing rather than nodes of two racks",
			nodes: racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"), policy: blockRack,
			running: []Request{bfJob("x", High, 8, 0, 1), bfJob("y", High, 2, 0, 2), bfJob("z", High, 4, 0, 3), bfJob("w", High, 4, 0, 4)},
			wait:    makeJob("g", "a").GPUs(8).Workers(2).Seq(5).Topology(rackOf("rack", true)).Obj(), at: []int{60},
			named: nil},
		{name: "an elastic gang is judged at its least size",
			nodes:   nodesOf("n", "a", 3, 8, 0, 0),
			running: []Request{bfJob("x", High, 8, 0, 1), bfJob("y", High, 8, 0, 2), bfJob("z", High, 8, 3*time.Hour, 3)},
			wait:    makeJob("g", "a").GPUs(8).Workers(4).Elastic(2).Seq(4).Obj(), at: []int{60},
			named: []string{"x", "y"}, wantInText: "on n-1, n-2, where"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.nodes, tc.policy)
			for _, r := range tc.running {
				mustEnqueue(t, p, r)
				sched(t, p, at(0))
			}
			mustEnqueue(t, p, tc.wait)
			sched(t, p, at(1))
			if tc.loan != nil {
				sched(t, p, at(31))
				mustEnqueue(t, p, *tc.loan)
				if d := sched(t, p, at(32)); len(d.Grants) != 1 || !d.Grants[0].OnLoan {
					t.Fatalf("setup: %s not started on loan: %+v", tc.loan.Job, d)
				}
			}
			for _, m := range tc.at {
				sched(t, p, at(m))
			}
			wi, ok := p.Explain(tc.wait.Job)
			if !ok {
				t.Fatalf("%s is not waiting", tc.wait.Job)
			}
			if !slices.Equal(wi.WaitingFor, tc.named) || tc.notInText != "" && strings.Contains(wi.Reason, tc.notInText) ||
				!strings.Contains(wi.Reason, tc.wantInText) {
				t.Fatalf("want %v named (not %q, with %q), got %v: %q", tc.named, tc.notInText, tc.wantInText, wi.WaitingFor, wi.Reason)
			}
		})
	}
}

func TestMinutesText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		90 * time.Minute: "1h30m", 279*time.Hour + 10*time.Minute: "279h10m", 11*time.Hour + 11*time.Minute: "11h11m",
		10 * time.Hour: "10h", 45 * time.Minute: "45m", 20 * time.Second: "20s",
	} {
		if got := minutesText(d); got != want {
			t.Errorf("minutesText(%v) = %q, want %q", d, got, want)
		}
	}
}
