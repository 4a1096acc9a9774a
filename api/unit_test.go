package api

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenAPIMatchesRoutes keeps openapi.json and the route table in step:
// every route is documented with its method, and every documented
// operation is a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapiJSON, &doc))
	require.NotEmpty(t, doc.OpenAPI)
	var documented, registered []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	for _, rt := range routes {
		registered = append(registered, rt.method+" "+strings.ReplaceAll(rt.path, "{$}", ""))
	}
	sort.Strings(documented)
	sort.Strings(registered)
	assert.Equal(t, registered, documented)

	// And the server serves that document, and every route is reachable
	// (answers something other than the mux's 404/405).
	s, _, token := fuzzServer(t)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/public/v2/openapi.json", nil))
	require.Equal(t, 200, rec.Code)
	assert.JSONEq(t, string(openapiJSON), rec.Body.String())
	for _, rt := range routes {
		path := strings.NewReplacer("{job_name}", "lm-mpi-job-x", "{name}", "default", "{$}", "").Replace(rt.path)
		req := httptest.NewRequest(rt.method, path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+token)
		h, pattern := s.mux.Handler(req)
		require.NotNil(t, h)
		assert.Equal(t, rt.method+" "+rt.path, pattern)
	}
}

func TestTokensFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	tok, err := AddToken(path, "alice", "team-a", RoleUser)
	require.NoError(t, err)
	admin, err := AddToken(path, "root", "ops", RoleAdmin)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(b), tok, "tokens are stored hashed")
	assert.Contains(t, string(b), HashToken(tok))
	fi, _ := os.Stat(path)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	ts, err := LoadTokens(path)
	require.NoError(t, err)
	p, ok := ts.Lookup(tok)
	require.True(t, ok)
	assert.Equal(t, Principal{User: "alice", Workspace: "team-a", Role: RoleUser}, p)
	p, ok = ts.Lookup(admin)
	require.True(t, ok)
	assert.True(t, p.Admin())
	_, ok = ts.Lookup(tok + "x")
	assert.False(t, ok)
	_, ok = ts.Lookup("")
	assert.False(t, ok)

	for _, bad := range []string{
		"tokens: [{sha256: abc, user: a, workspace: w, role: user}]",
		"tokens: [{sha256: " + HashToken("x") + ", user: a, workspace: w, role: root}]",
		"tokens: [{sha256: " + HashToken("x") + ", user: \"a'b\", workspace: w, role: user}]",
		"tokens: [{sha256: " + HashToken("x") + ", user: a, workspace: w, role: user, token: x}]",
	} {
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
		_, err := LoadTokens(path)
		assert.Error(t, err, bad)
	}
}

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

func TestInstanceTypes(t *testing.T) {
	s, _, _ := fuzzServer(t)
	for _, a := range s.config().Allocations() {
		for _, it := range instanceTypes(a.Allocation.Nodes) {
			assert.Positive(t, it.MaxWorkers, it.Name)
		}
	}
}
