package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// loanJob is a 1-GPU bfJob with an estimated run limit (Request.RunEstimated): nobody stops it
// there.
func loanJob(name string, c Class, kind Kind, rl time.Duration, seq int64) Request {
	r := bfJob(name, c, 1, rl, seq)
	r.Kind, r.RunEstimated = kind, true
	return r
}

// TestLoans: on bfSetup's node, reserved for "big" (medium, 4 GPUs) from minute 100, one GPU is
// free from minute 40. A job whose 30m estimate ends it before then starts there on loan; if it
// is still running past its estimate when big could otherwise start, big takes the GPU back
// whatever the borrower's class, as a yield that spends no retry.
func TestLoans(t *testing.T) {
	for _, tc := range []struct {
		name string
		// given: the job that comes at minute 40 (one GPU, estimate 30m) and how often it was
		// preempted before
		class       Class
		kind        Kind
		preemptions int
		// want: whether it starts on loan at 40 and yields to big at 100
		wantLoan bool
	}{
		{name: "a low job borrows and yields", class: Low, kind: KindJob, wantLoan: true},
		{name: "a job of the owner's class borrows and yields", class: Medium, kind: KindJob, wantLoan: true},
		{name: "a higher-class job borrows and yields", class: High, kind: KindJob, wantLoan: true},
		{name: "a notebook never borrows: it could not be made to yield", class: High, kind: KindNotebook, wantLoan: false},
		{name: "a job at max_preemptions never borrows", class: High, kind: KindJob, preemptions: 3, wantLoan: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := bfSetup(t, true)
			r := loanJob("x", tc.class, tc.kind, 30*time.Minute, 9)
			r.Preemptions = tc.preemptions
			mustEnqueue(t, p, r)
			d := sched(t, p, at(40))
			started := slices.ContainsFunc(d.Grants, func(g Grant) bool { return g.Job == "x" && g.OnLoan })
			if started != tc.wantLoan {
				t.Fatalf("at 40: want x started on loan %v, got %s", tc.wantLoan, mustJSON(t, d))
			}
			if !tc.wantLoan {
				return
			}
			// It overruns its estimate (70) and is still running when "hold" ends at 100.
			if d := sched(t, p, at(70)); len(d.Preemptions) > 0 {
				t.Fatalf("at 70: big cannot start yet, want no yield, got %s", mustJSON(t, d))
			}
			bfEnd(t, p, "hold")
			d = sched(t, p, at(100))
			if len(d.Preemptions) != 1 || d.Preemptions[0].Victim != "x" || !d.Preemptions[0].Loan || d.Preemptions[0].Preemptor.Job != "big" {
				t.Fatalf("at 100: want x to yield its loan to big, got %s", mustJSON(t, d))
			}
			if why := d.Preemptions[0].Reason; !strings.Contains(why, "loan") || !strings.Contains(why, "without spending a retry") {
				t.Fatalf("the yield's reason should tell the user why: %q", why)
			}
		})
	}
}

// TestLoanIsNotTakenBackEarly: a borrower inside its estimate keeps the capacity even when the
// reservation's owner could start sooner than planned: the owner waits for the estimate.
func TestLoanIsNotTakenBackEarly(t *testing.T) {
	p := bfSetup(t, true)
	mustEnqueue(t, p, loanJob("x", High, KindJob, 30*time.Minute, 9))
	if d := sched(t, p, at(40)); len(d.Grants) != 1 || !d.Grants[0].OnLoan {
		t.Fatalf("at 40: want x started on loan, got %s", mustJSON(t, d))
	}
	bfEnd(t, p, "hold") // at 50, long before its 100
	if d := sched(t, p, at(50)); len(d.Preemptions)+len(d.Grants) > 0 {
		t.Fatalf("at 50: x is within its estimate, want nothing decided, got %s", mustJSON(t, d))
	}
	if d := sched(t, p, at(70)); len(d.Preemptions) != 1 || !d.Preemptions[0].Loan {
		t.Fatalf("at 70: x's estimate is up, want it to yield, got %s", mustJSON(t, d))
	}
}

