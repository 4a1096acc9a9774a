package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// LogAgentTimeout is how long a log read waits for the node's agent to pick
// it up before the node counts as unreachable for reading logs.
const LogAgentTimeout = 10 * time.Second

// ReadLogWorkflow reads one chunk of a worker's log (see cluster.LogRequest)
// through the agent of req.Node, which holds the log. A client cannot run an
// activity by itself, so `trainq logs` and the API start this short
// workflow instead; it holds no state and may be repeated at will.
func ReadLogWorkflow(ctx workflow.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	if req.Node == "" {
		return cluster.LogChunk{}, temporal.NewNonRetryableApplicationError("node: must name the node the worker was placed on", "InvalidLogRequest", nil)
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              protocol.NodeTaskQueue(req.Node),
		ScheduleToStartTimeout: LogAgentTimeout,
		StartToCloseTimeout:    30 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 2},
		Summary:                "read the log of " + req.ID.String(),
	})
	var c cluster.LogChunk
	err := workflow.ExecuteActivity(ctx, (*activities.Activities).ReadLog, req).Get(ctx, &c)
	return c, err
}
