package workflows

// An attempt starts its workers on the granted nodes.

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/attempts"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func (j *job) nodeOptions(ctx workflow.Context, node, summary string, o workflow.ActivityOptions) workflow.Context {
	o.TaskQueue = protocol.NodeTaskQueue(node)
	o.Summary = summary
	// A node's agent that does not pick up its work within the node
	// timeout is lost: the activity fails instead of waiting for ever.
	o.ScheduleToStartTimeout = j.cur.nodeTimeout
	return workflow.WithActivityOptions(ctx, o)
}

// nodeLost is the outcome of an attempt whose node's agent did not answer.
func (j *job) nodeLost(node string) attempts.Outcome {
	j.cur.lostNodes[node] = true
	return attempts.NodeLostAfter(node, j.cur.nodeTimeout)
}

// isNodeTimeout tells whether an activity failed because no agent of its
// node picked it up within the node timeout.
func isNodeTimeout(err error) bool {
	var timeoutErr *temporal.TimeoutError
	return errors.As(err, &timeoutErr) && timeoutErr.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// startWorkers starts every worker of the gang. Starts are short and are
// never abandoned half-way, even on cancellation: a start still in flight
// could otherwise launch a worker after it was stopped. A preemption or
// cancellation that arrives meanwhile is seen by watch.
func (j *job) startWorkers(ctx workflow.Context, attempt int, grant protocol.GrantSignal) (attempts.Outcome, bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	short := workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}}
	// The start heartbeats: an agent that dies mid-start is noticed after
	// the heartbeat timeout, not the start's 2 minutes (the retry then
	// waits at most node_timeout for the agent before the node counts as lost).
	startOptions := short
	startOptions.HeartbeatTimeout = 15 * time.Second
	rv, out, ok := j.rendezvous(dctx, attempt, grant, short)
	if !ok {
		return out, false
	}
	var starts []workflow.Future
	for _, p := range grant.Placement {
		spec := j.workerSpec(attempt, grant, p, rv)
		summary := fmt.Sprintf("start worker %d on %s (GPUs %v)", p.Worker, p.Node, p.GPUs)
		starts = append(starts, workflow.ExecuteActivity(j.nodeOptions(dctx, p.Node, summary, startOptions), (*activities.Activities).StartWorker, spec))
	}
	results := make([]attempts.StartResult, len(starts))
	for i, f := range starts {
		var st cluster.WorkerStatus
		err := f.Get(dctx, &st)
		if err == nil && st.URL != "" {
			j.current().URL = st.URL // a Jupyter server says where it serves
		}
		results[i] = startResult(grant.Placement[i], err)
	}
	out, started, lost, busy := attempts.Starts(results, j.cur.nodeTimeout)
	for _, node := range lost {
		j.cur.lostNodes[node] = true
	}
	for _, node := range busy {
		// The grant's GPUs are not really free: the allocator's view is
		// wrong (a reset allocator, a worker it never knew of). The node is
		// reported with the release, so the allocator fences it and its
		// agent says who runs there.
		j.cur.busyNodes[node] = true
	}
	return out, started
}

// startResult says how a worker's start ended, for the attempt's rules.
func startResult(p scheduler.WorkerPlacement, err error) attempts.StartResult {
	r := attempts.StartResult{Worker: p.Worker, Node: p.Node}
	switch {
	case err == nil:
		return r
	case isNodeTimeout(err):
		r.End = attempts.StartNodeSilent
	case isGPUsBusy(err):
		r.End = attempts.StartGPUsBusy
	default:
		r.End = attempts.StartFailed
	}
	r.Error = errorText(err)
	return r
}

// workerSpec is what starts worker p of the attempt.
func (j *job) workerSpec(attempt int, grant protocol.GrantSignal, p scheduler.WorkerPlacement, rv activities.Rendezvous) cluster.WorkerSpec {
	return cluster.WorkerSpec{
		// The grant's size: n_workers, or for an elastic gang what fitted.
		ID: cluster.WorkerID{Job: j.name, Attempt: attempt, Worker: p.Worker}, Workers: len(grant.Placement),
		Node: p.Node, GPUs: p.GPUs, Type: j.spec.Type, Script: j.spec.Script, BaseImage: j.spec.BaseImage,
		ProcessesPerWorker: j.spec.ProcessesPerWorker, Env: j.spec.EnvVariables, Flags: j.spec.Flags,
		MasterAddr: rv.Addr, MasterPort: rv.Port, CheckpointDir: j.spec.CheckpointDir, Notebook: j.spec.Kind == scheduler.KindNotebook,
		CondaEnv: j.spec.CondaEnv, ShmGB: j.spec.ShmGB(), NoInternet: j.spec.Internet != nil && !*j.spec.Internet,
		ElasticMinWorkers: j.spec.ElasticMinWorkers, ElasticMaxWorkers: j.spec.ElasticMaxWorkers, ElasticMaxRestarts: j.spec.ElasticMaxRestarts,
	}
}

// rendezvous picks the attempt's MASTER_ADDR and MASTER_PORT on worker 0's
// node. A one-worker attempt leaves them empty: its StartWorker picks them on
// its own node, saving a round trip.
func (j *job) rendezvous(ctx workflow.Context, attempt int, grant protocol.GrantSignal, o workflow.ActivityOptions) (activities.Rendezvous, attempts.Outcome, bool) {
	var rv activities.Rendezvous
	if len(grant.Placement) == 1 {
		return rv, attempts.Outcome{}, true
	}
	master := grant.Placement[0].Node
	err := workflow.ExecuteActivity(j.nodeOptions(ctx, master, "pick MASTER_ADDR and MASTER_PORT on "+master, o),
		(*activities.Activities).Rendezvous, activities.RendezvousInput{Job: j.name, Attempt: attempt}).Get(ctx, &rv)
	if isNodeTimeout(err) {
		return rv, j.nodeLost(master), false
	}
	if err != nil {
		return rv, attempts.Outcome{Kind: attempts.Failed, Message: "could not pick a rendezvous address: " + errorText(err)}, false
	}
	return rv, attempts.Outcome{}, true
}

// isGPUsBusy tells whether a start found its GPUs used by a live worker
// of another job or attempt.
func isGPUsBusy(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeGPUsBusy
}
