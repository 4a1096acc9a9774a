package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// starveSetup is one node of 4 GPUs per job in running (each started at minute 0, one node
// each, in order), and then, at minute 60, the requests in waiting, first scheduled then: by
// minute 60 each running job would lose 4 GPU-hours, more than MaxLossGPUHours 1 allows.
func starveSetup(t *testing.T, pol Policy, running []Request, waiting ...Request) *Pool {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", len(running), 4, 0, 0), pol)
	mustEnqueue(t, p, running...)
	if got := grantedJobs(sched(t, p, at(0))); len(got) != len(running) {
		t.Fatalf("want %d jobs started at 0, got %v", len(running), got)
	}
	mustEnqueue(t, p, waiting...)
	if d := sched(t, p, at(60)); len(d.Grants)+len(d.Preemptions) > 0 {
		t.Fatalf("at 60: want nothing decided (every victim protected), got %s", mustJSON(t, d))
	}
	return p
}

func TestStarvation(t *testing.T) {
	limits := Policy{MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour}
	job := func(name string, c Class, seq int64) Request {
		return makeJob(name, "a").Class(c).GPUs(4).Seq(seq).Obj()
	}
	for _, tc := range []struct {
		name    string
		pol     Policy
		running []Request
		waiting []Request
		now     int // minute of the pass that is checked
		want    []string
	}{
		// The request became the first of its class at minute 60: from minute 180 on, the loss
		// limit no longer protects a strictly lower-class victim from it.
		{"after starvation_after as the first of its class, it preempts a victim max_loss protects",
			limits, []Request{job("long", Medium, 1)}, []Request{job("h", High, 2)}, 180, []string{"long"}},
		{"not a moment before",
			limits, []Request{job("long", Medium, 1)}, []Request{job("h", High, 2)}, 179, nil},
		{"off (0), never",
			Policy{MaxLossGPUHours: 1}, []Request{job("long", Medium, 1)}, []Request{job("h", High, 2)}, 60 * 24, nil},
		{"a medium request preempts a low victim",
			limits, []Request{job("long", Low, 1)}, []Request{job("m", Medium, 2)}, 180, []string{"long"}},
		{"never a victim of its own class",
			limits, []Request{job("long", High, 1)}, []Request{job("h", High, 2)}, 60 * 24, nil},
		{"never a victim of a higher class",
			limits, []Request{job("long", High, 1)}, []Request{job("m", Medium, 2)}, 60 * 24, nil},
		{"a low request preempts nobody",
			limits, []Request{job("long", Low, 1)}, []Request{job("l", Low, 2)}, 60 * 24, nil},
		{"a victim already preempted max_preemptions times, once more",
			limits, []Request{makeJob("long", "a").Class(Medium).GPUs(4).Seq(1).Preemptions(3).Obj()}, []Request{job("h", High, 2)}, 180, []string{"long"}},
		{"never a victim preempted more than max_preemptions times",
			limits, []Request{makeJob("long", "a").Class(Medium).GPUs(4).Seq(1).Preemptions(4).Obj()}, []Request{job("h", High, 2)}, 60 * 24, nil},
		{"min_runtime_before_preemption no longer protects either",
			Policy{MaxLossGPUHours: -1, MinRuntimeBeforePreemption: 10 * time.Hour, StarvationAfter: 2 * time.Hour},
			[]Request{job("long", Medium, 1)}, []Request{job("h", High, 2)}, 180, []string{"long"}},
		{"only the first of its class: the second high request does not preempt",
			limits, []Request{job("long1", Medium, 1), job("long2", Medium, 2)}, []Request{job("h1", High, 3), job("h2", High, 4)}, 180, []string{"long1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := starveSetup(t, tc.pol, tc.running, tc.waiting...)
			if tc.now > 179 { // the passes before it decide nothing
				if d := sched(t, p, at(179)); len(d.Preemptions) > 0 {
					t.Fatalf("at 179: want no preemption, got %v", victims(d))
				}
			}
			got := victims(sched(t, p, at(tc.now)))
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("at minute %d: preempted %v, want %v", tc.now, got, tc.want)
			}
		})
	}
}