// TestLoanKeepsTheStart: a borrower that overruns its estimate does not move the reservation's
// start later, so it lets no further borrower in behind it (an estimate that is "one more
// estimate from now" once overrun would push the start on with every overrun).
func TestLoanKeepsTheStart(t *testing.T) {
	p := bfSetup(t, true)
	mustEnqueue(t, p, loanJob("x", High, KindJob, 30*time.Minute, 9))
	sched(t, p, at(40))
	bfEnd(t, p, "hold") // big's start is x's estimate, 70
	sched(t, p, at(60))
	// At 90 x has overrun; a 1-GPU job with a 15m estimate would end at 105: after the start.
	mustEnqueue(t, p, loanJob("y", High, KindJob, 15*time.Minute, 10))
	d := sched(t, p, at(90))
	if slices.ContainsFunc(d.Grants, func(g Grant) bool { return g.Job == "y" }) {
		t.Fatalf("at 90: y must not borrow behind an overrun loan, got %s", mustJSON(t, d))
	}
	if len(d.Preemptions) != 1 || d.Preemptions[0].Victim != "x" {
		t.Fatalf("at 90: want x to yield to big, got %s", mustJSON(t, d))
	}
}

// TestLoanSurvivesSnapshot: a running job's loan is part of the snapshot (the allocator
// continues as new with it).
func TestLoanSurvivesSnapshot(t *testing.T) {
	p := bfSetup(t, true)
	mustEnqueue(t, p, loanJob("x", Low, KindJob, 30*time.Minute, 9))
	sched(t, p, at(40))
	q := roundTrip(t, p)
	if ri, ok := q.Running("x"); !ok || !ri.OnLoan {
		t.Fatalf("restored: want x running on loan, got %+v", ri)
	}
	bfEnd(t, q, "hold")
	if d := sched(t, q, at(100)); len(d.Preemptions) != 1 || !d.Preemptions[0].Loan {
		t.Fatalf("restored, at 100: want x to yield, got %s", mustJSON(t, d))
	}
}

// TestYieldedLoanDoesNotTakeTheReservationBack: two high jobs borrow the two free GPUs of the node
// reserved for big (medium, 4 GPUs), overrun, and yield to big at 100 with a notice of 10 minutes.
// x stops at once and reruns, ahead of big by class, with an estimate of a minute: short enough to
// end before y has stopped. It must not take back what x and hold left: big's reservation stays
// in force until its victims have stopped (keepOwnResv), so a yielded loan can neither start
// there outright nor borrow there again, and big starts the moment y has stopped. Without that,
// x restarted on big's node at 101 and big waited behind a job that no longer yields to it.
func TestYieldedLoanDoesNotTakeTheReservationBack(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, MaxLossGPUHours: 1, PreemptionNotice: 10 * time.Minute})
	mustEnqueue(t, p, bfJob("hold", High, 2, 100*time.Minute, 1), bfJob("one", Low, 1, 100*time.Minute, 2), bfJob("two", Low, 1, 100*time.Minute, 2))
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", Medium, 4, 60*time.Minute, 3))
	sched(t, p, at(1))
	sched(t, p, at(31))
	bfEnd(t, p, "one")
	bfEnd(t, p, "two")
	mustEnqueue(t, p, loanJob("x", High, KindJob, 30*time.Minute, 9), loanJob("y", High, KindJob, 30*time.Minute, 10))
	if d := sched(t, p, at(40)); len(d.Grants) != 2 || !d.Grants[0].OnLoan || !d.Grants[1].OnLoan {
		t.Fatalf("at 40: want x and y started on loan, got %s", mustJSON(t, d))
	}
	bfEnd(t, p, "hold")
	if d := sched(t, p, at(100)); len(d.Preemptions) != 2 || !d.Preemptions[0].Loan || !d.Preemptions[1].Loan {
		t.Fatalf("at 100: want x and y to yield to big, got %s", mustJSON(t, d))
	}
	rerun := loanJob("x", High, KindJob, time.Minute, 9)
	rerun.Attempt++
	mustEnqueue(t, p, rerun)
	p.Release("x", rerun.Attempt-1, 0)
	for _, m := range []int{101, 105} {
		if d := sched(t, p, at(m)); len(d.Grants)+len(d.Preemptions) > 0 {
			t.Fatalf("at %d: y is still stopping; want nothing decided (x's rerun must not take big's node), got %s", m, mustJSON(t, d))
		}
	}
	p.Release("y", 0, 0)
	if got := grantedJobs(sched(t, p, at(106))); !slices.Equal(got, []string{"big"}) {
		t.Fatalf("at 106: want big started once y stopped, got %v", got)
	}
}

