package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/protocol"
)

// TestLoanYieldsToTheReservation, with real processes, on allocation loan (one
// 2-GPU node, backfill, reserve_after 1m, a 5s notice): a 2-GPU job waits
// behind a high job whose 80s time limit ends it; after a minute it reserves
// the node from then on. A 1-GPU job whose learned estimate (a few seconds:
// three runs of its shape) ends it before that start runs on the free GPU on
// loan and says so; it then runs far past its estimate. When the high job's
// limit runs out, the reserved job takes the GPU back at once: the borrower
// gets a notice of reason loan_due naming it, yields, and reruns without
// spending max_retry, and the reserved job starts within the notice and the
// grace period of the limit, not after the borrower.
func TestLoanYieldsToTheReservation(t *testing.T) {
	startWorker(t)
	const ws = "loan-learned"
	long := gate(filepath.Join(t.TempDir(), "long"))
	// One script, so one shape: a few seconds until the gate opens, then ten minutes.
	shaped := protocol.JobSpec{Script: fmt.Sprintf("if [ -e %q ]; then sleep 600; else sleep 2; fi", string(long)),
		InstanceType: "a100.1gpu", Region: "T", AllocationName: "loan", PriorityClass: "medium", NWorkers: 1, Type: "binary", Workspace: ws}
	var learners []string
	for range 3 {
		learners = append(learners, submit(t, shaped))
	}
	var normalized protocol.JobSpec
	for _, j := range learners {
		normalized = waitState(t, j, protocol.StateCompleted, 3*time.Minute).Spec
	}
	query := activities.RuntimeQueries(protocol.EstimateRuntimeInput{Workspace: ws, Shape: normalized.Shape()})[0]
	eventually(t, 3*time.Minute, "visibility to list the three completed runtimes", func() bool {
		resp, err := env.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 10})
		return err == nil && len(resp.GetExecutions()) == 3
	})
	long.open(t)

	holder := protocol.JobSpec{Script: "sleep 600", InstanceType: "a100.1gpu", Region: "T", AllocationName: "loan",
		PriorityClass: "high", NWorkers: 1, Type: "binary", Workspace: "loan-hold", TimeLimit: 80 * time.Second}
	hold := submit(t, holder)
	held := waitState(t, hold, protocol.StateRunning, 3*time.Minute)
	limitEnds := held.Attempts[0].StartedAt.Add(holder.TimeLimit)
	big := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "loan",
		PriorityClass: "medium", NWorkers: 1, Type: "binary", Workspace: "loan-big"})
	cancelIfFailed(t, hold, big)
	eventually(t, 3*time.Minute, big+" to reserve the node", func() bool {
		v := queue(t, "loan")
		return len(v.Waiting) == 1 && v.Waiting[0].Job == big && len(v.Waiting[0].Reserved) == 1
	})

	borrower := submit(t, shaped)
	t.Cleanup(func() { trainq(t, "cancel", borrower) })
	st := waitState(t, borrower, protocol.StateRunning, 3*time.Minute)
	require.NotNil(t, st.Estimate, "its shape completed three times")
	require.Less(t, st.Estimate.Runtime, time.Minute)
	assert.True(t, st.Attempts[0].OnLoan, "it started on the reserved node's free GPU because its estimate ends it first")
	text, _, _ := trainq(t, "status", borrower)
	assert.Contains(t, text, "on loan")

	done := waitState(t, big, protocol.StateCompleted, 4*time.Minute)
	started := *done.Attempts[0].StartedAt
	// The limit stops the holder (grace 3s); the borrower yields within its 5s notice.
	assert.False(t, started.Before(limitEnds), "%s started at %s, before the limit at %s", big, started, limitEnds)
	assert.True(t, started.Before(limitEnds.Add(20*time.Second)), "%s started at %s, long after the limit at %s: the loan was not taken back", big, started, limitEnds)

	st = status(t, borrower)
	require.GreaterOrEqual(t, len(st.Attempts), 2, "the borrower reruns")
	first := st.Attempts[0]
	assert.Equal(t, protocol.NoticeReasonLoanDue, first.NoticeReason)
	require.NotNil(t, first.Preemptor)
	assert.Equal(t, big, first.Preemptor.Job)
	assert.Contains(t, first.EndReason, "yielded its loan to "+big)
	assert.Equal(t, 0, st.Restarts, "a yield spends no retry")
}
