package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/trainq/trainq/jobview"
	"github.com/trainq/trainq/protocol"
)

// checkpoint records that the job's running attempt has just saved its
// progress (?attempt=N, default the current attempt), so that a preemption
// from then on loses only the work since; ?progress=0.4 also says how much
// of the work is done, from which the allocator expects when it ends. A training script in a pod calls
// it after each save: it needs no Temporal access, only its token.
//
// Requests for a job are merged while one is on its way, and limited per
// job and per user (checkpointLimiter): the allocator takes only a few
// updates at once, for all its jobs.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, p Principal) {
	attempt, progress := 0, 0.0
	for k, v := range r.URL.Query() {
		switch k {
		case "attempt":
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > 1<<24 || len(v) > 1 {
				s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "attempt", fmt.Sprintf("%q is not allowed; give one attempt number, at least 1", v[0])))
				return
			}
			attempt = n
		case "progress":
			f, err := strconv.ParseFloat(v[0], 64)
			if err != nil || !(f > 0 && f <= 1) || len(v) > 1 {
				s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "progress", fmt.Sprintf("%q is not allowed; give the share of the work done, more than 0 and at most 1 (e.g. 0.4)", v[0])))
				return
			}
			progress = f
		default:
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: attempt, progress", k)))
			return
		}
	}
	// The user's limit comes first, so that a flood costs Temporal nothing;
	// the job's once the job is known to be the caller's, so that nobody
	// can spend another workspace's job's checkpoints.
	limits := s.checkpointLimits()
	if err := limits.admitUser(p); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	name := r.PathValue("job_name")
	if _, err := s.visibleJob(ctx, p, name); err != nil {
		s.fail(w, r, err)
		return
	}
	reply, err := limits.do(ctx, name, attempt, func() (protocol.CheckpointReply, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.CallTimeout)
		defer cancel()
		return s.backend.Checkpoint(cctx, name, attempt, progress)
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobview.CheckpointOf(reply))
}
