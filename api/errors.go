package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"go.temporal.io/api/serviceerror"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// Error is the body of every error answer: {"error": {"code", "message", "field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RetryAfter (seconds) is sent as Retry-After with 503.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Message }

func errorf(status int, code, field, msg string) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: msg}
}

// Error codes.
const (
	codeUnauthorized  = "unauthorized"
	codeForbidden     = "forbidden"
	codeNotFound      = "not_found"
	codeTooLarge      = "request_too_large"
	codeInvalidValue  = "invalid_value"
	codeInvalidParam  = "invalid_parameter"
	codeConflict      = "idempotency_key_reused"
	codeUnavailable   = "temporal_unavailable"
	codeNoWorker      = "worker_unavailable"
	codeInternal      = "internal"
	codeMethod        = "method_not_allowed"
	codeExists        = "job_exists"
	codeWrongKind     = "wrong_kind"
	codeTimeout       = "request_timeout"
	codeMediaType     = "unsupported_media_type"
	codeTooManyConns  = "too_many_connections"
	codeQueueFull     = "queue_full"
	codeNotRunning    = "job_not_running"
	retryAfterSeconds = 5
	// queueFullRetryAfter is how long a client is asked to wait when an
	// allocation's queue is full: jobs leave a full queue slowly.
	queueFullRetryAfter = 60
)

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError answers with the error body; 503 and 429 carry Retry-After.
func writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests {
		ra := e.RetryAfter
		if ra <= 0 {
			ra = retryAfterSeconds
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="trainq"`)
	}
	writeJSON(w, e.Status, map[string]*Error{"error": e})
}

// classify maps an error of the backend or of validation to an answer.
// Temporal being unreachable, or a query nobody answers, is 503, never 500.
func (s *Server) classify(r *http.Request, err error) *Error {
	var ae *Error
	var fe *protocol.FieldError
	var je *protocol.JSONError
	var invalid *serviceerror.InvalidArgument
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &je):
		return errorf(http.StatusBadRequest, je.Reason, je.Field, je.Message)
	case errors.As(err, &fe) && fe.TooLarge:
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, fe.Field, fe.Message)
	case errors.As(err, &fe) && fe.Forbidden:
		return errorf(http.StatusForbidden, codeForbidden, fe.Field, fe.Message)
	case errors.As(err, &fe):
		return errorf(http.StatusUnprocessableEntity, codeInvalidValue, fe.Field, fe.Message)
	case tooLarge(err):
		// The size checks keep requests well within Temporal's limits; this
		// is the last line, should those limits be set lower.
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "", "the request is larger than Temporal accepts; make job_desc, script, env_variables or flags smaller")
	case errors.Is(err, client.ErrJobNotFound):
		return errorf(http.StatusNotFound, codeNotFound, "", "no such job")
	case errors.Is(err, client.ErrJobNotRunning):
		return errorf(http.StatusConflict, codeNotRunning, "", err.Error())
	case errors.As(err, new(*protocol.QueueFullError)):
		return &Error{Status: http.StatusTooManyRequests, Code: codeQueueFull, Field: "allocation_name", Message: err.Error(), RetryAfter: queueFullRetryAfter}
	case errors.As(err, new(*protocol.WorkspaceQueueFullError)):
		return &Error{Status: http.StatusTooManyRequests, Code: codeQueueFull, Field: "priority_class", Message: err.Error(), RetryAfter: queueFullRetryAfter}
	case errors.Is(err, client.ErrNoAllocator):
		return &Error{Status: http.StatusServiceUnavailable, Code: codeNoWorker, Message: err.Error()}
	case client.Unavailable(err):
		msg := "Temporal did not answer in time; try again"
		code := codeUnavailable
		if r != nil && r.Context().Err() == nil && strings.Contains(strings.ToLower(err.Error()), "query") {
			code = codeNoWorker
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: code, Message: msg}
	case errors.As(err, &invalid):
		return errorf(http.StatusUnprocessableEntity, codeInvalidValue, "", "Temporal rejected the request: "+anonymous(invalid.Message))
	}
	s.log.Error("internal error", "route", routeOf(r), "err", err)
	return errorf(http.StatusInternalServerError, codeInternal, "", "internal error")
}

// tooLarge says whether Temporal (or gRPC) refused a message for its size.
func tooLarge(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "size exceeds limit") || strings.Contains(msg, "message larger than max")
}

// anonymous replaces every word of msg that has the shape of a job name:
// a message from Temporal is not known to name only the caller's jobs.
func anonymous(msg string) string {
	var b strings.Builder
	last := 0
	words(msg, func(i, j int) {
		if madeName(msg[i:j]) {
			b.WriteString(msg[last:i])
			b.WriteString("(a job)")
			last = j
		}
	})
	b.WriteString(msg[last:])
	return b.String()
}

func routeOf(r *http.Request) string {
	if r == nil {
		return ""
	}
	if r.Pattern != "" {
		return r.Pattern
	}
	return "unmatched"
}

// fail answers err, classified.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, s.classify(r, err))
}
