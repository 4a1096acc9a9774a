package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// A cohort's pool (Policy.Cohort) is shared by several allocations by the GPU: each request
// counts in its allocation's share (Request.Allocation). Within its share an allocation's
// requests are scheduled as in a pool of their own; beyond it they borrow what the others leave
// unused, up to its BorrowingLimit, and run on loan (Grant.Borrowed). A request whose allocation,
// with it, stays within its share may preempt borrowed jobs of the other allocations whatever
// their class (Preemption.Reclaim), before any job of its own: the borrower gets the notice and
// reruns without spending a retry. Notebooks, which are never preempted, never borrow; a job
// preempted MaxPreemptions times still does (taken back, it loses nothing if it honours the
// notice, and it spends no retry): otherwise capacity would stay idle under waiting jobs that
// happen to have been preempted often. See Cohorts in the package doc.

// checkCohort refuses a cohort with a nameless or repeated allocation or a negative share.
func checkCohort(shares []CohortShare) error {
	seen := map[string]bool{}
	for i, s := range shares {
		switch {
		case s.Allocation == "":
			return fmt.Errorf("cohort share %d: the allocation is empty", i+1)
		case seen[s.Allocation]:
			return fmt.Errorf("cohort share %d: allocation %s has two shares", i+1, s.Allocation)
		case s.GPUs < 0:
			return fmt.Errorf("cohort share %d (%s): gpus must not be negative, got %d", i+1, s.Allocation, s.GPUs)
		}
		seen[s.Allocation] = true
	}
	return nil
}

// cohortPool is a pool's cohort bookkeeping: its shares by allocation, and the GPUs each
// allocation's running and releasing workers hold.
type cohortPool struct {
	idx  map[string]int32
	held []int
}

func newCohortPool(shares []CohortShare) cohortPool {
	c := cohortPool{idx: make(map[string]int32, len(shares)), held: make([]int, len(shares))}
	for i, s := range shares {
		c.idx[s.Allocation] = int32(i)
	}
	return c
}

func (p *Pool) cohortOn() bool { return len(p.policy.Cohort) > 0 }

// admitAllocation refuses, in a cohort's pool, a request without a share.
func (p *Pool) admitAllocation(r *Request) error {
	if !p.cohortOn() {
		return nil
	}
	if _, ok := p.cohort.idx[r.Allocation]; !ok {
		names := make([]string, len(p.policy.Cohort))
		for i, s := range p.policy.Cohort {
			names[i] = s.Allocation
		}
		return fmt.Errorf("allocation %q has no share in this cohort: the shares are %v", r.Allocation, names)
	}
	return nil
}

// holdShare counts delta GPUs held by rj's allocation.
func (p *Pool) holdShare(rj *runJob, delta int) {
	if p.cohortOn() {
		p.cohort.held[p.cohort.idx[rj.r.Allocation]] += delta
	}
}

// sharePass is a pass's count against the shares: per allocation, the GPUs held plus those
// nominated to its waiting requests, as the pass goes.
type sharePass struct {
	on   bool
	used []int
}

func (sc *scratch) startShares(p *Pool) {
	sc.shares.on = p.cohortOn()
	if !sc.shares.on {
		return
	}
	sc.shares.used = append(sc.shares.used[:0], p.cohort.held...)
	for i := range sc.nominations {
		x := &sc.nominations[i]
		if w := p.waitIdx[x.by]; w != nil {
			sc.shares.used[p.cohort.idx[w.r.Allocation]] += x.demand.gpu
		}
	}
}

// mayBorrowShare says whether r may start beyond its share: a notebook, which is never
// preempted, may not.
func (p *Pool) mayBorrowShare(r *Request) bool { return r.Kind != KindNotebook }