// TestStarvationWakes: the pool asks for a pass when the first request of a class reaches
// StarvationAfter, since no event may come then.
func TestStarvationWakes(t *testing.T) {
	p := starveSetup(t, Policy{MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour},
		[]Request{makeJob("long", "a").Class(Medium).GPUs(4).Seq(1).Obj()}, makeJob("h", "a").Class(High).GPUs(4).Seq(2).Obj())
	if wake, ok := p.NextWake(); !ok || !wake.Equal(at(180)) {
		t.Fatalf("NextWake = %v %v, want minute 180", wake, ok)
	}
	if wi, _ := p.Explain("h"); !strings.Contains(wi.Reason, "only until it has been the first of its class for 2h0m0s") {
		t.Fatalf("the reason should name the bound: %q", wi.Reason)
	}
	q := roundTrip(t, p) // the head's clock survives a snapshot
	if got := victims(sched(t, q, at(180))); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("restored pool at 180: preempted %v, want [long]", got)
	}
}

// TestStarvingReservation: with Backfill, a starving request's reservation counts the jobs it
// may preempt as gone now, so it gets a start (when the jobs it may not preempt end) and holds
// its node against the requests that would not end by then, of its own class too.
func TestStarvingReservation(t *testing.T) {
	for _, tc := range []struct {
		name        string
		starve      time.Duration
		smallLimit  time.Duration
		wantStarted bool
	}{
		{"a high job that would not end by the start waits", 2 * time.Hour, 10 * time.Hour, false},
		{"one that ends by the start runs", 2 * time.Hour, time.Hour, true},
		// Without the bound the medium job never ends by its RunLimit (it has none), so the start
		// is unknown, a high request does not reserve, and the freed GPU goes to the next one.
		{"without starvation_after the high job takes the freed GPU", 0, 10 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, StarvationAfter: tc.starve})
			mustEnqueue(t, p, bfJob("hi-a", High, 2, 300*time.Minute, 1), bfJob("hi-b", High, 1, 400*time.Minute, 2), bfJob("med", Medium, 5, 0, 3))
			if got := grantedJobs(sched(t, p, at(0))); len(got) != 3 {
				t.Fatalf("want 3 jobs started at 0, got %v", got)
			}
			mustEnqueue(t, p, bfJob("big", High, 8, time.Hour, 4))
			for _, m := range []int{60, 180} {
				if d := sched(t, p, at(m)); len(d.Grants)+len(d.Preemptions) > 0 {
					t.Fatalf("at %d: want nothing decided, got %s", m, mustJSON(t, d))
				}
			}
			bfEnd(t, p, "hi-b")
			mustEnqueue(t, p, bfJob("small", High, 1, tc.smallLimit, 5))
			if got := grantedJobs(sched(t, p, at(190))); slices.Contains(got, "small") != tc.wantStarted {
				t.Fatalf("at 190 (hi-a ends at 300): started %v, want small started %v", got, tc.wantStarted)
			}
			if tc.starve == 0 || tc.wantStarted {
				return
			}
			bfEnd(t, p, "hi-a")
			if got := victims(sched(t, p, at(300))); !slices.Equal(got, []string{"med"}) {
				t.Fatalf("at 300, hi-a gone: preempted %v, want [med]", got)
			}
		})
	}
}

