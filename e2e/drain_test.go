package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
)

// TestDrainMovesAJobToAnotherNode, with real processes: an operator drains
// the node a job runs on (trainq allocator drain); the job's worker gets a
// notice (reason node_drain), exits, and the job reruns on the other node
// without spending max_retry; trainq queue shows the node drained, and
// nothing starts there until it is undrained.
func TestDrainMovesAJobToAnotherNode(t *testing.T) {
	startWorker(t)
	dir := t.TempDir()
	script := `if [ "$TRAINQ_ATTEMPT" = 2 ]; then exit 0; fi; ` +
		filepath.Join(env.binDir, "trainq") + ` notice --wait -o json > ` + dir + `/notice.json; exit 0`
	job := submit(t, protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "drain",
		PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	st := waitState(t, job, protocol.StateRunning, long)
	node := st.Attempts[0].Placement[0].Node
	other := map[string]string{"drain-1": "drain-2", "drain-2": "drain-1"}[node]

	out, errOut, code := trainq(t, "allocator", "drain", node, "--allocation", "drain", "--region", "T", "--reason", "disk swap", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var reply protocol.DrainReply
	require.NoError(t, json.Unmarshal([]byte(out), &reply), out)
	assert.Equal(t, protocol.DrainReply{Node: node, Drained: true, Changed: true, Jobs: []string{job}}, reply)

	st = waitState(t, job, protocol.StateCompleted, long)
	n := readWorkerNotice(t, filepath.Join(dir, "notice.json"))
	assert.Equal(t, protocol.NoticeReasonNodeDrain, n.Reason)
	assert.Nil(t, n.By)
	require.Len(t, st.Attempts, 2)
	assert.Equal(t, 0, st.Restarts, "a drain does not spend max_retry")
	assert.Equal(t, other, st.Attempts[1].Placement[0].Node, "the rerun went to the other node")
	assert.Contains(t, st.Attempts[0].EndReason, "node "+node+" is drained (disk swap)")

	queueOut, _, _ := trainq(t, "queue", "drain", "--region", "T")
	assert.Contains(t, queueOut, "drained: disk swap")

	// Both nodes are needed by a two-worker job: it waits while one is
	// drained and starts once it is undrained.
	wide := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "drain",
		PriorityClass: "medium", NWorkers: 2, Type: "binary"})
	eventually(t, long, "the wide job to wait behind the drain", func() bool {
		return len(queue(t, "drain").Waiting) == 1
	})
	ws := status(t, wide)
	assert.Equal(t, protocol.StatePending, ws.State)
	assert.Contains(t, ws.Reason, "node "+node+" is drained (disk swap)", "the reason names the drain")
	_, errOut, code = trainq(t, "allocator", "undrain", node, "--allocation", "drain", "--region", "T")
	require.Equal(t, 0, code, errOut)
	waitState(t, wide, protocol.StateCompleted, long)

	_, errOut, code = trainq(t, "allocator", "drain", "nowhere-9", "--allocation", "drain", "--region", "T")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, `has no node "nowhere-9"; its nodes are drain-1, drain-2`)
}
