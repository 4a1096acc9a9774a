package scheduler

import "sort"

// WaitingAttempt names one waiting request.
type WaitingAttempt struct {
	Job     string
	Attempt int
}

// WaitingAfter returns up to limit waiting requests in job-name order,
// starting after the job named after ("" = from the first). Callers that
// check the queue a slice at a time (the allocator's ghost check) pass the
// last job of the previous slice and wrap around when they get fewer than
// limit.
func (p *Pool) WaitingAfter(after string, limit int) []WaitingAttempt {
	if limit <= 0 {
		return nil
	}
	names := make([]string, 0, len(p.waitIdx))
	// Map order does not reach the result: it is sorted.
	//workflowcheck:ignore
	for job := range p.waitIdx {
		if job > after {
			names = append(names, job)
		}
	}
	sort.Strings(names)
	if len(names) > limit {
		names = names[:limit]
	}
	out := make([]WaitingAttempt, len(names))
	for i, job := range names {
		out[i] = WaitingAttempt{Job: job, Attempt: p.waitIdx[job].r.Attempt}
	}
	return out
}
