package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

func TestHealthConfigsAndOpenAPI(t *testing.T) {
	needServer(t)
	assert.Equal(t, 200, call(t, "", "GET", "/healthz", nil).Code)
	assert.Equal(t, 200, call(t, "", "GET", "/readyz", nil).Code)
	assert.Equal(t, 200, call(t, "", "GET", "/public/v2/openapi.json", nil).Code)
	assert.Equal(t, 401, call(t, "", "GET", "/public/v2/configs", nil).Code)
	r := call(t, "alice", "GET", "/public/v2/configs", nil)
	require.Equal(t, 200, r.Code)
	var cfg struct {
		DefaultRegion string `json:"default_region"`
		Regions       []struct {
			Name        string           `json:"name"`
			Allocations []allocationView `json:"allocations"`
		} `json:"regions"`
	}
	r.json(t, &cfg)
	assert.Equal(t, "SR006", cfg.DefaultRegion)
	require.Len(t, cfg.Regions, 1)
	require.Len(t, cfg.Regions[0].Allocations, 7)
	var names []string
	for _, it := range cfg.Regions[0].Allocations[0].InstanceTypes {
		names = append(names, it.Name)
	}
	assert.Contains(t, names, "a100plus.8gpu")
	m := call(t, "", "GET", "/metrics", nil)
	assert.Contains(t, string(m.Body), `route="GET /public/v2/configs"`)
}

