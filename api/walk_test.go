package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answer is what an endpoint answered.
type answer struct {
	Code   int
	Header http.Header
	Body   []byte
}

// walkReq is one request of the walk; {own}, {foreign}, {own_nb},
// {foreign_nb}, {alloc} and {itype} are filled in.
type walkReq struct{ method, path, body string }

// walkVariants lists, per route, the requests the walk makes. Every route
// must have an entry: a new route fails TestWalkCoversEveryRoute until it
// is walked. Requests that change state (DELETE of the own jobs) come last.
var walkVariants = map[string][]walkReq{
	"GET /healthz":                {{"GET", "/healthz", ""}},
	"GET /readyz":                 {{"GET", "/readyz", ""}},
	"GET /metrics":                {{"GET", "/metrics", ""}},
	"GET /public/v2/openapi.json": {{"GET", "/public/v2/openapi.json", ""}},
	"POST /public/v2/jobs": {
		{"POST", "/public/v2/jobs", `{"script":"echo walk","base_image":"i","instance_type":"{itype}","allocation_name":"{alloc}"}`},
		{"POST", "/public/v2/jobs", `{"script":"echo walk","base_image":"i","instance_type":"{itype}","allocation_name":"{alloc}","checkpoint_dir":"/etc/{foreign}"}`},
		{"POST", "/public/v2/jobs", `{"script":"echo walk","base_image":"i","instance_type":"{itype}","env_variables":{"A":"1","A":"2"}}`},
	},
	"GET /public/v2/jobs": {
		{"GET", "/public/v2/jobs", ""}, {"GET", "/public/v2/jobs?status=Pending&status=Running&limit=1000", ""},
		{"GET", "/public/v2/jobs?allocation_name={alloc}&region=SR006", ""},
	},
	"POST /public/v2/jobs/restart": {
		{"POST", "/public/v2/jobs/restart", `{"job_name":"{foreign}"}`}, {"POST", "/public/v2/jobs/restart", `{"job_name":"{own}"}`},
	},
	"GET /public/v2/jobs/{job_name}": {
		{"GET", "/public/v2/jobs/{own}", ""}, {"GET", "/public/v2/jobs/{foreign}", ""}, {"GET", "/public/v2/jobs/{foreign_nb}", ""},
	},
	"GET /public/v2/jobs/{job_name}/logs": {
		{"GET", "/public/v2/jobs/{own}/logs", ""}, {"GET", "/public/v2/jobs/{own}/logs?verbose=true", ""},
		{"GET", "/public/v2/jobs/{own}/logs?verbose=true&attempt=1", ""}, {"GET", "/public/v2/jobs/{own}/logs?verbose=true&tail=1&worker=0", ""},
		{"GET", "/public/v2/jobs/{own}/logs?verbose=true&follow=true", ""}, {"GET", "/public/v2/jobs/{own}/logs?attempt=9", ""},
		{"GET", "/public/v2/jobs/{foreign}/logs?verbose=true", ""},
	},
	"GET /public/v2/jobs/{job_name}/preemptors": {
		{"GET", "/public/v2/jobs/{own}/preemptors", ""}, {"GET", "/public/v2/jobs/{foreign}/preemptors", ""},
	},
	"POST /public/v2/jobs/{job_name}/checkpoint": {
		{"POST", "/public/v2/jobs/{own}/checkpoint", ""}, {"POST", "/public/v2/jobs/{own}/checkpoint?attempt=1", ""},
		{"POST", "/public/v2/jobs/{own}/checkpoint?attempt=x", ""}, {"POST", "/public/v2/jobs/{foreign}/checkpoint", ""},
	},
	"GET /public/v2/allocations/{name}/queue": {
		{"GET", "/public/v2/allocations/{alloc}/queue", ""}, {"GET", "/public/v2/allocations/{alloc}/queue?region=SR006", ""},
	},
	"GET /public/v2/jobs/{job_name}/params": {
		{"GET", "/public/v2/jobs/{own}/params", ""}, {"GET", "/public/v2/jobs/{foreign}/params", ""},
	},
	"GET /public/v2/jobs/{job_name}/nodes": {
		{"GET", "/public/v2/jobs/{own}/nodes", ""}, {"GET", "/public/v2/jobs/{own_nb}/nodes", ""}, {"GET", "/public/v2/jobs/{foreign}/nodes", ""},
	},
	"GET /public/v2/jobs/elastic/{job_name}/pods": {
		{"GET", "/public/v2/jobs/elastic/{own}/pods", ""}, {"GET", "/public/v2/jobs/elastic/{foreign}/pods", ""},
	},
	"GET /public/v2/allocations":     {{"GET", "/public/v2/allocations", ""}},
	"GET /public/v2/allocations/{$}": {{"GET", "/public/v2/allocations/", ""}},
	"GET /public/v2/allocations/{id}": {
		{"GET", "/public/v2/allocations/{alloc}", ""}, {"GET", "/public/v2/allocations/{alloc}?region=SR006", ""},
	},
	"GET /public/v2/allocations/{id}/nodes":          {{"GET", "/public/v2/allocations/{alloc}/nodes", ""}},
	"GET /public/v2/allocations/{id}/instance-types": {{"GET", "/public/v2/allocations/{alloc}/instance-types", ""}},
	"GET /public/v2/instance_types/{region}/available": {
		{"GET", "/public/v2/instance_types/SR006/available", ""}, {"GET", "/public/v2/instance_types/SR006/available?allocation_name={alloc}", ""},
	},
	"GET /public/v2/queues":     {{"GET", "/public/v2/queues", ""}, {"GET", "/public/v2/queues?allocation_id={alloc}", ""}},
	"GET /public/v2/queues/{$}": {{"GET", "/public/v2/queues/?allocation_id={alloc}&region=SR006", ""}},
	"GET /public/v2/queues/{id}": {
		{"GET", "/public/v2/queues/{alloc}:default", ""}, {"GET", "/public/v2/queues/{alloc}:nowhere", ""},
	},
	"GET /public/v2/queues/{id}/jobs": {
		{"GET", "/public/v2/queues/{alloc}:default/jobs", ""}, {"GET", "/public/v2/queues/{alloc}:default/jobs?status=Pending,Running&limit=5", ""},
	},
	"GET /public/v2/queues/{id}/instance-types": {{"GET", "/public/v2/queues/{alloc}:default/instance-types", ""}},
	"GET /public/v2/queues/{id}/awaiting-launch-resources": {
		{"GET", "/public/v2/queues/{alloc}:default/awaiting-launch-resources?priority=medium&limit=5&offset=0", ""},
		{"GET", "/public/v2/queues/{alloc}:default/awaiting-launch-resources?priority=urgent&limit=5&offset=0", ""},
	},
	"POST /public/v2/notebooks": {{"POST", "/public/v2/notebooks", `{"allocation_name":"{alloc}","instance_type":"{itype}"}`}},
	"GET /public/v2/configs":    {{"GET", "/public/v2/configs", ""}},
	"GET /ui/api/allocations/{name}/gpus": {
		{"GET", "/ui/api/allocations/{alloc}/gpus", ""}, {"GET", "/ui/api/allocations/{alloc}/gpus?region=SR006", ""},
	},
	"GET /ui/api/allocations/{name}/timeline": {
		{"GET", "/ui/api/allocations/{alloc}/timeline", ""}, {"GET", "/ui/api/allocations/{alloc}/timeline?hours=24", ""},
		{"GET", "/ui/api/allocations/{alloc}/timeline?hours=99", ""},
	},
	"DELETE /public/v2/notebooks/{name}": {
		{"DELETE", "/public/v2/notebooks/{foreign_nb}", ""}, {"DELETE", "/public/v2/notebooks/{own}", ""},
		{"DELETE", "/public/v2/notebooks/{own_nb}", ""},
	},
	"DELETE /public/v2/jobs/{job_name}": {{"DELETE", "/public/v2/jobs/{foreign}", ""}, {"DELETE", "/public/v2/jobs/{own}", ""}},
}

