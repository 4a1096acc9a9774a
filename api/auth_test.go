package api

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
