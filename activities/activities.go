// Package activities holds trainq's activities: the control activities that
// talk to Temporal (capacity requests, leak detection) and the node
// activities that start, watch and stop a job's workers through a cluster
// backend. Node activities run on the task queue of the node they touch.
package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// ErrTypeCapacityRefused marks a capacity request the allocator can never satisfy.
const ErrTypeCapacityRefused = "CapacityRefused"

// Activities carries what the activities need. One value serves every task
// queue of a worker process.
type Activities struct {
	Client  client.Client
	Config  *config.Config
	Backend cluster.Backend
}

// RequestCapacityInput names the allocator and the request.
type RequestCapacityInput struct {
	Region     string                   `json:"region"`
	Allocation string                   `json:"allocation"`
	Request    protocol.CapacityRequest `json:"request"`
}

// AllocatorInput builds the start input of an allocator from the config.
func AllocatorInput(cfg *config.Config, region, allocation string) (protocol.AllocatorInput, error) {
	_, a, err := cfg.Allocation(region, allocation)
	if err != nil {
		return protocol.AllocatorInput{}, err
	}
	return protocol.AllocatorInput{
		Region:          region,
		Allocation:      a.Name,
		Nodes:           a.Nodes,
		Policy:          a.Policy(),
		StopGracePeriod: a.StopGracePeriod.D(),
		ReclaimInterval: cfg.ReclaimInterval.D(),
	}, nil
}

// AllocatorStartOptions are the options that start an allocator, or find the
// running one.
func AllocatorStartOptions(region, allocation string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       protocol.AllocatorWorkflowID(region, allocation),
		TaskQueue:                protocol.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            fmt.Sprintf("allocator of %s/%s", region, allocation),
	}
}

// RequestCapacity asks the allocation's allocator for capacity, starting the
// allocator if it is not running. The update ID makes a retried request a
// no-op; a request the allocation can never satisfy fails for good.
func (a *Activities) RequestCapacity(ctx context.Context, in RequestCapacityInput) (protocol.CapacityReply, error) {
	var reply protocol.CapacityReply
	start, err := AllocatorInput(a.Config, in.Region, in.Allocation)
	if err != nil {
		return reply, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCapacityRefused, nil)
	}
	op := a.Client.NewWithStartWorkflowOperation(AllocatorStartOptions(in.Region, in.Allocation), protocol.AllocatorWorkflowName, start)
	handle, err := a.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     fmt.Sprintf("request/%s/%d", in.Request.Job, in.Request.Attempt),
			UpdateName:   protocol.UpdateRequestCapacity,
			Args:         []any{in.Request},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		// The allocator's validator refused the request: retrying cannot help.
		return reply, temporal.NewNonRetryableApplicationError(appErr.Error(), ErrTypeCapacityRefused, nil)
	}
	return reply, err
}

// describeConcurrency bounds the DescribeWorkflowExecution calls that one
// leak check makes at once: an allocator may hold thousands of jobs.
const describeConcurrency = 16

// FindVanishedJobs returns the jobs among jobs whose workflow is no longer
// running (terminated, timed out, or gone), in the order given. The
// allocator reclaims their capacity.
func (a *Activities) FindVanishedJobs(ctx context.Context, jobs []string) ([]string, error) {
	vanished := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	slots := make(chan struct{}, describeConcurrency)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			desc, err := a.Client.DescribeWorkflowExecution(ctx, job, "")
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				vanished[i] = true
			case err != nil:
				errs[i] = err
			default:
				vanished[i] = desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			}
		}()
		activity.RecordHeartbeat(ctx, i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var gone []string
	for i, job := range jobs {
		if vanished[i] {
			gone = append(gone, job)
		}
	}
	return gone, nil
}

// RendezvousInput names an attempt.
type RendezvousInput struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
}

// Rendezvous is where the workers of an attempt meet (MASTER_ADDR, MASTER_PORT).
type Rendezvous struct {
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// Rendezvous picks the attempt's master address on the node of worker 0.
func (a *Activities) Rendezvous(ctx context.Context, in RendezvousInput) (Rendezvous, error) {
	addr, port, err := a.Backend.Rendezvous(ctx, in.Job, in.Attempt)
	return Rendezvous{Addr: addr, Port: port}, err
}

// StartWorker starts one worker. It is idempotent per job, attempt and worker.
func (a *Activities) StartWorker(ctx context.Context, spec cluster.WorkerSpec) (cluster.WorkerStatus, error) {
	return a.Backend.Start(ctx, spec)
}

// WatchWorker waits for a worker to exit, heartbeating while it runs. After a
// worker-process restart, the retried activity re-attaches to the process.
func (a *Activities) WatchWorker(ctx context.Context, id cluster.WorkerID) (cluster.WorkerStatus, error) {
	st, err := a.Backend.Wait(ctx, id, func(s cluster.WorkerStatus) { activity.RecordHeartbeat(ctx, s.Phase) })
	if err == nil && st.Phase == cluster.PhaseNotFound {
		return st, temporal.NewNonRetryableApplicationError(fmt.Sprintf("worker %d of %s attempt %d was never started on this node", id.Worker, id.Job, id.Attempt), "WorkerNotFound", nil)
	}
	return st, err
}

// StopWorkerInput says which worker to stop and how long it may take.
type StopWorkerInput struct {
	ID    cluster.WorkerID `json:"id"`
	Grace time.Duration    `json:"grace"`
}

// StopWorker stops a worker gracefully (SIGTERM, then SIGKILL after the grace
// period) and returns once none of its processes is left.
func (a *Activities) StopWorker(ctx context.Context, in StopWorkerInput) (cluster.WorkerStatus, error) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, "stopping")
			}
		}
	}()
	return a.Backend.Stop(ctx, in.ID, in.Grace)
}
