// Package agentlogs reads workers' logs through the agent of their node, so
// that `trainq logs` and the API show a log from any machine that reaches
// Temporal: each read is a short workflow (protocol.ReadLogWorkflowName)
// whose activity runs on the node's task queue and returns a chunk.
package agentlogs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// ErrAgentUnreachable is returned (wrapped) when the node's agent did not
// pick up a read in time: the node is down or its agent is not running.
var ErrAgentUnreachable = errors.New("the node's agent did not answer")

// Reader reads logs through the node agents; it is a cluster.LogReader.
type Reader struct {
	Client client.Client
	// Local, if set, is asked first: a worker whose log it has (it ran on
	// this machine, or one sharing its data dir) is read there without a
	// round trip through Temporal, also while its node's agent is down.
	// Only a worker it does not know (cluster.ErrNotFound) is asked of the
	// node's agent.
	Local cluster.LogReader
	// Timeout bounds one read (default one minute).
	Timeout time.Duration
}

var _ cluster.LogSource = (*Reader)(nil)

// Reachable is nil: every node's agent is reached through Temporal, from
// any machine (a node whose agent is down says so on its first read).
func (r *Reader) Reachable() error { return nil }

// ReadLog reads one chunk of the worker's log on req.Node.
func (r *Reader) ReadLog(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	if err := req.Validate(); err != nil {
		return cluster.LogChunk{}, err
	}
	if req.Node == "" {
		return cluster.LogChunk{}, errors.New("node: must name the node the worker was placed on")
	}
	if r.Local != nil {
		c, err := r.Local.ReadLog(ctx, req)
		if !errors.Is(err, cluster.ErrNotFound) {
			return c, err
		}
	}
	return r.viaAgent(ctx, req)
}

func (r *Reader) viaAgent(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	run, err := r.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       "trainq-log-" + uuid.NewString(),
		TaskQueue:                protocol.TaskQueue,
		WorkflowExecutionTimeout: timeout,
		StaticSummary:            fmt.Sprintf("read the log of %s on node %s", req.ID, req.Node),
	}, protocol.ReadLogWorkflowName, req)
	if err != nil {
		return cluster.LogChunk{}, fmt.Errorf("read the log of %s: %w", req.ID, err)
	}
	var c cluster.LogChunk
	if err := run.Get(ctx, &c); err != nil {
		return c, readError(req, err)
	}
	return c, nil
}

// readError says in a sentence why a read failed, keeping
// cluster.ErrNotFound and ErrAgentUnreachable for errors.Is.
func readError(req cluster.LogRequest, err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == "WorkerNotFound" {
		return fmt.Errorf("%w: %s (node %s has no such worker)", cluster.ErrNotFound, req.ID, req.Node)
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
		return fmt.Errorf("%w: the agent of node %s (task queue %s) did not pick up the read of %s's log; is `trainq-worker agent --node %s` running?",
			ErrAgentUnreachable, req.Node, protocol.NodeTaskQueue(req.Node), req.ID, req.Node)
	}
	if app != nil {
		return fmt.Errorf("read the log of %s on node %s: %s", req.ID, req.Node, app.Error())
	}
	return fmt.Errorf("read the log of %s on node %s: %w", req.ID, req.Node, err)
}
