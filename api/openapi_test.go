package api

import (
	"encoding/json"
	"net/http/httptest"
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
