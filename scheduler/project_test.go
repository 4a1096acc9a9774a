package scheduler

import (
	"strings"
	"testing"
	"time"
)

// TestProject: expected starts from the pool played forward, each with its assumption, or
// unknown with the reason; the pool itself is not changed.
func TestProject(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{})
	limited := makeJob("limited", "a").GPUs(8).Seq(1).Obj()
	limited.RunLimit = 90 * time.Minute
	mustEnqueue(t, p, limited, makeJob("forever", "a").GPUs(8).Seq(2).Obj())
	if d := sched(t, p, at(0)); len(d.Grants) != 2 {
		t.Fatalf("setup: %v", grantedJobs(d))
	}
	second := makeJob("second", "a").GPUs(8).Seq(4).Obj()
	second.RunLimit = 30 * time.Minute
	mustEnqueue(t, p, makeJob("first", "a").GPUs(8).Seq(3).Obj(), second,
		makeJob("third", "a").GPUs(8).Seq(5).Obj(), makeJob("big", "a").GPUs(8).Workers(2).Seq(6).Obj())
	sched(t, p, at(10))
	before := mustJSON(t, p.Snapshot())
	got, err := p.Project(at(10), time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	for job, want := range map[string]struct {
		at      time.Time
		because string
	}{
		// limited ends at 90m: first starts then, without a limit of its own, so it never ends.
		"first": {at(90), "if limited ends by its time limit at 2025-01-01 11:30 UTC"},
		// second waits behind first; first and forever hold every node for ever.
		"second": {time.Time{}, "unknown: the capacity it needs is held by jobs without a time limit (first, forever)"},
		"third":  {time.Time{}, "unknown: the capacity it needs is held by jobs without a time limit"},
		"big":    {time.Time{}, "unknown:"},
	} {
		e, ok := got[job]
		if !ok || !e.At.Equal(want.at) || !strings.Contains(e.Because, want.because) {
			t.Errorf("%s: expected %+v, want at %v because %q", job, e, want.at, want.because)
		}
	}
	if after := mustJSON(t, p.Snapshot()); after != before {
		t.Fatal("the projection changed the pool")
	}

	// With limits all round, every request gets a time, in order, each after the one before.
	q := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{})
	for i, name := range []string{"r0", "w1", "w2"} {
		r := makeJob(name, "a").GPUs(8).Seq(int64(i)).Obj()
		r.RunLimit = time.Duration(10*(i+1)) * time.Minute
		mustEnqueue(t, q, r)
	}
	sched(t, q, at(0))
	got, err = q.Project(at(5), 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := got["w1"]; !e.At.Equal(at(10)) || !strings.Contains(e.Because, "if r0 ends by its time limit") {
		t.Errorf("w1: %+v", e)
	}
	if e := got["w2"]; !e.At.Equal(at(30)) || !strings.Contains(e.Because, "if w1 ends by its time limit at 2025-01-01 10:30 UTC") {
		t.Errorf("w2: %+v", e)
	}

	// A preemptor starts once its victim has stopped.
	v := poolWith(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{}, running("low").Class(Low).GPUs(8))
	mustEnqueue(t, v, makeJob("high", "a").Class(High).GPUs(8).Obj())
	got, _ = v.Project(at(20), 2*time.Minute, nil)
	if e := got["high"]; !e.At.Equal(at(22)) || !strings.Contains(e.Because, "if low stops for high at 2025-01-01 10:22 UTC") {
		t.Errorf("high: %+v", e)
	}

	// A request that can start now says so.
	r := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), Policy{})
	mustEnqueue(t, r, makeJob("now", "a").GPUs(8).Obj())
	got, _ = r.Project(at(0), time.Minute, nil)
	if e := got["now"]; !e.At.Equal(at(0)) || e.Because != "it can start now" {
		t.Errorf("now: %+v", e)
	}
}

// TestProjectOverdueEstimate: a job past its time limit is taken to end at once (it is being
// stopped); one past an estimate (RunEstimated) to run for one more estimate, and the waiting
// job's expected start says which.
func TestProjectOverdueEstimate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		estimated bool
		want      time.Time
		because   string
	}{
		{"limit", false, at(90), "it can start now"},
		{"estimate", true, at(120), "ends within its estimated run time again (it is past its estimate)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
			r := makeJob("long", "a").GPUs(4).Seq(1).Obj()
			r.RunLimit, r.RunEstimated = 30*time.Minute, tc.estimated
			mustEnqueue(t, p, r)
			sched(t, p, at(0))
			mustEnqueue(t, p, makeJob("next", "a").GPUs(4).Seq(2).Obj())
			sched(t, p, at(90)) // an hour past its 30 minutes
			got, err := p.Project(at(90), 0, []string{"next"})
			if err != nil {
				t.Fatal(err)
			}
			e := got["next"]
			if !e.At.Equal(tc.want) || !strings.Contains(e.Because, tc.because) {
				t.Fatalf("expected start %v (%s), want %v (%s)", e.At, e.Because, tc.want, tc.because)
			}
		})
	}
}

// TestProjectProgress: a job without a time limit that reports its progress is expected to end
// when its rate says (from its start with one report, from its first report with more), and
// sooner than its time limit says if the limit is later; a snapshot keeps the reports.
func TestProjectProgress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   time.Duration
		reports []progressMark // minutes after the start, share done
		want    time.Time
		because string
	}{
		{"no report, no limit: unknown", 0, nil, time.Time{}, "held by jobs without a time limit"},
		{"one report: the rate since the start", 0, []progressMark{{at(20), 0.25}}, at(80), "25% done"},
		{"two reports: the rate between them", 0, []progressMark{{at(10), 0.5}, at20(0.6)}, at(60), "60% done"},
		{"a later limit: progress says sooner", 3 * time.Hour, []progressMark{{at(20), 0.25}}, at(80), "25% done"},
		{"a sooner limit wins", 70 * time.Minute, []progressMark{{at(20), 0.25}}, at(70), "ends by its time limit"},
		{"a bad share changes nothing", 0, []progressMark{{at(20), 1.5}}, time.Time{}, "held by jobs without a time limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
			r := makeJob("long", "a").GPUs(4).Seq(1).Obj()
			r.RunLimit = tc.limit
			mustEnqueue(t, p, r)
			sched(t, p, at(0))
			for _, m := range tc.reports {
				p.Progressed("long", r.Attempt, m.at, m.done)
			}
			mustEnqueue(t, p, makeJob("next", "a").GPUs(4).Seq(2).Obj())
			sched(t, p, at(21))
			for _, q := range []*Pool{p, roundTrip(t, p)} {
				got, err := q.Project(at(21), 0, []string{"next"})
				if err != nil {
					t.Fatal(err)
				}
				e := got["next"]
				if !e.At.Equal(tc.want) || !strings.Contains(e.Because, tc.because) {
					t.Fatalf("expected start %v (%s), want %v (%s)", e.At, e.Because, tc.want, tc.because)
				}
			}
		})
	}
}

func at20(done float64) progressMark { return progressMark{at: at(20), done: done} }
