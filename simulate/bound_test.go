package simulate

import (
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// TestStarvationBound: with backfill and starvation_after, a starving medium request waits for
// the high job on the only node (it may not preempt it) and, once that ends, for a high request
// that starved later and takes the node first (a lower class's reservation holds nothing from
// it): both start within the bound the package doc states, the medium one only because the
// check counts the high one's run. With the estimates it needs (learned, none seen yet) the
// high job's end is unknown, so this is the drain a starving owner's reservation makes.
func TestStarvationBound(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 8), Jobs: []Job{
		jb("a", 0, scheduler.High, 1, 10*time.Hour),
		jb("b", time.Minute, scheduler.Medium, 8, time.Hour),
		jb("c", 2*time.Hour, scheduler.High, 8, time.Hour),
	}}
	pol := Policy{Name: "bfs", Scheduler: scheduler.Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: time.Hour}}
	r := run(t, w, pol, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Estimates: []Estimates{{Kind: EstimateLearned}}})
	if b := r.Starvation; b == nil || *b != (StarvationBound{Starved: 2, Held: 2}) {
		t.Fatalf("starvation bound %+v, want 2 starved, 2 within", b)
	}
}

// TestStarvationBoundBroken: a start after the mark is counted broken with its excess, and a
// higher-class head starting on a lower one's reserved node moves the lower one's bound.
func TestStarvationBoundBroken(t *testing.T) {
	s := &sim{w: &Workload{Jobs: []Job{{ID: "lo"}, {ID: "hi"}}}, jobs: make([]jobState, 2), opt: Options{StopDelay: 30 * time.Second}}
	s.marks = map[int32]starvationMark{
		0: {attempt: 1, class: scheduler.Medium, by: time.Hour, nodes: []string{"n1"}},
		1: {attempt: 1, class: scheduler.High, by: 2 * time.Hour, nodes: []string{"n1"}},
	}
	s.jobs[0].attempt, s.jobs[1].attempt = 1, 1
	s.jobs[1].nodes, s.jobs[1].remaining = []string{"n1"}, time.Hour
	s.now = 90 * time.Minute
	s.boundAtStart(1) // hi starts on n1 at 1h30m for 1h: lo's bound becomes 2h31m30s
	s.now = 3 * time.Hour
	s.boundAtStart(0)
	want := StarvationBound{Held: 1, Broken: 1, WorstExcess: Seconds(28*time.Minute + 30*time.Second)}
	if s.bound != want {
		t.Fatalf("got %+v, want %+v", s.bound, want)
	}
}
