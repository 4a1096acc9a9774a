package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// httpDo sends requests as user to the test server; a followed log is read
// for a moment after its answer began and cut (the answer itself may take as
// long as any other on a busy machine).
func httpDo(t *testing.T, user string) func(method, path, body string) answer {
	return func(method, path, body string) answer {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, env.server.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+env.tokens[user])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		follow := strings.Contains(path, "follow=true")
		if follow {
			time.AfterFunc(1500*time.Millisecond, cancel)
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil && !follow {
			require.NoError(t, err)
		}
		return answer{Code: resp.StatusCode, Header: resp.Header, Body: data}
	}
}

// TestRedactionWalkTemporal: alice's high job preempts bob's low job on
// allocation w; bob's job reruns and waits for alice's. Then bob walks every
// endpoint (and alice every endpoint), and no answer names a job of the
// other workspace.
func TestRedactionWalkTemporal(t *testing.T) {
	needServer(t)
	bobJob := submitJob(t, "bob", job("echo bob started; while true; do sleep 0.2; done", "allocation_name", "w", "instance_type", "a100.2gpu",
		"priority_class", "low", "max_retry", 1))
	waitStatus(t, "bob", bobJob, "Running")
	aliceJob := submitJob(t, "alice", job("sleep 120", "allocation_name", "w", "instance_type", "a100.2gpu", "priority_class", "high"))
	eventually(t, long, "bob's job to be preempted and wait for alice's", func() bool {
		v := jobStatus(t, "bob", bobJob)
		return v.Attempt == 2 && v.Status == "Pending" && v.Reason != "" && len(v.Preemptors) > 0
	})
	notebook := func(user string) string {
		r := call(t, user, "POST", "/public/v2/notebooks", map[string]any{"allocation_name": "t"})
		require.Equal(t, 200, r.Code, string(r.Body))
		var sub submitted
		r.json(t, &sub)
		return sub.Name
	}
	bobNB, aliceNB := notebook("bob"), notebook("alice")
	defer func() {
		for _, n := range []string{bobJob, aliceJob, bobNB, aliceNB} {
			call(t, "root", "DELETE", "/public/v2/jobs/"+n, nil)
		}
		// The walks submitted jobs on w: stop them too.
		_, names := listNames(t, "root", "?allocation_name=w&status=Pending&status=Running")
		for _, n := range names {
			call(t, "root", "DELETE", "/public/v2/jobs/"+n, nil)
		}
	}()

	answers := walkAsOtherWorkspace(t, httpDo(t, "bob"), map[string]string{"own": bobJob, "foreign": aliceJob, "own_nb": bobNB,
		"foreign_nb": aliceNB, "alloc": "w", "itype": "a100.1gpu"}, []string{aliceJob, aliceNB})
	st := answers["GET /public/v2/jobs/"+bobJob]
	require.Equal(t, 200, st.Code, string(st.Body))
	var v jobView
	require.NoError(t, json.Unmarshal(st.Body, &v))
	require.NotEmpty(t, v.Attempts)
	assert.Contains(t, v.Attempts[0].EndReason, "preempted by "+hiddenName)
	assert.Equal(t, hiddenName, v.Preemptors[0].Name)
	logs := answers["GET /public/v2/jobs/"+bobJob+"/logs?verbose=true&attempt=1"]
	require.Equal(t, 200, logs.Code, string(logs.Body))
	assert.Contains(t, string(logs.Body), "(preempted by "+hiddenName)
	assert.Contains(t, string(logs.Body), "bob started")

	walkAsOtherWorkspace(t, httpDo(t, "alice"), map[string]string{"own": aliceJob, "foreign": bobJob, "own_nb": aliceNB,
		"foreign_nb": bobNB, "alloc": "w", "itype": "a100.1gpu"}, []string{bobJob, bobNB})
}

