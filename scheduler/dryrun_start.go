package scheduler

import (
	"fmt"
	"time"
)

// DryRunStart is when r, which must pass Admit and be new to the pool, would be expected to
// start if it were enqueued now: Forecast, with stop, on a copy of the pool that holds r. The
// pool itself is not changed. A dry run that starts at once needs no projection; one that
// waits (or preempts, and waits for its victims to stop) answers when, as sbatch --test-only
// does.
func (p *Pool) DryRunStart(r Request, now time.Time, stop time.Duration) (ExpectedStart, error) {
	r = normalize(r)
	if err := p.Admit(r); err != nil {
		return ExpectedStart{}, err
	}
	if p.waitIdx[r.Job] != nil || p.running[r.Job] != nil {
		return ExpectedStart{}, fmt.Errorf("job %q is already in the pool", r.Job)
	}
	q, err := Restore(p.Snapshot())
	if err != nil {
		return ExpectedStart{}, err
	}
	if err := q.Enqueue(r); err != nil {
		return ExpectedStart{}, err
	}
	starts, err := q.Forecast(now, stop, []string{r.Job})
	if err != nil {
		return ExpectedStart{}, err
	}
	return starts[r.Job], nil
}