// walkOrder puts the routes that change state last.
func walkOrder() []string {
	var first, last []string
	for _, rt := range routes {
		k := rt.method + " " + rt.path
		if rt.method == "DELETE" {
			last = append(last, k)
		} else {
			first = append(first, k)
		}
	}
	return append(first, last...)
}

func TestWalkCoversEveryRoute(t *testing.T) {
	for _, rt := range routes {
		assert.NotEmpty(t, walkVariants[rt.method+" "+rt.path], "walk %s %s in walkVariants", rt.method, rt.path)
	}
}

// walkAsOtherWorkspace sends every route's requests (and every route's path
// with every other method) through do, as a user of a workspace that does
// not own the jobs named foreign, and fails if any answer — body or
// header — names one of them. It returns the answers by request.
func walkAsOtherWorkspace(t *testing.T, do func(method, path, body string) answer, vars map[string]string, foreign []string) map[string]answer {
	t.Helper()
	fill := strings.NewReplacer("{own}", vars["own"], "{foreign}", vars["foreign"], "{own_nb}", vars["own_nb"],
		"{foreign_nb}", vars["foreign_nb"], "{alloc}", vars["alloc"], "{itype}", vars["itype"])
	out := map[string]answer{}
	check := func(key string, a answer, asked string) {
		t.Helper()
		var text strings.Builder
		text.Write(a.Body)
		for k, vs := range a.Header {
			text.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		for _, n := range leaked(text.String(), foreign) {
			// An error may repeat what the request said; nothing else may
			// name another workspace's job.
			if !(strings.Contains(asked, n) && a.Code >= 400) {
				t.Errorf("%s answered %d naming %s of another workspace:\n%s", key, a.Code, n, text.String())
			}
		}
		if a.Code >= 500 {
			t.Errorf("%s answered %d: %s", key, a.Code, a.Body)
		}
		if a.Code >= 400 {
			var e struct{ Error *Error }
			if err := json.Unmarshal(a.Body, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Errorf("%s answered %d without an error body: %s", key, a.Code, a.Body)
			}
		}
	}
	for _, k := range walkOrder() {
		for _, rq := range walkVariants[k] {
			path, body := fill.Replace(rq.path), fill.Replace(rq.body)
			key := rq.method + " " + path
			if body != "" {
				key += " " + body
			}
			a := do(rq.method, path, body)
			out[key] = a
			check(key, a, path+body)
		}
	}
	// Every route's path with every other method: 405, never a name.
	for _, rt := range routes {
		for _, m := range []string{"GET", "POST", "DELETE", "PUT", "PATCH"} {
			if m == rt.method {
				continue
			}
			path := strings.NewReplacer("{job_name}", vars["foreign"], "{name}", vars["foreign_nb"]).Replace(rt.path)
			a := do(m, path, "")
			if a.Code != http.StatusMethodNotAllowed && !(a.Code < 300 || a.Code == 404 || a.Code == 401 || a.Code == 415) {
				t.Errorf("%s %s answered %d", m, path, a.Code)
			}
			check(m+" "+path, a, path)
		}
	}
	return out
}

// recorderDo sends requests to s with token, as httptest requests; a
// followed log is cut after a moment (any other answer may take as long as a
// busy machine makes it).
func recorderDo(s *Server, token string) func(method, path, body string) answer {
	return func(method, path, body string) answer {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		limit := 30 * time.Second
		if strings.Contains(path, "follow=true") {
			limit = 300 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(req.Context(), limit)
		defer cancel()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req.WithContext(ctx))
		return answer{Code: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	}
}

// TestRedactionWalkFake walks every endpoint as bob over a fake whose
// statuses and queue name alice's jobs everywhere a job name can go.
func TestRedactionWalkFake(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	vars := map[string]string{"own": jobB, "foreign": jobA, "own_nb": nbB, "foreign_nb": nbA, "alloc": fakeAlloc, "itype": "a100plus.1gpu"}
	answers := walkAsOtherWorkspace(t, recorderDo(s, bobToken), vars, foreignToBob)

	// What bob does see: his own names, alice's jobs as hidden ones with
	// their class, and the sentences around them.
	st := answers["GET /public/v2/jobs/"+jobB]
	require.Equal(t, 200, st.Code, string(st.Body))
	var v jobView
	require.NoError(t, json.Unmarshal(st.Body, &v))
	assert.Equal(t, jobB, v.JobName)
	assert.Equal(t, []string{hiddenName, hiddenName}, v.WaitingFor)
	assert.Contains(t, v.Message, "preempted by "+hiddenName+" (high job)")
	assert.Contains(t, v.Reason, "hold; "+hiddenName+" is ahead.")
	require.Len(t, v.Attempts, 2)
	assert.Equal(t, hiddenName, v.Attempts[0].Preemptor.Job)
	assert.Equal(t, "preempted by "+hiddenName+" (high job): preempted to make room for high-priority job "+hiddenName+".", v.Attempts[0].EndReason)
	require.Len(t, v.Preemptors, 2)
	assert.Equal(t, preemptorView{Name: hiddenName, Priority: "high", Type: "job", Attempt: 1, At: v.Preemptors[0].At}, v.Preemptors[0])
	assert.Equal(t, "notebook", v.Preemptors[1].Type)

	logs := answers["GET /public/v2/jobs/"+jobB+"/logs?verbose=true&attempt=1"]
	require.Equal(t, 200, logs.Code, string(logs.Body))
	assert.Contains(t, string(logs.Body), "==> job "+jobB+" attempt 1 worker 0 on sr006-a100plus-1")
	assert.Contains(t, string(logs.Body), "(preempted by "+hiddenName+" (high job)")
	assert.Contains(t, string(logs.Body), "epoch 2\n")

	q := answers["GET /public/v2/allocations/"+fakeAlloc+"/queue"]
	require.Equal(t, 200, q.Code, string(q.Body))
	var qv queueView
	require.NoError(t, json.Unmarshal(q.Body, &qv))
	require.Len(t, qv.Waiting, 2)
	assert.Equal(t, hiddenName, qv.Waiting[0].JobName)
	assert.Equal(t, jobB, qv.Waiting[1].JobName)
	assert.Equal(t, "can start now: 2 GPUs that "+jobB+" released are free", qv.Waiting[0].Reason, "bob's own name stays")
	require.Len(t, qv.Running, 3)
	assert.Empty(t, qv.Running[0].Placement, "where another workspace's job runs is not shown")
	assert.Equal(t, hiddenName, qv.Running[1].PreemptedBy)
	assert.Equal(t, nbB, qv.Running[2].JobName)

	for _, k := range []string{"GET /public/v2/jobs/" + jobA, `POST /public/v2/jobs/restart {"job_name":"` + jobA + `"}`, "DELETE /public/v2/jobs/" + jobA,
		"DELETE /public/v2/notebooks/" + nbA, "DELETE /public/v2/notebooks/" + jobB} {
		assert.Equal(t, 404, answers[k].Code, k)
	}

	// An admin sees every name.
	a := recorderDo(s, adminTok)("GET", "/public/v2/jobs/"+jobB, "")
	assert.Contains(t, string(a.Body), jobA)
	// alice sees her names and not bob's.
	walkAsOtherWorkspace(t, recorderDo(s, aliceTok), map[string]string{"own": jobA, "foreign": jobB, "own_nb": nbA, "foreign_nb": nbB,
		"alloc": fakeAlloc, "itype": "a100plus.1gpu"}, []string{jobB, nbB})
}
