package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// bfJob is a one-worker job of family a with gpus GPUs, class c and run limit rl (0: none).
func bfJob(name string, c Class, gpus int, rl time.Duration, seq int64) Request {
	r := makeJob(name, "a").Class(c).GPUs(gpus).Seq(seq).Obj()
	r.RunLimit = rl
	return r
}

// bfEnd ends a running job as the allocator reports it: BeginRelease, then each worker.
func bfEnd(t *testing.T, p *Pool, job string) {
	t.Helper()
	ri, ok := p.Running(job)
	if !ok {
		t.Fatalf("%s is not running", job)
	}
	p.BeginRelease(job)
	for w := range ri.Placement {
		p.Release(job, ri.Attempt, w)
	}
}

// bfSetup is one node of 4 GPUs: "hold" (high, 3 GPUs, run limit 100m) and "one" (low, 1 GPU,
// run limit 100m) run from minute 0; "big" (medium, 4 GPUs) waits from minute 1, may preempt
// neither (the high one outranks it, the low one would lose more than MaxLossGPUHours at
// minute 61), and reserves the node at minute 31 (ReserveAfter 30m): with backfill, from
// minute 100 on. Then "one" ends at minute 40: one GPU is free until then.
func bfSetup(t *testing.T, backfill bool) *Pool {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: backfill, MaxLossGPUHours: 1})
	mustEnqueue(t, p, bfJob("hold", High, 3, 100*time.Minute, 1), bfJob("one", Low, 1, 100*time.Minute, 2))
	if got := grantedJobs(sched(t, p, at(0))); len(got) != 2 {
		t.Fatalf("want hold and one started, got %v", got)
	}
	mustEnqueue(t, p, bfJob("big", Medium, 4, 60*time.Minute, 3))
	sched(t, p, at(1))
	if d := sched(t, p, at(31)); len(d.Grants)+len(d.Preemptions) > 0 {
		t.Fatalf("at 31: want nothing decided, got %s", mustJSON(t, d))
	}
	if wi, _ := p.Explain("big"); !slices.Equal(wi.Reserved, []string{"n-1"}) {
		t.Fatalf("big should have reserved n-1: %+v", wi)
	}
	bfEnd(t, p, "one")
	return p
}

func TestBackfill(t *testing.T) {
	for _, tc := range []struct {
		name        string
		req         Request
		backfill    bool
		wantStarted bool
	}{
		// A job that ends (by its run limit) before the reservation starts runs there.
		{"a low job that ends before the reservation starts", bfJob("short", Low, 1, 30*time.Minute, 9), true, true},
		{"without backfill the drain holds the GPU from it", bfJob("short", Low, 1, 30*time.Minute, 9), false, false},
		// One that would end after the start waits; so does one without a run limit.
		{"a low job that would end after the start waits", bfJob("long", Low, 1, 120*time.Minute, 9), true, false},
		{"a low job without a run limit waits", bfJob("nolimit", Low, 1, 0, 9), true, false},
		// The reservation binds a higher class too: only if it ends by the start.
		{"a high job that would end after the start waits", bfJob("hi", High, 1, 120*time.Minute, 0), true, false},
		{"without backfill the high job starts on the drained node", bfJob("hi", High, 1, 120*time.Minute, 0), false, true},
		{"a high job without a run limit waits", bfJob("hi", High, 1, 0, 0), true, false},
		{"a high job that ends before the start runs", bfJob("hi", High, 1, 59*time.Minute, 0), true, true},
		{"a high job that ends at the start exactly runs", bfJob("hi", High, 1, 60*time.Minute, 0), true, true},
		{"a high job a minute longer waits", bfJob("hi", High, 1, 61*time.Minute, 0), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := bfSetup(t, tc.backfill)
			mustEnqueue(t, p, tc.req)
			got := grantedJobs(sched(t, p, at(40)))
			if started := slices.Contains(got, tc.req.Job); started != tc.wantStarted {
				t.Fatalf("at 40 (reservation from 100): started %v, want %s started %v", got, tc.req.Job, tc.wantStarted)
			}
			// Whatever started, big starts when hold ends at 100 by its limit (the short jobs are gone by then).
			if tc.wantStarted && tc.backfill {
				bfEnd(t, p, tc.req.Job)
			}
			if tc.backfill {
				bfEnd(t, p, "hold")
				if got := grantedJobs(sched(t, p, at(100))); !slices.Contains(got, "big") {
					t.Fatalf("at 100: want big started, got %v", got)
				}
			}
		})
	}
}

