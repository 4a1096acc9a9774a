package simulate

import (
	"cmp"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// TestStarvationBound plays small workloads on one 8-GPU node (backfill, reserve_after 30m,
// starvation_after 1h, learned estimates: none seen yet, so no job's end is known) and checks
// that every request that starves starts within the bound, which must count each way the
// package doc says a starving request may wait longer: each row fails without its part.
func TestStarvationBound(t *testing.T) {
	pol := Policy{Name: "bfs", Scheduler: scheduler.Policy{ReserveAfter: 30 * time.Minute, Backfill: true, StarvationAfter: time.Hour}}
	for _, tc := range []struct {
		name string
		jobs []Job
		min  time.Duration // min_runtime_before_preemption
		stop time.Duration
		est  *Estimates // nil: learned
		want StarvationBound
	}{
		{name: "a medium one waits for the high job there, then for a high one that starved later and takes the node first",
			jobs: []Job{jb("a", 0, scheduler.High, 1, 10*time.Hour), jb("b", time.Minute, scheduler.Medium, 8, time.Hour), jb("c", 2*time.Hour, scheduler.High, 8, time.Hour)},
			want: StarvationBound{Starved: 2, Held: 2}},
		{name: "a high one starves and starts in one pass, on capacity a starving medium one held",
			jobs: []Job{jb("a", 0, scheduler.High, 4, 10*time.Hour), jb("m", time.Minute, scheduler.Medium, 8, time.Hour), jb("h", 2*time.Hour, scheduler.High, 4, 10*time.Hour)},
			want: StarvationBound{Starved: 2, Held: 2}},
		{name: "a job there stopping for a high request when a medium one starves: it waits for that request's run",
			jobs: []Job{jb("m", time.Minute, scheduler.Medium, 8, time.Hour), jb("h", time.Hour+30*time.Second, scheduler.High, 8, 5*time.Hour), jb("a", 0, scheduler.Medium, 8, 10*time.Hour)},
			stop: 5 * time.Minute, want: StarvationBound{Starved: 2, Held: 2}},
		{name: "a starving high one that preempts (it reserves nothing) and runs on a starving medium one's node",
			jobs: []Job{jb("m", time.Minute, scheduler.Medium, 8, time.Hour), jb("h", 2*time.Hour, scheduler.High, 8, 10*time.Hour), jb("a", 0, scheduler.Medium, 8, 10*time.Hour)},
			min:  100 * time.Hour, want: StarvationBound{Starved: 3, Held: 2, Unchecked: 1}},
		{name: "a loan that starts after it starves, by a limit that ends before the start the medium job's limit gave, and outlives that job",
			jobs: []Job{jb("a", 0, scheduler.Medium, 1, 2*time.Hour), jb("m", time.Minute, scheduler.Medium, 8, time.Hour), jb("l", 65*time.Minute, scheduler.High, 1, 84*time.Minute)},
			est:  &Estimates{Kind: EstimateLimit, Factor: 2}, want: StarvationBound{Starved: 1, Held: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pol
			p.Scheduler.MinRuntimeBeforePreemption = tc.min
			est := Estimates{Kind: EstimateLearned}
			if tc.est != nil {
				est = *tc.est
			}
			r := run(t, &Workload{Name: "t", Nodes: nodes(1, 8), Jobs: tc.jobs}, p,
				Options{StopDelay: cmp.Or(tc.stop, 30*time.Second), MaxRetry: -1, Estimates: []Estimates{est}})
			if b := r.Starvation; b == nil || *b != tc.want {
				t.Fatalf("starvation bound %+v, want %+v", b, tc.want)
			}
		})
	}
}

// TestStarvationBoundBroken: a start after the bound is counted broken with its excess; a
// higher-class starving head starting on a lower one's reserved node moves the lower one's bound,
// but not once the lower one is late already.
func TestStarvationBoundBroken(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hiStarts time.Duration // when hi, a starving high head, starts on n1 for an hour
		want     StarvationBound
	}{
		{"hi starts within lo's bound: lo waits for its run too", 50 * time.Minute, StarvationBound{Held: 2}},
		{"hi starts after lo's bound: lo was late already", 90 * time.Minute, StarvationBound{Held: 1, Broken: 1, WorstExcess: Seconds(2 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sim{w: &Workload{Jobs: []Job{{ID: "lo", Class: scheduler.Medium}, {ID: "hi", Class: scheduler.High}}}, jobs: make([]jobState, 2), opt: Options{StopDelay: 30 * time.Second}}
			s.marks = map[int32]starvationMark{
				0: {class: scheduler.Medium, by: time.Hour, nodes: []string{"n1"}},
				1: {class: scheduler.High, by: 2 * time.Hour, nodes: []string{"n1"}},
			}
			s.jobs[1].nodes, s.jobs[1].remaining = []string{"n1"}, time.Hour
			s.now = tc.hiStarts
			s.boundAtStart(1, false)
			s.now = 3 * time.Hour
			if tc.want.Broken == 0 {
				s.now = tc.hiStarts + time.Hour + 30*time.Second + time.Minute // lo's bound, moved
			}
			s.boundAtStart(0, false)
			if s.bound != tc.want {
				t.Fatalf("got %+v, want %+v", s.bound, tc.want)
			}
		})
	}
}
