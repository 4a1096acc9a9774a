package api

import (
	"fmt"
	"net/http"
	"strconv"
)

// checkpoint records that the job's running attempt has just saved its
// progress (?attempt=N, default the current attempt), so that a preemption
// from then on loses only the work since. A training script in a pod calls
// it after each save: it needs no Temporal access, only its token.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, p Principal) {
	attempt := 0
	for k, v := range r.URL.Query() {
		if k != "attempt" {
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: attempt", k)))
			return
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > 1<<24 || len(v) > 1 {
			s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "attempt", fmt.Sprintf("%q is not allowed; give one attempt number, at least 1", v[0])))
			return
		}
		attempt = n
	}
	ctx, cancel := s.call(r)
	defer cancel()
	name := r.PathValue("job_name")
	if _, err := s.visibleJob(ctx, p, name); err != nil {
		s.fail(w, r, err)
		return
	}
	reply, err := s.backend.Checkpoint(ctx, name, attempt)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}