// TestJobLifecycle: submit, status, logs (tail, verbose, follow), list with
// filters and paging, preemptors, and DELETE of a finished job.
func TestJobLifecycle(t *testing.T) {
	needServer(t)
	name := submitJob(t, "alice", job("echo hello; echo world", "job_desc", "lifecycle", "priority_class", "low", "max_retry", 1))
	// follow=true streams until the job ends.
	r := call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs?follow=true&verbose=true", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	assert.Contains(t, string(r.Body), "hello\nworld\n")
	assert.Contains(t, string(r.Body), "ended Completed")

	v := waitStatus(t, "alice", name, "Completed")
	assert.Equal(t, "low", v.PriorityClass)
	assert.Equal(t, "job", v.Kind)
	assert.Equal(t, "binary", v.Type)
	assert.Equal(t, "alice", v.JobAuthor)
	assert.Equal(t, "team-a", v.Workspace)
	assert.Equal(t, 1, v.Attempt)
	assert.NotNil(t, v.RunningAt)
	assert.NotNil(t, v.CompletedAt)
	assert.Empty(t, v.Preemptors)

	// The log holds the job's output between the supervisor's lines.
	r = call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs", nil)
	assert.Contains(t, string(r.Body), "hello\nworld\n")
	assert.Contains(t, string(r.Body), "[trainq-supervisor] worker exited with code 0\n")
	assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
	r = call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs?tail=3", nil)
	assert.True(t, strings.HasPrefix(string(r.Body), "world\n"), string(r.Body))
	assert.Equal(t, 3, strings.Count(string(r.Body), "\n"))
	r = call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs?verbose=true", nil)
	assert.Contains(t, string(r.Body), "==> job "+name+" attempt 1 worker 0 on api-t-")
	assert.Equal(t, 422, call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs?tail=-1", nil).Code)
	assert.Equal(t, 422, call(t, "alice", "GET", "/public/v2/jobs/"+name+"/logs?attempt=7", nil).Code)

	r = call(t, "alice", "GET", "/public/v2/jobs/"+name+"/preemptors", nil)
	require.Equal(t, 200, r.Code)
	assert.JSONEq(t, `{"job_name":"`+name+`","status":"Completed","preemptors":[]}`, string(r.Body))

	// List: visibility catches up with the final state.
	eventually(t, long, "the list to show the job Completed", func() bool {
		_, names := listNames(t, "alice", "?status=Completed&allocation_name=t&job_author=alice")
		return slices.Contains(names, name)
	})
	r = call(t, "alice", "GET", "/public/v2/jobs?status=Completed&status=Failed&allocation_name=t&region=SR006&limit=1", nil)
	var list struct {
		Count int      `json:"count"`
		Jobs  []jobRow `json:"jobs"`
	}
	r.json(t, &list)
	require.Len(t, list.Jobs, 1)
	assert.GreaterOrEqual(t, list.Count, 1)
	row := list.Jobs[0]
	assert.Equal(t, name, row.JobName, "newest first")
	assert.Equal(t, "a100.1gpu", row.InstanceType)
	assert.Equal(t, "lifecycle", row.JobDesc)
	assert.Equal(t, int64(1), row.GPUCount)
	assert.NotEmpty(t, row.UID)
	assert.NotNil(t, row.CompletedDT)
	_, names := listNames(t, "alice", "?start_date="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	assert.Empty(t, names)

	// Deleting a finished job is a no-op, and says how it ended.
	for range 2 {
		r = call(t, "alice", "DELETE", "/public/v2/jobs/"+name, nil)
		require.Equal(t, 200, r.Code, string(r.Body))
		assert.JSONEq(t, `{"job_name":"`+name+`","status":"Completed"}`, string(r.Body))
	}
	assert.Equal(t, 404, call(t, "alice", "GET", "/public/v2/jobs/lm-mpi-job-nope", nil).Code)
	assert.Equal(t, 404, call(t, "alice", "GET", "/public/v2/jobs/allocator%2FSR006%2Ft", nil).Code)
}

func TestPaging(t *testing.T) {
	needServer(t)
	var mine []string
	for i := range 3 {
		mine = append(mine, submitJob(t, "bob", job("true", "job_desc", "page "+string(rune('a'+i)))))
	}
	eventually(t, long, "visibility to list bob's jobs", func() bool {
		n, _ := listNames(t, "bob", "")
		return n >= 3
	})
	count, first := listNames(t, "bob", "?limit=2")
	_, second := listNames(t, "bob", "?limit=2&offset=2")
	assert.Len(t, first, 2)
	assert.GreaterOrEqual(t, count, 3)
	all := append(first, second...)
	for _, n := range mine {
		assert.Contains(t, all, n)
	}
	assert.Equal(t, []string{mine[2], mine[1]}, first, "newest first")
	for _, n := range mine {
		waitStatus(t, "bob", n, "Completed")
	}
}

// TestAuthMatrix: no token and unknown tokens are 401; another workspace's
// job is 404 on every endpoint; admin sees and lists everything.
func TestAuthMatrix(t *testing.T) {
	needServer(t)
	name := submitJob(t, "alice", job("sleep 30"))
	for _, ep := range []struct{ method, path string }{
		{"GET", "/public/v2/jobs/" + name}, {"GET", "/public/v2/jobs/" + name + "/logs"},
		{"GET", "/public/v2/jobs/" + name + "/preemptors"}, {"DELETE", "/public/v2/jobs/" + name},
		{"DELETE", "/public/v2/notebooks/" + name},
	} {
		assert.Equal(t, 401, call(t, "", ep.method, ep.path, nil).Code, ep)
		assert.Equal(t, 401, call(t, "tq_not-a-token", ep.method, ep.path, nil).Code, ep)
		r := call(t, "bob", ep.method, ep.path, nil)
		assert.Equal(t, 404, r.Code, ep)
		assert.Equal(t, "not_found", r.err(t).Code)
	}
	assert.Equal(t, 401, call(t, "", "GET", "/public/v2/jobs", nil).Code)
	assert.Equal(t, 401, call(t, "", "POST", "/public/v2/jobs", job("true")).Code)
	r := call(t, "bob", "POST", "/public/v2/jobs/restart", map[string]string{"job_name": name})
	assert.Equal(t, 404, r.Code)
	assert.Equal(t, 422, call(t, "bob", "GET", "/public/v2/jobs?workspace=team-a", nil).Code)

	eventually(t, long, "admin's list to show alice's job", func() bool {
		_, names := listNames(t, "root", "?workspace=team-a")
		return slices.Contains(names, name)
	})
	_, bobs := listNames(t, "bob", "?limit=1000")
	assert.NotContains(t, bobs, name)
	v := jobStatus(t, "root", name)
	assert.Equal(t, "team-a", v.Workspace)
	assert.Equal(t, 200, call(t, "root", "GET", "/public/v2/jobs/"+name+"/preemptors", nil).Code)
	r = call(t, "root", "DELETE", "/public/v2/jobs/"+name, nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	waitStatus(t, "alice", name, "Stopped")
}

// TestIdempotencyKey: a retry answers with the same job and starts nothing
// new, also after the job ended; the key with another body is 409.
func TestIdempotencyKey(t *testing.T) {
	needServer(t)
	key := "retry-" + time.Now().Format(time.RFC3339Nano)
	body := job("sleep 30")
	first := submitJob(t, "alice", body, "Idempotency-Key", key)
	r := call(t, "alice", "POST", "/public/v2/jobs", body, "Idempotency-Key", key)
	require.Equal(t, 200, r.Code, string(r.Body))
	var again submitted
	r.json(t, &again)
	assert.Equal(t, first, again.JobName)

	// The same spelling-independent request (defaults written out) is the same request.
	body2 := job("sleep 30", "n_workers", 1, "priority_class", "medium")
	r = call(t, "alice", "POST", "/public/v2/jobs", body2, "Idempotency-Key", key)
	require.Equal(t, 200, r.Code, string(r.Body))

	r = call(t, "alice", "POST", "/public/v2/jobs", job("sleep 31"), "Idempotency-Key", key)
	require.Equal(t, 409, r.Code, string(r.Body))
	assert.Equal(t, "Idempotency-Key", r.err(t).Field)

	// Another workspace's same key is another job.
	other := submitJob(t, "bob", body, "Idempotency-Key", key)
	assert.NotEqual(t, first, other)

	// One workflow only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := client.New(env.client, nil).Count(ctx, client.ListFilter{Names: []string{first}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)

	// After the job has ended, a retry still answers with it and runs nothing.
	require.Equal(t, 200, call(t, "alice", "DELETE", "/public/v2/jobs/"+first, nil).Code)
	require.Equal(t, 200, call(t, "bob", "DELETE", "/public/v2/jobs/"+other, nil).Code)
	waitStatus(t, "alice", first, "Stopped")
	r = call(t, "alice", "POST", "/public/v2/jobs", body, "Idempotency-Key", key)
	require.Equal(t, 200, r.Code, string(r.Body))
	r.json(t, &again)
	assert.Equal(t, first, again.JobName)
	assert.Equal(t, "Stopped", again.Status)
	assert.Equal(t, 409, call(t, "alice", "POST", "/public/v2/jobs", job("sleep 31"), "Idempotency-Key", key).Code)
}

// TestIdempotencyKeyAcrossAConfigReload: a retry that comes after a config
// reload changed the defaults its request was filled in with (here queue
// prod's default class, high then medium) is still the same request: it
// answers with the job the first try started, and starts nothing. Another
// request under the key is still refused.
func TestIdempotencyKeyAcrossAConfigReload(t *testing.T) {
	needServer(t)
	key := "reload-" + time.Now().Format(time.RFC3339Nano)
	body := job("sleep 30", "allocation_name", "t", "queue_name", "prod", "instance_type", "a100.1gpu")
	first := submitJob(t, "bob", body, "Idempotency-Key", key)
	t.Cleanup(func() { call(t, "bob", "DELETE", "/public/v2/jobs/"+first, nil) })
	require.NoError(t, env.handler.Reload(configWithProd(t, func(q *config.Queue) { q.DefaultPriority.Job = "medium" })))

	r := call(t, "bob", "POST", "/public/v2/jobs", body, "Idempotency-Key", key)
	require.Equal(t, 200, r.Code, string(r.Body))
	var again submitted
	r.json(t, &again)
	assert.Equal(t, first, again.JobName)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := client.New(env.client, nil).Count(ctx, client.ListFilter{Names: []string{first}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "one workflow only")

	other := job("sleep 31", "allocation_name", "t", "queue_name", "prod", "instance_type", "a100.1gpu")
	assert.Equal(t, 409, call(t, "bob", "POST", "/public/v2/jobs", other, "Idempotency-Key", key).Code)
}

// configWithProd is the running config with queue prod of allocation t
// changed; the test's end puts the running config back.
func configWithProd(t *testing.T, change func(*config.Queue)) *config.Config {
	t.Helper()
	old := env.handler.config()
	t.Cleanup(func() { env.handler.live.Store(old); env.backend.SetConfig(old) })
	next, err := config.Load(old.Source())
	require.NoError(t, err)
	_, a, err := next.Allocation("SR006", "t")
	require.NoError(t, err)
	for i := range a.Queues {
		if a.Queues[i].Name == "prod" {
			change(&a.Queues[i])
		}
	}
	return next
}

// TestIdempotentRetryOfAJobThatFillsItsQueue: team-a may have one medium
// job waiting on allocation lim. A keyed submission that waits there fills
// the queue; its retry (a client that lost the answer) answers with the same
// job, not 429 for the room the job itself takes, while another job is
// refused.
func TestIdempotentRetryOfAJobThatFillsItsQueue(t *testing.T) {
	needServer(t)
	onLim := func(script string) map[string]any {
		return job(script, "allocation_name", "lim", "instance_type", "a100.2gpu")
	}
	holder := submitJob(t, "alice", onLim("while true; do sleep 0.1; done"))
	waitStatus(t, "alice", holder, "Running")
	key := "full-" + time.Now().Format(time.RFC3339Nano)
	waiting := submitJob(t, "alice", onLim("true"), "Idempotency-Key", key)
	eventually(t, long, "the keyed job to wait", func() bool {
		r := call(t, "root", "GET", "/public/v2/allocations/lim/queue", nil)
		var q queueView
		r.json(t, &q)
		return r.Code == 200 && q.WaitingTotal == 1
	})
	r := call(t, "alice", "POST", "/public/v2/jobs", onLim("echo another"))
	require.Equal(t, 429, r.Code, "the queue is full: %s", r.Body)

	r = call(t, "alice", "POST", "/public/v2/jobs", onLim("true"), "Idempotency-Key", key)
	require.Equal(t, 200, r.Code, string(r.Body))
	var again submitted
	r.json(t, &again)
	assert.Equal(t, waiting, again.JobName)
	assert.Equal(t, "Pending", again.Status)
	r = call(t, "alice", "POST", "/public/v2/jobs", onLim("echo other"), "Idempotency-Key", key)
	assert.Equal(t, 409, r.Code, "another request under the key is still a conflict: %s", r.Body)

	for _, j := range []string{waiting, holder} {
		require.Equal(t, 200, call(t, "alice", "DELETE", "/public/v2/jobs/"+j, nil).Code)
	}
}

// TestRejectedRequestStartsNothing: bad requests of a workspace that has no
// jobs leave it without jobs; only the good request that follows them runs.
func TestRejectedRequestStartsNothing(t *testing.T) {
	needServer(t)
	bad := []struct {
		body any
		code int
	}{
		{`{"script":"true",`, 400},
		{`[]`, 400},
		{job("true", "n_workers", "two"), 400},
		{job("true", "unknown", 1), 400},
		{job("true", "n_workers", 0), 422},
		{job("true", "n_workers", 9), 422},
		{job("true", "priority_class", "urgent"), 422},
		{job("true", "max_retry", 101), 422},
		{job("true", "processes_per_worker", "many"), 422},
		{job("true", "allocation_name", "nope"), 422},
		{job("true", "region", "nowhere"), 422},
		{job("true", "instance_type", "h100.1gpu"), 422},
		{job("true", "type", "tensorflow"), 422},
		{job("true", "base_image", ""), 422},
		{job("true", "job_desc", strings.Repeat("x", MaxBodyBytes)), 413},
	}
	for _, b := range bad {
		r := call(t, "carol", "POST", "/public/v2/jobs", b.body, "Idempotency-Key", "bad-"+time.Now().String())
		assert.Equal(t, b.code, r.Code, "%v: %s", b.body, r.Body)
		if r.Code >= 400 {
			e := r.err(t)
			assert.NotEmpty(t, e.Code)
			assert.NotEmpty(t, e.Message)
		}
	}
	r := call(t, "carol", "POST", "/public/v2/jobs", job("true", "priority_class", "urgent"))
	assert.Equal(t, "priority_class", r.err(t).Field)
	// A good request afterwards is the marker: once visibility shows it,
	// it would show a job a rejected request had started too.
	marker := submitJob(t, "carol", job("true"))
	count := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := client.New(env.client, nil).Count(ctx, client.ListFilter{Workspace: "team-empty"})
		require.NoError(t, err)
		return n
	}
	eventually(t, long, "the marker job to be visible", func() bool { return count() >= 1 })
	assert.Equal(t, int64(1), count(), "only the marker job may exist")
	n, names := listNames(t, "carol", "")
	assert.Equal(t, 1, n)
	assert.Equal(t, []string{marker}, names)
}

// TestSeedRequestBody posts the seed's sample request body as is: it is
// accepted, and the job gets scheduled (its script does not exist here, so
// it then fails and reruns; that is not the API's business).
func TestSeedRequestBody(t *testing.T) {
	needServer(t)
	body, err := os.ReadFile("../cmd/trainq/testdata/seed-job.json")
	require.NoError(t, err)
	r := call(t, "alice", "POST", "/public/v2/jobs", body)
	require.Equal(t, 200, r.Code, string(r.Body))
	var sub submitted
	r.json(t, &sub)
	assert.True(t, strings.HasPrefix(sub.JobName, "lm-mpi-job-"))
	assert.Equal(t, "Pending", sub.Status)
	var v jobView
	eventually(t, long, "the seed job to be scheduled", func() bool {
		v = jobStatus(t, "alice", sub.JobName)
		return len(v.Attempts) > 0 && v.Attempts[0].StartedAt != nil
	})
	assert.Equal(t, "medium", v.PriorityClass)
	assert.Equal(t, "pytorch2", v.Type)
	assert.Equal(t, 2, v.NWorkers)
	assert.Equal(t, 16, v.GPUCount)
	assert.Equal(t, 3, v.MaxRetry)
	assert.Len(t, v.Attempts[0].Placement, 2)
	require.Equal(t, 200, call(t, "alice", "DELETE", "/public/v2/jobs/"+sub.JobName, nil).Code)
	eventually(t, long, "the seed job to end", func() bool {
		return protocol.JobState(jobStatus(t, "alice", sub.JobName).Status).Terminal()
	})
}

// TestPreemptionQueueRestart: a high job preempts a low one on allocation q;
// the queue, the status and /preemptors say so; restart runs the low job
// again; DELETE stops it.
func TestPreemptionQueueRestart(t *testing.T) {
	needServer(t)
	low := submitJob(t, "alice", job("while true; do sleep 0.1; done", "allocation_name", "q", "instance_type", "a100.2gpu", "priority_class", "low"))
	waitStatus(t, "alice", low, "Running")
	waiting := submitJob(t, "alice", job("true", "allocation_name", "q", "instance_type", "a100.2gpu", "priority_class", "low"))
	eventually(t, long, "the second low job to wait with a reason", func() bool {
		v := jobStatus(t, "alice", waiting)
		return v.Status == "Pending" && v.Reason != "" && v.Position == 1
	})

	// Queue as the owner: names; as another workspace: no names.
	r := call(t, "alice", "GET", "/public/v2/allocations/q/queue", nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	var q queueView
	r.json(t, &q)
	require.Len(t, q.Waiting, 1)
	assert.Equal(t, waiting, q.Waiting[0].JobName)
	assert.Equal(t, 1, q.Waiting[0].LaunchOrder)
	assert.Equal(t, "job", q.Waiting[0].Type)
	assert.Equal(t, "low", q.Waiting[0].Priority)
	assert.Equal(t, 2, q.Waiting[0].GPUCount)
	assert.NotEmpty(t, q.Waiting[0].Reason)
	require.Len(t, q.Running, 1)
	assert.Equal(t, low, q.Running[0].JobName)
	assert.Equal(t, 2, q.Total)
	assert.Equal(t, 0, q.Free)
	r = call(t, "bob", "GET", "/public/v2/allocations/q/queue?region=SR006", nil)
	require.Equal(t, 200, r.Code)
	assert.NotContains(t, string(r.Body), low)
	assert.NotContains(t, string(r.Body), waiting)
	assert.Contains(t, string(r.Body), hiddenName)
	assert.Equal(t, 422, call(t, "bob", "GET", "/public/v2/allocations/q/queue?region=nowhere", nil).Code)

	high := submitJob(t, "bob", job("sleep 1", "allocation_name", "q", "instance_type", "a100.2gpu", "priority_class", "high"))
	v := waitStatus(t, "alice", low, "Preempted")
	require.Len(t, v.Preemptors, 1)
	// bob's job is in another workspace: alice learns its class, not its name.
	assert.Equal(t, "high", v.Preemptors[0].Priority)
	assert.Equal(t, "job", v.Preemptors[0].Type)
	assert.Equal(t, hiddenName, v.Preemptors[0].Name)
	assert.NotContains(t, string(call(t, "alice", "GET", "/public/v2/jobs/"+low, nil).Body), high)
	r = call(t, "root", "GET", "/public/v2/jobs/"+low+"/preemptors", nil)
	var pre struct{ Preemptors []preemptorView }
	r.json(t, &pre)
	require.Len(t, pre.Preemptors, 1)
	assert.Equal(t, preemptorView{ID: high, Name: high, Priority: "high", Type: "job", Attempt: 1, At: pre.Preemptors[0].At}, pre.Preemptors[0])
	assert.NotNil(t, pre.Preemptors[0].At)

	// Restart the preempted job: a new job, same parameters.
	r = call(t, "alice", "POST", "/public/v2/jobs/restart", map[string]string{"job_name": low})
	require.Equal(t, 200, r.Code, string(r.Body))
	var sub submitted
	r.json(t, &sub)
	assert.NotEqual(t, low, sub.JobName)
	assert.Equal(t, low, sub.RestartedFrom)
	nv := jobStatus(t, "alice", sub.JobName)
	assert.Equal(t, "low", nv.PriorityClass)
	assert.Equal(t, "q", nv.AllocationName)
	assert.Equal(t, 400, call(t, "alice", "POST", "/public/v2/jobs/restart", `{"job":"x"}`).Code)
	assert.Equal(t, 422, call(t, "alice", "POST", "/public/v2/jobs/restart", `{}`).Code)

	// Stop both: DELETE is idempotent.
	for _, j := range []string{sub.JobName, waiting} {
		r = call(t, "alice", "DELETE", "/public/v2/jobs/"+j, nil)
		require.Equal(t, 200, r.Code, string(r.Body))
	}
	waitStatus(t, "alice", sub.JobName, "Stopped")
	r = call(t, "alice", "DELETE", "/public/v2/jobs/"+sub.JobName, nil)
	assert.JSONEq(t, `{"job_name":"`+sub.JobName+`","status":"Stopped"}`, string(r.Body))
	waitStatus(t, "bob", high, "Completed")
}

func TestNotebooks(t *testing.T) {
	needServer(t)
	r := call(t, "alice", "POST", "/public/v2/notebooks", map[string]any{"allocation_name": "t", "priority_class": "low"})
	require.Equal(t, 200, r.Code, string(r.Body))
	var sub submitted
	r.json(t, &sub)
	assert.True(t, strings.HasPrefix(sub.Name, protocol.NotebookNamePrefix), sub.Name)
	assert.Equal(t, sub.Name, sub.JobName)
	require.NotEmpty(t, sub.Notes)
	assert.Contains(t, sub.Notes[0], "high")
	v := waitStatus(t, "alice", sub.Name, "Running")
	assert.Equal(t, "notebook", v.Kind)
	assert.Equal(t, "high", v.PriorityClass)
	assert.Equal(t, "a100.1gpu", v.InstanceType)
	assert.Equal(t, 400, call(t, "alice", "POST", "/public/v2/notebooks", `{"n_workers":2}`).Code)
	assert.Equal(t, 404, call(t, "bob", "DELETE", "/public/v2/notebooks/"+sub.Name, nil).Code)

	jobName := submitJob(t, "alice", job("true"))
	assert.Equal(t, 404, call(t, "alice", "DELETE", "/public/v2/notebooks/"+jobName, nil).Code, "a job is not a notebook")
	r = call(t, "alice", "DELETE", "/public/v2/notebooks/"+sub.Name, nil)
	require.Equal(t, 200, r.Code, string(r.Body))
	waitStatus(t, "alice", sub.Name, "Stopped")
	waitStatus(t, "alice", jobName, "Completed")
}

// TestFollowStreams: follow=true delivers lines while the job still runs.
func TestFollowStreams(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	name := submitJob(t, "alice", job("echo first; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo second"))
	waitStatus(t, "alice", name, "Running")
	req, _ := http.NewRequest("GET", env.server.URL+"/public/v2/jobs/"+name+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+env.tokens["alice"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	rd := bufio.NewReader(resp.Body)
	// next returns the next line of the job's own output.
	next := func() string {
		for {
			line, err := rd.ReadString('\n')
			require.NoError(t, err)
			if !strings.HasPrefix(line, "[trainq-supervisor]") {
				return line
			}
		}
	}
	assert.Equal(t, "first\n", next(), "the first line arrives while the job runs")
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	assert.Equal(t, "second\n", next())
	rest, err := io.ReadAll(rd)
	require.NoError(t, err, "the stream ends with the job")
	assert.Contains(t, string(rest), "worker exited with code 0")
}

// TestTemporalDown: with Temporal unreachable every Temporal-backed endpoint
// answers 503 with Retry-After, quickly; nothing is 500.
func TestTemporalDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // a closed port
	c, err := sdkclient.NewLazyClient(sdkclient.Options{HostPort: addr})
	require.NoError(t, err)
	defer c.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	tokens := &Tokens{}
	tokens.entries, err = parseEntries(TokenFile{Tokens: []TokenEntry{{SHA256: HashToken("tq_t"), User: "u", Workspace: "w", Role: RoleUser}}})
	require.NoError(t, err)
	s, err := New(Options{Config: cfg, Backend: client.New(c, cfg), Tokens: tokens, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	defer srv.Close()
	ok := `{"script":"true","base_image":"i","instance_type":"a100plus.1gpu"}`
	for _, ep := range []struct{ method, path, body string }{
		{"POST", "/public/v2/jobs", ok}, {"GET", "/public/v2/jobs", ""}, {"GET", "/public/v2/jobs/lm-mpi-job-x", ""},
		{"DELETE", "/public/v2/jobs/lm-mpi-job-x", ""}, {"GET", "/public/v2/allocations/default/queue", ""},
		{"GET", "/readyz", ""},
	} {
		start := time.Now()
		req, _ := http.NewRequest(ep.method, srv.URL+ep.path, strings.NewReader(ep.body))
		req.Header.Set("Authorization", "Bearer tq_t")
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e struct{ Error Error }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		_ = resp.Body.Close()
		assert.Equal(t, 503, resp.StatusCode, ep)
		assert.NotEmpty(t, resp.Header.Get("Retry-After"), ep)
		assert.Equal(t, codeUnavailable, e.Error.Code, ep)
		// Bounded by CallTimeout (2s), with room for a busy machine: a call
		// that waited on the unreachable server would never end.
		assert.Less(t, time.Since(start), 15*time.Second, ep)
	}
	// Validation needs no Temporal: bad input is still 4xx.
	req, _ := http.NewRequest("POST", srv.URL+"/public/v2/jobs", strings.NewReader(`{"script":1}`))
	req.Header.Set("Authorization", "Bearer tq_t")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, 400, resp.StatusCode)
}

// TestExampleClient runs examples/client.py against the test server.
func TestExampleClient(t *testing.T) {
	needServer(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "../examples/client.py", "--allocation", "t", "--instance-type", "a100.1gpu",
		"--script", "echo trained epoch 1; echo trained epoch 2")
	cmd.Env = append(os.Environ(), "TRAINQ_API_URL="+env.server.URL, "TRAINQ_API_TOKEN="+env.tokens["alice"])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "trained epoch 2")
	assert.Contains(t, string(out), "Completed")
}

// TestLargeRequest: a body just under 1 MiB is accepted, although Temporal
// limits a workflow's details to 20000 bytes.
func TestLargeRequest(t *testing.T) {
	needServer(t)
	env := map[string]string{}
	for i := range 2000 {
		env["VAR_"+strings.Repeat("x", 10)+string(rune('a'+i%26))+strings.Repeat("y", i%7)+"_"+time.Duration(i).String()] = strings.Repeat("v", 200)
	}
	body := job("true # "+strings.Repeat("long script ", 5000), "env_variables", env, "job_desc", strings.Repeat("d", 400<<10))
	data, err := json.Marshal(body)
	require.NoError(t, err)
	require.Less(t, len(data), MaxBodyBytes)
	require.Greater(t, len(data), 800<<10)
	name := submitJob(t, "alice", body)
	v := waitStatus(t, "alice", name, "Completed")
	assert.Equal(t, "a100.1gpu", v.InstanceType)
	// A script longer than any command line can be is refused up front.
	r := call(t, "alice", "POST", "/public/v2/jobs", job(strings.Repeat("x", protocol.MaxArgBytes+1)))
	assert.Equal(t, 422, r.Code)
	assert.Equal(t, "script", r.err(t).Field)
}
