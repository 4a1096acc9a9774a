package scheduler

import (
	"fmt"
	"time"
)

// DryRun is what a request would get if it were enqueued now, as Slurm's sbatch --test-only
// answers: it starts at the next pass on Placement; or it preempts Preempts and waits for them;
// or it waits, and Waiting says where and why, as Explain would once it is queued.
type DryRun struct {
	Start     bool              `json:"start"`
	Placement []WorkerPlacement `json:"placement,omitempty"`
	Preempts  []string          `json:"preempts,omitempty"`
	Waiting   *WaitingInfo      `json:"waiting,omitempty"`
	// ExpectedStart, when it would not start at once, is when it would be expected to (see
	// DryRunStart; the caller fills it in).
	ExpectedStart *ExpectedStart `json:"expected_start,omitempty"`
}

// DryRun answers for r, which must pass Admit and be new to the pool, from a copy of the pool:
// the pool itself is not changed. It costs a Snapshot and a Restore of the pool (milliseconds
// for thousands of jobs), so callers should not call it on every pass. now before the pool's
// last pass counts as that pass's time.
func (p *Pool) DryRun(r Request, now time.Time) (DryRun, error) {
	r = normalize(r)
	if err := p.Admit(r); err != nil {
		return DryRun{}, err
	}
	if p.waitIdx[r.Job] != nil || p.running[r.Job] != nil {
		return DryRun{}, fmt.Errorf("job %q is already in the pool", r.Job)
	}
	q, err := Restore(p.Snapshot())
	if err != nil {
		return DryRun{}, err
	}
	if err := q.Enqueue(r); err != nil {
		return DryRun{}, err
	}
	var out DryRun
	wi, _ := q.Explain(r.Job)
	if now.Before(p.lastNow) {
		now = p.lastNow
	}
	d := q.Schedule(now)
	for _, g := range d.Grants {
		if g.Job == r.Job {
			out.Start, out.Placement = true, g.Placement
		}
	}
	for _, pr := range d.Preemptions {
		if pr.Preemptor.Job == r.Job {
			out.Preempts = append(out.Preempts, pr.Victim)
		}
	}
	if !out.Start {
		out.Waiting = &wi
	}
	return out, nil
}
