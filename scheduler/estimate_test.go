package scheduler

import (
	"testing"
	"time"
)

func TestLearnedRuntime(t *testing.T) {
	m := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, x := range ms {
			out = append(out, time.Duration(x)*time.Minute)
		}
		return out
	}
	many := make([]int, 0, 25)
	for k := 25; k >= 1; k-- { // newest first: 25m is the latest run
		many = append(many, k)
	}
	for _, tc := range []struct {
		name string
		runs []time.Duration
		q    float64
		want time.Duration
		ok   bool
	}{
		{"too few runs", m(5, 6), 0.9, 0, false},
		{"the fewest that count", m(5, 7, 6), 0.9, 7 * time.Minute, true},
		{"p50 of three", m(5, 7, 6), 0.5, 6 * time.Minute, true},
		{"p90 of ten", m(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Minute, true},
		// Only the newest LearnedRuns count: 25m..6m; their most is 25m, their least 6m.
		{"the newest twenty", m(many...), 1, 25 * time.Minute, true},
		{"the newest twenty, least", m(many...), 0.01, 6 * time.Minute, true},
	} {
		got, ok := LearnedRuntime(tc.runs, tc.q)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: LearnedRuntime = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEstimatedRunLimit(t *testing.T) {
	for _, tc := range []struct{ est, ran, want time.Duration }{
		{time.Hour, 0, time.Hour},
		{0, 0, MinRunLimit},
		{time.Hour, 20 * time.Minute, 40 * time.Minute},
		{time.Hour, time.Hour - 30*time.Second, MinRerunLimit}, // a rerun near its estimate still needs some time
		{time.Hour, time.Hour, time.Hour},                      // one that used it all: one more estimate
		{time.Hour, 2 * time.Hour, time.Hour},                  // one that outran it, as the projection takes a running job past it
	} {
		if got := EstimatedRunLimit(tc.est, tc.ran); got != tc.want {
			t.Errorf("EstimatedRunLimit(%s, %s) = %s, want %s", tc.est, tc.ran, got, tc.want)
		}
	}
}
