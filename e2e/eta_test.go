package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
)

// TestExpectedStarts, with real processes, on allocation eta (one 2-GPU
// node): while a job with a 10-minute time limit runs, `trainq queue --eta`
// says the next job is expected when that limit runs out, because of it,
// and the job behind that one, which has no limit of its own, is unknown,
// naming it.
func TestExpectedStarts(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	spec := func(script string) protocol.JobSpec {
		return protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "eta",
			PriorityClass: "medium", NWorkers: 1, Type: "binary"}
	}
	s := spec(hold.waitFor())
	s.TimeLimit = 10 * time.Minute
	limited := submit(t, s)
	st := waitState(t, limited, protocol.StateRunning, long)
	require.NotEmpty(t, st.Attempts)
	started := *st.Attempts[0].StartedAt
	next := submit(t, spec("true"))
	// The queue's order is the order the allocator hears the requests in: last goes in after next.
	eventually(t, long, "the next job to be queued", func() bool { return queue(t, "eta").WaitingTotal == 1 })
	last := submit(t, spec("true"))

	var v protocol.QueueView
	eventually(t, long, "both jobs to be listed with expected starts", func() bool {
		out, _, code := trainq(t, "queue", "eta", "--region", "T", "--eta", "-o", "json")
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			return false
		}
		return len(v.Waiting) == 2 && v.Waiting[0].ExpectedStart != nil && v.Waiting[1].ExpectedStart != nil
	})
	first, second := v.Waiting[0], v.Waiting[1]
	assert.Equal(t, next, first.Job)
	want := started.Add(10 * time.Minute)
	assert.WithinDuration(t, want, first.ExpectedStart.At, time.Second, "when the limit runs out: %+v", first.ExpectedStart)
	assert.True(t, strings.HasPrefix(first.ExpectedStart.Because, "if "+limited+" ends by its time limit at "), first.ExpectedStart.Because)
	assert.Equal(t, last, second.Job)
	assert.True(t, second.ExpectedStart.At.IsZero())
	assert.Contains(t, second.ExpectedStart.Because, "held by jobs without a time limit ("+next+")")

	out, _, code := trainq(t, "queue", "eta", "--region", "T", "--eta")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Expected starts")
	assert.Contains(t, out, "if "+limited+" ends by its time limit")
	out, _, _ = trainq(t, "queue", "eta", "--region", "T")
	assert.NotContains(t, out, "Expected starts", "only --eta asks for them")

	hold.open(t)
	for _, j := range []string{limited, next, last} {
		waitState(t, j, protocol.StateCompleted, long)
	}
}
