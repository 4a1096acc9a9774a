package scheduler

// Tests from an adversarial review of the first version of cohorts (Policy.Cohort). Each
// comment says what that version did wrong; the test pins the rule that holds now, or is
// skipped with why the defect is still there (#38).

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

type testRand struct{ *rand.Rand }

func newTestRand(seed int64) testRand { return testRand{rand.New(rand.NewPCG(uint64(seed), 7))} }
func (r testRand) Intn(n int) int     { return r.IntN(n) }

func rvJob(name, alloc string, c Class, gpus int) jobBuilder {
	return makeJob(name, "a").In(alloc).Class(c).GPUs(gpus)
}

// R1: Reconfigure of a cohort pool with a waiting request fails: admitWaiting drops the
// Allocation column, so Restore sees allocation "".
func TestReviewReconfigureKeepsAllocation(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("a1", "a", Medium, 8).Seq(1).Obj(), rvJob("a2", "a", Medium, 8).Seq(2).Obj(), rvJob("a3", "a", Medium, 8).Seq(3).Obj())
	sched(t, p, at(0))
	// a3 waits (borrowing limit 0). Reconfigure with the same nodes and policy.
	if _, err := p.Reconfigure(nodesOf("n", "a", 2, 8, 0, 0), pol); err != nil {
		t.Fatalf("reconfigure with the same nodes and policy: %v", err)
	}
}

// R2: Adopt takes a request whose allocation has no share (admitAnywhere skips admitAllocation):
// it is charged to the first share (idx[""] == 0) and the pool's snapshot no longer restores.
func TestReviewAdoptChecksAllocation(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	err := p.Adopt(Adoption{Request: rvJob("x", "", Medium, 8).Obj(), Placement: []WorkerPlacement{{Worker: 0, Node: "n-1", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}, StartedAt: t0})
	if err == nil {
		t.Logf("adopted a job without allocation; held = %v", p.cohort.held)
		if _, rerr := Restore(p.Snapshot()); rerr != nil {
			t.Fatalf("Adopt accepted a job with no share and the snapshot no longer restores: %v", rerr)
		}
		t.Fatalf("Adopt accepted a job with no share (held %v)", p.cohort.held)
	}
}

// R3: within its share, an allocation whose share is full of its own low jobs cannot preempt
// them for its own high job when its borrowing limit is 0 (the default): the victim's GPUs, still
// held, count against the share, so it is borrow-capped. In a pool of its own it would preempt.
func TestReviewOwnPreemptionAtFullShare(t *testing.T) {
	t.Skip("known, #38: an allocation at its share with borrowing_limit 0 does not preempt its own lower class (counting its own lower-class jobs as room let it start on free capacity beyond its share, and churn followed)")
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("a1", "a", Low, 8).Seq(1).Obj(), rvJob("b1", "b", Low, 8).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("a2", "a", High, 8).Seq(3).Obj())
	d := sched(t, p, at(1))
	if vs := victims(d); len(vs) != 1 || vs[0] != "a1" {
		wi, _ := p.Explain("a2")
		t.Fatalf("a2 (high, a) should preempt a1 (low, a) within a's share: victims %v; a2 waits: %q", vs, wi.Reason)
	}
}

// R4: an elastic gang is "within" its share at its least size, but then preempts (takes back)
// for its whole size, taking back far beyond its share.
func TestReviewElasticReclaimsBeyondShare(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 4, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8}, {Allocation: "c", GPUs: 4, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 4, 4, 0, 0), pol)
	for i, j := range []string{"c1", "c2", "c3", "c4"} {
		mustEnqueue(t, p, rvJob(j, "c", Low, 4).Seq(int64(i+1)).Obj())
	}
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("g", "a", Medium, 4).Workers(3).Elastic(1).Seq(10).Obj())
	d := sched(t, p, at(1))
	var reclaimed []string
	for _, pe := range d.Preemptions {
		if pe.Reclaim {
			reclaimed = append(reclaimed, pe.Victim)
		}
	}
	if len(reclaimed)*4 > 4 {
		t.Fatalf("allocation a (share 4 GPUs, holding 0) took back %v = %d GPUs for one gang", reclaimed, 4*len(reclaimed))
	}
}

