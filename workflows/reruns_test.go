package workflows

import (
	"testing"

	"github.com/trainq/trainq/protocol"
)

// TestReruns: which ended attempts another attempt follows, in the one function that decides
// it for both the stopping state and what comes after.
func TestReruns(t *testing.T) {
	mk := func(restarts, maxRetry, nodeLosses int) *job {
		return &job{spec: protocol.JobSpec{MaxRetry: maxRetry}, status: protocol.JobStatus{Restarts: restarts, NodeLosses: nodeLosses}}
	}
	for _, tc := range []struct {
		name string
		j    *job
		out  outcome
		want bool
	}{
		{"completed", mk(0, 3, 0), outcome{kind: outcomeCompleted}, false},
		{"cancelled", mk(0, 3, 0), outcome{kind: outcomeCancelled}, false},
		{"time limit", mk(0, 3, 0), outcome{kind: outcomeTimeLimit}, false},
		{"failed, retries left", mk(2, 3, 0), outcome{kind: outcomeFailed}, true},
		{"failed, none left", mk(3, 3, 0), outcome{kind: outcomeFailed}, false},
		{"failed for good", mk(0, 3, 0), outcome{kind: outcomeFailed, final: true}, false},
		{"preempted, retries left", mk(0, 1, 0), outcome{kind: outcomePreempted}, true},
		{"preempted, none left", mk(1, 1, 0), outcome{kind: outcomePreempted}, false},
		{"node lost, max_retry spent", mk(3, 3, 0), outcome{kind: outcomeNodeLost}, true},
		{"node lost, last free rerun", mk(0, 3, maxNodeLossReruns-1), outcome{kind: outcomeNodeLost}, true},
		{"node lost once too often", mk(0, 3, maxNodeLossReruns), outcome{kind: outcomeNodeLost}, false},
		{"node drained", mk(3, 3, maxNodeLossReruns), outcome{kind: outcomeNodeDrained}, true},
	} {
		if got := tc.j.reruns(tc.out); got != tc.want {
			t.Errorf("%s: reruns = %v, want %v", tc.name, got, tc.want)
		}
	}
}