// shareRoom is, for the walker w, how many workers its allocation's share and borrowing limit
// leave room for (beside what is nominated to w already), whether that is fewer than it needs
// to start at all (it waits: outBorrowCapped), and whether it fits within its share at its whole
// size, which lets it take back what others borrowed (scratch.reclaiming). A request without
// GPUs takes nothing back.
func (sc *scratch) shareRoom(p *Pool, w *waitReq, sh *shape) (workers int, capped, within bool) {
	if !sc.shares.on || sh.need.gpu == 0 {
		return sh.workers, false, false
	}
	a := p.cohort.idx[w.r.Allocation]
	share := p.policy.Cohort[a]
	used := sc.shares.used[a] - sc.ownNominatedGPUs()
	within = used+sh.workers*sh.need.gpu <= share.GPUs
	limit := share.GPUs
	if p.mayBorrowShare(&w.r) {
		if share.BorrowingLimit < 0 {
			return sh.workers, false, within
		}
		limit += share.BorrowingLimit
	}
	workers = min(sh.workers, max(limit-used, 0)/sh.need.gpu)
	return workers, workers < w.r.leastWorkers(), within
}

// countShareUse adds what the walker took in the pass to its allocation's count, in place of
// what was nominated to it before, and says whether the allocation is now beyond its share.
func (sc *scratch) countShareUse(p *Pool, w *waitReq, sh *shape, own int) (beyond bool) {
	if !sc.shares.on {
		return false
	}
	a := p.cohort.idx[w.r.Allocation]
	sc.shares.used[a] += len(sc.pick)*sh.need.gpu - own
	return sc.shares.used[a] > p.policy.Cohort[a].GPUs
}

// reclaimable says whether rj is a job the walker takes back whatever its class: the walker
// fits within its share (scratch.reclaiming), and rj started beyond its own allocation's share
// (Grant.Borrowed) and is of another allocation. (Taking back by the allocations' current use
// instead, as Kueue does, threw away 50-66 % of the useful work on the trace's multigpu50 pool
// without notices: long-running jobs of an allocation over its share were taken back.)
func (sc *scratch) reclaimable(rj *runJob) bool {
	return sc.reclaiming && rj.borrowed && !rj.releasing && rj.r.Kind != KindNotebook && rj.r.Allocation != sc.walkerAllocation
}

// borrowedJobs appends the jobs of a node's victim list that the walker takes back (see
// reclaimable), whatever their class, in victim order; a due loan listed already is not listed
// again.
func (sc *scratch) borrowedJobs(now time.Time, list []listedVictim, out []victimCand) []victimCand {
	from := len(out)
	for _, lv := range list {
		rj := lv.rj
		if sc.victims[rj] || !sc.reclaimable(rj) || (sc.loansListed && sc.loanDue(rj, now)) {
			continue
		}
		k := keyOf(rj, now)
		k.yields = true
		out = append(out, victimCandOf(rj, k))
	}
	slices.SortFunc(out[from:], cmpVictimCand)
	return out
}

// shareText is the reason a request waits at its allocation's borrowing limit.
func (p *Pool) shareText(w *waitReq, used int) string {
	s := p.policy.Cohort[p.cohort.idx[w.r.Allocation]]
	gpus := w.r.leastWorkers() * w.r.Demand.GPUs
	if !p.mayBorrowShare(&w.r) {
		return fmt.Sprintf("allocation %s holds %d GPUs of its cohort share of %d, and the notebook needs %d; a notebook does not borrow beyond the share",
			s.Allocation, used, s.GPUs, gpus)
	}
	return fmt.Sprintf("allocation %s holds %d GPUs, its cohort share of %d and up to %d borrowed (borrowing_limit); the job needs %d",
		s.Allocation, used, s.GPUs, s.BorrowingLimit, gpus)
}

// sameAllocation says whether the waiting request by is of the walker's allocation, or the pool
// has no cohort: capacity nominated to another allocation's request is not taken over.
func (p *Pool) sameAllocation(sc *scratch, by string) bool {
	if !sc.shares.on {
		return true
	}
	w := p.waitIdx[by]
	return w != nil && w.r.Allocation == sc.walkerAllocation
}
