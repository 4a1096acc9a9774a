package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

func TestParseEstimates(t *testing.T) {
	got, err := ParseEstimates("exact, limit:2x,learned,learned:p50,limit:1.5")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.String())
	}
	if s := strings.Join(names, " "); s != "exact limit:2x learned learned:p50 limit:1.5x" {
		t.Fatalf("parsed %s", s)
	}
	if got[1].Factor != 2 || got[3].Percentile != 0.5 {
		t.Fatalf("parsed %+v", got)
	}
	if got, err := ParseEstimates("none"); err != nil || got != nil {
		t.Fatalf("none: %v %v", got, err)
	}
	for _, bad := range []string{"limit:0.5x", "limit:x", "exact,none", "guess", "learned:p0", ""} {
		if _, err := ParseEstimates(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The RunLimit a request carries: exact is the remaining work, limit:2x twice the runtime less
// what earlier attempts ran (at least MinRerunLimit; once they ran that long, twice the runtime
// again), none nothing.
func TestRunLimits(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{jb("a", 0, scheduler.Low, 4, time.Hour)}}
	for _, c := range []struct {
		est            Estimates
		ran, remaining time.Duration
		want           time.Duration
	}{
		{Estimates{Kind: EstimateNone}, 0, time.Hour, 0},
		{Estimates{Kind: EstimateExact}, 0, time.Hour, time.Hour},
		{Estimates{Kind: EstimateExact}, 20 * time.Minute, 40 * time.Minute, 40 * time.Minute},
		{Estimates{Kind: EstimateLimit, Factor: 2}, 0, time.Hour, 2 * time.Hour},
		{Estimates{Kind: EstimateLimit, Factor: 2}, 30 * time.Minute, time.Hour, 90 * time.Minute},
		{Estimates{Kind: EstimateLimit, Factor: 2}, 2*time.Hour - 30*time.Second, time.Hour, scheduler.MinRerunLimit},
		{Estimates{Kind: EstimateLimit, Factor: 2}, 3 * time.Hour, time.Hour, 2 * time.Hour}, // outrun: one more
		{Estimates{Kind: EstimateLearned}, 0, time.Hour, 0},                                  // nothing learned: no estimate
	} {
		s, err := newSim(w, prio, Options{StopDelay: time.Second}, c.est)
		if err != nil {
			t.Fatal(err)
		}
		s.jobs[0].attempt, s.jobs[0].ran, s.jobs[0].remaining = 1, c.ran, c.remaining
		if got := s.request(0).RunLimit; got != c.want {
			t.Errorf("%s, ran %s: RunLimit %s, want %s", c.est, c.ran, got, c.want)
		}
	}
}

// A learned estimate comes only from jobs that completed before the submission: a job of the
// same shape still running (even one that will run 100h) counts for nothing.
func TestLearnedUsesOnlyThePast(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(6, 4), Jobs: []Job{
		jb("a0", 0, scheduler.Medium, 1, time.Hour),
		jb("a1", 0, scheduler.Medium, 1, 2*time.Hour),
		jb("a2", 0, scheduler.Medium, 1, 3*time.Hour),
		jb("long", 0, scheduler.Medium, 1, 100*time.Hour),
		jb("early", 150*time.Minute, scheduler.Medium, 1, time.Minute), // 2 completed: too few
		jb("late", 3*time.Hour+time.Second, scheduler.Medium, 1, time.Minute),
		jb("other", 3*time.Hour+time.Second, scheduler.Medium, 2, time.Minute), // another shape
	}}
	s, err := newSim(w, prio, Options{StopDelay: time.Second}, Estimates{Kind: EstimateLearned})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.loop(); err != nil {
		t.Fatal(err)
	}
	st := func(id string) *jobState { return &s.jobs[s.idx[id]] }
	if st("early").hasEst {
		t.Errorf("early got an estimate %s from 2 completed jobs", st("early").estimate)
	}
	// p90 (nearest rank) of 1h, 2h, 3h, and the early job's 1m: ceil(0.9·4) = the 4th.
	if e := st("late"); !e.hasEst || e.estimate != 3*time.Hour || e.estLevel != 0 {
		t.Errorf("late: estimate %s (has %v, level %d), want 3h from its own shape", e.estimate, e.hasEst, e.estLevel)
	}
	if st("other").hasEst {
		t.Errorf("other (2 GPUs) got an estimate %s from 1-GPU jobs", st("other").estimate)
	}
	if got := s.request(s.idx["late"]).RunLimit; got != 3*time.Hour {
		t.Errorf("late's request carries %s", got)
	}
}

