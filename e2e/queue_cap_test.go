package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// TestFullQueueRefusesSubmissions fills an allocation whose max_waiting is 2:
// the next submission is refused before any workflow starts.
func TestFullQueueRefusesSubmissions(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	spec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Allocation: "capped"}.Spec()
	}
	running := submit(t, spec(hold.waitFor()))
	waitState(t, running, protocol.StateRunning, long)
	waiting := []string{submit(t, spec("true")), submit(t, spec("true"))}
	eventually(t, long, "two jobs to wait", func() bool { return len(queue(t, "capped").Waiting) == 2 })
	// The CLI (a fresh process: no counts cached) is refused at once.
	_, errOut, code := trainq(t, "submit", "--region", "T", "--allocation", "capped", "--instance-type", "a100.2gpu", "--script", "true", "--type", "binary")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "has 2 waiting jobs (max_waiting); try later")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tqclient.New(env.client, nil).Count(ctx, tqclient.ListFilter{Allocation: "capped"})
	require.NoError(t, err)
	assert.Equal(t, int64(3), n, "a refused submission starts nothing")

	hold.open(t)
	for _, job := range append(waiting, running) {
		waitState(t, job, protocol.StateCompleted, long)
	}
}

// TestWorkspaceWaitingLimitRefusesSubmissions: on allocation capped, team-a may
// have one medium job waiting (limits: max_waiting 1). Its second waiting job
// is refused before any workflow starts, through the CLI and the client; a
// job of another workspace is not.
func TestWorkspaceWaitingLimitRefusesSubmissions(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	running := submit(t, fixture.Job{Allocation: "capped", Workspace: "team-a", Script: hold.waitFor()}.Spec())
	waitState(t, running, protocol.StateRunning, long)
	waiting := submit(t, fixture.Job{Allocation: "capped", Workspace: "team-a", Script: "true"}.Spec())
	eventually(t, long, "team-a's second job to wait", func() bool { return len(queue(t, "capped").Waiting) == 1 })
	want := "team-a has 1 medium job waiting in T/capped, its limit (medium.max_waiting 1); try later"
	_, errOut, code := trainq(t, "submit", "--region", "T", "--allocation", "capped", "--workspace", "team-a",
		"--instance-type", "a100.2gpu", "--script", "true", "--type", "binary")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, want)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	third := fixture.Job{Allocation: "capped", Workspace: "team-a", Script: "true"}.Spec()
	_, err := tqclient.New(env.client, env.cfg).Submit(ctx, third, tqclient.SubmitOptions{})
	var full *protocol.WorkspaceQueueFullError
	require.ErrorAs(t, err, &full, "the client refuses it too")
	assert.Equal(t, want, full.Error())
	n, err := tqclient.New(env.client, nil).Count(ctx, tqclient.ListFilter{Allocation: "capped", Workspace: "team-a"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "a refused submission starts nothing")

	other := submit(t, fixture.Job{Allocation: "capped", Workspace: "team-b", Script: "true"}.Spec())
	hold.open(t)
	for _, job := range []string{running, waiting, other} {
		waitState(t, job, protocol.StateCompleted, long)
	}
}
