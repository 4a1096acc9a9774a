package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// checkScheduleAtMost runs, on copies of p, one full pass at now and passes of
// at most k decisions (k = 1, 2, 3) at now until one says no more. A limited
// pass decides exactly what the full pass decides for the requests before its
// cut, in the same order, and stops only once it has decided k; the passes
// after it, at the same time with no event between, end with the same grants
// and preemptions as the full pass. A pass of at most 0 decides nothing.
func checkScheduleAtMost(t testing.TB, p *Pool, now time.Time) {
	t.Helper()
	full := roundTrip(t, p).Schedule(now)
	if d := roundTrip(t, p).ScheduleAtMost(now, 0); len(d.Grants)+len(d.Preemptions) > 0 {
		t.Fatalf("ScheduleAtMost(0) decided %s", mustJSON(t, d))
	}
	for k := 1; k <= 3; k++ {
		q := roundTrip(t, p)
		first := q.ScheduleAtMost(now, k)
		if len(first.Grants) > len(full.Grants) || len(first.Preemptions) > len(full.Preemptions) ||
			!slices.EqualFunc(first.Grants, full.Grants[:len(first.Grants)], sameGrant) ||
			!slices.EqualFunc(first.Preemptions, full.Preemptions[:len(first.Preemptions)], samePreemption) {
			t.Fatalf("ScheduleAtMost(%d) decided %s, the full pass %s", k, mustJSON(t, first), mustJSON(t, full))
		}
		if !first.More && (len(first.Grants) != len(full.Grants) || len(first.Preemptions) != len(full.Preemptions)) {
			t.Fatalf("ScheduleAtMost(%d) stopped short without saying so: %s, full %s", k, mustJSON(t, first), mustJSON(t, full))
		}
		if n := len(first.Grants) + len(first.Preemptions); first.More && n < k {
			t.Fatalf("ScheduleAtMost(%d) says more after %d decisions", k, n)
		}
		all := first
		for d, passes := first, 1; d.More; passes++ {
			if passes > len(p.waiting)+2 {
				t.Fatalf("ScheduleAtMost(%d) still says more after %d passes", k, passes)
			}
			d = q.ScheduleAtMost(now, k)
			all.Grants = append(all.Grants, d.Grants...)
			all.Preemptions = append(all.Preemptions, d.Preemptions...)
		}
		checkInvariants(t, q)
		if a, b := decisionSet(all), decisionSet(full); a != b {
			t.Fatalf("passes of at most %d decided\n%s\nthe full pass\n%s", k, a, b)
		}
	}
}

func sameGrant(a, b Grant) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func samePreemption(a, b Preemption) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// decisionSet lists the grants (with their placements) and preemptions, sorted.
func decisionSet(d Decisions) string {
	var out []string
	for _, g := range d.Grants {
		out = append(out, fmt.Sprintf("grant %v", g))
	}
	for _, pe := range d.Preemptions {
		out = append(out, fmt.Sprintf("preempt %s/%d for %s", pe.Victim, pe.VictimAttempt, pe.Preemptor.Job))
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

// TestScheduleAtMostGrantsInSlices: 20 one-GPU requests on 3 empty 8-GPU
// nodes; passes of at most 7 grant 7, 7, then the last 6 that fit, and say
// so; the queue is what one full pass leaves.
func TestScheduleAtMostGrantsInSlices(t *testing.T) {
	build := func() *Pool {
		p := mustPool(t, nodesOf("n", "a100", 3, 8, 96, 768), Policy{})
		for i := range 30 {
			mustEnqueue(t, p, makeJob(fmt.Sprintf("j%02d", i), "a100").GPUs(1).Seq(int64(i)).Obj())
		}
		return p
	}
	full := build().Schedule(at(1))
	p := build()
	var got []string
	for _, want := range []struct {
		grants int
		more   bool
	}{{7, true}, {7, true}, {7, true}, {3, false}} {
		d := p.ScheduleAtMost(at(1), 7)
		if len(d.Grants) != want.grants || d.More != want.more {
			t.Fatalf("pass granted %d, more %v; want %d, %v", len(d.Grants), d.More, want.grants, want.more)
		}
		got = append(got, grantedJobs(d)...)
	}
	if want := grantedJobs(full); !slices.Equal(got, want) {
		t.Fatalf("granted %v, a full pass %v", got, want)
	}
	if d := p.ScheduleAtMost(at(1), 7); len(d.Grants)+len(d.Preemptions) != 0 || d.More {
		t.Fatalf("a pass after the last decided %s", mustJSON(t, d))
	}
	if n := p.WaitingCount(); n != 6 {
		t.Fatalf("%d wait, want 6", n)
	}
}

// TestScheduleAtMostCountsPreemptions: two 4-GPU nodes full of low one-GPU
// jobs and three high 4-GPU requests. A pass of at most 2 decisions stops
// after the first request, whose 4 victims take it past the limit; the next
// goes on with the second; the third, with nothing left to preempt, only
// waits.
func TestScheduleAtMostCountsPreemptions(t *testing.T) {
	var jobs []runSpec
	for i := range 8 {
		jobs = append(jobs, running(fmt.Sprintf("lo%d", i)).Class(Low))
	}
	p := poolWith(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{}, jobs...)
	for i := range 3 {
		mustEnqueue(t, p, makeJob(fmt.Sprintf("hi%d", i), "a").Class(High).GPUs(4).Seq(int64(i)).Obj())
	}
	d := p.ScheduleAtMost(at(1), 2)
	if len(d.Preemptions) != 4 || !d.More || d.Preemptions[0].Preemptor.Job != "hi0" {
		t.Fatalf("first pass: %s", mustJSON(t, d))
	}
	d = p.ScheduleAtMost(at(1), 2)
	if len(d.Preemptions) != 4 || !d.More || d.Preemptions[0].Preemptor.Job != "hi1" {
		t.Fatalf("second pass: %s", mustJSON(t, d))
	}
	if d = p.ScheduleAtMost(at(1), 2); len(d.Grants)+len(d.Preemptions) != 0 || d.More {
		t.Fatalf("third pass: %s", mustJSON(t, d))
	}
	checkInvariants(t, p)
}
