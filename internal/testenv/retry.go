package testenv

import (
	"context"
	"testing"
	"time"

	trainq "github.com/trainq/trainq/client"
)

// callTimeout bounds one call of Retry.
const callTimeout = 30 * time.Second

// Retry calls call until it succeeds, and returns its error only when it is
// not transient (see client.Unavailable) or timeout has passed. On a busy
// machine (two cores compiling beside the tests) or while a trainq-worker
// restarts, Temporal answers for a while with Unavailable, DeadlineExceeded,
// Canceled or a reset stream: a test helper asks again instead of failing
// the test. Each call has its own deadline of at most 30 s.
func Retry(t testing.TB, timeout time.Duration, what string, call func(ctx context.Context) error) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(callTimeout, time.Until(deadline)))
		err := call(ctx)
		cancel()
		if err == nil || !trainq.Unavailable(err) || time.Now().After(deadline) {
			return err
		}
		t.Logf("%s: %v (transient; asking again)", what, err)
		time.Sleep(200 * time.Millisecond)
	}
}
