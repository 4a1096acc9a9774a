package scheduler

import (
	"math"
	"slices"
	"time"
)

// Learned runtime estimates: a job without a time limit is expected to run as long as the
// LearnedPercentile of the runtimes of the last LearnedRuns completed jobs of its shape (its
// workspace, kind, script, instance type and workers), once at least LearnedMinRuns of them
// completed; else the same of its coarse shape (its workspace, class and total GPUs); else it has
// no estimate. trainq learns them from the finished jobs (their search attributes); trainq
// simulate learns them from the trace's completed jobs as it replays it.
const (
	LearnedPercentile = 0.9
	LearnedRuns       = 20
	LearnedMinRuns    = 3
)

// Floors of a RunLimit: an attempt's limit or estimate is never below MinRunLimit (a RunLimit
// of 0 means "no estimate"), and a rerun's estimate less what its earlier attempts ran is never
// below MinRerunLimit (a rerun that has nearly used its estimate still needs some time).
const (
	MinRunLimit   = time.Second
	MinRerunLimit = time.Minute
)

// LearnedRuntime is the q-quantile (0 < q ≤ 1) of runs, the runtimes of a shape's latest
// completed jobs, newest first (only the first LearnedRuns count); ok is false when fewer than
// LearnedMinRuns are given.
func LearnedRuntime(runs []time.Duration, q float64) (d time.Duration, ok bool) {
	if len(runs) < LearnedMinRuns {
		return 0, false
	}
	s := slices.Clone(runs[:min(len(runs), LearnedRuns)])
	slices.Sort(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))], true
}

// EstimatedRunLimit is the RunLimit of an attempt of a job estimated to run est in all, whose
// earlier attempts ran ran: what is left of est, or, once they ran est or longer, est again.
// A job that outran its estimate is known to need more than it; the projection takes a running
// job past its estimate to run one more estimate from now, and so does its rerun. The rest of
// est (at least MinRerunLimit) made such a rerun a one-minute job that backfill let start on
// capacity reserved for another: on trainq simulate's multigpu50 list at 15 nodes, a job that
// had run 42 hours of an 11-hour estimate yielded its loan to an 8-GPU job, came back as a
// one-minute job ahead of it and ran 413 hours more.
func EstimatedRunLimit(est, ran time.Duration) time.Duration {
	if ran == 0 {
		return max(est, MinRunLimit)
	}
	if ran >= est {
		return max(est, MinRerunLimit)
	}
	return max(est-ran, MinRerunLimit)
}
