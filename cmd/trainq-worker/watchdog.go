package main

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// keepAllocatorsRunning starts, every interval, the allocator of any
// allocation that has none running: one terminated from the Web UI or the
// CLI, or failed. The fresh allocator recovers its state from the jobs and
// node agents, so jobs that were waiting do not wait for ever. Starting an
// allocator that runs is a no-op (conflict policy USE_EXISTING).
func keepAllocatorsRunning(ctx context.Context, c client.Client, cfg *config.Config, interval time.Duration, logger *slog.Logger) {
	runs := map[string]string{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, ref := range cfg.Allocations() {
			in, err := cfg.AllocatorInput(ref.Region, ref.Allocation.Name)
			if err != nil {
				continue
			}
			id := protocol.AllocatorWorkflowID(ref.Region, ref.Allocation.Name)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			run, err := c.ExecuteWorkflow(sctx, protocol.AllocatorStartOptions(ref.Region, ref.Allocation.Name), protocol.AllocatorWorkflowName, in)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("could not make sure the allocator runs", "allocator", id, "error", err)
				}
				continue
			}
			// The run ID changes on continue-as-new too; only a run this
			// call started has a first run ID of its own.
			if prev, ok := runs[id]; ok && prev != run.GetRunID() && isFirstRun(ctx, c, id, run.GetRunID()) {
				logger.Warn("the allocator was not running; started a fresh one, which recovers its state from the jobs", "allocator", id)
			}
			runs[id] = run.GetRunID()
			recoverIfReset(ctx, c, id, logger)
		}
	}
}

// recoverIfReset sends the recover update to an allocator whose current run
// was reset (`temporal workflow reset`) after its last recovery. Runs of this
// release notice their own resets (see resetSince in workflows/allocator.go)
// and have recovered by the time this looks; it serves runs that older code
// started, which do not. Temporal keeps the reset time only on the reset run
// itself, so a reset run that continued as new before this looked escapes it.
func recoverIfReset(ctx context.Context, c client.Client, id string, logger *slog.Logger) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(dctx, id, "")
	if err != nil {
		return
	}
	resetAt := d.RawResponse.GetWorkflowExtendedInfo().GetLastResetTime()
	if resetAt == nil || !resetAt.IsValid() {
		return
	}
	v, err := c.QueryWorkflow(dctx, id, "", protocol.QueryCounts)
	if err != nil {
		return
	}
	var counts protocol.QueueCounts
	if err := v.Get(&counts); err != nil || counts.Recovering || !counts.RecoveredAt.Before(resetAt.AsTime()) {
		return
	}
	logger.Warn("the allocator was reset after its last recovery; rebuilding its state from the jobs", "allocator", id,
		"reset_at", resetAt.AsTime(), "recovered_at", counts.RecoveredAt)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	handle, err := c.UpdateWorkflow(rctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: protocol.UpdateRecover, WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err != nil {
		logger.Warn("could not ask the reset allocator to recover", "allocator", id, "error", err)
		return
	}
	_ = handle // the recovery runs on; the next check sees it recovering or recovered
}

// isFirstRun tells whether run starts a new chain of runs (not a
// continue-as-new of an earlier one).
func isFirstRun(ctx context.Context, c client.Client, id, run string) bool {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(dctx, id, run)
	if err != nil {
		return false
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetFirstRunId() == run
}
