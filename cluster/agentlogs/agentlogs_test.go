package agentlogs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
)

func TestReadErrorKeepsWhatCallersTest(t *testing.T) {
	req := cluster.LogRequest{ID: cluster.WorkerID{Job: "j", Attempt: 1}, Node: "gpu-7"}
	notFound := fmt.Errorf("workflow failed: %w", temporal.NewNonRetryableApplicationError("never started", "WorkerNotFound", nil))
	assert.ErrorIs(t, readError(req, notFound), cluster.ErrNotFound)

	noAgent := fmt.Errorf("workflow failed: %w", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
	err := readError(req, noAgent)
	assert.ErrorIs(t, err, ErrAgentUnreachable)
	assert.Contains(t, err.Error(), "trainq-worker agent --node gpu-7")

	other := readError(req, temporal.NewApplicationError("disk on fire", "Oops"))
	assert.NotErrorIs(t, other, cluster.ErrNotFound)
	assert.Contains(t, other.Error(), "disk on fire")
}

// local serves the workers it has and knows nothing of the others.
type local map[cluster.WorkerID]string

func (l local) ReadLog(_ context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	text, ok := l[req.ID]
	if !ok {
		return cluster.LogChunk{}, fmt.Errorf("%w: %s", cluster.ErrNotFound, req.ID)
	}
	return cluster.LogChunk{Data: []byte(text), Size: int64(len(text))}, nil
}

func TestReaderPrefersTheLocalLog(t *testing.T) {
	here := cluster.WorkerID{Job: "j", Attempt: 1}
	r := &Reader{Local: local{here: "on this machine\n"}} // no Client: a read through an agent would panic
	c, err := r.ReadLog(context.Background(), cluster.LogRequest{ID: here, Node: "gpu-1"})
	require.NoError(t, err)
	assert.Equal(t, "on this machine\n", string(c.Data))

	_, err = r.ReadLog(context.Background(), cluster.LogRequest{ID: here})
	assert.Error(t, err, "a request must name the node")
	assert.False(t, errors.Is(err, cluster.ErrNotFound))
}
