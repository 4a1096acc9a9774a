package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestCapacityRequestOverItsWorkspaceCapIsRefused: the job's capacity
// request (a job submitted before its workspace's cap was lowered, or past
// the edge) is refused for good when the cap could never let it start,
// whatever the allocation's nodes; under the cap it passes.
func TestCapacityRequestOverItsWorkspaceCapIsRefused(t *testing.T) {
	in := protocol.AllocatorInput{Policy: scheduler.Policy{Limits: []scheduler.Limit{{Class: scheduler.High, MaxGPUs: 4}}}}
	req := protocol.CapacityRequest{Job: "j", Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.High, InstanceType: "a100.8gpu", Workers: 1, Workspace: "team-a"}
	err := admit(in, req, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "workspace team-a may hold at most 4 high GPUs")
	req.InstanceType = "a100.4gpu"
	assert.NoError(t, admit(in, req, false))
	req.InstanceType, req.Workspace = "a100.8gpu", ""
	assert.NoError(t, admit(in, req, false), "a request without a workspace is capped by nothing")
}
