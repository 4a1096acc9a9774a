package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
)

func TestCheckpointEndpoint(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	rec := post(s, "/public/v2/jobs/"+nbB+"/checkpoint", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var reply protocol.CheckpointReply
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reply))
	assert.Equal(t, nbB, reply.Job)
	assert.Equal(t, 1, reply.Attempt, "no ?attempt means the current attempt")
	assert.False(t, reply.At.IsZero())

	for _, tc := range []struct {
		name, path string
		code       int
		field      string
		errCode    string
	}{
		{"a waiting job", "/public/v2/jobs/" + jobB + "/checkpoint", 409, "", codeNotRunning},
		{"another workspace's job", "/public/v2/jobs/" + jobA + "/checkpoint", 404, "", codeNotFound},
		{"attempt 0", "/public/v2/jobs/" + nbB + "/checkpoint?attempt=0", 422, "attempt", codeInvalidParam},
		{"attempt twice", "/public/v2/jobs/" + nbB + "/checkpoint?attempt=1&attempt=2", 422, "attempt", codeInvalidParam},
		{"unknown parameter", "/public/v2/jobs/" + nbB + "/checkpoint?at=now", 400, "at", codeInvalidParam},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(s, tc.path, "")
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			var body map[string]Error
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, tc.errCode, body["error"].Code)
			assert.Equal(t, tc.field, body["error"].Field)
		})
	}
}
