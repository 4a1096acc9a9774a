package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/scheduler"
)

// TestSchedulerRequest: the one conversion of a capacity request keeps every
// field the pool reads, parses the instance type, and lets a learned
// estimate stand in for a missing time limit (marked as estimated), never
// for a limit the job has.
func TestSchedulerRequest(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	req := CapacityRequest{Job: "j", Attempt: 2, Kind: scheduler.KindJob, Class: scheduler.High, InstanceType: "a100.4gpu",
		Workers: 3, MinWorkers: 2, Seq: 7, SubmittedAt: at, Preemptions: 1, HonorsNotice: true, Nodes: []string{"n1"},
		Workspace: "ws", User: "ann", RunEstimate: time.Hour}
	r, err := req.SchedulerRequest()
	require.NoError(t, err)
	assert.Equal(t, scheduler.Request{Job: "j", Attempt: 2, Kind: scheduler.KindJob, Class: scheduler.High,
		Demand: scheduler.Demand{GPUs: 4, Family: "a100"}, Workers: 3, MinWorkers: 2, Seq: 7, SubmittedAt: at, Preemptions: 1,
		HonorsNotice: true, Nodes: []string{"n1"}, Workspace: "ws", User: "ann", RunLimit: time.Hour, RunEstimated: true}, r)

	req.RunLimit = 2 * time.Hour
	r, err = req.SchedulerRequest()
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, r.RunLimit)
	assert.False(t, r.RunEstimated, "a job's own time limit is not an estimate")

	req.InstanceType = "a100.many"
	_, err = req.SchedulerRequest()
	assert.Error(t, err)
}