// TestBackfillSpare: a request that ends after the reservation's start may still take what the
// node will have beyond the reserved request's demand at that start.
func TestBackfillSpare(t *testing.T) {
	for _, tc := range []struct {
		gpus int
		want bool
	}{{2, true}, {3, false}} {
		p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true})
		mustEnqueue(t, p, bfJob("six", High, 6, 100*time.Minute, 1))
		sched(t, p, at(0))
		mustEnqueue(t, p, bfJob("big", Medium, 4, 0, 2))
		sched(t, p, at(1))
		sched(t, p, at(31)) // big reserves: from 100 the node has 8 GPUs, big needs 4: 4 to spare, 2 free now
		mustEnqueue(t, p, bfJob("long", Low, tc.gpus, 0, 3))
		got := grantedJobs(sched(t, p, at(32)))
		if slices.Contains(got, "long") != tc.want {
			t.Fatalf("a %d-GPU job without a run limit: started %v, want started %v", tc.gpus, got, tc.want)
		}
	}
}

// TestBackfillOverrun: a strictly lower-class job that runs past its run limit on a node
// reserved for a request loses its protection against that request (here MaxLossGPUHours):
// the reserved request preempts it rather than wait for it for ever.
func TestBackfillOverrun(t *testing.T) {
	// At 100 "one" has overrun its 90m, a limit or a learned estimate: big may preempt it
	// although it would lose 1h40m of work (an outrun estimate of a job big may take back
	// leaves big's start known, so big keeps its reservation).
	for _, estimated := range []bool{false, true} {
		p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1})
		one := bfJob("one", Low, 1, 90*time.Minute, 2)
		one.RunEstimated = estimated
		mustEnqueue(t, p, bfJob("hold", High, 3, 100*time.Minute, 1), one)
		sched(t, p, at(0))
		mustEnqueue(t, p, bfJob("big", Medium, 4, 60*time.Minute, 3))
		sched(t, p, at(1))
		sched(t, p, at(31))
		bfEnd(t, p, "hold")
		d := sched(t, p, at(100))
		if got := victims(d); !slices.Equal(got, []string{"one"}) {
			t.Fatalf("estimated %v, at 100: want one preempted for big, got %s", estimated, mustJSON(t, d))
		}
	}
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1})
	// A job within its limit is still protected: the same with a limit of 120m waits.
	mustEnqueue(t, p, bfJob("hold", High, 3, 100*time.Minute, 1), bfJob("one", Low, 1, 120*time.Minute, 2))
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", Medium, 4, 60*time.Minute, 3))
	sched(t, p, at(1))
	sched(t, p, at(31))
	bfEnd(t, p, "hold")
	if d := sched(t, p, at(100)); len(d.Preemptions) > 0 {
		t.Fatalf("at 100: one is within its limit, want no preemption, got %s", mustJSON(t, d))
	}
}

