package allocation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/internal/fixture"
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
		in := fixture.Request{Job: "j", Attempt: 1, Class: scheduler.Medium, GPUs: 2}.Capacity()
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

// TestDetailsShowExpectedStarts: the Web UI's details list each waiting job with its expected
// start when one was projected, known or not, and say as of when.
func TestDetailsShowExpectedStarts(t *testing.T) {
	s := newState(t, 1)
	held := fixture.Request{Job: "held", Attempt: 1, Class: scheduler.Medium, GPUs: 8, RunLimit: time.Hour}.Capacity()
	s.Request(held, t0)
	s.Pass(t0)
	s.Request(fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Medium, GPUs: 8}.Capacity(), t0)
	s.Request(fixture.Request{Job: "last", Attempt: 1, Class: scheduler.Medium, GPUs: 8}.Capacity(), t0)
	s.Pass(t0)
	now := t0.Add(time.Minute)
	d := s.Details(false, "", s.DetailStarts(now))
	assert.Contains(t, d, "Expected starts as of 09:01:00 UTC (`trainq queue a --region T --eta`")
	assert.Contains(t, d, "next · medium · 8 GPUs")
	assert.Contains(t, d, "**expected start 10:00:00 UTC (if held ends by its time limit at")
	assert.Contains(t, d, "**expected start unknown (the capacity it needs is held by jobs without a time limit (next))**")
	assert.NotContains(t, s.Details(false, "", ExpectedStarts{}), "expected start", "none projected, none shown")
}

// TestDetailStartsGoStale: the details' starts are projected again once older than the
// interval, or as soon as the details list a waiting job they lack or drop one they have.
func TestDetailStartsGoStale(t *testing.T) {
	s := newState(t, 1)
	held := fixture.Request{Job: "held", Attempt: 1, Class: scheduler.Medium, GPUs: 8, RunLimit: time.Hour}.Capacity()
	s.Request(held, t0)
	s.Pass(t0)
	none := s.DetailStarts(t0)
	assert.False(t, none.Stale(s, t0.Add(time.Second), 10*time.Second), "nothing waits, nothing changed")
	s.Request(fixture.Request{Job: "next", Attempt: 1, Class: scheduler.Medium, GPUs: 8}.Capacity(), t0)
	s.Pass(t0)
	assert.True(t, none.Stale(s, t0.Add(time.Second), 10*time.Second), "a job the starts lack is listed")
	some := s.DetailStarts(t0.Add(time.Second))
	assert.False(t, some.Stale(s, t0.Add(2*time.Second), 10*time.Second))
	assert.True(t, some.Stale(s, t0.Add(11*time.Second), 10*time.Second), "older than the interval")
	assert.True(t, ExpectedStarts{}.Stale(s, t0, 10*time.Second), "never projected")
}
