package activities

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEstimateCacheKeepsFewRunsBriefly: a listing with enough runs to learn from is reused for
// estimateCacheTTL; one with too few only for estimateCacheTTLFew, so that the jobs after a
// shape's first completions learn from them soon.
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
		if _, hit := c.fresh(tc.query, now.Add(tc.after)); hit != tc.hit {
			t.Errorf("%s after %s: hit %v, want %v", tc.query, tc.after, hit, tc.hit)
		}
	}
}

// TestEstimateCacheListsOnceForABurst: callers that miss the cache together wait for one
// listing and all get its runs; a failed listing is not kept (the next caller lists again); a
// nil cache lists every time.
func TestEstimateCacheListsOnceForABurst(t *testing.T) {
	c := &EstimateCache{}
	var calls atomic.Int32
	release := make(chan struct{})
	want := []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}
	//nolint:unparam // its signature is EstimateCache.runs' list parameter
	list := func() ([]time.Duration, error) {
		calls.Add(1)
		<-release
		return want, nil
	}
	const burst = 50
	var wg sync.WaitGroup
	got := make([][]time.Duration, burst)
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.runs(context.Background(), "shape", list)
		}()
	}
	// The first caller lists; the others find its listing under way and wait for it.
	for {
		c.mu.Lock()
		_, busy := c.listing["shape"]
		c.mu.Unlock()
		if busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("a burst of %d listed %d times, want once", burst, n)
	}
	for i, g := range got {
		if len(g) != len(want) {
			t.Fatalf("caller %d got %v, want %v", i, g, want)
		}
	}

	failing := 0
	fail := func() ([]time.Duration, error) { failing++; return nil, errors.New("visibility is down") }
	if _, err := c.runs(context.Background(), "other", fail); err == nil {
		t.Fatal("a failed listing is an error")
	}
	_, _ = c.runs(context.Background(), "other", fail)
	if failing != 2 {
		t.Errorf("a failed listing was kept: %d listings, want 2", failing)
	}

	var none *EstimateCache
	n := 0
	count := func() ([]time.Duration, error) { n++; return want, nil }
	_, _ = none.runs(context.Background(), "shape", count)
	_, _ = none.runs(context.Background(), "shape", count)
	if n != 2 {
		t.Errorf("a nil cache listed %d times for 2 calls, want 2", n)
	}
}
