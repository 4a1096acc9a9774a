package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/protocol"
)

// ErrJobNotRunning is returned (wrapped in a sentence) for a checkpoint of a
// job, or an attempt, that holds no capacity now.
var ErrJobNotRunning = errors.New("job not running")

// notRunningError is a sentence that is ErrJobNotRunning.
type notRunningError struct{ msg string }

func (e *notRunningError) Error() string        { return e.msg }
func (e *notRunningError) Is(target error) bool { return target == ErrJobNotRunning }

// Checkpoint tells a running job's allocator that the job's current attempt
// has just saved its progress, so that preempting it from now on loses only
// the work done since (the victim ordering weighs it). attempt 0 means the
// job's current attempt; a training script passes $TRAINQ_ATTEMPT, so that a
// report racing with a preemption cannot be booked on the next attempt.
// progress, when more than 0, is the share of the job's work done (at most 1),
// from which its allocator expects when it ends (trainq checkpoint
// --progress).
func (c *Client) Checkpoint(ctx context.Context, job string, attempt int, progress float64) (protocol.CheckpointReply, error) {
	var reply protocol.CheckpointReply
	if attempt < 0 {
		return reply, &protocol.FieldError{Field: "attempt", Message: fmt.Sprintf("must be 1 or more (0: the current attempt); got %d", attempt)}
	}
	if err := protocol.CheckProgress(progress); err != nil {
		return reply, err
	}
	st, err := c.Status(ctx, job)
	if err != nil {
		return reply, err
	}
	if st.State != protocol.StateRunning || len(st.Attempts) == 0 {
		return reply, &notRunningError{fmt.Sprintf("job %s is %s, not running; only a running attempt can report a checkpoint", job, st.State)}
	}
	if attempt == 0 {
		attempt = st.Attempts[len(st.Attempts)-1].Number
	}
	handle, err := c.Temporal.UpdateWorkflow(ctx, sdkclient.UpdateWorkflowOptions{
		WorkflowID:   protocol.AllocatorWorkflowID(st.Region, st.Allocation),
		UpdateName:   protocol.UpdateCheckpoint,
		Args:         []any{protocol.CheckpointReport{Job: job, Attempt: attempt, Progress: progress}},
		WaitForStage: sdkclient.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	var refused *temporal.ApplicationError
	if errors.As(err, &refused) {
		// The allocator's answer: the attempt ended or is another one.
		return reply, &notRunningError{refused.Message()}
	}
	if err != nil {
		return reply, fmt.Errorf("checkpoint of %s: %w", job, err)
	}
	// The job records it in its attempt (a checkpoint within a notice's
	// window honours the notice). The allocator has it already, which is
	// what preemption weighs, so a job that cannot be told loses nothing.
	if tellsJob(st, attempt, reply.At) {
		_ = c.Temporal.SignalWorkflow(ctx, job, "", protocol.SignalCheckpointed, reply)
	}
	return reply, nil
}

// checkpointSignalEvery is how often, at most, a job is told of its
// attempt's checkpoints outside a notice. A job continues as new only
// between attempts, and a run takes protocol.TemporalSignalsPerRun signals:
// told of every checkpoint (the REST API books 10 a minute), a long attempt
// would spend them, and then the allocator's preemptions and drains would be
// refused and the job reclaimed as gone, its workers stopped without a
// notice. At this rate an attempt runs 69 days before that.
const checkpointSignalEvery = 10 * time.Minute

// tellsJob says whether the job is told of a checkpoint at at of attempt,
// as its status st (read before the report) shows the attempt: the first
// checkpoint, the first since a notice (it honours the notice), and then one
// every checkpointSignalEvery.
func tellsJob(st protocol.JobStatus, attempt int, at time.Time) bool {
	for _, a := range st.Attempts {
		if a.Number != attempt {
			continue
		}
		switch {
		case a.CheckpointAt == nil:
			return true
		case a.NoticedAt != nil && a.CheckpointAt.Before(*a.NoticedAt):
			return true
		}
		return at.Sub(*a.CheckpointAt) >= checkpointSignalEvery
	}
	return true
}
