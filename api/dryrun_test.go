package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
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
	// Nothing runs there yet: it would start on the first node.
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
	require.NotNil(t, d.ExpectedStartAt, "it starts once its victim has stopped: %s", d.ExpectedStart)
	assert.Contains(t, d.ExpectedStart, low)
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
	// When depends on whether team-a's completed jobs give the running one an estimate; it says which.
	assert.Contains(t, d.ExpectedStart, low, "the expected start, or why unknown, names what it waits for")

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

// TestAwaitingLaunchResources: GET /queues/{id}/awaiting-launch-resources
// lists the queue's waiting jobs of a class in the allocator's launch order,
// with ML Space's filters, order and paging; another workspace's jobs show
// without name, workspace or author.
func TestAwaitingLaunchResources(t *testing.T) {
	needServer(t)
	onDry := func(script, class string) map[string]any {
		return job(script, "allocation_name", "dry", "instance_type", "a100.2gpu", "priority_class", class)
	}
	holder := submitJob(t, "alice", onDry("while true; do sleep 0.1; done", "high"))
	waitStatus(t, "alice", holder, "Running")
	// The launch order is the order the allocator hears the requests in: each goes in after the last.
	queued := func(n int) {
		t.Helper()
		eventually(t, long, fmt.Sprintf("%d jobs to be queued", n), func() bool {
			r := call(t, "root", "GET", "/public/v2/allocations/dry/queue", nil)
			var q queueView
			r.json(t, &q)
			return r.Code == 200 && q.WaitingTotal == n
		})
	}
	aliceWaits := submitJob(t, "alice", onDry("true", "medium"))
	queued(1)
	bobWaits := submitJob(t, "bob", onDry("true", "medium"))
	queued(2)
	lowWaits := submitJob(t, "alice", onDry("true", "low"))
	queued(3)
	type answer struct {
		Items []awaitingItem
		Count int
	}
	get := func(user, query string) answer {
		t.Helper()
		var a answer
		eventually(t, long, "the waiting jobs to be listed", func() bool {
			r := call(t, user, "GET", "/public/v2/queues/dry:default/awaiting-launch-resources?"+query, nil)
			require.Equal(t, 200, r.Code, string(r.Body))
			a = answer{}
			r.json(t, &a)
			return a.Count > 0 || strings.Contains(query, "workspace_ids=nobody")
		})
		return a
	}
	a := get("alice", "priority=medium&limit=10&offset=0")
	require.Equal(t, 2, a.Count)
	require.Len(t, a.Items, 2)
	assert.Equal(t, aliceWaits, a.Items[0].Name)
	assert.Equal(t, "team-a", a.Items[0].WorkspaceID)
	assert.Equal(t, "alice", a.Items[0].Author)
	assert.Equal(t, "dry:default", a.Items[0].QueueID)
	assert.Equal(t, 2, a.Items[0].GPUCount)
	assert.NotEmpty(t, a.Items[0].Reason)
	assert.Equal(t, hiddenName, a.Items[1].Name, "bob's job, to alice")
	assert.Empty(t, a.Items[1].WorkspaceID)
	assert.Less(t, a.Items[0].LaunchOrder, a.Items[1].LaunchOrder)

	assert.Equal(t, 1, get("alice", "priority=low&limit=10&offset=0").Count, "the low class alone")
	a = get("alice", "priority=medium&limit=1&offset=1")
	require.Len(t, a.Items, 1)
	assert.Equal(t, 2, a.Count, "count is of all that match, not of the page")
	assert.Equal(t, hiddenName, a.Items[0].Name)
	a = get("alice", "priority=medium&limit=10&offset=0&order_by=-launch_order")
	require.Len(t, a.Items, 2)
	assert.Equal(t, aliceWaits, a.Items[1].Name, "descending launch order")
	a = get("alice", "priority=medium&limit=10&offset=0&workspace_ids=team-a")
	require.Len(t, a.Items, 1)
	assert.Equal(t, aliceWaits, a.Items[0].Name)
	a = get("bob", "priority=medium&limit=10&offset=0")
	require.Len(t, a.Items, 2)
	assert.Equal(t, hiddenName, a.Items[0].Name, "alice's job, to bob")
	assert.Equal(t, bobWaits, a.Items[1].Name)
	// Alice's waiting job's reason names the job in its way, alice's holder: to bob, hidden.
	assert.Contains(t, get("alice", "priority=medium&limit=10&offset=0").Items[0].Reason, holder)
	assert.NotContains(t, a.Items[0].Reason, holder, "bob does not learn the name of team-a's job from a reason")
	assert.Contains(t, a.Items[0].Reason, hiddenName)

	for query, field := range map[string]string{
		"limit=10&offset=0":                                               "priority",
		"priority=urgent&limit=10&offset=0":                               "priority",
		"priority=high&limit=0&offset=0":                                  "limit",
		"priority=high&limit=10":                                          "offset",
		"priority=high&limit=10&offset=0&order_by=size":                   "order_by",
		"priority=high&limit=10&offset=0&gpu_count_min=4&gpu_count_max=2": "gpu_count_min",
		"priority=high&limit=10&offset=0&colour=red":                      "colour",
	} {
		r := call(t, "alice", "GET", "/public/v2/queues/dry:default/awaiting-launch-resources?"+query, nil)
		assert.Equal(t, 400, r.Code, query)
		assert.Contains(t, string(r.Body), `"field": "`+field+`"`, query)
	}
	for _, j := range []struct{ user, name string }{{"alice", holder}, {"alice", aliceWaits}, {"bob", bobWaits}, {"alice", lowWaits}} {
		require.Equal(t, 200, call(t, j.user, "DELETE", "/public/v2/jobs/"+j.name, nil).Code)
	}
}

// TestConfigReloadChangesQueues: a reloaded config's queue assignments
// apply to the next request, through the API and its backend alike; a
// config that changes more is refused and the running one kept.
func TestConfigReloadChangesQueues(t *testing.T) {
	needServer(t)
	s := env.handler
	body := job("true", "allocation_name", "t", "queue_name", "prod", "instance_type", "a100.1gpu", "priority_class", "high")
	r := call(t, "alice", "POST", "/public/v2/jobs?dry_run=true", body)
	require.Equal(t, 403, r.Code, "team-a is not assigned to prod: %s", r.Body)

	old := s.config()
	next := configWithProd(t, func(q *config.Queue) { q.Workspaces = append(q.Workspaces, "team-a") })
	require.NoError(t, s.Reload(next))
	r = call(t, "alice", "POST", "/public/v2/jobs?dry_run=true", body)
	require.Equal(t, 200, r.Code, "team-a is assigned to prod now: %s", r.Body)
	name := submitJob(t, "alice", body) // the backend's own check agrees
	waitStatus(t, "alice", name, "Completed")

	bad, err := config.Load(old.Source())
	require.NoError(t, err)
	_, a, _ := bad.Allocation("SR006", "t")
	a.MaxPreemptions = 9
	err = s.Reload(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "max_preemptions changed")
	assert.Same(t, next, s.config(), "a refused reload keeps the running config")
}