func TestLearnerKeepsTheLastRuns(t *testing.T) {
	l := newLearner(1) // the most of the last LearnedRuns
	keys := [2]string{"fine", "coarse"}
	for k := 1; k <= scheduler.LearnedRuns+5; k++ {
		l.observe(keys, time.Duration(100-k)*time.Minute) // decreasing: the first 5 are the longest
	}
	if d, _, ok := l.estimate(keys); !ok || d != 94*time.Minute {
		t.Fatalf("estimate %s %v, want 94m (the first 5 runs forgotten)", d, ok)
	}
	// A shape with too few runs falls back to the coarse key.
	l.observe([2]string{"rare", "coarse"}, time.Minute)
	if d, lv, ok := l.estimate([2]string{"rare", "coarse"}); !ok || lv != 1 || d != 93*time.Minute { // the 1m pushed out 94m
		t.Fatalf("rare: %s level %d %v", d, lv, ok)
	}
}

func TestETAErrors(t *testing.T) {
	h := time.Hour
	recs := []etaRec{
		{etaPred{at: 2 * h, asked: h, set: true}, 2 * h, h}, // exact
		{etaPred{at: 3 * h, set: true}, 2 * h, 2 * h},       // 1h early: 50% of its wait
		{etaPred{at: 1 * h, set: true}, 5 * h, 4 * h},       // 4h late: 100%
		{etaPred{at: 10 * h, set: true}, 4 * h, 3 * h},      // 6h early: 200%
		{etaPred{set: true, unknown: 1}, 4 * h, 3 * h},      // no estimate
		{etaPred{set: true, unknown: 2}, 4 * h, 3 * h},      // beyond the horizon
		{etaPred{}, 4 * h, 3 * h},                           // never asked: counted as beyond
	}
	e := etaErrors(recs)
	if e.Known != 4 || e.NoEstimate != 1 || e.Horizon != 2 || !near(e.UnknownPct, 300.0/7) {
		t.Fatalf("counts %+v", e)
	}
	// |errors| 0, 1h, 4h, 6h: p50 the 2nd, p90 the 4th; shares 0, 50, 100, 200%.
	if e.AbsP50.D() != h || e.AbsP90.D() != 6*h || e.RelP50 != 50 || e.RelP90 != 200 {
		t.Fatalf("quantiles %+v", e)
	}
	if e.Late != 1 || e.LatePct != 25 || e.Now != 0 {
		t.Fatalf("late %+v", e)
	}
	if n := etaErrors([]etaRec{{etaPred{at: h, asked: h, set: true}, 2 * h, h}}); n.Now != 1 || n.NowPct != 100 || n.Late != 1 {
		t.Fatalf("expected at the moment asked: %+v", n)
	}
	if z := etaErrors(nil); z.Known != 0 || z.AbsP50 != 0 || z.UnknownPct != 0 {
		t.Fatalf("empty %+v", z)
	}
}

func TestBaselineETA(t *testing.T) {
	m := time.Minute
	starts := []time.Duration{0, 10 * m, 20 * m, 50 * m, 70 * m}
	// In (20m, 80m]: 50m and 70m, 2 an hour; position 3 is 1h30m away.
	if at, ok := baselineETA(80*m, 3, starts, time.Hour); !ok || at != 80*m+90*m {
		t.Fatalf("at %s %v, want 2h50m", at, ok)
	}
	// The window's edge is out: at 80m a start at 20m is not in the last hour.
	if at, ok := baselineETA(80*m, 1, starts, 2*time.Hour); !ok || at != 80*m+24*m {
		t.Fatalf("2h window: %s %v, want 1h44m (5 starts in 2h)", at, ok)
	}
	if _, ok := baselineETA(200*m, 1, starts, time.Hour); ok {
		t.Fatal("no start in the last hour must be unknown")
	}
}