// R5: the borrowed flag is fixed at the start: once its allocation is back within its share,
// a job that started beyond it is still taken back by another allocation.
func TestReviewBorrowedFlagIsSticky(t *testing.T) {
	t.Skip("known, #38: a job that started borrowed stays so (taking back by current use threw away 50-66 % of useful work on multigpu50)")
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p,
		rvJob("a1", "a", Medium, 4).Nodes("n-1").Seq(1).Obj(), rvJob("a2", "a", Medium, 4).Nodes("n-2").Seq(2).Obj(),
		rvJob("a3", "a", Medium, 4).Nodes("n-1").Seq(3).Obj(), rvJob("a4", "a", Medium, 4).Nodes("n-2").Seq(4).Obj())
	d := sched(t, p, at(0))
	for _, g := range d.Grants {
		t.Logf("grant %s borrowed %v", g.Job, g.Borrowed)
	}
	p.Cancel("a1")
	p.Cancel("a2")
	sched(t, p, at(1))
	// a holds a3 + a4 = 8 GPUs = its share; 8 GPUs are free (4 on each node).
	mustEnqueue(t, p, rvJob("b1", "b", Low, 8).Seq(5).Obj())
	d = sched(t, p, at(2))
	for _, pe := range d.Preemptions {
		t.Fatalf("%s of allocation a, which holds only its share (8 of 8), was taken back for b1: %s", pe.Victim, pe.Reason)
	}
}

// R6: a borrowed job that is also a due loan on the walker's reserved node is listed twice
// among the node's candidates (dueLoans and borrowedJobs): its GPUs count twice.
func TestReviewDueLoanAndBorrowedListedTwice(t *testing.T) {
	pol := Policy{Backfill: true, ReserveAfter: time.Minute,
		Cohort: []CohortShare{{Allocation: "a", GPUs: 16}, {Allocation: "b", GPUs: 0, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), pol)
	h := rvJob("h", "a", High, 2).Seq(1).Obj()
	h.RunLimit = 60 * time.Minute
	mustEnqueue(t, p, h)
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("a1", "a", Medium, 8).Seq(2).Obj())
	sched(t, p, at(0))
	sched(t, p, at(2))
	b := rvJob("b3", "b", Low, 6).Seq(3).Obj()
	b.RunLimit = 10 * time.Minute
	mustEnqueue(t, p, b)
	d := sched(t, p, at(3))
	if len(d.Grants) != 1 || !d.Grants[0].OnLoan || !d.Grants[0].Borrowed {
		t.Fatalf("setup: b3 should start on loan and borrowed: %s", mustJSON(t, d))
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("pass at minute 30 panicked: %v", r)
		}
	}()
	d = sched(t, p, at(30))
	t.Logf("decisions: %s", mustJSON(t, d))
	if len(d.Preemptions) > 0 {
		t.Fatalf("a1 lacks 8 GPUs on n-1 and b3 frees 6 (h is high): nothing should be preempted, got %s", mustJSON(t, d.Preemptions))
	}
}

// R7: the preemptFor failure cache is keyed by shape and class only, but what a walker may
// preempt depends on its allocation: b's failure is reused for a's request of the same shape.
func TestReviewPreemptCacheCrossesAllocations(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("a1", "a", Low, 8).Seq(1).Obj(), rvJob("b1", "b", Medium, 8).Seq(2).Obj())
	sched(t, p, at(0))
	// bM walks first (earlier seq): it may preempt nothing (a1 is a's, b1 its class).
	mustEnqueue(t, p, rvJob("bM", "b", Medium, 8).Seq(3).Obj(), rvJob("aM", "a", Medium, 8).Seq(4).Obj())
	d := sched(t, p, at(1))
	if vs := victims(d); len(vs) != 1 || vs[0] != "a1" {
		wi, _ := p.Explain("aM")
		t.Fatalf("aM (medium, a) should preempt a1 (low, a), as it does without bM ahead of it: victims %v; aM: %q", vs, wi.Reason)
	}
}

// Control for R7: without bM, aM preempts a1.
func TestReviewPreemptCacheControl(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("a1", "a", Low, 8).Seq(1).Obj(), rvJob("b1", "b", Medium, 8).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("aM", "a", Medium, 8).Seq(4).Obj())
	d := sched(t, p, at(1))
	if vs := victims(d); len(vs) != 1 || vs[0] != "a1" {
		t.Fatalf("control: victims %v", vs)
	}
}

// R9: a request without GPUs is always "within" its share (shareRoom returns within = true
// when sh.need.gpu == 0), so a CPU-only low job of an allocation far beyond its share takes
// back another allocation's high borrowed job.
func TestReviewZeroGPUAlwaysWithin(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 4, BorrowingLimit: -1}, {Allocation: "b", GPUs: 4, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 8, 0), pol)
	a1 := rvJob("a1", "a", Medium, 8).Seq(1).Obj()
	a1.Demand.CPU = 4
	b1 := rvJob("b1", "b", High, 8).Seq(2).Obj()
	b1.Demand.CPU = 4
	mustEnqueue(t, p, a1, b1)
	sched(t, p, at(0))
	c := rvJob("c", "a", Low, 0).Seq(3).Obj()
	c.Demand.CPU = 8
	mustEnqueue(t, p, c)
	d := sched(t, p, at(1))
	for _, pe := range d.Preemptions {
		t.Fatalf("allocation a holds 8 GPUs of its share of 4, yet its low CPU-only job c took back %s (reclaim %v): %s", pe.Victim, pe.Reclaim, pe.Reason)
	}
}