// TestStarvingIgnoresLowerReservations: a lower class's reservation (with a start) keeps a
// starving request neither from preempting on its nodes nor from reserving them.
func TestStarvingIgnoresLowerReservations(t *testing.T) {
	for _, starve := range []time.Duration{0, 2 * time.Hour} {
		t.Run(fmt.Sprint(starve), func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, StarvationAfter: starve})
			mustEnqueue(t, p, bfJob("hi-a", High, 2, 300*time.Minute, 1), bfJob("med-r", Medium, 6, 10000*time.Minute, 2))
			if got := grantedJobs(sched(t, p, at(0))); len(got) != 2 {
				t.Fatalf("want 2 jobs started at 0, got %v", got)
			}
			mustEnqueue(t, p, bfJob("medw", Medium, 8, time.Hour, 3))
			sched(t, p, at(1))
			sched(t, p, at(31))
			if wi, _ := p.Explain("medw"); !slices.Equal(wi.Reserved, []string{"n-1"}) {
				t.Fatalf("medw should have reserved n-1: %+v", wi)
			}
			mustEnqueue(t, p, bfJob("big", High, 8, time.Hour, 4))
			for _, m := range []int{60, 180} {
				if d := sched(t, p, at(m)); len(d.Grants)+len(d.Preemptions) > 0 {
					t.Fatalf("at %d: want nothing decided, got %s", m, mustJSON(t, d))
				}
			}
			bfEnd(t, p, "hi-a")
			got := victims(sched(t, p, at(300)))
			if want := starve > 0; slices.Equal(got, []string{"med-r"}) != want {
				t.Fatalf("at 300, hi-a gone: preempted %v, want med-r preempted %v", got, want)
			}
		})
	}
}

// TestStarvingKeepsItsNodes: once a request starves, its reservation stays on the nodes it
// reserved then, although another node comes to lack less: its bound is for those nodes, and a
// node where it lacks less now may free later. Before it starves it still moves.
func TestStarvingKeepsItsNodes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		starve       time.Duration
		wantReserved string // at minute 200, once n-2 lacks less
		wantStarted  bool   // at minute 300, when n-1's blocker ends
	}{
		{"starving, it keeps n-1 and starts when its blocker ends", 2 * time.Hour, "n-1", true},
		{"not starving, it moves to n-2, and a later job takes n-1", 0, "n-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, StarvationAfter: tc.starve})
			// n-1: hi-a (6 GPUs, ends by minute 300); n-2: hi-b (4, ends at 200) and hi-c (3, by 1000).
			mustEnqueue(t, p, bfJob("hi-a", High, 6, 300*time.Minute, 1), bfJob("hi-b", High, 4, 200*time.Minute, 2), bfJob("hi-c", High, 3, 1000*time.Minute, 3))
			sched(t, p, at(0))
			for job, node := range map[string]string{"hi-a": "n-1", "hi-b": "n-2", "hi-c": "n-2"} {
				if ri, _ := p.Running(job); len(ri.Placement) != 1 || ri.Placement[0].Node != node {
					t.Fatalf("%s placed on %+v, want %s", job, ri.Placement, node)
				}
			}
			mustEnqueue(t, p, bfJob("big", Medium, 8, time.Hour, 4))
			for _, m := range []int{1, 31, 121, 130} {
				sched(t, p, at(m))
			}
			if wi, _ := p.Explain("big"); !slices.Equal(wi.Reserved, []string{"n-1"}) {
				t.Fatalf("at 130: big reserved %v, want n-1 (it lacks 6 GPUs there, 7 on n-2)", wi.Reserved)
			}
			p = roundTrip(t, p) // what it keeps survives a snapshot
			bfEnd(t, p, "hi-b")
			sched(t, p, at(200))
			if wi, _ := p.Explain("big"); !slices.Equal(wi.Reserved, []string{tc.wantReserved}) {
				t.Fatalf("at 200, n-2 lacking 3: big reserved %v, want %s", wi.Reserved, tc.wantReserved)
			}
			mustEnqueue(t, p, bfJob("later", High, 2, 2000*time.Minute, 5))
			sched(t, p, at(250))
			bfEnd(t, p, "hi-a")
			if got := grantedJobs(sched(t, p, at(300))); slices.Contains(got, "big") != tc.wantStarted {
				t.Fatalf("at 300, hi-a gone: started %v, want big started %v", got, tc.wantStarted)
			}
		})
	}
}