// TestBackfillOverrunLossWithinWait: with LossWithinWait an overrun on a reserved node loses its
// protection only as far as the reserved request has waited: one (low, 6 GPUs from minute 0, an
// estimate of 90m) loses 6 GPU-minutes a minute, big (medium, 8 GPUs, submitted at 50) has
// waited 8 GPU-minutes a minute, and big preempts it once that covers its loss, at 200.
func TestBackfillOverrunLossWithinWait(t *testing.T) {
	for _, tc := range []struct {
		now  int
		want []string
	}{
		{100, nil},             // one would lose 600 GPU-minutes, big waited 400
		{199, nil},             // 1194 against 1192
		{200, []string{"one"}}, // 1200 against 1200
	} {
		p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, LossWithinWait: true})
		one := bfJob("one", Low, 6, 90*time.Minute, 2)
		one.RunEstimated = true
		mustEnqueue(t, p, bfJob("hold", High, 2, 100*time.Minute, 1), one)
		sched(t, p, at(0))
		big := bfJob("big", Medium, 8, 60*time.Minute, 3)
		big.SubmittedAt = at(50)
		mustEnqueue(t, p, big)
		sched(t, p, at(50))
		sched(t, p, at(80))
		if wi, _ := p.Explain("big"); !slices.Equal(wi.Reserved, []string{"n-1"}) {
			t.Fatalf("big should have reserved n-1: %+v", wi)
		}
		bfEnd(t, p, "hold")
		if d := sched(t, p, at(tc.now)); !slices.Equal(victims(d), tc.want) {
			t.Fatalf("at %d: want %v preempted for big, got %s", tc.now, tc.want, mustJSON(t, d))
		}
	}
}

// TestBackfillHighReserves: with backfill a high request that no one may be preempted for
// reserves too, and the 1-GPU high jobs that would not end by its start stop cycling through
// its node.
func TestBackfillHighReserves(t *testing.T) {
	for _, backfill := range []bool{true, false} {
		p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: backfill})
		mustEnqueue(t, p, bfJob("h1", High, 3, 100*time.Minute, 1), bfJob("h2", High, 1, 50*time.Minute, 2))
		sched(t, p, at(0))
		mustEnqueue(t, p, bfJob("bigh", High, 4, 0, 3))
		sched(t, p, at(1))
		sched(t, p, at(31))
		bfEnd(t, p, "h2")
		mustEnqueue(t, p, bfJob("h3", High, 1, 200*time.Minute, 4))
		got := grantedJobs(sched(t, p, at(50)))
		if slices.Contains(got, "h3") == backfill {
			t.Fatalf("backfill %v: h3 started %v; want it to wait for bigh's reservation only with backfill", backfill, got)
		}
		if wi, ok := p.Explain("bigh"); backfill && (!ok || !strings.Contains(wi.Reason, "only jobs whose time limits end them before then")) {
			t.Fatalf("bigh's reason %q does not say what backfill lets start on its nodes", wi.Reason)
		}
	}
}

// TestAnOutrunEstimateGivesNoStart: a reservation's start that rests on a job which has run past
// its estimate (Request.RunEstimated, not a limit) is unknown, so a high request, which reserves
// only with a known start, stops holding capacity for it; a starving one keeps a provisional
// start, one more estimate from now, and lends its nodes until then. On one node of 4 GPUs
// "hold" (high, 3 GPUs, run limit 60m) runs from minute 0 and "bigh" (high, 4 GPUs) has
// reserved the node from minute 31, with its start at hold's end. "h3" (high, 1 GPU) asks at
// minute 50 or 70.
func TestAnOutrunEstimateGivesNoStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// given: whether hold's run limit is only an estimate, its progress report (a share
		// done at minute 50; 0: none), and the allocation's starvation_after (bigh is first of
		// its class from minute 1)
		estimated  bool
		done       float64
		starvation time.Duration
		// when: the minute h3 asks, and its run limit
		asks  int
		limit time.Duration
		// want: h3 started at once
		wantStarted bool
	}{
		{"an estimate not yet outrun: the reservation binds", true, 0, 0, 50, 100 * time.Minute, false},
		{"an outrun estimate: the start is unknown, nothing is held", true, 0, 0, 70, 100 * time.Minute, true},
		{"an outrun estimate with progress: the start is known", true, 0.5, 0, 70, 100 * time.Minute, false},
		{"an outrun limit: the job is stopped, the start is now", false, 0, 0, 70, 100 * time.Minute, false},
		{"starving: the provisional start binds h3, which ends after it", true, 0, time.Hour, 70, 100 * time.Minute, false},
		{"starving: the provisional start lends to h3, which ends before it", true, 0, time.Hour, 70, 30 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: tc.starvation})
			hold := bfJob("hold", High, 3, 60*time.Minute, 1)
			hold.RunEstimated = tc.estimated
			mustEnqueue(t, p, hold)
			sched(t, p, at(0))
			mustEnqueue(t, p, bfJob("bigh", High, 4, 0, 2))
			sched(t, p, at(1))
			sched(t, p, at(31))
			if wi, _ := p.Explain("bigh"); !slices.Equal(wi.Reserved, []string{"n-1"}) {
				t.Fatalf("at 31: bigh should have reserved n-1: %+v", wi)
			}
			ri, _ := p.Running("hold")
			if tc.done > 0 && !p.Progressed("hold", ri.Attempt, at(50), tc.done) {
				t.Fatal("hold's progress was not taken")
			}
			mustEnqueue(t, p, bfJob("h3", High, 1, tc.limit, 3))
			got := grantedJobs(sched(t, p, at(tc.asks)))
			if started := slices.Contains(got, "h3"); started != tc.wantStarted {
				t.Fatalf("at %d: started %v; want h3 started %v", tc.asks, got, tc.wantStarted)
			}
		})
	}
}