// TestStarvingReservationBindsEveryClass: a medium request that starves behind high jobs with no
// run limit (its start is unknown) still holds what frees up on its node against a stream of
// high jobs: with StarvationAfter, its reservation binds every request of the pass, not only
// those after it; without, the stream takes each GPU as it frees.
func TestStarvingReservationBindsEveryClass(t *testing.T) {
	for _, tc := range []struct {
		name          string
		starvation    time.Duration
		wantStreamRun bool
	}{
		{"starving: the high stream waits", time.Hour, false},
		{"no starvation bound: the high stream takes the GPU", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: tc.starvation})
			mustEnqueue(t, p, bfJob("hi1", High, 2, 0, 1), bfJob("hi2", High, 2, 0, 2))
			sched(t, p, at(0))
			mustEnqueue(t, p, bfJob("med", Medium, 4, 0, 3))
			sched(t, p, at(1))
			sched(t, p, at(31))
			sched(t, p, at(62)) // med has been first of its class for an hour: it starves
			bfEnd(t, p, "hi1")
			mustEnqueue(t, p, bfJob("hi3", High, 1, 0, 4))
			got := grantedJobs(sched(t, p, at(70)))
			if ran := slices.Contains(got, "hi3"); ran != tc.wantStreamRun {
				t.Fatalf("at 70: started %v; want hi3 started %v", got, tc.wantStreamRun)
			}
			if tc.wantStreamRun {
				return
			}
			bfEnd(t, p, "hi2")
			if got := grantedJobs(sched(t, p, at(80))); !slices.Equal(got, []string{"med"}) {
				t.Fatalf("at 80: want med started once hi2 ended, got %v", got)
			}
		})
	}
}

// TestPropertyLoansWithUndershootingEstimates plays random streams of learned-style estimates
// (RunEstimated), a third of them shorter than the true runtime, on a small backfilling pool
// with 4-GPU requests that reserve: schedChecked checks every invariant after every pass (a
// yield only of a loan past its estimate, never of a notebook, nothing over-allocated); here,
// no job yields more often than MaxPreemptions allows. The streams must exercise loans and
// yields. They do not check that a second pass at the same instant decides nothing: a
// reservation's owner that moves its reservation to other nodes in its walk frees the old ones
// for the requests walked before it only from the next instant (NextWake says so).
func TestPropertyLoansWithUndershootingEstimates(t *testing.T) {
	grants, yields := 0, 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 36))
		p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{ReserveAfter: 4 * time.Minute, Backfill: true, StarvationAfter: 0})
		now := t0
		ends := map[string]time.Time{} // true end of each running attempt
		yieldsOf := map[string]int{}
		attempt := map[string]int{}
		pending := map[string]Request{}
		for step := range 400 {
			now = now.Add(time.Duration(rng.IntN(3)) * time.Minute)
			if rng.IntN(3) == 0 {
				name := fmt.Sprintf("j%d", step)
				r := bfJob(name, Class(rng.IntN(3)), 1, time.Duration(1+rng.IntN(10))*time.Minute, int64(step))
				r.RunEstimated = true
				if rng.IntN(10) == 0 {
					r.Kind = KindNotebook
				}
				if rng.IntN(8) == 0 {
					r.Demand.GPUs, r.RunLimit, r.RunEstimated = 4, 0, false // a big one, with no estimate
				}
				pending[name] = r
				mustEnqueue(t, p, r)
			}
			for _, job := range p.RunningJobs() {
				ri, _ := p.Running(job)
				if !ri.Releasing && !now.Before(ends[job]) {
					bfEnd(t, p, job)
				}
			}
			d := schedChecked(t, p, now, false)
			for _, g := range d.Grants {
				r := pending[g.Job]
				// The true runtime: 0.3 to 3 times the estimate (no estimate: 5 to 40 minutes).
				run := time.Duration(float64(r.RunLimit) * (0.3 + 2.7*rng.Float64()))
				if r.RunLimit == 0 {
					run = time.Duration(5+rng.IntN(36)) * time.Minute
				}
				ends[g.Job] = now.Add(run)
				if g.OnLoan {
					grants++
				}
			}
			for _, pe := range d.Preemptions {
				if pe.Loan {
					yields++
					yieldsOf[pe.Victim]++
					if yieldsOf[pe.Victim] > 3 {
						t.Fatalf("seed %d: %s yielded %d times, more than max_preemptions", seed, pe.Victim, yieldsOf[pe.Victim])
					}
				}
				// The victim reruns as its next attempt once it has stopped.
				ri, _ := p.Running(pe.Victim)
				for w := range ri.Placement {
					p.Release(pe.Victim, ri.Attempt, w)
				}
				r := pending[pe.Victim]
				attempt[pe.Victim]++
				r.Attempt, r.Preemptions = attempt[pe.Victim], r.Preemptions+1
				pending[pe.Victim] = r
				mustEnqueue(t, p, r)
			}
		}
	}
	if grants == 0 || yields == 0 {
		t.Fatalf("the streams started %d jobs on loan and %d yielded: too few to test loans", grants, yields)
	}
	t.Logf("%d jobs started on loan, %d yielded", grants, yields)
}