// TestIssueRequestsAgainstTemporal: the requests of the issue, against the
// real server: each is refused at submission and starts nothing.
func TestIssueRequestsAgainstTemporal(t *testing.T) {
	needServer(t)
	flags := map[string]any{}
	for _, k := range []string{"a", "b", "c"} {
		flags[k] = strings.Repeat("x", 50000)
	}
	for _, tc := range []struct {
		body  any
		code  int
		field string
	}{
		{`{"script":"echo ok","base_image":"b","instance_type":"a100.1gpu","allocation_name":"t","job_desc":"` + strings.Repeat("<", 1040000) + `"}`, 413, "job_desc"},
		{`{"script":"echo ok","base_image":"b","instance_type":"a100.1gpu","allocation_name":"t","job_desc":"` + strings.Repeat("<", 400000) + `"}`, 413, "job_desc"},
		{job("true", "flags", flags), 422, "flags"},
		{job("true", "processes_per_worker", 1000000), 422, "processes_per_worker"},
		{job("true", "checkpoint_dir", "../../../etc"), 422, "checkpoint_dir"},
		{`{"script":"true","base_image":"b","instance_type":"a100.1gpu","allocation_name":"t","env_variables":{"A":"1","A":"2"}}`, 400, "env_variables.A"},
	} {
		r := call(t, "dave", "POST", "/public/v2/jobs", tc.body)
		require.Equal(t, tc.code, r.Code, string(r.Body))
		assert.Equal(t, tc.field, r.err(t).Field)
	}
	assert.Equal(t, 405, call(t, "dave", "GET", "/public/v2/jobs/restart", nil).Code)
	r := call(t, "dave", "POST", "/public/v2/jobs", job("true"), "Content-Type", "text/plain")
	assert.Equal(t, 415, r.Code, string(r.Body))
	// Only the marker job that follows exists in dave's workspace.
	marker := submitJob(t, "dave", job("true"))
	count := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := client.New(env.client, nil).Count(ctx, client.ListFilter{Workspace: "team-dave"})
		require.NoError(t, err)
		return n
	}
	eventually(t, long, "the marker job to be visible", func() bool { return count() >= 1 })
	assert.Equal(t, int64(1), count(), "only the marker job may exist")
	waitStatus(t, "dave", marker, "Completed")
}

// TestNotFoundTimingTemporal measures a 404 for another workspace's job
// against one for a name nobody has, on the real server, and checks that
// both wait for the floor (DefaultNotFoundFloor, which the harness keeps).
// That they then take alike is TestNotFoundTakesAlike's, without the clock:
// two medians on a busy machine differ by more than any fixed delta. What
// neither checks: a real Describe slower than the floor would still tell
// the two apart (the log line shows how close the medians are).
func TestNotFoundTimingTemporal(t *testing.T) {
	needServer(t)
	foreign := submitJob(t, "alice", job("sleep 30"))
	defer call(t, "alice", "DELETE", "/public/v2/jobs/"+foreign, nil)
	measure := func(name string) []time.Duration {
		var ds []time.Duration
		for range 30 {
			start := time.Now()
			r := call(t, "bob", "GET", "/public/v2/jobs/"+name, nil)
			ds = append(ds, time.Since(start))
			require.Equal(t, 404, r.Code)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds
	}
	none := "lm-mpi-job-00000000-0000-4000-8000-000000000000"
	measure(none) // warm up
	f, n := measure(foreign), measure(none)
	t.Logf("404 another workspace's job: median %v p90 %v; no such job: median %v p90 %v", f[15], f[27], n[15], n[27])
	floor := DefaultNotFoundFloor // (the harness's server keeps the default)
	assert.GreaterOrEqual(t, f[0], floor, "the quickest 404 of another workspace's job")
	assert.GreaterOrEqual(t, n[0], floor, "the quickest 404 of a name nobody has")
}

// TestStartFailureReason: a job every edge refuses (the API, the CLI and
// client.Submit check the limits), started past them (as a program that
// starts the workflow through Temporal's own API can), fails its attempt
// with the real reason its worker could not start, not a bare exit code.
func TestStartFailureReason(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := protocol.JobSpec{Script: "echo " + strings.Repeat("x", 140<<10), BaseImage: "b", InstanceType: "a100.1gpu",
		AllocationName: "t", Workspace: "team-a", Author: "alice"}
	tq := client.New(env.client, env.cfg)
	_, err := tq.Submit(ctx, spec, client.SubmitOptions{})
	require.ErrorContains(t, err, "Linux accepts at most", "the edge refuses it")
	parsed, _, err := protocol.ParseSpec(spec)
	require.NoError(t, err, "it parses: only the limits refuse it")
	sub, err := tq.SubmitChecked(ctx, parsed, client.SubmitOptions{})
	require.NoError(t, err)
	v := waitStatus(t, "alice", sub.JobName, "Failed")
	require.NotEmpty(t, v.Attempts)
	t.Logf("message: %s", v.Message)
	assert.Contains(t, v.Attempts[0].EndReason, "could not start")
	assert.Contains(t, v.Attempts[0].EndReason, "MAX_ARG_STRLEN")
}
