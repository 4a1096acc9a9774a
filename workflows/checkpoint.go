package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
)

// validateCheckpoint refuses, before anything is written to the history, a
// report for a job that does not hold capacity here in that attempt: a report
// that arrives after its attempt ended is harmless but must say so.
func (a *allocator) validateCheckpoint(r protocol.CheckpointReport) error {
	if r.Job == "" {
		return fmt.Errorf("checkpoint: job is empty")
	}
	if a.recovering {
		return nil // the rebuilt pool decides, once it is there
	}
	return a.checkRunning(r)
}

func (a *allocator) checkRunning(r protocol.CheckpointReport) error {
	info, ok := a.pool.Running(r.Job)
	if !ok {
		return fmt.Errorf("job %s is not running on allocation %s/%s; only a running attempt can report a checkpoint",
			r.Job, a.in.Region, a.in.Allocation)
	}
	if info.Attempt != r.Attempt {
		return fmt.Errorf("job %s runs attempt %d, not attempt %d", r.Job, info.Attempt, r.Attempt)
	}
	return nil
}

// onCheckpoint stamps the report with the allocator's clock. It changes no
// decision by itself, so it does not ask for a scheduling pass: the next
// pass that looks for victims weighs it.
func (a *allocator) onCheckpoint(ctx workflow.Context, r protocol.CheckpointReport) (protocol.CheckpointReply, error) {
	a.updates++
	if err := a.awaitRecovered(ctx); err != nil {
		return protocol.CheckpointReply{}, err
	}
	if err := a.checkRunning(r); err != nil {
		return protocol.CheckpointReply{}, err
	}
	now := workflow.Now(ctx)
	if !a.pool.Checkpointed(r.Job, r.Attempt, now) {
		// The same instant as an earlier report, or before the attempt's start.
		info, _ := a.pool.Running(r.Job)
		return protocol.CheckpointReply{Job: r.Job, Attempt: r.Attempt, At: info.CheckpointAt}, nil
	}
	a.note("checkpoint " + r.Job)
	return protocol.CheckpointReply{Job: r.Job, Attempt: r.Attempt, At: now}, nil
}
