package workflows

// What a job shows of itself: its state, search attributes and the Web UI's
// current details.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// setState records a state change in the status, the search attributes and
// the Web UI's current details.
func (j *job) setState(ctx workflow.Context, s protocol.JobState) {
	j.status.State = s
	// The place in the queue is known only from the allocator's reply to
	// this attempt's request (see waitForCapacity).
	j.status.Position, j.status.Reason = 0, ""
	err := workflow.UpsertTypedSearchAttributes(ctx,
		protocol.KeyState.ValueSet(string(s)),
		protocol.KeyAttempt.ValueSet(int64(j.status.Attempt)),
	)
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not update search attributes", "error", err)
	}
	workflow.SetCurrentDetails(ctx, j.details())
}

func (j *job) details() string {
	var b strings.Builder
	st := j.status
	fmt.Fprintf(&b, "## %s · attempt %d · restarts %d/%d\n\n", st.State, st.Attempt, st.Restarts, st.MaxRetry)
	if st.Message != "" {
		fmt.Fprintf(&b, "%s\n\n", st.Message)
	}
	if st.Warning != "" {
		fmt.Fprintf(&b, "**Warning**: %s\n\n", st.Warning)
	}
	if st.State == protocol.StatePending && st.Reason != "" {
		queued := ""
		if len(st.Attempts) > 0 {
			queued = " at " + stamp(&st.Attempts[len(st.Attempts)-1].QueuedAt)
		}
		if st.Position > 0 {
			fmt.Fprintf(&b, "**Queue position %d** when queued%s: %s\n\n", st.Position, queued, st.Reason)
		} else {
			fmt.Fprintf(&b, "**Waiting** since%s: %s\n\n", queued, st.Reason)
		}
		fmt.Fprintf(&b, "Live position: the current details of %s, or `trainq status %s`; expected start: `trainq status --eta %s`.\n\n", j.alloc.id, j.name, j.name)
	}
	if st.Estimate != nil && !st.State.Terminal() {
		fmt.Fprintf(&b, "**Runtime estimate** %s.\n\n", st.Estimate)
	}
	if len(st.Attempts) > 0 {
		if p := st.Attempts[len(st.Attempts)-1].Placement; len(p) > 0 && !st.State.Terminal() {
			gpus := 0
			for _, w := range p {
				gpus += len(w.GPUs)
			}
			nodes := "nodes"
			if len(p) == 1 {
				nodes = "node"
			}
			fmt.Fprintf(&b, "Placement: %s (%d GPUs on %d %s)\n\n", scheduler.PlacementText(p), gpus, len(p), nodes)
		}
	}
	b.WriteString("| attempt | queued | started | ended | why it ended | preemptor |\n|---|---|---|---|---|---|\n")
	for _, a := range st.Attempts {
		pre := ""
		if a.Preemptor != nil {
			pre = fmt.Sprintf("%s (%s %s)", a.Preemptor.Job, a.Preemptor.Class, a.Preemptor.Kind)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", a.Number, stamp(&a.QueuedAt), stamp(a.StartedAt), stamp(a.EndedAt), a.EndReason, pre)
	}
	return b.String()
}

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05")
}

func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "timed out: " + timeoutErr.Error()
	}
	return err.Error()
}
