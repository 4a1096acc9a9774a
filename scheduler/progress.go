package scheduler

import (
	"fmt"
	"time"
)

// progressMark is a progress report of a running attempt: the share of its job's work done, 0
// to 1, at a time.
type progressMark struct {
	at   time.Time
	done float64
}

// Progressed records that a running attempt reported, at time at, that done (more than 0, at
// most 1) of its job's work is done (trainq checkpoint --progress). Pool.Project and backfill
// then expect it to end when the rate since its first report of the attempt (or, with one
// report, since the attempt started, from nothing done) finishes the rest, or by its RunLimit if
// that comes first. It changes no decision but where backfill (Policy.Backfill) times a
// reservation by it, so the next pass runs. It returns false, changing nothing, for an
// attempt that is not running, a time before its start or not after its last report, or done
// out of range.
func (p *Pool) Progressed(job string, attempt int, at time.Time, done float64) bool {
	rj := p.running[job]
	at = normTime(at)
	if rj == nil || rj.r.Attempt != attempt || at.Before(rj.startedAt) || !(done > 0 && done <= 1) ||
		(!rj.progLast.at.IsZero() && !at.After(rj.progLast.at)) {
		return false
	}
	if rj.progFirst.at.IsZero() {
		rj.progFirst = progressMark{at: at, done: done}
	}
	rj.progLast = progressMark{at: at, done: done}
	p.touch()
	return true
}

// progressEnd is when rj's progress reports say it will end: the rest of its work at the rate
// since its first report (with one report, since its start from nothing done). ok is false
// without a report, or when the rate is not positive.
func progressEnd(rj *runJob) (time.Time, bool) {
	last := rj.progLast
	if last.at.IsZero() {
		return time.Time{}, false
	}
	if last.done >= 1 {
		return last.at, true
	}
	from := progressMark{at: rj.startedAt}
	if rj.progFirst.at.Before(last.at) {
		from = rj.progFirst
	}
	elapsed, gained := float64(last.at.Sub(from.at)), float64(last.done-from.done)
	if !(elapsed > 0 && gained > 0) {
		return time.Time{}, false
	}
	rest := float64(float64(1-last.done) * float64(elapsed/gained))
	if rest > float64(ProjectHorizon) {
		rest = float64(ProjectHorizon)
	}
	return last.at.Add(time.Duration(rest)), true
}

// progressText says what a projection assumes of a job that ends by its progress.
func progressText(rj *runJob) string {
	return fmt.Sprintf("ends when its progress reports say (%.0f%% done at %s)", 100*rj.progLast.done, rj.progLast.at.UTC().Format("15:04:05"))
}