// starvingOnN1 is two nodes of 8 GPUs, n-1 holding hi-a (6 GPUs, ends by minute 300) and n-2
// hi-b (7, by 1000), and a medium request big (8 GPUs) that has starved since minute 121 and
// keeps n-1, where it lacks least.
func starvingOnN1(t *testing.T) *Pool {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour})
	mustEnqueue(t, p, bfJob("hi-a", High, 6, 300*time.Minute, 1), bfJob("hi-b", High, 7, 1000*time.Minute, 2))
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", Medium, 8, time.Hour, 3))
	for _, m := range []int{1, 31, 121, 130} {
		sched(t, p, at(m))
	}
	if got := reservedOf(p, "big"); !slices.Equal(got, []string{"n-1"}) {
		t.Fatalf("at 130: big reserved %v, want n-1 (it lacks 6 GPUs there, 7 on n-2)", got)
	}
	return p
}

// reservedOf is the nodes job reserved in the last pass.
func reservedOf(p *Pool, job string) []string {
	wi, _ := p.Explain(job)
	return wi.Reserved
}

// TestStarvingReturnsToItsNodes: a starving request of a higher class takes the nodes a starving
// lower one keeps (a lower class's reservation holds nothing from it); the lower one reserves
// elsewhere meanwhile, and returns to its own nodes once they are free of it.
func TestStarvingReturnsToItsNodes(t *testing.T) {
	p := starvingOnN1(t)
	mustEnqueue(t, p, bfJob("hbig", High, 8, time.Hour, 4))
	for _, m := range []int{131, 251} {
		sched(t, p, at(m))
	}
	if got, other := reservedOf(p, "hbig"), reservedOf(p, "big"); !slices.Equal(got, []string{"n-1"}) || !slices.Equal(other, []string{"n-2"}) {
		t.Fatalf("at 251, hbig starving: hbig reserved %v, big %v; want n-1 and n-2", got, other)
	}
	p = roundTrip(t, p)
	p.Cancel("hbig")
	sched(t, p, at(260))
	if got := reservedOf(p, "big"); !slices.Equal(got, []string{"n-1"}) {
		t.Fatalf("at 260, hbig gone: big reserved %v, want n-1 again", got)
	}
}

// TestStarvingWalkerLeavesLowerReservationsHolding: a starving request walks as if a lower
// class's reservation were not there, but where it takes nothing the reservation still holds
// against the requests after it: a later high job may not start on a starving medium request's
// node just because a starving high request walked past it.
func TestStarvingWalkerLeavesLowerReservationsHolding(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour})
	// n-1: hi-a (6 GPUs, ends by minute 300); n-2: hi-b (4) and med-x (3), which a high request may preempt.
	mustEnqueue(t, p, bfJob("hi-a", High, 6, 300*time.Minute, 1), bfJob("hi-b", High, 4, 1000*time.Minute, 2), bfJob("med-x", Medium, 3, 1000*time.Minute, 3))
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", Medium, 8, time.Hour, 4))
	for _, m := range []int{1, 31, 121, 130} {
		sched(t, p, at(m))
	}
	mustEnqueue(t, p, bfJob("hbig", High, 8, time.Hour, 5))
	for _, m := range []int{131, 161, 251} {
		sched(t, p, at(m))
	}
	if hb, b := reservedOf(p, "hbig"), reservedOf(p, "big"); !slices.Equal(hb, []string{"n-2"}) || !slices.Equal(b, []string{"n-1"}) {
		t.Fatalf("at 251, both starving: hbig reserved %v, big %v; want n-2 (it lacks 4 GPUs there, 6 on n-1) and n-1", hb, b)
	}
	mustEnqueue(t, p, bfJob("small", High, 2, 2000*time.Minute, 6))
	if got := grantedJobs(sched(t, p, at(255))); slices.Contains(got, "small") {
		t.Fatalf("at 255: started %v; small (it would run past big's start) may not start on big's node n-1", got)
	}
	if got := reservedOf(p, "big"); !slices.Equal(got, []string{"n-1"}) {
		t.Fatalf("at 255: big reserved %v, want n-1", got)
	}
}

