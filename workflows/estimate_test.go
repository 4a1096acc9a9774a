package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestJobLearnsItsRuntimeEstimate: a training job without a time limit learns its estimate
// once, before its first request, for its shape; each request carries what is left of it (the
// rerun's: less what the first attempt ran); the status shows it; and the job, once completed,
// records its shape and runtime for the jobs after it.
func TestJobLearnsItsRuntimeEstimate(t *testing.T) {
	h := newJobHarness(t)
	h.estimate = &protocol.RuntimeEstimate{Runtime: 40 * time.Minute, Runs: 5, Basis: "jobs of this shape"}
	var recorded []temporal.SearchAttributes
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		recorded = append(recorded, args.Get(0).(temporal.SearchAttributes))
	}).Return(nil).Maybe()
	spec := h.preemptedThenRerun(11 * time.Minute)
	h.run(spec)
	require.NoError(t, h.env.GetWorkflowError())
	st := h.status()
	require.Equal(t, protocol.StateCompleted, st.State)

	require.Len(t, h.estimates, 1, "learned once, not per attempt")
	assert.Equal(t, st.Spec.Shape(), h.estimates[0].Shape)
	assert.Equal(t, protocol.EstimateRuntimeInput{Workspace: st.Spec.Workspace, Shape: st.Spec.Shape(), Class: "low", GPUs: st.GPUs}, h.estimates[0])
	assert.Equal(t, h.estimate, st.Estimate)
	require.Len(t, h.requests, 2)
	assert.Equal(t, 40*time.Minute, h.requests[0].RunEstimate)
	ran := st.Attempts[0].EndedAt.Sub(*st.Attempts[0].StartedAt)
	assert.Equal(t, 40*time.Minute-ran, h.requests[1].RunEstimate, "the rerun: what is left after %s", ran)
	assert.Zero(t, h.requests[0].RunLimit, "an estimate is no limit")

	var shape string
	var secs int64
	for _, sa := range recorded {
		if v, ok := sa.GetKeyword(protocol.KeyShape); ok {
			shape = v
		}
		if v, ok := sa.GetInt64(protocol.KeyRunSeconds); ok {
			secs = v
		}
	}
	assert.Equal(t, st.Spec.Shape(), shape)
	total := ran + st.Attempts[1].EndedAt.Sub(*st.Attempts[1].StartedAt)
	assert.Equal(t, int64((total+time.Second-1)/time.Second), secs, "both attempts' run time, %s", total)
}

// TestJobWithoutAnEstimate: a job with a time limit asks for no estimate (its limit says more);
// neither does a Jupyter server; a job of a shape too few jobs completed has none, and its
// request carries none.
func TestJobWithoutAnEstimate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*protocol.JobSpec)
		asks bool
	}{
		{"a time limit", func(s *protocol.JobSpec) { s.TimeLimit = time.Hour }, false},
		{"a Jupyter server", func(s *protocol.JobSpec) { s.Kind, s.PriorityClass = scheduler.KindNotebook, "high" }, false},
		{"too few jobs like it", func(*protocol.JobSpec) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newJobHarness(t)
			h.grantAt(time.Minute, 1, 1)
			h.watch(1, -1, 10*time.Minute, 0)
			spec := fixture.Job{Class: "medium"}.Spec()
			tc.edit(&spec)
			h.run(spec)
			require.NoError(t, h.env.GetWorkflowError())
			assert.Equal(t, tc.asks, len(h.estimates) == 1, "asked: %v", h.estimates)
			assert.Nil(t, h.status().Estimate)
			require.NotEmpty(t, h.requests)
			assert.Zero(t, h.requests[0].RunEstimate)
		})
	}
}

// TestRerunLearnsNothingNew: the estimate is learned once, at submission; a rerun of a job
// that had none does not ask again (trainq simulate learns the same way).
func TestRerunLearnsNothingNew(t *testing.T) {
	h := newJobHarness(t)
	h.grantAt(time.Minute, 1, 1)
	h.watch(1, -1, forever, 0)
	h.preemptAt(11*time.Minute, 1, "lm-mpi-job-high")
	h.grantAt(2*time.Hour, 2, 1)
	h.watch(2, -1, 10*time.Minute, 0)
	h.run(fixture.Job{Class: "low", MaxRetry: 1}.Spec())
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, h.requests, 2)
	assert.Len(t, h.estimates, 1, "the first request asked, the rerun's did not")
}