// TestExplainSaysAnUnknownStartDrains: a medium request's reservation whose start rests on a
// high job past its estimate drains, and its reason says so rather than promising backfill.
func TestExplainSaysAnUnknownStartDrains(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true})
	hold := bfJob("hold", High, 3, 60*time.Minute, 1)
	hold.RunEstimated = true
	mustEnqueue(t, p, hold)
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", Medium, 4, 0, 2))
	sched(t, p, at(1))
	for _, tc := range []struct {
		minute     int
		wantReason string
	}{
		{31, "only jobs whose time limits end them before then"},
		{70, "when it will fit is unknown"},
	} {
		sched(t, p, at(tc.minute))
		wi, ok := p.Explain("big")
		if !ok || !slices.Equal(wi.Reserved, []string{"n-1"}) || !strings.Contains(wi.Reason, tc.wantReason) {
			t.Fatalf("at %d: want n-1 reserved and a reason saying %q, got %+v", tc.minute, tc.wantReason, wi)
		}
	}
}

// A reservation's owner is told which running jobs it may not preempt leave it no room on its
// nodes, longest expected first, with how long each has run against its limit: an overrunning
// job of its own class on the only node that holds it is what a user waiting for weeks needs to
// see. A lower-class job it (starving) may preempt is not named. (A high request reserves with
// an unknown start only once it starves.)
func TestExplainNamesTheJobsAReservationWaitsFor(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: 2 * time.Hour})
	for _, r := range []Request{
		bfJob("over-a", High, 1, time.Hour, 1),
		bfJob("over-b", High, 1, time.Hour, 2),
		bfJob("within", High, 1, 20*time.Hour, 3),
		bfJob("lowjob", Low, 1, 2*time.Hour, 4),
		makeJob("nb", "a").Class(High).Notebook().GPUs(1).Seq(5).Obj(),
	} {
		if r.Job != "within" && r.Job != "lowjob" {
			r.RunEstimated = r.RunLimit > 0
		}
		mustEnqueue(t, p, r)
	}
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", High, 8, 0, 6))
	sched(t, p, at(1))
	sched(t, p, at(600))
	wi, ok := p.Explain("big")
	if !ok || !slices.Equal(wi.Reserved, []string{"n-1"}) {
		t.Fatalf("want n-1 reserved for big, got %+v", wi)
	}
	want := "; the jobs there that it may not preempt and that leave it no room are nb (high notebook, running 10h, no time limit), " +
		"over-a (high, running 10h, past its estimate of 1h), over-b (high, running 10h, past its estimate of 1h) " +
		"and within (high, running 10h, time limit 20h)"
	if !strings.HasSuffix(wi.Reason, want) {
		t.Fatalf("want the reason to end %q, got %q", want, wi.Reason)
	}
	if !slices.Equal(wi.WaitingFor, []string{"nb", "over-a", "over-b", "within"}) {
		t.Fatalf("want it waiting for nb, over-a, over-b and within (not lowjob), got %v", wi.WaitingFor)
	}
}