// R8: the explanation's "jobs in its way" (inTheWay) ignores the cohort: another allocation's
// lower-class job, which the pass will not preempt, is not named as in the way.
func TestReviewExplainIgnoresCohort(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8, BorrowingLimit: -1}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("b1", "b", Low, 8).Seq(1).Obj(), rvJob("b2", "b", Low, 8).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("a1", "a", High, 8).Seq(3).Obj(), rvJob("a2", "a", High, 8).Seq(4).Obj())
	d := sched(t, p, at(1))
	t.Logf("decisions %s", mustJSON(t, d))
	wi, _ := p.Explain("a2")
	t.Logf("a2: %q", wi.Reason)
}

// R10: defragmentation (Preemption.Move) ignores allocations: a gang of a moves a job of b
// that is within b's share out of a rack.
func TestReviewDefragmentCrossesAllocations(t *testing.T) {
	pol := Policy{Topology: blockRack.Topology, Cohort: []CohortShare{{Allocation: "a", GPUs: 16, BorrowingLimit: -1}, {Allocation: "b", GPUs: 16, BorrowingLimit: -1}}}
	p := mustPool(t, racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"), pol)
	mustEnqueue(t, p, rvJob("s", "b", Medium, 1).Nodes("n1").Seq(1).Obj(), rvJob("big", "b", High, 8).Nodes("n3").Seq(2).Obj())
	sched(t, p, at(0))
	for _, j := range []string{"s", "big"} {
		p.running[j].r.Nodes = nil
	}
	g := rvJob("g", "a", Medium, 8).Workers(2).Seq(3).Topology(rackOf("rack", true)).Obj()
	g.SubmittedAt = at(80)
	mustEnqueue(t, p, g)
	d := sched(t, p, at(100))
	for _, pe := range d.Preemptions {
		if p.running[pe.Victim].r.Allocation != "a" {
			t.Fatalf("%s of allocation b (within its share, not borrowed) preempted for a's gang (move %v, reclaim %v): %s", pe.Victim, pe.Move, pe.Reclaim, pe.Reason)
		}
	}
}

// Randomised: cohort.held equals what the running jobs hold, survives a snapshot round trip,
// and a restored copy decides what the pool decides.
func TestReviewCohortRandom(t *testing.T) {
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 12, BorrowingLimit: -1}, {Allocation: "b", GPUs: 12, BorrowingLimit: 8}, {Allocation: "c", GPUs: 8}},
		MaxPreemptions: 2}
	allocs := []string{"a", "b", "c"}
	for seed := int64(1); seed <= 30; seed++ {
		rng := newTestRand(seed)
		p := mustPool(t, nodesOf("n", "a", 4, 8, 16, 0), pol)
		next := 0
		check := func(step int, what string) {
			t.Helper()
			want := make([]int, len(allocs))
			for _, j := range p.RunningJobs() {
				rj := p.running[j]
				for w := range rj.nodes {
					if !rj.released[w] {
						want[p.cohort.idx[rj.r.Allocation]] += rj.r.Demand.GPUs
					}
				}
			}
			if !slicesEqualInt(want, p.cohort.held) {
				t.Fatalf("seed %d step %d (%s): held %v, want %v", seed, step, what, p.cohort.held, want)
			}
			q := roundTrip(t, p)
			if !slicesEqualInt(q.cohort.held, p.cohort.held) {
				t.Fatalf("seed %d step %d: restored held %v, want %v", seed, step, q.cohort.held, p.cohort.held)
			}
			for _, j := range p.RunningJobs() {
				if q.running[j].borrowed != p.running[j].borrowed {
					t.Fatalf("seed %d step %d: %s borrowed flag lost", seed, step, j)
				}
			}
		}
		for step := 0; step < 120; step++ {
			now := at(step * 7)
			switch op := rng.Intn(10); {
			case op < 5:
				next++
				gp := []int{0, 1, 2, 4, 8}[rng.Intn(5)]
				r := rvJob(fmt.Sprintf("j%d", next), allocs[rng.Intn(3)], Class(rng.Intn(3)), gp).Seq(int64(next)).Obj()
				r.Demand.CPU = 2
				r.Workers = 1 + rng.Intn(2)
				if r.Workers == 2 && rng.Intn(2) == 0 {
					r.MinWorkers = 1
				}
				if rng.Intn(12) == 0 && gp > 0 {
					r.Kind = KindNotebook
					r.Class = High
					r.Workers, r.MinWorkers = 1, 0
				}
				if p.Admit(r) == nil {
					mustEnqueue(t, p, r)
				}
			case op < 8:
				q := roundTrip(t, p)
				dq := q.Schedule(now)
				d := schedChecked(t, p, now, false)
				if a, b := mustJSON(t, d), mustJSON(t, dq); a != b {
					t.Fatalf("seed %d step %d: restored copy decided\n%s\nthe pool\n%s", seed, step, b, a)
				}
				for _, pe := range d.Preemptions {
					rj := p.running[pe.Victim]
					for w := range rj.nodes {
						p.Release(pe.Victim, pe.VictimAttempt, w)
					}
					r := rj.r
					r.Attempt++
					r.Preemptions++
					r.Workers = len(rj.nodes)
					if !pe.Loan {
						_ = 0
					}
					if p.waitIdx[r.Job] == nil && p.running[r.Job] == nil {
						r.MinWorkers = 0
						mustEnqueue(t, p, r)
					}
				}
			case op < 9:
				js := p.RunningJobs()
				if len(js) > 0 {
					j := js[rng.Intn(len(js))]
					rj := p.running[j]
					p.BeginRelease(j)
					for w := range rj.nodes {
						p.Release(j, rj.r.Attempt, w)
					}
				}
			default:
				if len(p.waiting) > 0 {
					p.Cancel(p.waiting[rng.Intn(len(p.waiting))].r.Job)
				}
			}
			check(step, "after op")
		}
	}
}

