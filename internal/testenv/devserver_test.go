package testenv

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
)

// A killed dev server comes back on the same port with the same state, and
// a client made before the kill works again without being rebuilt.
func TestPersistentDevServerSurvivesKill(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	bin, skip, err := TemporalCLI(root)
	require.NoError(t, err)
	if skip != "" {
		t.Skip(skip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := StartPersistentDevServer(ctx, bin, filepath.Join(t.TempDir(), "temporal.db"))
	require.NoError(t, err)
	defer srv.Stop(10 * time.Second)
	c, err := client.Dial(client.Options{HostPort: srv.HostPort()})
	require.NoError(t, err)
	defer c.Close()

	// A workflow no worker runs: it stays open, in the database.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "survivor", TaskQueue: "nobody"}, "Nothing")
	require.NoError(t, err)
	require.Error(t, srv.Start(ctx), "starting a running server is an error")

	srv.Kill()
	require.NoError(t, srv.Start(ctx))
	desc, err := c.DescribeWorkflow(ctx, "survivor", "")
	require.NoError(t, err, "the old client reaches the restarted server")
	assert.Equal(t, run.GetRunID(), desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.RawResponse.GetWorkflowExecutionInfo().GetStatus())

	// trainq's search attributes are registered again at a restart, harmlessly.
	sa, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: client.DefaultNamespace})
	require.NoError(t, err)
	assert.Contains(t, sa.GetCustomAttributes(), "TrainqState")
}
