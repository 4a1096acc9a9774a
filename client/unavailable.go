package client

import (
	"context"
	"errors"
	"strings"

	"go.temporal.io/api/serviceerror"
)

// Unavailable says whether err means Temporal (or the trainq-worker that
// answers a query) could not be reached in time: it is busy, restarting or
// away, and asking again later may succeed. Such errors come as gRPC
// statuses (Unavailable, DeadlineExceeded, Canceled, ResourceExhausted), as
// a deadline of the caller's context, or only as text when the transport
// broke (a stream reset with RST_STREAM, a refused connection).
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		unav     *serviceerror.Unavailable
		deadline *serviceerror.DeadlineExceeded
		canceled *serviceerror.Canceled
		exhaust  *serviceerror.ResourceExhausted
	)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &unav) || errors.As(err, &deadline) || errors.As(err, &canceled) || errors.As(err, &exhaust) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "Unavailable", "DeadlineExceeded", "context deadline exceeded",
		"transport is closing", "no such host", "RST_STREAM"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
