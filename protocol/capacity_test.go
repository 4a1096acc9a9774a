package protocol

import (
	"encoding/json"
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

// A request that carries the demand its job parsed is not parsed again: the
// allocator and the job's admission take the demand as it came (a request
// from a job older than the field is parsed, and a bad instance type is
// refused).
func TestSchedulerRequestTakesTheCarriedDemand(t *testing.T) {
	d := scheduler.Demand{GPUs: 8, Family: "a100plus", VRAMGB: 80, CPU: 96, RAMGB: 768}
	req := CapacityRequest{Job: "j", Attempt: 1, Class: scheduler.Medium, InstanceType: "not parsed here", Workers: 1, Demand: &d}
	r, err := req.SchedulerRequest()
	require.NoError(t, err)
	assert.Equal(t, d, r.Demand)

	req.Demand = nil
	_, err = req.SchedulerRequest()
	assert.Error(t, err, "without a carried demand the instance type is parsed")

	var back CapacityRequest
	b, err := json.Marshal(CapacityRequest{Job: "j", InstanceType: "a100.1gpu", Demand: &d})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, &d, back.Demand, "the demand survives the signal's and the activity's JSON")
}