func slicesEqualInt(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// R11: a request granted beyond its share in a pass is taken back in the very next pass (same
// instant, nothing changed) by a later walker of that pass that is within its share: the first
// pass grants what the second preempts (sched's idempotence check fails).
func TestReviewGrantThenReclaim(t *testing.T) {
	t.Skip("known, #38: a request beyond its share may borrow what a lender's request later in the same pass wants, and loses it at the next pass (keeping the lenders' waiting wants back left capacity idle)")
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	mustEnqueue(t, p, rvJob("a1", "a", Medium, 8).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, rvJob("a2", "a", High, 8).Seq(2).Obj(), rvJob("b1", "b", Low, 8).Seq(3).Obj())
	d := schedChecked(t, p, at(1), false)
	t.Logf("pass 1: %s", mustJSON(t, d))
	p.dirty = true
	d2 := p.Schedule(at(1))
	if len(d2.Grants)+len(d2.Preemptions) > 0 {
		t.Fatalf("a second pass at the same instant decided %s after %s", mustJSON(t, d2), mustJSON(t, d))
	}
}

// R12: Adopt never marks a job borrowed (Adoption has no such field, and Adopt does not work it
// out): after an allocator rebuilds its pool from adoptions, an allocation within its share can
// no longer take back what the others borrowed.
func TestReviewAdoptLosesBorrowed(t *testing.T) {
	t.Skip("known, #38: an adopted job has no borrowed flag (Adoption carries none)")
	pol := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8, BorrowingLimit: -1}, {Allocation: "b", GPUs: 8}}}
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), pol)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for i, n := range []string{"n-1", "n-2"} {
		r := rvJob(fmt.Sprintf("a%d", i+1), "a", Medium, 8).Obj()
		if err := p.Adopt(Adoption{Request: r, Placement: []WorkerPlacement{{Worker: 0, Node: n, GPUs: all}}, StartedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	mustEnqueue(t, p, rvJob("b1", "b", Low, 8).Seq(1).Obj())
	d := sched(t, p, at(1))
	if len(d.Preemptions) == 0 {
		wi, _ := p.Explain("b1")
		t.Fatalf("a holds 16 GPUs of its share of 8, b none of its 8: b1 should take one back; it waits: %q", wi.Reason)
	}
}

// R13: Policy.Changes does not compare Cohort: allocation.State.Reconfigure, which does nothing
// when the summary is empty, would ignore a change of shares alone.
func TestReviewChangesSeesCohort(t *testing.T) {
	a := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8}, {Allocation: "b", GPUs: 8}}}
	b := Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 4}, {Allocation: "b", GPUs: 12}}}
	if c := a.Changes(b); len(c) == 0 {
		t.Fatalf("Changes reports no change between cohorts %v and %v", a.Cohort, b.Cohort)
	}
}
