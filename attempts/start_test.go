package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestStarts: whether an attempt is started, given how its workers' starts
// ended, and which nodes the release must name.
func TestStarts(t *testing.T) {
	started := func(w int, node string) StartResult { return StartResult{Worker: w, Node: node} }
	silent := StartResult{Worker: 1, Node: "n2", End: StartNodeSilent, Error: "timeout"}
	busy := StartResult{Worker: 1, Node: "n2", End: StartGPUsBusy, Error: "GPUs 0,1 of n2 are used by other/1/0"}
	failed := StartResult{Worker: 0, Node: "n1", End: StartFailed, Error: "image not found"}
	for _, tc := range []struct {
		name       string
		results    []StartResult
		wantKind   Kind
		wantText   string
		started    bool
		lost, busy []string
	}{
		{name: "every worker started", results: []StartResult{started(0, "n1"), started(1, "n2")}, started: true},
		{name: "a silent node is lost", results: []StartResult{started(0, "n1"), silent},
			wantKind: NodeLost, wantText: "node n2 lost: its agent did not answer for 1m0s", lost: []string{"n2"}},
		{name: "busy GPUs: the node is lost and named busy, and the job reruns as after a node loss", results: []StartResult{started(0, "n1"), busy},
			wantKind: NodeLost, wantText: "worker 1 could not start: GPUs 0,1 of n2 are used by other/1/0; the node is fenced", lost: []string{"n2"}, busy: []string{"n2"}},
		{name: "a failed start fails the attempt", results: []StartResult{failed, started(1, "n2")},
			wantKind: Failed, wantText: "worker 0 could not start on n1: image not found"},
		{name: "a lost node outweighs an earlier failure", results: []StartResult{failed, silent},
			wantKind: NodeLost, wantText: "node n2 lost", lost: []string{"n2"}},
		{name: "the first lost node is the one reported; both are named", results: []StartResult{
			{Worker: 0, Node: "n1", End: StartNodeSilent}, busy},
			wantKind: NodeLost, wantText: "node n1 lost", lost: []string{"n1", "n2"}, busy: []string{"n2"}},
		{name: "the first failure is the one reported", results: []StartResult{failed, {Worker: 1, Node: "n2", End: StartFailed, Error: "later"}},
			wantKind: Failed, wantText: "image not found"},
	} {
		out, ok, lost, busyNodes := Starts(tc.results, time.Minute)
		assert.Equal(t, tc.started, ok, tc.name)
		assert.Equal(t, tc.lost, lost, tc.name)
		assert.Equal(t, tc.busy, busyNodes, tc.name)
		if !tc.started {
			assert.Equal(t, tc.wantKind, out.Kind, tc.name)
			assert.Contains(t, out.Message, tc.wantText, tc.name)
		}
	}
}
