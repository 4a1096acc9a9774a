package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// currentDetails reads a workflow's current details through the metadata
// query, as the Web UI does. A query a busy worker did not take in time
// is asked again, as status asks (neighbour run 56 failed here, on a
// machine running four CPU-bound jobs).
func currentDetails(t *testing.T, id string) string {
	t.Helper()
	var md sdkpb.WorkflowMetadata
	require.NoError(t, testenv.Retry(t, long, "current details of "+id, func(ctx context.Context) error {
		resp, err := env.client.QueryWorkflow(ctx, id, "", "__temporal_workflow_metadata")
		if err != nil {
			return err
		}
		return resp.Get(&md)
	}))
	return md.GetCurrentDetails()
}

func describe(t *testing.T, id string) *client.WorkflowExecutionDescription {
	t.Helper()
	var d *client.WorkflowExecutionDescription
	require.NoError(t, testenv.Retry(t, long, "describe "+id, func(ctx context.Context) (err error) {
		d, err = env.client.DescribeWorkflow(ctx, id, "")
		return err
	}))
	return d
}

func TestVisibilitySearchAttributesAndCurrentDetails(t *testing.T) {
	cfgPath, cfg, _ := obsSetup(t)
	startWorkerWith(t, cfgPath)
	dir := t.TempDir()
	spec := func(script string) protocol.JobSpec {
		return fixture.Job{Script: script, Region: "O", Allocation: "visibility", MaxRetry: 2, Author: "alice", Workspace: "ws-42"}.Spec()
	}
	gateRun, gateWait := gate(filepath.Join(dir, "run")), gate(filepath.Join(dir, "wait"))
	running := submitWith(t, cfg, spec(gateRun.waitFor()))
	waitState(t, running, protocol.StateRunning, long)
	waiting := submitWith(t, cfg, spec(gateWait.waitFor()))
	waitState(t, waiting, protocol.StatePending, long)
	t.Cleanup(func() { gateRun.open(t); gateWait.open(t) })

	// Search attributes, as DescribeWorkflowExecution returns them.
	d := describe(t, running)
	sa := d.TypedSearchAttributes
	get := func(k interface{ GetName() string }) any {
		for key, v := range sa.GetUntypedValues() {
			if key.GetName() == k.GetName() {
				return v
			}
		}
		return nil
	}
	assert.Equal(t, "Running", get(protocol.KeyState))
	assert.Equal(t, "medium", get(protocol.KeyPriority))
	assert.Equal(t, "visibility", get(protocol.KeyAllocation))
	assert.Equal(t, "O", get(protocol.KeyRegion))
	assert.Equal(t, "alice", get(protocol.KeyAuthor))
	assert.Equal(t, "ws-42", get(protocol.KeyWorkspace))
	assert.Equal(t, "job", get(protocol.KeyKind))
	assert.Equal(t, int64(1), get(protocol.KeyAttempt))
	assert.Equal(t, int64(2), get(protocol.KeyGPUs))
	// The raw response carries them as indexed fields too (what the UI lists).
	fields := d.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	for _, sa := range protocol.SearchAttributeTypes {
		if sa.Name == protocol.SAShape || sa.Name == protocol.SARunSeconds {
			assert.NotContains(t, fields, sa.Name, "recorded once the job completes")
			continue
		}
		assert.Contains(t, fields, sa.Name)
	}
	summary, err := d.GetStaticSummary()
	require.NoError(t, err)
	assert.Equal(t, "medium · 1×a100.2gpu · O/visibility · max_retry 2", summary)
	details, err := d.GetStaticDetails()
	require.NoError(t, err)
	assert.Contains(t, details, "| instance_type | `a100.2gpu` |")
	assert.Contains(t, details, "| author | `alice` |")

	// Current details of the running job: state, placement, attempt table.
	cur := currentDetails(t, running)
	assert.Contains(t, cur, "## Running · attempt 1 · restarts 0/2")
	assert.Contains(t, cur, "Placement: obs-visibility-1[0,1] (2 GPUs on 1 node)")
	assert.Contains(t, cur, "| attempt | queued | started | ended | why it ended | preemptor |")

	// The waiting job: its state in the search attributes, its place in the
	// queue and the reason in its current details.
	assert.Equal(t, "Pending", describe(t, waiting).TypedSearchAttributes.GetUntypedValues()[protocol.KeyState])
	var st protocol.JobStatus
	eventually(t, long, "the waiting job's allocator to explain its wait", func() bool {
		st = status(t, waiting)
		return st.Reason != "" && strings.Contains(currentDetails(t, waiting), "Queue position")
	})
	cur = currentDetails(t, waiting)
	assert.Contains(t, cur, "## Pending · attempt 1")
	assert.Contains(t, cur, "**Queue position 1** when queued")
	// The reason as the allocator gave it when the job queued: the same as
	// now, but for how long the job in its way had run by then.
	atQueueing, _, _ := strings.Cut(st.Reason, "running ")
	assert.Contains(t, cur, atQueueing)
	assert.Contains(t, cur, "allocator/O/visibility")

	// The allocator shows per-node use, the running job and the queue.
	alloc := currentDetails(t, protocol.AllocatorWorkflowID("O", "visibility"))
	assert.Contains(t, alloc, "| obs-visibility-1 | a100 | 2 | 0 | 2 | 0 |")
	assert.Contains(t, alloc, "- "+running+" · medium · 2 GPUs · running")
	assert.Contains(t, alloc, "1. "+waiting+" · medium · 2 GPUs — ")

	// A state change updates the search attributes and the details.
	gateRun.open(t)
	waitState(t, running, protocol.StateCompleted, long)
	done := describe(t, running).TypedSearchAttributes.GetUntypedValues()
	assert.Equal(t, "Completed", done[protocol.KeyState])
	// A completed job records its shape and runtime, for the jobs of its shape after it to learn from.
	ran := status(t, running).Spec
	assert.Equal(t, ran.Shape(), done[protocol.KeyShape])
	assert.Positive(t, done[protocol.KeyRunSeconds])
	waitState(t, waiting, protocol.StateRunning, long)
	assert.Contains(t, currentDetails(t, waiting), "## Running · attempt 1")
	gateWait.open(t)
	waitState(t, waiting, protocol.StateCompleted, long)
}
