package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	trainq "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// Eventually polls cond until it holds or the deadline passes. It is the
// way to wait for a state another process reaches (Temporal workflows have
// no watch); it never stands in for an event a test could await directly.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitState waits until job reaches want and returns its status; it fails
// the test at once if the job ends in another state. Right after a
// trainq-worker restart a status query may time out while the job's
// workflow task moves to the new worker: it then asks again.
func WaitState(t testing.TB, c client.Client, job string, want protocol.JobState, timeout time.Duration) protocol.JobStatus {
	t.Helper()
	var st protocol.JobStatus
	Eventually(t, timeout, fmt.Sprintf("%s to reach %s", job, want), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		if st, err = trainq.New(c, nil).Status(ctx, job); err != nil {
			t.Logf("status of %s: %v (asking again)", job, err)
			return false
		}
		if st.State.Terminal() && st.State != want {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("%s ended %s, want %s:\n%s", job, st.State, want, b)
		}
		return st.State == want
	})
	return st
}
