package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
)

// ReadLog reads a chunk of a worker's log on the node whose task queue it
// runs on, so that `trainq logs` and the API can show the log from a
// machine that is not the node. It only reads: repeating it is harmless. A
// worker the node never started is a non-retryable WorkerNotFound.
func (a *Activities) ReadLog(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	if err := req.Validate(); err != nil {
		return cluster.LogChunk{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidLogRequest", nil)
	}
	c, err := a.Backend.ReadLog(ctx, req)
	if errors.Is(err, cluster.ErrNotFound) {
		return c, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("worker %d of %s attempt %d was never started on this node", req.ID.Worker, req.ID.Job, req.ID.Attempt), ErrTypeWorkerNotFound, nil)
	}
	return c, err
}
