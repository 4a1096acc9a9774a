package client

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// TestNotebookAutoshutdown: shutdown_in and shutdown_at are checked with
// their field's name; a Jupyter server gets its queue's idle_timeout, else
// its allocation's; a queue can turn it off; a job gets none.
func TestNotebookAutoshutdown(t *testing.T) {
	cfg := config.Default()
	_, alloc, err := cfg.Allocation(cfg.DefaultRegion, "demo")
	require.NoError(t, err)
	off := config.Duration(0)
	short := config.Duration(10 * time.Minute)
	alloc.Queues = []config.Queue{{Name: "main", Default: true}, {Name: "short", IdleTimeout: &short}, {Name: "never", IdleTimeout: &off}}
	alloc.IdleTimeout, alloc.IdleWarning = config.Duration(30*time.Minute), 0
	secs := func(n int64) *int64 { return &n }

	for _, tc := range []struct {
		name       string
		req        NotebookRequest
		field, msg string
	}{
		{"shutdown_in zero", NotebookRequest{ShutdownIn: secs(0)}, "shutdown_in", "must be a positive number of seconds"},
		{"shutdown_in negative", NotebookRequest{ShutdownIn: secs(-5)}, "shutdown_in", "got -5"},
		{"shutdown_at not cron", NotebookRequest{ShutdownAt: "tonight"}, "shutdown_at", "want 5 fields"},
		{"shutdown_at bad hour", NotebookRequest{ShutdownAt: "0 25 * * *"}, "shutdown_at", `hour field "25": 25 is out of range (allowed: *, 0-23`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.AllocationName = "demo"
			spec := NotebookSpec(cfg, tc.req)
			_, err := Check(cfg, &spec)
			var fe *protocol.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, fe.Message, tc.msg)
		})
	}

	spec := NotebookSpec(cfg, NotebookRequest{AllocationName: "demo", ShutdownIn: secs(3600), ShutdownAt: "0 20 * * 1-5"})
	notes, err := Check(cfg, &spec)
	require.NoError(t, err)
	require.NotNil(t, spec.Autoshutdown)
	assert.Equal(t, int64(3600), *spec.Autoshutdown.ShutdownIn)
	assert.Equal(t, "0 20 * * 1-5", spec.Autoshutdown.ShutdownAt)
	assert.Equal(t, 30*time.Minute, spec.Autoshutdown.IdleTimeout)
	assert.Equal(t, "allocation demo", spec.Autoshutdown.IdleRule)
	assert.Contains(t, notes, "idle_timeout of allocation demo: the Jupyter server is stopped once its /api/status has shown no activity for 30m0s, with a warning 5m0s before")

	spec = NotebookSpec(cfg, NotebookRequest{AllocationName: "demo", QueueName: "short"})
	_, err = Check(cfg, &spec)
	require.NoError(t, err)
	assert.Equal(t, &protocol.NotebookShutdown{IdleTimeout: 10 * time.Minute, IdleRule: "queue short of allocation demo"}, spec.Autoshutdown)

	spec = NotebookSpec(cfg, NotebookRequest{AllocationName: "demo", QueueName: "never"})
	_, err = Check(cfg, &spec)
	require.NoError(t, err)
	assert.Nil(t, spec.Autoshutdown, "queue never turns idle stops off")

	job := protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo"}
	_, err = Check(cfg, &job)
	require.NoError(t, err)
	assert.Nil(t, job.Autoshutdown, "a training job is not a Jupyter server")
	job.Autoshutdown = &protocol.NotebookShutdown{ShutdownIn: secs(60)}
	_, err = Check(cfg, &job)
	var fe *protocol.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, "shutdown_in", fe.Field)
}
