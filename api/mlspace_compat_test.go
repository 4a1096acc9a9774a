package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuthorizationHeaderForms: the token alone (as ML Space's own clients
// send it), Bearer in any case, and whitespace around either are accepted;
// other schemes and malformed headers are not.
func TestAuthorizationHeaderForms(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	get := func(auth string, hdr ...string) int {
		req := httptest.NewRequest("GET", "/public/v2/jobs/"+jobB, nil)
		req.Header.Set("Authorization", auth)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, auth := range []string{"Bearer " + bobToken, "bearer " + bobToken, "BEARER " + bobToken, bobToken,
		" " + bobToken + " ", "Bearer  " + bobToken + " ", "Bearer\t" + bobToken} {
		assert.Equal(t, 200, get(auth), "%q", auth)
	}
	for _, auth := range []string{"", "Basic " + bobToken, "Bearer", "Bearer " + bobToken + " extra", "Bearer nope", "nope"} {
		assert.Equal(t, 401, get(auth), "%q", auth)
	}
	assert.Equal(t, 200, get(bobToken, "x-workspace-id", teamB), "the token's own workspace")
	assert.Equal(t, 403, get(bobToken, "x-workspace-id", teamA), "another workspace")
}

// TestPostAnswersWarnings: ML Space's fields are accepted; the ones trainq
// does not act on are named in the answer's warnings; a bad one is refused
// naming it, and nothing starts.
func TestPostAnswersWarnings(t *testing.T) {
	s, fb, token := fuzzServer(t)
	post := func(body string) (int, map[string]any) {
		req := httptest.NewRequest("POST", "/public/v2/jobs", strings.NewReader(body))
		req.Header.Set("Authorization", token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
		return rec.Code, out
	}
	code, out := post(`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","internet":true,"shm_size_class":"large",
		"queue_name":"default","conda_env":"torch","stop_timer":30,"preflight_check":true,"cuda11":false,"priority_class":"shared-medium"}`)
	require.Equal(t, 200, code, out)
	warnings, _ := out["warnings"].([]any)
	text, _ := json.Marshal(warnings)
	assert.Contains(t, string(text), "preflight_check is deprecated")
	assert.Contains(t, string(text), "cuda11 is deprecated")
	assert.Contains(t, string(text), "priority_class shared-medium runs as medium")
	assert.Equal(t, 1, fb.started())

	code, out = post(`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","shm_size_class":"tiny"}`)
	assert.Equal(t, 422, code, out)
	assert.Equal(t, "shm_size_class", out["error"].(map[string]any)["field"])
	assert.Equal(t, 1, fb.started(), "a rejected request starts nothing")

	// A binary job as ML Space's client_lib builds it, with the elastic
	// fields' defaults it sends for every type.
	code, out = post(`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","type":"binary","n_workers":1,
		"elastic_min_workers":"default","elastic_max_workers":"default","elastic_max_restarts":5,"pytorch_use_env":false}`)
	assert.Equal(t, 200, code, out)
	assert.Equal(t, 2, fb.started())
	code, out = post(`{"script":"s","base_image":"i","instance_type":"a100plus.1gpu","type":"binary","elastic_max_restarts":3}`)
	assert.Equal(t, 422, code, out)
	assert.Equal(t, "elastic_max_restarts", out["error"].(map[string]any)["field"])
	assert.Equal(t, 2, fb.started(), "a rejected request starts nothing")
}

// getAs sends one GET as the holder of token, with optional headers.
//
//nolint:unparam // the call names whose token the request carries; the tests all send bob's today
func getAs(t *testing.T, s *Server, method, path, token string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// TestGetJobInMLSpaceShape: a call that sends x-workspace-id (as ML
// Space's clients do) or asks view=mlspace gets ML Space's body: the status
// in lower case, times in epoch seconds, 200 "job not found" for an unknown
// or foreign job; other calls get trainq's.
func TestGetJobInMLSpaceShape(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	for _, hdr := range [][]string{{"x-workspace-id", teamB}, nil} {
		path := "/public/v2/jobs/" + jobB
		if hdr == nil {
			path += "?view=mlspace"
		}
		code, body := getAs(t, s, "GET", path, bobToken, hdr...)
		require.Equal(t, 200, code, string(body))
		var v map[string]any
		require.NoError(t, json.Unmarshal(body, &v))
		assert.Equal(t, "pending", v["status"])
		assert.Equal(t, float64(1_700_000_500), v["created_at"])
		assert.Contains(t, v, "running_at")
		assert.Equal(t, "Pending", v["trainq"].(map[string]any)["status"], "trainq's view rides along")
		assert.NotContains(t, string(body), jobA, "redaction holds in this shape too")
	}
	code, body := getAs(t, s, "GET", "/public/v2/jobs/"+jobB, bobToken)
	require.Equal(t, 200, code)
	assert.Equal(t, "Pending", decoded(t, body)["status"], "trainq's shape by default")

	for _, name := range []string{"lm-mpi-job-00000000-0000-4000-8000-000000000000", jobA} {
		code, body = getAs(t, s, "GET", "/public/v2/jobs/"+name, bobToken, "x-workspace-id", teamB)
		assert.Equal(t, 200, code)
		assert.JSONEq(t, `{"job_name":"`+name+`","status":"job not found"}`, string(body))
		code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+name, bobToken)
		assert.Equal(t, 404, code)
	}
	code, body = getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"?view=xml", bobToken)
	assert.Equal(t, 400, code)
	assert.Equal(t, "view", decoded(t, body)["error"].(map[string]any)["field"])
	code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"?region=SR003", bobToken)
	assert.Equal(t, 404, code, "the job is not in that region")
}

// TestJobParamsNodesAndDelete: /params lists all 33 fields, /nodes the
// nodes of a running job (404 while pending), DELETE takes region and
// answers ML Space's "deleted".
func TestJobParamsNodesAndDelete(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	code, body := getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"/params", bobToken)
	require.Equal(t, 200, code, string(body))
	var params map[string]any
	require.NoError(t, json.Unmarshal(body, &params))
	assert.Len(t, params, 33)
	assert.Equal(t, "train.py", params["script"])
	assert.Equal(t, "low", params["priority_class"])
	assert.Equal(t, "default", params["queue_name"])

	code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"/nodes", bobToken)
	assert.Equal(t, 404, code, "a pending job runs on no node")
	code, body = getAs(t, s, "GET", "/public/v2/jobs/"+nbB+"/nodes", bobToken)
	require.Equal(t, 200, code, string(body))
	assert.JSONEq(t, `{"node_names":["sr006-a100plus-1"]}`, string(body))
	code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+jobA+"/params", bobToken)
	assert.Equal(t, 404, code, "another workspace's job")
	code, _ = getAs(t, s, "GET", "/public/v2/jobs/elastic/"+jobB+"/pods", bobToken)
	assert.Equal(t, 422, code, "not a pytorch_elastic job")

	code, _ = getAs(t, s, "DELETE", "/public/v2/jobs/"+jobB+"?region=SR003", bobToken)
	assert.Equal(t, 404, code, "the job is not in that region")
	code, body = getAs(t, s, "DELETE", "/public/v2/jobs/"+jobB+"?region=SR006", bobToken, "x-workspace-id", teamB)
	require.Equal(t, 200, code, string(body))
	assert.JSONEq(t, `{"job_name":"`+jobB+`","status":"deleted"}`, string(body))
	_ = fb
}

