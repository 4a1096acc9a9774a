package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// TestNoticeCommand: inside a worker, trainq notice says whether it is to be
// stopped, for people and as JSON; it exits 1 while there is none and waits
// with --wait; outside a worker it says what is missing.
func TestNoticeCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notice.json")
	t.Setenv(cluster.NoticeFileEnv, path)
	r := cli(t, "", "notice")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no notice: the worker is not being stopped")
	r = cli(t, "", "notice", "--wait", "--timeout", "100ms")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no notice within 100ms")

	n := protocol.WorkerNotice{Reason: protocol.NoticeReasonPreempted, By: &protocol.NoticeBy{Class: "high", Kind: "job"},
		Deadline: time.Now().Add(time.Minute).UTC().Truncate(time.Second), Job: "lm-mpi-job-x", Attempt: 2}
	data, err := json.Marshal(n)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	r = cli(t, "", "notice")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "preempted by a high job: save your work and exit by "), r.stdout)
	r = cli(t, "", "notice", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var got protocol.WorkerNotice
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, n, got)

	t.Setenv(cluster.NoticeFileEnv, "")
	r = cli(t, "", "notice")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "$TRAINQ_NOTICE_FILE is not set")
}
