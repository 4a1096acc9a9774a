package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/protocol"
)

// recoverTimeout bounds an operator's recovery: listing and registering
// every job of the allocation takes seconds, not minutes.
const recoverTimeout = 2 * time.Minute

// RecoverAllocator makes the allocation's allocator rebuild its state from
// the jobs and the node agents (see workflows.AllocatorWorkflow), starting a
// fresh allocator if none runs, and answers what the recovery found.
func (c *Client) RecoverAllocator(ctx context.Context, region, allocation string) (protocol.RecoverReply, error) {
	var reply protocol.RecoverReply
	in, err := c.config().AllocatorInput(region, allocation)
	if err != nil {
		return reply, err
	}
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	op := c.Temporal.NewWithStartWorkflowOperation(protocol.AllocatorStartOptions(in.Region, in.Allocation), protocol.AllocatorWorkflowName, in)
	handle, err := c.Temporal.UpdateWithStartWorkflow(ctx, sdkclient.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: sdkclient.UpdateWorkflowOptions{
			UpdateName:   protocol.UpdateRecover,
			WaitForStage: sdkclient.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	if err != nil {
		return reply, fmt.Errorf("recover allocation %s/%s: %w", in.Region, in.Allocation, err)
	}
	return reply, nil
}

// DrainNode takes a node of an allocation out of service, or (r.Undrain)
// puts it back (see protocol.DrainRequest). The allocation must be running:
// a drain is of the running allocator's state.
func (c *Client) DrainNode(ctx context.Context, region, allocation string, r protocol.DrainRequest) (protocol.DrainReply, error) {
	var reply protocol.DrainReply
	handle, err := c.Temporal.UpdateWorkflow(ctx, sdkclient.UpdateWorkflowOptions{
		WorkflowID:   protocol.AllocatorWorkflowID(region, allocation),
		UpdateName:   protocol.UpdateDrain,
		Args:         []any{r},
		WaitForStage: sdkclient.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return reply, fmt.Errorf("allocation %s/%s has no running allocator (start trainq-worker): %w", region, allocation, err)
	}
	var refused *temporal.ApplicationError
	if errors.As(err, &refused) {
		return reply, &protocol.FieldError{Field: "node", Message: refused.Message()}
	}
	if err != nil {
		return reply, fmt.Errorf("drain %s of allocation %s/%s: %w", r.Node, region, allocation, err)
	}
	return reply, nil
}
