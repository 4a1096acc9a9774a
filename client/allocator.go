package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// AllocatorInput builds the start input of an allocator from the config.
func AllocatorInput(cfg *config.Config, region, allocation string) (protocol.AllocatorInput, error) {
	_, a, err := cfg.Allocation(region, allocation)
	if err != nil {
		return protocol.AllocatorInput{}, err
	}
	return protocol.AllocatorInput{
		Region:           region,
		Allocation:       a.Name,
		Nodes:            a.Nodes,
		Policy:           a.Policy(),
		StopGracePeriod:  a.StopGracePeriod.D(),
		ReclaimInterval:  cfg.ReclaimInterval.D(),
		NodeTimeout:      cfg.NodeTimeout.D(),
		MaxWaiting:       a.MaxWaiting,
		WaitingLimits:    a.WaitingLimits(),
		PreemptionNotice: a.PreemptionNotice.D(),

		ClassPreemptionNotice: a.ClassNotices(),
		NoticeSignal:          a.NoticeSignal,
	}, nil
}

// AllocatorTaskTimeout is the allocator's workflow task timeout (see
// protocol.AllocatorTaskTimeout).
const AllocatorTaskTimeout = protocol.AllocatorTaskTimeout

// AllocatorStartOptions are the options that start an allocator, or find the
// running one.
func AllocatorStartOptions(region, allocation string) sdkclient.StartWorkflowOptions {
	return sdkclient.StartWorkflowOptions{
		ID:                       protocol.AllocatorWorkflowID(region, allocation),
		TaskQueue:                protocol.AllocatorTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            fmt.Sprintf("allocator of %s/%s", region, allocation),
		// After a kill -9 of trainq-worker the task it was running is
		// retried once this passes: every job of the allocation waits for
		// it, so it is short. An allocator task takes milliseconds.
		WorkflowTaskTimeout: AllocatorTaskTimeout,
	}
}

// recoverTimeout bounds an operator's recovery: listing and registering
// every job of the allocation takes seconds, not minutes.
const recoverTimeout = 2 * time.Minute

// RecoverAllocator makes the allocation's allocator rebuild its state from
// the jobs and the node agents (see workflows.AllocatorWorkflow), starting a
// fresh allocator if none runs, and answers what the recovery found.
func (c *Client) RecoverAllocator(ctx context.Context, region, allocation string) (protocol.RecoverReply, error) {
	var reply protocol.RecoverReply
	in, err := AllocatorInput(c.config(), region, allocation)
	if err != nil {
		return reply, err
	}
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	op := c.Temporal.NewWithStartWorkflowOperation(AllocatorStartOptions(in.Region, in.Allocation), protocol.AllocatorWorkflowName, in)
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
