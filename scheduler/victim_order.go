package scheduler

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// The victim order (cmpVictim) depends on the time of the pass: the work a job would lose grows
// with its GPU count, so a 2-GPU job overtakes a 1-GPU job that started earlier, and protection
// expires. Among jobs of one class and one GPU count, though, the order of the unprotected ones
// never changes: GPUs × (now − since) ranks them by since, the later the cheaper, whatever now is.
//
// So each node keeps its candidates (running jobs that are not stopping and not notebooks) in a
// victim list sorted by class, GPUs of the job, since (latest first), then job id: a run of
// one class and GPU count is in victim order. A job that saves on its notice (runJob.saves)
// loses nothing whenever it is preempted: it is listed with the latest since of all
// (savesSince), so it heads its run, before every job that loses something, and such jobs are
// in job id order among themselves, as cmpVictim puts them. Its key does not move with time
// either: the list stays static. The list changes only when a job starts, stops, or
// reports a checkpoint. A victim search merges the runs of one class by the full key, setting aside the protected jobs (few: only
// jobs restarted after a preemption), which it sorts and puts after the class's unprotected ones.
// The result is the order a sort by cmpVictimCand gives (tested by TestVictimOrderKept and after
// every pass of the property test).

// listedVictim is a job in a node's victim list, with its list key inline, so that finding the
// runs of one class and GPU count reads one array.
type listedVictim struct {
	class Class
	gpus  int64
	since int64 // UnixNano of since(rj)
	rj    *runJob
}

func listedOf(rj *runJob) listedVictim {
	s := since(rj).UnixNano()
	if rj.saves {
		s = savesSince
	}
	return listedVictim{class: rj.r.Class, gpus: gpusHeld(rj), since: s, rj: rj}
}

// savesSince is the list key since of a job that saves on its notice: later than any time.
const savesSince = math.MaxInt64

// gpusHeld is the number of GPUs a running job holds over all its nodes.
func gpusHeld(rj *runJob) int64 {
	return int64(rj.r.Demand.GPUs * (len(rj.nodes) - rj.nReleased))
}

// since is when the work a preemption would lose began: the attempt's start or its last
// checkpoint, whichever is later. (For a job that saves on its notice the work at stake begins
// at the notice's deadline, after it exits: lostWork and keyOf count none.)
func since(rj *runJob) time.Time {
	if rj.ckpt.After(rj.startedAt) {
		return rj.ckpt
	}
	return rj.startedAt
}

// cmpListed is the order of a node's victim list: class, GPUs, then latest since first, then
// job id.
func cmpListed(a, b listedVictim) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if c := cmp.Compare(a.gpus, b.gpus); c != 0 {
		return c
	}
	if c := cmp.Compare(b.since, a.since); c != 0 {
		return c
	}
	return strings.Compare(a.rj.r.Job, b.rj.r.Job)
}

// sizeVictimLists gives each node's victim list room for as many jobs as it has GPUs (at least
// 4), cut from one allocation: a pass that starts thousands of jobs would otherwise grow each
// list step by step.
func (p *Pool) sizeVictimLists() {
	total := 0
	for i := range p.nodes {
		total += max(4, p.nodes[i].GPUs)
	}
	arena := make([]listedVictim, total)
	for i := range p.nodes {
		k := max(4, p.nodes[i].GPUs)
		p.nodes[i].victimList = arena[:0:k]
		arena = arena[k:]
	}
}

// listVictim adds (add) or removes rj from the victim lists of every node it holds a worker on.
func (p *Pool) listVictim(rj *runJob, add bool) {
	lv := listedOf(rj)
	for w, n := range rj.nodes {
		if rj.released[w] {
			continue
		}
		nd := &p.nodes[n]
		k, in := slices.BinarySearchFunc(nd.victimList, lv, cmpListed)
		switch {
		case add && !in:
			nd.victimList = slices.Insert(nd.victimList, k, lv)
		case !add && in:
			nd.victimList = slices.Delete(nd.victimList, k, k+1)
		}
	}
}

// mergeClass appends the preemptible candidates in list (one node's victim list, the part of
// one class), for a request of class cl, to out in victim order: the unprotected ones merged from
// the runs of one GPU count, then the protected ones, sorted.
func (p *Pool) mergeClass(now time.Time, sc *scratch, list []listedVictim, cl Class, out []victimCand) []victimCand {
	// The runs: list[runs[i]:runs[i+1]].
	sc.listRuns = append(sc.listRuns[:0], 0)
	for k := 1; k < len(list); k++ {
		if list[k].gpus != list[k-1].gpus {
			sc.listRuns = append(sc.listRuns, k)
		}
	}
	sc.listRuns = append(sc.listRuns, len(list))
	runs := len(sc.listRuns) - 1
	sc.listHeads = grow(sc.listHeads, runs)
	sc.headKeys = grow(sc.headKeys, runs)
	protected := sc.protectedCands[:0]
	for i := range runs {
		sc.listHeads[i] = sc.listRuns[i] - 1
		protected = p.advanceHead(now, sc, list, i, cl, protected)
	}
	for {
		best := -1
		for i := range runs {
			if sc.listHeads[i] < sc.listRuns[i+1] && (best < 0 || cmpVictim(sc.headKeys[i], sc.headKeys[best]) < 0) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, victimCandOf(list[sc.listHeads[best]].rj, sc.headKeys[best]))
		protected = p.advanceHead(now, sc, list, best, cl, protected)
	}
	if len(protected) > 1 {
		slices.SortFunc(protected, cmpVictimCand)
	}
	sc.protectedCands = protected[:0]
	return append(out, protected...)
}

// advanceHead moves run i's head to its next preemptible, unprotected job and keys it; the
// protected jobs it passes go to protected.
func (p *Pool) advanceHead(now time.Time, sc *scratch, list []listedVictim, i int, cl Class, protected []victimCand) []victimCand {
	end := sc.listRuns[i+1]
	for sc.listHeads[i]++; sc.listHeads[i] < end; sc.listHeads[i]++ {
		rj := list[sc.listHeads[i]].rj
		if !p.preemptible(rj, cl, now, sc) || (sc.loansListed && sc.loanDue(rj, now)) || sc.reclaimable(rj) {
			continue // (a due loan, or a borrowed job the walker takes back, is listed first: candidates)
		}
		k := keyOf(rj, now)
		if !k.protected {
			sc.headKeys[i] = k
			break
		}
		protected = append(protected, victimCandOf(rj, k))
	}
	return protected
}

func victimCandOf(rj *runJob, k victimKey) victimCand {
	d := &rj.r.Demand
	return victimCand{ref: victimRef{rj: rj, nom: -1}, key: k, amt: demandOf(d)}
}