// One node of 4 GPUs: a (high) runs 1h from 0; b (medium, 4 GPUs) arrives at 1m and waits for it;
// h, high too (it may not preempt a), arrives at 2m and waits ahead of b: h starts at 1h, b at
// 1h10m.
func TestETAMeasured(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.High, 4, time.Hour),
		jb("b", time.Minute, scheduler.Medium, 4, 30*time.Minute),
		jb("h", 2*time.Minute, scheduler.High, 4, 10*time.Minute),
	}}
	opt := Options{StopDelay: time.Second, MaxRetry: -1, Estimates: []Estimates{{Kind: EstimateExact}, {Kind: EstimateLimit, Factor: 2}}}
	r := run(t, w, prio, opt)
	e := r.ETA
	if e == nil || e.Waited != 2 || e.Measured != 2 || len(e.Models) != 5 {
		t.Fatalf("eta %+v", e)
	}
	ex, lim, base := e.Models[0], e.Models[2], e.Models[4]
	// With fewer samples than a forecast needs, it is the projection, without a range.
	for _, k := range []int{0, 2} {
		m, f := e.Models[k], e.Models[k+1]
		if f.Name != "forecast ("+m.Name+")" || f.AtSubmission != m.AtSubmission || f.BeforeStart != m.BeforeStart || f.RangeAtSubmission != nil {
			t.Errorf("%s: %+v, want the projection's errors %+v and no range", f.Name, f, m)
		}
	}
	// Exact: at its submission h is expected at 1h (it is first in line) and starts then; b is
	// expected at 1h when it is submitted (h is not there yet) but starts at 1h10m: 10m late.
	if a := ex.AtSubmission; a.Known != 2 || a.AbsP50 != 0 || a.AbsP90.D() != 10*time.Minute || a.Late != 1 {
		t.Errorf("exact at submission %+v", a)
	}
	if b := ex.BeforeStart; b.Known != 2 || b.AbsP90 != 0 {
		t.Errorf("exact before start %+v", b)
	}
	// limit:2x: a is expected to end at 2h: h at 2h (1h early), b at 2h (50m early).
	if a := lim.AtSubmission; a.Known != 2 || a.AbsP50.D() != 50*time.Minute || a.AbsP90.D() != time.Hour || a.Late != 0 {
		t.Errorf("limit:2x at submission %+v", a)
	}
	// The baseline: b at 1m is 1st in line with 1 start (a's) in the last hour: 1m + 1h, 9m
	// before its start (late); h at 2m is 1st too (ahead of b): 2m + 1h, 2m after its start.
	if !strings.HasPrefix(base.Name, BaselineName) {
		t.Fatalf("baseline %q", base.Name)
	}
	if a := base.AtSubmission; a.Known != 2 || a.AbsP50.D() != 2*time.Minute || a.AbsP90.D() != 9*time.Minute || a.Late != 1 {
		t.Errorf("baseline at submission %+v", a)
	}
	var b strings.Builder
	WriteMarkdown(&b, []*Result{r})
	for _, want := range []string{"for the 2 jobs whose first attempt waited 10m00s or more (2 measured)", "| exact | 0s | 10m00s |", "| limit:2x | 50m00s | 1h00m |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// The longest waiter of each class is named, with the reason the pool gave and where it fits.
func TestLongestWaiters(t *testing.T) {
	w := &Workload{Name: "t", Nodes: append(nodes(1, 4), scheduler.Node{Name: "small", Family: "a", GPUs: 1, CPU: 64, RAMGB: 512}), Jobs: []Job{
		jb("a", 0, scheduler.High, 4, time.Hour),
		jb("b", time.Minute, scheduler.Medium, 4, 30*time.Minute),
		jb("c", 2*time.Minute, scheduler.Medium, 4, 30*time.Minute),
	}}
	r := run(t, w, prio, Options{StopDelay: time.Second, MaxRetry: -1})
	if len(r.Longest) != 1 {
		t.Fatalf("longest %+v", r.Longest)
	}
	x := r.Longest[0]
	if x.Job != "c" || x.Class != "medium" || x.Wait.D() != 88*time.Minute || x.Samples != 9 || x.Reason == "" || strings.Join(x.FitsOn, " ") != "n1" {
		t.Fatalf("longest %+v", x)
	}
	if x.Holders["high"] != 1 || x.Holders["medium"] != 1 {
		t.Fatalf("holders %+v", x.Holders)
	}
	// Per class: the 4-7 GPUs bucket, then 4+ GPUs (the same jobs here).
	if len(r.SizeWaits) != 4 || r.SizeWaits[2].Class != "medium" || r.SizeWaits[2].Size != "4-7 GPUs" || r.SizeWaits[2].P95.D() != 88*time.Minute ||
		r.SizeWaits[3].Size != Row4GPU || r.SizeWaits[3].P95.D() != 88*time.Minute || r.SizeWaits[1].Size != Row4GPU || r.SizeWaits[1].Class != "high" {
		t.Fatalf("size waits %+v", r.SizeWaits)
	}
}

// TestEstimateAccuracy: the report says how each model's estimates compare with the true
// runtimes: exact is right, limit:2x twice as long; learned (3 earlier runs of 1h of the same
// shape, then one of 4h) is short for the 4h job only.
func TestEstimateAccuracy(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Medium, 1, time.Hour),
		jb("b", 0, scheduler.Medium, 1, time.Hour),
		jb("c", 0, scheduler.Medium, 1, time.Hour),
		jb("d", 2*time.Hour, scheduler.Medium, 1, 4*time.Hour),
	}}
	opt := Options{StopDelay: time.Second, MaxRetry: -1, Estimates: []Estimates{{Kind: EstimateExact}, {Kind: EstimateLimit, Factor: 2}, {Kind: EstimateLearned}}}
	r := run(t, w, prio, opt)
	if r.ETA == nil || len(r.ETA.Models) != 7 {
		t.Fatalf("eta %+v", r.ETA)
	}
	for k, want := range []EstimateAccuracy{
		{Jobs: 4, Below: 0, MedianRatio: 1, P10Ratio: 1},
		{Jobs: 4, Below: 0, MedianRatio: 2, P10Ratio: 2},
		{Jobs: 1, Below: 1, MedianRatio: 0.25, P10Ratio: 0.25},
	} {
		if got := r.ETA.Models[2*k].Accuracy; got == nil || *got != want {
			t.Errorf("%s: accuracy %+v, want %+v", r.ETA.Models[2*k].Name, got, want)
		}
	}
	if r.ETA.Models[6].Accuracy != nil {
		t.Errorf("the baseline carries no estimates: %+v", r.ETA.Models[6].Accuracy)
	}
	var b strings.Builder
	WriteMarkdown(&b, []*Result{r})
	if want := "Estimates learned: 1 jobs carried one; 100% were shorter than the true runtime"; !strings.Contains(b.String(), want) {
		t.Errorf("want %q in\n%s", want, b.String())
	}
}

// TestReasonKeyGroupsOneCause: the reasons a wait is given at two moments, with its blockers'
// run times in other units and one past its estimate by then, are one reason; another cause is
// another.
func TestReasonKeyGroupsOneCause(t *testing.T) {
	a := "it has been the first high-priority request for 25h14m15s (reserve_after 30m0s), so node n-1 is reserved for it; " +
		"the jobs there that it may not preempt and that leave it no room are j-7 (high, running 45m, estimated 11h11m)"
	b := "it has been the first high-priority request for 446h12m20s (reserve_after 30m0s), so node n-1 is reserved for it; " +
		"the jobs there that it may not preempt and that leave it no room are j-7 (high, running 279h, past its estimate of 11h11m)"
	other := "not enough capacity is free or being released, and low-priority jobs do not preempt others"
	if reasonKey(a) != reasonKey(b) {
		t.Fatalf("one cause, two keys:\n%s\n%s", reasonKey(a), reasonKey(b))
	}
	if reasonKey(a) == reasonKey(other) {
		t.Fatal("two causes, one key")
	}
}
