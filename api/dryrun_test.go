package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDryRunStartsNothing: POST /jobs?dry_run=true answers where a job
// would start, whom it would preempt (named only to their own workspace)
// or why it would wait, from the real allocator, and starts nothing.
func TestDryRunStartsNothing(t *testing.T) {
	needServer(t)
	onDry := func(class string) map[string]any {
		return job("true", "allocation_name", "dry", "instance_type", "a100.2gpu", "priority_class", class)
	}
	dryRun := func(user string, body map[string]any) dryRunAnswer {
		t.Helper()
		r := call(t, user, "POST", "/public/v2/jobs?dry_run=true", body)
		require.Equal(t, 200, r.Code, string(r.Body))
		var d dryRunAnswer
		r.json(t, &d)
		require.True(t, d.DryRun)
		return d
	}
	// The allocation has no allocator yet: the empty allocation answers.
	d := dryRun("alice", onDry("medium"))
	assert.True(t, d.WouldStart, "an empty allocation: %+v", d)
	require.Len(t, d.Placement, 1)
	assert.Equal(t, "api-dry-1", d.Placement[0].Node)

	low := submitJob(t, "alice", job("while true; do sleep 0.1; done", "allocation_name", "dry", "instance_type", "a100.2gpu", "priority_class", "low"))
	waitStatus(t, "alice", low, "Running")

	d = dryRun("alice", onDry("high"))
	assert.False(t, d.WouldStart)
	assert.Equal(t, []string{low}, d.Preempts, "alice sees her own victim")
	assert.Contains(t, d.Reason, low)
	r := call(t, "bob", "POST", "/public/v2/jobs?dry_run=true", onDry("high"))
	require.Equal(t, 200, r.Code, string(r.Body))
	assert.NotContains(t, string(r.Body), low, "bob does not learn the name of team-a's job")
	var db dryRunAnswer
	r.json(t, &db)
	assert.Equal(t, []string{hiddenName}, db.Preempts)

	d = dryRun("alice", onDry("low"))
	assert.False(t, d.WouldStart)
	assert.Empty(t, d.Preempts, "low preempts nobody")
	assert.Equal(t, 1, d.Position)
	assert.NotEmpty(t, d.Reason)

	// Nothing was started or queued: the low job still runs, nobody waits.
	r = call(t, "root", "GET", "/public/v2/allocations/dry/queue", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var q queueView
	r.json(t, &q)
	assert.Empty(t, q.Waiting)
	require.Len(t, q.Running, 1)
	assert.Equal(t, low, q.Running[0].JobName)
	assert.Equal(t, "Running", jobStatus(t, "alice", low).Status)

	// Bad input: a bad dry_run value, and a bad field, are refused as always.
	r = call(t, "alice", "POST", "/public/v2/jobs?dry_run=maybe", onDry("high"))
	assert.Equal(t, 400, r.Code)
	assert.Contains(t, string(r.Body), "dry_run")
	r = call(t, "alice", "POST", "/public/v2/jobs?dry_run=true", onDry("urgent"))
	assert.Equal(t, 422, r.Code, string(r.Body))
	assert.Contains(t, string(r.Body), "priority_class")
	require.Equal(t, 200, call(t, "alice", "DELETE", "/public/v2/jobs/"+low, nil).Code)
}
