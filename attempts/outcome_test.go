package attempts

import "testing"

// TestReruns: which ended attempts another attempt follows, in the one function that decides
// it for both the stopping state and what comes after.
func TestReruns(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  Record
		out  Outcome
		want bool
	}{
		{"completed", Record{MaxRetry: 3}, Outcome{Kind: Completed}, false},
		{"cancelled", Record{MaxRetry: 3}, Outcome{Kind: Cancelled}, false},
		{"time limit", Record{MaxRetry: 3}, Outcome{Kind: TimeLimit}, false},
		{"failed, retries left", Record{Restarts: 2, MaxRetry: 3}, Outcome{Kind: Failed}, true},
		{"failed, none left", Record{Restarts: 3, MaxRetry: 3}, Outcome{Kind: Failed}, false},
		{"failed for good", Record{MaxRetry: 3}, Outcome{Kind: Failed, Final: true}, false},
		{"stuck, retries left", Record{MaxRetry: 1}, Outcome{Kind: Failed, Stuck: true}, true},
		{"preempted, retries left", Record{MaxRetry: 1}, Outcome{Kind: Preempted}, true},
		{"preempted, none left", Record{Restarts: 1, MaxRetry: 1}, Outcome{Kind: Preempted}, false},
		{"node lost, max_retry spent", Record{Restarts: 3, MaxRetry: 3}, Outcome{Kind: NodeLost}, true},
		{"node lost, last free rerun", Record{MaxRetry: 3, NodeLosses: MaxNodeLossReruns - 1}, Outcome{Kind: NodeLost}, true},
		{"node lost once too often", Record{MaxRetry: 3, NodeLosses: MaxNodeLossReruns}, Outcome{Kind: NodeLost}, false},
		{"node drained", Record{Restarts: 3, MaxRetry: 3, NodeLosses: MaxNodeLossReruns}, Outcome{Kind: NodeDrained}, true},
		{"loan yielded, max_retry spent", Record{Restarts: 3, MaxRetry: 3}, Outcome{Kind: Yielded}, true},
	} {
		if got := Reruns(tc.out, tc.rec); got != tc.want {
			t.Errorf("%s: Reruns = %v, want %v", tc.name, got, tc.want)
		}
	}
}
