package activities

import (
	"testing"
	"time"
)

// TestEstimateCacheKeepsFewRunsBriefly: a listing with enough runs to learn from is reused for
// estimateCacheTTL; one with too few only for estimateCacheTTLFew, so that the jobs after a
// shape's first completions learn from them soon; a nil cache keeps nothing.
func TestEstimateCacheKeepsFewRunsBriefly(t *testing.T) {
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	c := &EstimateCache{}
	c.put("many", []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}, now)
	c.put("few", []time.Duration{time.Minute}, now)
	for _, tc := range []struct {
		query string
		after time.Duration
		hit   bool
	}{
		{"many", estimateCacheTTLFew, true},
		{"many", estimateCacheTTL - time.Millisecond, true},
		{"many", estimateCacheTTL, false},
		{"few", estimateCacheTTLFew - time.Millisecond, true},
		{"few", estimateCacheTTLFew, false},
		{"other", 0, false},
	} {
		if _, hit := c.get(tc.query, now.Add(tc.after)); hit != tc.hit {
			t.Errorf("%s after %s: hit %v, want %v", tc.query, tc.after, hit, tc.hit)
		}
	}
	var none *EstimateCache
	none.put("many", []time.Duration{time.Minute}, now)
	if _, hit := none.get("many", now); hit {
		t.Error("a nil cache keeps nothing")
	}
}
