package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestNotebookTokenOnlyForItsAuthor: a Jupyter server's tokenised URL runs
// code as its author, so GET /jobs/{name} shows the token to the author and
// to admins only; another user of the same workspace sees where it serves,
// without the token, in the job and in its attempts.
func TestNotebookTokenOnlyForItsAuthor(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	fb := newFakeBackend(cfg)
	const bea, nb = "tq_bea-token", "jupyter-cccccccc-0000-4000-8000-00000000000c"
	const served = "http://sr006-a100plus-1:8888/lab?token=s3cret"
	now := time.Unix(1_700_000_500, 0).UTC()
	fb.add(client.JobInfo{JobName: nb, Kind: "notebook", Author: "bob", Workspace: teamB, Running: true},
		protocol.JobStatus{State: protocol.StateRunning, Kind: scheduler.KindNotebook, Priority: "high", Region: "SR006", Allocation: fakeAlloc,
			Attempt: 1, CreatedAt: now, Spec: protocol.JobSpec{Author: "bob", Workspace: teamB, Kind: scheduler.KindNotebook},
			Attempts: []protocol.AttemptRecord{{Number: 1, QueuedAt: now, StartedAt: &now, URL: served}}})
	tokens := &Tokens{}
	var err error
	tokens.entries, err = parseEntries(TokenFile{Tokens: []TokenEntry{
		{SHA256: HashToken(bobToken), User: "bob", Workspace: teamB, Role: RoleUser},
		{SHA256: HashToken(bea), User: "bea", Workspace: teamB, Role: RoleUser},
		{SHA256: HashToken(adminTok), User: "root", Workspace: "ops", Role: RoleAdmin},
	}})
	require.NoError(t, err)
	s, err := New(Options{Config: cfg, Backend: fb, Tokens: tokens, PollInterval: 5 * time.Millisecond, NotFoundFloor: time.Microsecond})
	require.NoError(t, err)

	get := func(token string) (string, []string, string) {
		code, body := getAs(t, s, "GET", "/public/v2/jobs/"+nb, token)
		require.Equal(t, 200, code, string(body))
		var v struct {
			URL      string `json:"url"`
			Attempts []struct {
				URL string `json:"url"`
			} `json:"attempts"`
		}
		require.NoError(t, json.Unmarshal(body, &v))
		var attempts []string
		for _, a := range v.Attempts {
			attempts = append(attempts, a.URL)
		}
		return v.URL, attempts, string(body)
	}
	for _, who := range []string{bobToken, adminTok} {
		u, attempts, _ := get(who)
		assert.Equal(t, served, u)
		assert.Equal(t, []string{served}, attempts)
	}
	u, attempts, body := get(bea)
	assert.Equal(t, "http://sr006-a100plus-1:8888/lab", u, "bea, of bob's workspace, sees where it serves")
	assert.Equal(t, []string{"http://sr006-a100plus-1:8888/lab"}, attempts)
	assert.False(t, strings.Contains(body, "s3cret"), "the token reached another user: %s", body)
}
