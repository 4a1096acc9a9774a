package activities

import (
	"context"
	"encoding/json"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// NoticeWorkerInput names the worker to tell, and what.
type NoticeWorkerInput struct {
	ID     cluster.WorkerID      `json:"id"`
	Notice protocol.WorkerNotice `json:"notice"`
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
	return err
}
