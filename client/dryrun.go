package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// DryRunAnswer is what a job would get if it were submitted now, and from
// whom the answer came.
type DryRunAnswer struct {
	scheduler.DryRun
	Region     string `json:"region"`
	Allocation string `json:"allocation"`
	// Idle says the allocation has no allocator yet (nothing was ever
	// submitted to it): the answer is the empty allocation's.
	Idle bool `json:"idle,omitempty"`
}

// dryRunJob names the job of a dry run: the allocator must not know it.
const dryRunJob = "dry-run"

// DryRun asks the allocation's allocator what spec, checked by Check,
// would get if it were submitted now: where it would start, whom it would
// preempt, or why it would wait (as sbatch --test-only answers). Nothing is
// started or queued.
func (c *Client) DryRun(ctx context.Context, spec protocol.CheckedSpec) (DryRunAnswer, error) {
	out := DryRunAnswer{Region: spec.Region, Allocation: spec.AllocationName}
	most, least := spec.GangSize()
	req := protocol.CapacityRequest{Job: dryRunJob, Attempt: 1, Kind: spec.Kind, Class: spec.Class(), InstanceType: spec.InstanceType,
		Workers: most, MinWorkers: least, Topology: spec.Topology, Nodes: spec.AllowedNodes, Workspace: spec.Workspace, SubmittedAt: time.Now().UTC()}
	resp, err := c.Temporal.QueryWorkflow(ctx, protocol.AllocatorWorkflowID(spec.Region, spec.AllocationName), "", protocol.QueryDryRun, req)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return c.idleDryRun(out, spec, req)
	}
	if err != nil {
		return out, fmt.Errorf("asking the allocator of %s/%s: %w", spec.Region, spec.AllocationName, err)
	}
	return out, resp.Get(&out.DryRun)
}

// idleDryRun answers for an allocation whose allocator has not started:
// its pool is empty.
func (c *Client) idleDryRun(out DryRunAnswer, spec protocol.CheckedSpec, req protocol.CapacityRequest) (DryRunAnswer, error) {
	if c.config() == nil {
		return out, fmt.Errorf("allocation %s/%s has no allocator yet, and no config to answer from", spec.Region, spec.AllocationName)
	}
	_, alloc, err := c.config().Allocation(spec.Region, spec.AllocationName)
	if err != nil {
		return out, err
	}
	pool, err := scheduler.NewPool(alloc.Nodes, alloc.Policy())
	if err != nil {
		return out, err
	}
	out.Idle = true
	r := req.SchedulerRequestOf(spec.Demand())
	r.Seq = 1
	out.DryRun, err = pool.DryRun(r, req.SubmittedAt)
	return out, err
}
