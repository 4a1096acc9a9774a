package allocation

import (
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// TestRequestForCarriesTheRunEstimate: a time limit is a RunLimit the job is stopped at; a
// learned estimate is a RunLimit marked estimated (nobody stops the job there); a limit wins.
func TestRequestForCarriesTheRunEstimate(t *testing.T) {
	pool := newState(t, 1).Pool
	for _, tc := range []struct {
		name            string
		limit, estimate time.Duration
		wantLimit       time.Duration
		wantEstimated   bool
	}{
		{"neither", 0, 0, 0, false},
		{"a time limit", time.Hour, 0, time.Hour, false},
		{"a learned estimate", 0, 40 * time.Minute, 40 * time.Minute, true},
		{"a limit wins", time.Hour, 40 * time.Minute, time.Hour, false},
	} {
		in := one("j", 1, scheduler.Medium, 2)
		in.RunLimit, in.RunEstimate = tc.limit, tc.estimate
		r, err := RequestFor(pool, in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.RunLimit != tc.wantLimit || r.RunEstimated != tc.wantEstimated {
			t.Errorf("%s: RunLimit %s, RunEstimated %v; want %s, %v", tc.name, r.RunLimit, r.RunEstimated, tc.wantLimit, tc.wantEstimated)
		}
	}
}
