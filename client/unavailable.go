package client

import (
	"context"
	"errors"
	"strings"

	"go.temporal.io/api/serviceerror"

	"github.com/trainq/trainq/protocol"
)

// searchAttributesNotLoaded says whether err is a server refusing one of
// trainq's own search attributes as not defined, or as not mapped to a
// column. trainq-worker registers them before anything starts, so this
// means a server whose cache has not loaded them (yet): both seen on the
// test cluster, "not defined" right after a frontend restart while
// PostgreSQL was down (TRAINQ_CHAOS=cluster), "no mapping defined" within
// the namespace cache's refresh interval (10 s) of their registration.
// Asking again once the database is back succeeds, so it is not the
// caller's fault (the API answers 503, not 422).
func searchAttributesNotLoaded(err error) bool {
	var inv *serviceerror.InvalidArgument
	if !errors.As(err, &inv) {
		return false
	}
	msg := inv.Message
	if !strings.Contains(msg, "is not defined") && !strings.Contains(msg, "has no mapping defined") {
		return false
	}
	for _, sa := range protocol.SearchAttributeTypes {
		if name := "search attribute " + sa.Name; strings.Contains(msg, name+" ") || strings.HasSuffix(msg, name) {
			return true
		}
	}
	return false
}

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
	if searchAttributesNotLoaded(err) {
		return true
	}
	for _, s := range []string{"connection refused", "Unavailable", "DeadlineExceeded", "context deadline exceeded",
		"transport is closing", "no such host", "RST_STREAM"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
