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
}
