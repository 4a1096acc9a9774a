package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Allocation t has three queues (see the harness config): default (every
// node, class and workspace), shared (shared classes only) and prod (nodes
// api-t-3 and api-t-4, medium and high, team-b only, jobs high by default).

func TestQueuesAreListedWithMLSpacesShapes(t *testing.T) {
	r := call(t, "alice", "GET", "/public/v2/queues/?allocation_id=t", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var list []queueSummary
	r.json(t, &list)
	require.Len(t, list, 3)
	assert.Equal(t, queueSummary{ID: "t:prod", Name: "prod", Description: "urgent production jobs", AllocationID: "t", Region: "SR006", Active: true, Type: "custom"}, list[2])
	assert.True(t, list[0].Default)

	r = call(t, "alice", "GET", "/public/v2/queues/t:prod", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var d queueDetail
	r.json(t, &d)
	assert.Equal(t, []string{"api-t-3", "api-t-4"}, d.Nodes)
	assert.Equal(t, []string{"medium", "high"}, d.Metadata.JobPriorityAllowed)
	assert.Equal(t, "high", d.Metadata.DefaultPriority.Job)
	assert.False(t, d.Assigned, "alice's team-a is not assigned")
	assert.Empty(t, d.Workspaces, "a user does not see the other workspaces")
	r = call(t, "root", "GET", "/public/v2/queues/t:prod", nil)
	r.json(t, &d)
	assert.Equal(t, []string{"team-b"}, d.Workspaces, "an admin does")

	r = call(t, "alice", "GET", "/public/v2/queues/t:nope", nil)
	assert.Equal(t, http.StatusNotFound, r.Code)
	assert.Contains(t, r.err(t).Message, `allocation t has no queue "nope"; its queues are default, shared, prod`)
	r = call(t, "alice", "GET", "/public/v2/queues/t", nil)
	assert.Equal(t, http.StatusNotFound, r.Code)
	assert.Contains(t, r.err(t).Message, "ids are <allocation>:<queue>")

	r = call(t, "alice", "GET", "/public/v2/queues/t:prod/instance-types", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var its []instanceTypeCount
	r.json(t, &its)
	require.NotEmpty(t, its)
}

// TestQueueNameRoutesAndGuardsTheRequest: a workspace not assigned to a
// queue and a class the queue does not allow get 403 naming the field and
// what is allowed, and nothing starts; an assigned workspace's job takes
// the queue's default class and shows in the queue's jobs and in the job
// list with its queue.
func TestQueueNameRoutesAndGuardsTheRequest(t *testing.T) {
	before := call(t, "root", "GET", "/public/v2/jobs?allocation_name=t&limit=1000", nil)
	require.Equal(t, 200, before.Code)
	var was listView
	before.json(t, &was)

	r := call(t, "alice", "POST", "/public/v2/jobs", job("true", "queue_name", "prod"))
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	e := r.err(t)
	assert.Equal(t, "queue_name", e.Field)
	assert.Equal(t, "workspace team-a is not assigned to queue prod of allocation t; it is assigned to team-b", e.Message)

	r = call(t, "bob", "POST", "/public/v2/jobs", job("true", "queue_name", "prod", "priority_class", "low"))
	require.Equal(t, http.StatusForbidden, r.Code, string(r.Body))
	e = r.err(t)
	assert.Equal(t, "priority_class", e.Field)
	assert.Equal(t, "queue prod of allocation t does not allow priority_class low; it allows medium, high", e.Message)

	r = call(t, "bob", "POST", "/public/v2/jobs", job("true", "queue_name", "night"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	assert.Equal(t, "queue_name", r.err(t).Field)

	after := call(t, "root", "GET", "/public/v2/jobs?allocation_name=t&limit=1000", nil)
	var now listView
	after.json(t, &now)
	assert.Equal(t, was.Count, now.Count, "a refused request starts nothing")

	name := submitJob(t, "bob", job("true", "queue_name", "prod"))
	v := waitStatus(t, "bob", name, "Completed")
	assert.Equal(t, "high", v.PriorityClass, "the queue's default class")
	assert.Equal(t, "prod", v.QueueName)

	r = call(t, "bob", "GET", "/public/v2/queues/t:prod/jobs", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var qj struct{ Jobs []queueJob }
	r.json(t, &qj)
	require.NotEmpty(t, qj.Jobs)
	assert.Equal(t, name, qj.Jobs[0].Name)
	assert.Equal(t, "prod", qj.Jobs[0].QueueName)
	assert.Equal(t, int64(1), qj.Jobs[0].TryCount)

	r = call(t, "bob", "GET", "/public/v2/queues/t:shared/jobs", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	r.json(t, &qj)
	for _, j := range qj.Jobs {
		assert.NotEqual(t, name, j.Name, "a prod job is not in the shared queue")
	}

	r = call(t, "bob", "GET", "/public/v2/jobs?allocation_name=t&limit=5", nil)
	var l listView
	r.json(t, &l)
	require.NotEmpty(t, l.Jobs)
	assert.Equal(t, "prod", l.Jobs[0].QueueName)
	assert.Equal(t, "t:prod", l.Jobs[0].QueueID)
}
