package activities

import (
	"context"
	"encoding/json"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// NoticeWorkerInput names the worker to tell, and what.
type NoticeWorkerInput struct {
	ID     cluster.WorkerID      `json:"id"`
	Notice protocol.WorkerNotice `json:"notice"`
	// Signal, when set, is also sent to the worker's processes once the
	// notice is in place (the allocation's notice_signal).
	Signal string `json:"signal,omitempty"`
}

// NoticeWorker tells a running worker it is about to be stopped: the notice
// goes where its $TRAINQ_NOTICE_FILE names (cluster.Noticer). A backend that
// cannot, or a worker that is not there, is a non-retryable error: the job
// stops the worker at the deadline all the same.
func (a *Activities) NoticeWorker(ctx context.Context, in NoticeWorkerInput) error {
	if _, err := thisNode(ctx); err != nil {
		return err
	}
	n, ok := a.Backend.(cluster.Noticer)
	if !ok {
		return temporal.NewNonRetryableApplicationError("the cluster backend cannot give workers a notice", ErrTypeUnsupported, nil)
	}
	data, err := json.Marshal(in.Notice)
	if err != nil {
		return err
	}
	err = n.Notice(ctx, in.ID, append(data, '\n'))
	if errors.Is(err, cluster.ErrNotFound) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeWorkerNotFound, err)
	}
	if err != nil || in.Signal == "" {
		return err
	}
	// The file is in place before the signal, so that a handler reads it.
	s, ok := a.Backend.(cluster.NoticeSignaller)
	if !ok {
		activity.GetLogger(ctx).Warn("the cluster backend cannot send a notice signal; the worker has the notice file only", "worker", in.ID.String(), "signal", in.Signal)
		return nil
	}
	if err := s.NoticeSignal(ctx, in.ID, in.Signal); err != nil {
		// The notice is given: a worker that exited meanwhile needs no signal.
		activity.GetLogger(ctx).Warn("could not send the notice signal", "worker", in.ID.String(), "signal", in.Signal, "error", err)
	}
	return nil
}
