package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// TestFullQueueRefusesSubmissions fills an allocation whose max_waiting is 2:
// the next submission is refused before any workflow starts.
func TestFullQueueRefusesSubmissions(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	spec := func(script string) protocol.JobSpec {
		return protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "capped",
			PriorityClass: "medium", NWorkers: 1, Type: "binary"}
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