// TestAllocationEndpoints: ML Space's allocation and instance-type
// endpoints answer from the config and the live allocator.
func TestAllocationEndpoints(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	for _, path := range []string{"/public/v2/allocations", "/public/v2/allocations/"} {
		code, body := getAs(t, s, "GET", path, bobToken)
		require.Equal(t, 200, code, path)
		var list []allocationSummary
		require.NoError(t, json.Unmarshal(body, &list))
		assert.Contains(t, list, allocationSummary{ID: "default", Name: "default", RegionKey: "SR006", WorkspaceAccess: true})
	}
	code, body := getAs(t, s, "GET", "/public/v2/allocations/default?region=SR006", bobToken)
	require.Equal(t, 200, code, string(body))
	var d allocationDetail
	require.NoError(t, json.Unmarshal(body, &d))
	assert.Equal(t, 32, d.Resources.GPU.All, "4 nodes of 8 GPUs in the config")
	require.NotNil(t, d.Resources.GPU.Current)
	assert.Equal(t, 8, *d.Resources.GPU.Current, "what the allocator holds")

	code, body = getAs(t, s, "GET", "/public/v2/allocations/default/nodes?region=SR006", bobToken)
	require.Equal(t, 200, code, string(body))
	var nodes []allocationNode
	require.NoError(t, json.Unmarshal(body, &nodes))
	require.Len(t, nodes, 1, "the allocator's view names one node")
	assert.Equal(t, [3]int{8, 8, 0}, [3]int{nodes[0].ResourceUsage.Total, nodes[0].ResourceUsage.Allocated, nodes[0].ResourceUsage.Available})
	assert.NotContains(t, string(body), jobA)

	code, body = getAs(t, s, "GET", "/public/v2/allocations/nope", bobToken)
	assert.Equal(t, 404, code, string(body))
	code, body = getAs(t, s, "GET", "/public/v2/instance_types/SR006/available?allocation_name=default", bobToken)
	require.Equal(t, 200, code, string(body))
	assert.Contains(t, string(body), `"instance_types"`)
	code, _ = getAs(t, s, "GET", "/public/v2/instance_types/NOPE/available", bobToken)
	assert.Equal(t, 404, code)
	code, body = getAs(t, s, "GET", "/public/v2/instance_types/SR006/available?color=red", bobToken)
	assert.Equal(t, 400, code)
	assert.Equal(t, "color", decoded(t, body)["error"].(map[string]any)["field"])
}

func decoded(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// TestLogsTakeRegion: ML Space's clients send the job's region with logs.
func TestLogsTakeRegion(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	code, body := getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"/logs?region=SR006&tail=1", bobToken)
	assert.Equal(t, 200, code, string(body))
	code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+jobB+"/logs?region=SR003", bobToken)
	assert.Equal(t, 404, code)
}

// TestJobEndpointsCheckRegion: every job endpoint that takes region answers
// 404 for another region than the job's.
func TestJobEndpointsCheckRegion(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	for _, path := range []string{"/params", "/nodes"} {
		code, _ := getAs(t, s, "GET", "/public/v2/jobs/"+nbB+path+"?region=SR003", bobToken)
		assert.Equal(t, 404, code, path)
		code, _ = getAs(t, s, "GET", "/public/v2/jobs/"+nbB+path+"?region=SR006", bobToken)
		assert.Equal(t, 200, code, path)
	}
	code, _ := getAs(t, s, "GET", "/public/v2/jobs/elastic/"+nbB+"/pods?region=SR003", bobToken)
	assert.Equal(t, 404, code)
}
