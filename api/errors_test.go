package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/scheduler"
)

func TestBadRequestsWithoutTemporal(t *testing.T) {
	s, fb, token := fuzzServer(t)
	do := func(method, path, body, auth string, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	errOf := func(rec *httptest.ResponseRecorder) Error {
		var e struct{ Error Error }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
		return e.Error
	}
	ok := `{"script":"echo","base_image":"i","instance_type":"a100plus.1gpu"}`
	bearer := "Bearer " + token

	assert.Equal(t, 401, do("POST", "/public/v2/jobs", ok, "").Code)
	assert.Equal(t, 401, do("POST", "/public/v2/jobs", ok, "Bearer nope").Code)
	assert.Equal(t, 401, do("POST", "/public/v2/jobs", ok, "Basic "+token).Code)
	assert.Equal(t, 413, do("POST", "/public/v2/jobs", `{"job_desc":"`+strings.Repeat("x", MaxBodyBytes)+`"}`, bearer).Code)

	rec := do("POST", "/public/v2/jobs", `{"script":"echo","base_image":"i","instance_type":"a100.1gpu","priority":"high"}`, bearer)
	assert.Equal(t, 400, rec.Code)
	assert.Equal(t, "priority", errOf(rec).Field)
	rec = do("POST", "/public/v2/jobs", `{"script":"echo","base_image":"i","instance_type":"a100.1gpu","n_workers":"2"}`, bearer)
	assert.Equal(t, 400, rec.Code)
	assert.Equal(t, "n_workers", errOf(rec).Field)
	rec = do("POST", "/public/v2/jobs", `{"script":"echo","base_image":"i","instance_type":"a100.1gpu","priority_class":"urgent"}`, bearer)
	assert.Equal(t, 422, rec.Code)
	assert.Equal(t, "priority_class", errOf(rec).Field)
	assert.Contains(t, errOf(rec).Message, "low, medium, high")
	rec = do("POST", "/public/v2/jobs", `{"script":"echo","instance_type":"a100.1gpu"}`, bearer)
	assert.Equal(t, 422, rec.Code)
	assert.Equal(t, "base_image", errOf(rec).Field)
	assert.Equal(t, 0, fb.started(), "rejected requests start nothing")

	// Idempotency over the fake: same body → same job; other body → 409.
	a := do("POST", "/public/v2/jobs", ok, bearer, "Idempotency-Key", "k1")
	require.Equal(t, 200, a.Code, a.Body.String())
	b := do("POST", "/public/v2/jobs", strings.Replace(ok, `"script"`, `"n_workers":1,"script"`, 1), bearer, "Idempotency-Key", "k1")
	require.Equal(t, 200, b.Code, b.Body.String())
	assert.Equal(t, a.Body.String(), b.Body.String())
	c := do("POST", "/public/v2/jobs", strings.Replace(ok, "echo", "echo 2", 1), bearer, "Idempotency-Key", "k1")
	assert.Equal(t, 409, c.Code)
	assert.Equal(t, 400, do("POST", "/public/v2/jobs", ok, bearer, "Idempotency-Key", "bad key").Code)
	assert.Equal(t, 1, fb.started())

	rec = do("PUT", "/public/v2/jobs", ok, bearer)
	assert.Equal(t, 405, rec.Code)
	assert.Equal(t, "method_not_allowed", errOf(rec).Code)
	assert.Equal(t, 404, do("GET", "/public/v3/jobs", "", bearer).Code)
	assert.Equal(t, 404, do("GET", "/public/v2/jobs/..%2f..%2fetc", "", bearer).Code)
	assert.Equal(t, 400, do("GET", "/public/v2/jobs?sort=x", "", bearer).Code)
	assert.Equal(t, 422, do("GET", "/public/v2/jobs?status=Sleeping", "", bearer).Code)
	assert.Equal(t, 422, do("GET", "/public/v2/jobs?region=x'%20OR%201=1", "", bearer).Code)
	assert.Equal(t, 422, do("GET", "/public/v2/jobs?limit=0", "", bearer).Code)
	assert.Equal(t, 422, do("GET", "/public/v2/jobs?workspace=other", "", bearer).Code)
	assert.Equal(t, 404, do("GET", "/public/v2/allocations/nope/queue", "", bearer).Code)

	rec = do("GET", "/metrics", "", "")
	assert.Equal(t, 200, rec.Code)
	assert.Contains(t, rec.Body.String(), `trainq_api_requests_total{code="401",method="POST",route="POST /public/v2/jobs"}`)
	assert.Contains(t, rec.Body.String(), `trainq_api_request_duration_seconds_bucket`)
	assert.NotContains(t, rec.Body.String(), token)
}

// TestKeyedNotebookRetryOnAReplicaWithOtherDefaults: during a rolling update
// the two trainq-api replicas can run configs whose defaults differ (here the
// instance type a Jupyter server gets when it names none). A keyed retry
// that reaches the other replica is the same request, and answers with the
// server the first try started; another request under the key is 409.
func TestKeyedNotebookRetryOnAReplicaWithOtherDefaults(t *testing.T) {
	first, fb, token := fuzzServer(t)
	next := config.Default()
	next.DataDir = first.config().DataDir
	_, demo, err := next.Allocation("SR006", "demo")
	require.NoError(t, err)
	demo.Nodes = append([]scheduler.Node{{Name: "demo-v100", Family: "v100", GPUs: 1, CPU: 8, RAMGB: 64}}, demo.Nodes...)
	second, err := New(Options{Config: next, Backend: fb, Tokens: first.tokens, NotFoundFloor: time.Microsecond})
	require.NoError(t, err)
	require.NotEqual(t, first.config().DefaultNotebookInstance("SR006", "demo"), next.DefaultNotebookInstance("SR006", "demo"))

	post := func(s *Server, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/public/v2/notebooks", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "nb-1")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	body := `{"allocation_name":"demo","base_image":"jupyter"}`
	a := post(first, body)
	require.Equal(t, 200, a.Code, a.Body.String())
	b := post(second, body)
	require.Equal(t, 200, b.Code, b.Body.String())
	assert.JSONEq(t, a.Body.String(), b.Body.String())
	assert.Equal(t, 1, fb.started())
	assert.Equal(t, 409, post(second, `{"allocation_name":"demo","base_image":"other"}`).Code)
}
