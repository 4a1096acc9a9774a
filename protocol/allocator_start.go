package protocol

import (
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
)

// AllocatorStartOptions are the options that start an allocator, or find the running one.
func AllocatorStartOptions(region, allocation string) sdkclient.StartWorkflowOptions {
	return sdkclient.StartWorkflowOptions{
		ID:                       AllocatorWorkflowID(region, allocation),
		TaskQueue:                AllocatorTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            fmt.Sprintf("allocator of %s/%s", region, allocation),
		// After a kill -9 of trainq-worker the task it was running is retried once this
		// passes: every job of the allocation waits for it, so it is short. An allocator task
		// takes milliseconds.
		WorkflowTaskTimeout: AllocatorTaskTimeout,
	}
}
