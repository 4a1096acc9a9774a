package simulate

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/scheduler"
)

// idOf is a job id that seed 1 puts in member m of two.
func idOf(t *testing.T, prefix string, m int) string {
	t.Helper()
	for k := range 1000 {
		if id := fmt.Sprintf("%s-%d", prefix, k); TeamOf(1, id, 2)-1 == m {
			return id
		}
	}
	t.Fatalf("no id for member %d", m)
	return ""
}

func memberWait(t *testing.T, run CohortRun, w *Workload, pol Policy, opt Options, co CohortOptions) map[string]time.Duration {
	t.Helper()
	mode := asIslands
	if run.Lends > 0 || run.Reclaims > 0 {
		mode = asCohort
	}
	d, err := newCohortDriver(w, pol, opt, co, mode)
	require.NoError(t, err)
	_, err = d.run()
	require.NoError(t, err)
	out := map[string]time.Duration{}
	for _, s := range d.members {
		for i, j := range s.w.Jobs {
			out[j.ID] = s.jobs[i].waited
		}
	}
	return out
}

// Two allocations of one 8-GPU node each. a runs a 10-hour job from 0 and queues a 5-hour one at
// 1m; b's node is idle until b's own 1-hour job comes at 2h.
//
// As islands, a's second job waits for a's node (9h59m) while b's node idles for 9 of those
// hours. In the cohort it borrows b's node at once; at 2h b takes its node back: the borrower is
// stopped (no notice: 30 s), b's job starts when it has left, and a's job borrows the node again
// when b's job ends, rerunning without spending its one retry.
func TestCohortLendsAnIdleNodeAndTakesItBack(t *testing.T) {
	a1, a2, b1 := idOf(t, "a", 0), idOf(t, "a2", 0), idOf(t, "b", 1)
	w := &Workload{Name: "t", Nodes: nodes(2, 8), Jobs: []Job{
		jb(a1, 0, scheduler.Medium, 8, 10*time.Hour),
		jb(a2, time.Minute, scheduler.Medium, 8, 5*time.Hour),
		jb(b1, 2*time.Hour, scheduler.Low, 8, time.Hour),
	}}
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: 0, Clock: fixedClock()}
	co := CohortOptions{Members: 2, Seed: 1, LendingLimit: NoLimit, BorrowingLimit: NoLimit}
	r, err := RunCohort(w, prio, opt, co)
	require.NoError(t, err)

	islands := memberWait(t, r.Islands, w, prio, opt, co)
	assert.Equal(t, map[string]time.Duration{a1: 0, a2: 9*time.Hour + 59*time.Minute, b1: 0}, islands)
	assert.Zero(t, r.Islands.Lends+r.Islands.Reclaims)
	assert.InDelta(t, 8*(time.Hour+59*time.Minute+7*time.Hour).Hours(), r.Islands.IdleWhileWaitingGPUHours, 1e-9)

	cohortWaits := memberWait(t, r.Cohort, w, prio, opt, co)
	assert.Equal(t, map[string]time.Duration{a1: 0, a2: time.Hour, b1: 30 * time.Second}, cohortWaits,
		"a2 borrows at once and waits only while b's job runs; b1 waits for the borrower to leave")
	assert.Equal(t, 2, r.Cohort.Lends)
	assert.Equal(t, 1, r.Cohort.Reclaims)
	assert.Equal(t, 1, r.Cohort.Members[0].Reclaims)
	assert.InDelta(t, 8*(2*time.Hour-time.Minute).Hours(), r.Cohort.ReclaimLostGPUHours, 1e-9)
	assert.Zero(t, r.Cohort.IdleWhileWaitingGPUHours)
	for _, m := range r.Cohort.Members {
		assert.Zero(t, m.Rejected)
	}
	assert.InDelta(t, 8*(10+5+1), r.Cohort.UsefulGPUHours, 1e-9, "a2 completed on its rerun: the reclaim spent no retry")

	// Shared by the GPU, the same: a2 starts beyond a's share at once, b1 takes it back.
	sh := r.Shared
	assert.Equal(t, 2, sh.BorrowedStarts, "a2, twice")
	assert.Equal(t, 1, sh.Reclaims)
	assert.Equal(t, 1, sh.Members[0].Reclaims)
	assert.Equal(t, Seconds(time.Hour), sh.Members[0].WaitMax, "a2 waits only while b1 runs")
	assert.Equal(t, Seconds(30*time.Second), sh.Members[1].WaitMax, "b1 waits for the borrower to stop")
	assert.InDelta(t, 8*(2*time.Hour-time.Minute).Hours(), sh.ReclaimLostGPUHours, 1e-9)
	assert.Zero(t, sh.IdleWhileWaitingGPUHours)
	assert.InDelta(t, 8*(10+5+1), sh.UsefulGPUHours, 1e-9)
}

