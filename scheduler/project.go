package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ExpectedStart is when a waiting request is expected to start, from the pool projected forward
// (Pool.Project), and the assumption it rests on; or, with At zero, why that is unknown.
type ExpectedStart struct {
	At time.Time `json:"at,omitempty"`
	// Because is the assumption ("if lm-mpi-job-… ends by its time limit at 14:05") or, with
	// At zero, why there is no expected start ("lm-mpi-job-… has no time limit").
	Because string `json:"because"`
	// Earliest and Latest are the range 8 in 10 jobs of the allocation have started in, from
	// its record of how wrong its expected starts were (Pool.Forecast); zero until it has one.
	Earliest time.Time `json:"earliest,omitempty"`
	Latest   time.Time `json:"latest,omitempty"`
	// Projected is the projection's own start (zero: it has none) once the record corrected
	// it (Samples > 0).
	Projected time.Time `json:"projected,omitempty"`
	// Samples is how many past expected starts the correction and range rest on.
	Samples int `json:"samples,omitempty"`
}

// Projection bounds: the events a projection plays and how far it looks ahead. A pool that
// needs more to start a request says so rather than spend more.
const (
	ProjectEvents  = 500
	ProjectHorizon = 14 * 24 * time.Hour
)

// Project plays the pool forward from now with its own rules, on a copy (the pool is not
// changed): a running job ends when its attempt has run for its Request.RunLimit (one past an
// estimate, Request.RunEstimated, one more RunLimit from now), a stopping
// one within stop, each worker of a preempted job stop after its preemption; a waiting request
// starts as the pool would start it then, and its RunLimit, if it has one, ends it in turn. A
// job without a RunLimit never ends in the projection, so the requests that can only start
// after it have no expected start, and say why. Preempted jobs are not queued again (their
// reruns would only come later). The projection plays at most ProjectEvents events within
// ProjectHorizon, and stops once every job of want has its answer (nil: every waiting
// request), since a pass over a long queue costs the most: ask only for the jobs shown. It
// returns an ExpectedStart per job of want, by job.
func (p *Pool) Project(now time.Time, stop time.Duration, want []string) (map[string]ExpectedStart, error) {
	return p.project(now, stop, want, ProjectEvents)
}

// project is Project playing at most events events.
func (p *Pool) project(now time.Time, stop time.Duration, want []string, events int) (map[string]ExpectedStart, error) {
	q, err := Restore(p.snapshotScheduling()) // the copy's starts are not the pool's: no record
	if err != nil {
		return nil, err
	}
	if now.Before(p.lastNow) {
		now = p.lastNow
	}
	pr := &projection{q: q, out: map[string]ExpectedStart{}, stop: stop}
	if want == nil {
		for _, w := range q.waiting {
			pr.pending = append(pr.pending, w.r.Job)
		}
	} else {
		for _, job := range want {
			if q.waitIdx[job] != nil {
				pr.pending = append(pr.pending, job)
			}
		}
	}
	for _, job := range q.RunningJobs() {
		rj := q.running[job]
		if rj.releasing {
			pr.push(now.Add(stop), rj, "is stopping")
		} else if end := jobEnd(rj, now); !end.IsZero() {
			pr.push(end, rj, endText(rj, now))
		}
	}
	t, because := now, ""
	for steps := 0; ; steps++ {
		pr.pass(t, now, because)
		next, ok := pr.next()
		switch {
		case len(pr.out) == len(pr.pending):
			return pr.out, nil
		case !ok:
			pr.unknown("the capacity it needs is held by jobs without a time limit (%s)", pr.unlimited())
			return pr.out, nil
		case steps >= events || next.Sub(now) > ProjectHorizon:
			pr.unknown("it starts, if at all, beyond what the projection looks at (%d events, %s)", events, durText(ProjectHorizon))
			return pr.out, nil
		}
		t, because = next, pr.release(next)
	}
}

// projection is Project's working state.
type projection struct {
	q       *Pool
	stop    time.Duration
	events  []projEvent // by time, then job
	pending []string    // the waiting requests when the projection began
	out     map[string]ExpectedStart
}

// projEvent is a job's capacity coming free in the projection.
type projEvent struct {
	at      time.Time
	job     string
	attempt int
	what    string // "ends by its time limit", "is stopping"
}

