package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// `trainq restart` submits a new job with a finished job's spec, through
// client.Restart; a name no job has is a plain sentence. The spec comes from
// the Temporal server alone: a restart with no trainq-worker running (or
// one too busy to take a query in time, as neighbour run 61 saw) works, and
// its job runs once a worker is back.
func TestRestartThroughTheCLI(t *testing.T) {
	w := startWorker(t)
	old := submit(t, fixture.Job{GPUs: 1, Script: "echo restarted"}.Spec())
	waitState(t, old, protocol.StateCompleted, long)

	out, errOut, code := trainq(t, "restart", old, "--output", "json")
	require.Equal(t, 0, code, errOut)
	var res struct {
		JobName       string `json:"job_name"`
		Status        string `json:"status"`
		RestartedFrom string `json:"restarted_from"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, old, res.RestartedFrom)
	assert.NotEqual(t, old, res.JobName)
	assert.Equal(t, "Pending", res.Status)
	st := waitState(t, res.JobName, protocol.StateCompleted, long)
	assert.Equal(t, status(t, old).Spec, st.Spec, "the new job runs the old one's spec")

	_, errOut, code = trainq(t, "restart", "lm-mpi-job-nobody")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "job lm-mpi-job-nobody does not exist")

	w.Stop(30 * time.Second)
	out, errOut, code = trainq(t, "restart", old, "--output", "json")
	require.Equal(t, 0, code, "restart with no worker running: %s", errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	startWorker(t)
	waitState(t, res.JobName, protocol.StateCompleted, long)
}
