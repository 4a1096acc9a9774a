package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNotebookAutoshutdownFields: POST /notebooks takes ML Space's
// shutdown_in and shutdown_at; a bad value is 4xx naming the field and
// starts nothing; a good one is kept on the server's spec.
func TestNotebookAutoshutdownFields(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	for _, tc := range []struct{ body, field, msg string }{
		{`{"allocation_name":"default","shutdown_in":0}`, "shutdown_in", "must be a positive number of seconds"},
		{`{"allocation_name":"default","shutdown_in":-60}`, "shutdown_in", "got -60"},
		{`{"allocation_name":"default","shutdown_in":"soon"}`, "shutdown_in", ""},
		{`{"allocation_name":"default","shutdown_at":"every evening"}`, "shutdown_at", "want 5 fields"},
		{`{"allocation_name":"default","shutdown_at":"0 20 * 13 *"}`, "shutdown_at", `month field "13"`},
	} {
		before := fb.started()
		rec := post(s, "/public/v2/notebooks", tc.body)
		assert.True(t, rec.Code == 400 || rec.Code == 422, "%s: %d %s", tc.body, rec.Code, rec.Body)
		var e struct {
			Error struct{ Field, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
		assert.Equal(t, tc.field, e.Error.Field, tc.body)
		assert.Contains(t, e.Error.Message, tc.msg, tc.body)
		assert.Equal(t, before, fb.started(), "%s: a refused request starts nothing", tc.body)
	}

	rec := post(s, "/public/v2/notebooks", `{"allocation_name":"default","shutdown_in":3600,"shutdown_at":"0 20 * * 1-5"}`)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var sub submitted
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &sub))
	fb.mu.Lock()
	spec := fb.jobs[sub.JobName].status.Spec
	fb.mu.Unlock()
	require.NotNil(t, spec.Autoshutdown)
	assert.Equal(t, int64(3600), *spec.Autoshutdown.ShutdownIn)
	assert.Equal(t, "0 20 * * 1-5", spec.Autoshutdown.ShutdownAt)
}
