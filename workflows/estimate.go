package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// learnInput asks a training job's first capacity request to learn its runtime estimate first
// (RequestCapacityInput.Learn), if it has no time limit: a Jupyter server runs until it is
// stopped, so its runtime says nothing. The request's own local activity learns it, so that
// nothing runs before the request: a grant already in the job's first workflow task must find
// the attempt waiting. It is learned once, at submission, as trainq simulate learns it: a rerun
// carries what is left of it.
func (j *job) learnInput() *protocol.EstimateRuntimeInput {
	if j.spec.TimeLimit > 0 || j.spec.Kind == scheduler.KindNotebook || j.status.Estimate != nil || j.status.Attempt > 1 {
		return nil
	}
	return &protocol.EstimateRuntimeInput{Workspace: j.spec.Workspace, Shape: j.spec.Shape(), Class: j.spec.PriorityClass, GPUs: j.spec.GPUs()}
}

// learned takes in the estimate the request learned: the status shows it, and the attempt's
// request (sent again by a check, answered to a recovering allocator) and the later attempts'
// carry it.
func (j *job) learned(e *protocol.RuntimeEstimate) {
	if e == nil || j.status.Estimate != nil || j.spec.TimeLimit > 0 {
		return
	}
	j.status.Estimate = e
	j.cur.request.RunEstimate = scheduler.EstimatedRunLimit(e.Runtime, 0)
}

// recordRuntime records, on a training job that completed, its shape and how long it ran in
// all (TrainqShape, TrainqRunSeconds): the jobs of its shape after it learn from them
// (versionLearnedEstimate).
func (j *job) recordRuntime(ctx workflow.Context) {
	if j.spec.Kind == scheduler.KindNotebook ||
		workflow.GetVersion(ctx, versionLearnedEstimate, workflow.DefaultVersion, 1) < 1 {
		return
	}
	secs := int64((j.runTime(workflow.Now(ctx)) + time.Second - 1) / time.Second)
	err := workflow.UpsertTypedSearchAttributes(ctx,
		protocol.KeyShape.ValueSet(j.spec.Shape()),
		protocol.KeyRunSeconds.ValueSet(max(secs, 1)),
	)
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not record the job's runtime", "error", err)
	}
}