func (pr *projection) push(at time.Time, rj *runJob, what string) {
	e := projEvent{at: at, job: rj.r.Job, attempt: rj.r.Attempt, what: what}
	i, _ := slices.BinarySearchFunc(pr.events, e, func(a, b projEvent) int {
		return cmp.Or(a.at.Compare(b.at), strings.Compare(a.job, b.job))
	})
	pr.events = slices.Insert(pr.events, i, e)
}

// pass schedules the copy at t and records the starts; because is what freed the capacity.
func (pr *projection) pass(t, now time.Time, because string) {
	d := pr.q.Schedule(t)
	for _, g := range d.Grants {
		if _, done := pr.out[g.Job]; !done && slices.Contains(pr.pending, g.Job) {
			e := ExpectedStart{At: t, Because: "it can start now"}
			if t.After(now) {
				e.Because = because
			}
			pr.out[g.Job] = e
		}
		if rj := pr.q.running[g.Job]; rj != nil && rj.r.RunLimit > 0 {
			pr.push(t.Add(rj.r.RunLimit), rj, endText(rj, t))
		}
	}
	for _, pe := range d.Preemptions {
		if rj := pr.q.running[pe.Victim]; rj != nil {
			pr.push(t.Add(pr.stop), rj, "stops for "+pe.Preemptor.Job)
		}
	}
	if at, ok := pr.q.NextWake(); ok && at.After(t) {
		pr.events = append(pr.events, projEvent{at: at}) // a timer of the pool's own (no job)
		slices.SortStableFunc(pr.events, func(a, b projEvent) int { return a.at.Compare(b.at) })
	}
}

// next is the time of the next event.
func (pr *projection) next() (time.Time, bool) {
	if len(pr.events) == 0 {
		return time.Time{}, false
	}
	return pr.events[0].at, true
}

// release plays every event at t: the jobs' workers stop. It returns the assumption the
// starts at t rest on.
func (pr *projection) release(t time.Time) string {
	var enders []projEvent
	for len(pr.events) > 0 && !pr.events[0].at.After(t) {
		e := pr.events[0]
		pr.events = pr.events[1:]
		rj := pr.q.running[e.job]
		if e.job == "" || rj == nil || rj.r.Attempt != e.attempt {
			continue
		}
		for w := range rj.nodes {
			pr.q.Release(e.job, e.attempt, w)
		}
		enders = append(enders, e)
	}
	at := t.UTC().Format("2006-01-02 15:04 MST")
	switch len(enders) {
	case 0:
		return "as the pool's rules allow at " + at
	case 1:
		return fmt.Sprintf("if %s %s at %s", enders[0].job, enders[0].what, at)
	}
	return fmt.Sprintf("if %s and %d other %s end or stop as planned by %s", enders[0].job, len(enders)-1, plural(len(enders)-1, "job", "jobs"), at)
}

// unknown gives every request without an expected start the reason.
func (pr *projection) unknown(format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	for _, job := range pr.pending {
		if _, ok := pr.out[job]; !ok {
			pr.out[job] = ExpectedStart{Because: "unknown: " + why}
		}
	}
}

// unlimited names the running jobs of the copy that never end in it (a few, then a count).
func (pr *projection) unlimited() string {
	var names []string
	for _, job := range pr.q.RunningJobs() {
		rj := pr.q.running[job]
		if _, reported := progressEnd(rj); !rj.releasing && rj.r.RunLimit <= 0 && !reported {
			names = append(names, job)
		}
	}
	if len(names) > 2 {
		return fmt.Sprintf("%s, %s and %d more", names[0], names[1], len(names)-2)
	}
	return strings.Join(names, ", ")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// durText is d in days or hours, for sentences.
func durText(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// endText is what the projection assumes of a running job that ends: by its time limit, by its
// estimate, or, past its estimate, one more estimated run time from now.
func endText(rj *runJob, now time.Time) string {
	if pe, ok := progressEnd(rj); ok && jobEnd(rj, now).Equal(maxTime(now, pe)) {
		return progressText(rj)
	}
	switch {
	case !rj.r.RunEstimated:
		return "ends by its time limit"
	case now.Sub(rj.startedAt) >= rj.r.RunLimit:
		return "ends within its estimated run time again (it is past its estimate)"
	}
	return "ends by its estimated run time"
}