// TestCutPassKeepsTheHeadsReservation: a pass cut short (ScheduleAtMost) before the first
// request of a class keeps that request's reservation, so that the next call at the same time
// decides what one full pass would: no high job starts on a starving medium request's node.
func TestCutPassKeepsTheHeadsReservation(t *testing.T) {
	p := starvingOnN1(t)
	mustEnqueue(t, p, bfJob("g1", High, 1, 2000*time.Minute, 5), bfJob("small", High, 2, 2000*time.Minute, 6))
	if d := p.ScheduleAtMost(at(200), 1); !slices.Equal(grantedJobs(d), []string{"g1"}) || !d.More {
		t.Fatalf("first call at 200: %s, want g1 granted and more to decide", mustJSON(t, d))
	}
	if got := reservedOf(p, "big"); !slices.Equal(got, []string{"n-1"}) {
		t.Fatalf("after the cut pass: big reserved %v, want n-1", got)
	}
	p.ScheduleAtMost(at(200), 1)
	if ri, ok := p.Running("small"); ok {
		t.Fatalf("small started on %+v, on starving big's node", ri.Placement)
	}
}

// TestLossWithinWait: with Policy.LossWithinWait a starving request preempts a job the loss
// limit protects only if the job's work at stake is at most the GPU-hours the request has waited.
func TestLossWithinWait(t *testing.T) {
	pol := Policy{MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour, LossWithinWait: true}
	long := makeJob("long", "a").Class(Medium).GPUs(4).Seq(1).Obj() // started at minute 0
	for _, tc := range []struct {
		name      string
		submitted int // minute the waiting high request (4 GPUs) was submitted
		now       int
		want      []string
	}{
		// At 180 the victim would lose 4 GPUs × 3h = 12 GPU-hours; a request submitted at 0 has
		// waited 4 GPUs × 3h = 12.
		{"its wait covers the victim's loss: it preempts", 0, 180, []string{"long"}},
		// Submitted at 30, it has waited 10 GPU-hours at 180, and the victim's loss grows as
		// fast as its wait: it never preempts, and waits for the victim's end.
		{"the victim would lose more than it waited: it does not preempt", 30, 180, nil},
		{"nor later", 30, 60 * 24, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := makeJob("h", "a").Class(High).GPUs(4).Seq(2).SubmittedAt(tc.submitted).Obj()
			p := starveSetup(t, pol, []Request{long}, h)
			got := victims(sched(t, p, at(tc.now)))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("at minute %d: preempted %v, want %v", tc.now, got, tc.want)
			}
		})
	}
}

// TestStrictMaxPreemptions: with Policy.StrictMaxPreemptions a starving request no longer
// preempts a job at MaxPreemptions once more.
func TestStrictMaxPreemptions(t *testing.T) {
	for _, strict := range []bool{false, true} {
		pol := Policy{MaxLossGPUHours: 1, StarvationAfter: 2 * time.Hour, StrictMaxPreemptions: strict}
		atMax := makeJob("long", "a").Class(Medium).GPUs(4).Seq(1).Preemptions(3).Obj()
		p := starveSetup(t, pol, []Request{atMax}, makeJob("h", "a").Class(High).GPUs(4).Seq(2).Obj())
		got := victims(sched(t, p, at(180)))
		if want := !strict; (len(got) == 1) != want {
			t.Fatalf("strict %v: at 180 preempted %v; want the job at max_preemptions preempted once more: %v", strict, got, want)
		}
	}
}