// A lending limit of 0 is islands again; a borrowing limit below a node's GPUs too.
func TestCohortLimitsHold(t *testing.T) {
	a1, a2 := idOf(t, "a", 0), idOf(t, "a2", 0)
	w := &Workload{Name: "t", Nodes: nodes(2, 8), Jobs: []Job{
		jb(a1, 0, scheduler.Medium, 8, 10*time.Hour),
		jb(a2, time.Minute, scheduler.Medium, 8, 5*time.Hour),
	}}
	opt := Options{StopDelay: 30 * time.Second, Clock: fixedClock()}
	for _, co := range []CohortOptions{
		{Members: 2, Seed: 1, LendingLimit: 0, BorrowingLimit: NoLimit},
		{Members: 2, Seed: 1, LendingLimit: NoLimit, BorrowingLimit: 7},
	} {
		r, err := RunCohort(w, prio, opt, co)
		require.NoError(t, err)
		assert.Zero(t, r.Cohort.Lends, "%+v", co)
		assert.Equal(t, r.Islands.Members, r.Cohort.Members, "%+v", co)
	}
	r, err := RunCohort(w, prio, opt, CohortOptions{Members: 2, Seed: 1, LendingLimit: 8, BorrowingLimit: 8})
	require.NoError(t, err)
	assert.Equal(t, 1, r.Cohort.Lends, "limits of one node's GPUs let one node go")
}

// Random workloads on several members of mixed nodes: every run ends, every job the islands
// complete the cohort completes too, and no grant lands on a node its member does not hold
// (RunCohort fails on one: memberState.started).
func TestCohortRandomWorkloads(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var ns []scheduler.Node
		for i := range 6 + rng.IntN(6) {
			ns = append(ns, scheduler.Node{Name: fmt.Sprintf("n%d", i), Family: "a", GPUs: []int{2, 4, 8}[rng.IntN(3)], CPU: 64, RAMGB: 512})
		}
		var jobs []Job
		at := time.Duration(0)
		for i := range 150 {
			at += time.Duration(rng.IntN(40)) * time.Minute
			j := jb(fmt.Sprintf("j%d", i), at, scheduler.Class(rng.IntN(3)), []int{1, 2, 4, 8}[rng.IntN(4)], time.Duration(10+rng.IntN(600))*time.Minute)
			if rng.IntN(8) == 0 {
				j.Workers = 2
			}
			jobs = append(jobs, j)
		}
		w := &Workload{Name: "random", Nodes: ns, Jobs: jobs}
		pol := prio
		pol.Scheduler.PreemptionNotice = time.Duration(rng.IntN(2)) * 5 * time.Minute
		opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 0.5, HonorSeed: seed, Clock: fixedClock()}
		r, err := RunCohort(w, pol, opt, CohortOptions{Members: 2 + rng.IntN(3), Seed: 1, LendingLimit: NoLimit, BorrowingLimit: NoLimit})
		require.NoError(t, err, "seed %d", seed)
		for k, is := range r.Islands.Members {
			c := r.Cohort.Members[k]
			assert.Equal(t, is.Rejected, c.Rejected, "seed %d %s", seed, is.Name)
		}
		assert.InDelta(t, r.Islands.UsefulGPUHours, r.Cohort.UsefulGPUHours, 1e-6, "seed %d: every job completes either way", seed)
		assert.LessOrEqual(t, r.Cohort.IdleWhileWaitingGPUHours, r.Islands.IdleWhileWaitingGPUHours+1e-9, "seed %d", seed)
		assert.InDelta(t, r.Islands.UsefulGPUHours, r.Shared.UsefulGPUHours, 1e-6, "seed %d: shared, every job completes too", seed)
		for k, is := range r.Islands.Members {
			assert.Equal(t, is.Rejected, r.Shared.Members[k].Rejected, "seed %d %s", seed, is.Name)
		}
	}
}
