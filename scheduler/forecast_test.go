package scheduler

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestForecastWithoutARecordIsTheProjection: until the pool has ForecastMinSamples finished
// samples, an expected start is the projection's, without a range.
func TestForecastWithoutARecordIsTheProjection(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 1, 8, 64), Policy{})
	r := makeJob("run", "a").GPUs(1).Obj()
	r.RunLimit = time.Hour
	mustEnqueue(t, p, r, makeJob("wait", "a").GPUs(1).Seq(2).Obj())
	sched(t, p, at(0))
	p.SampleForecasts(at(0), 0)
	proj, err := p.Project(at(1), 0, []string{"wait"})
	if err != nil {
		t.Fatal(err)
	}
	fc, err := p.Forecast(at(1), 0, []string{"wait"})
	if err != nil {
		t.Fatal(err)
	}
	if fc["wait"] != proj["wait"] || !fc["wait"].At.Equal(at(60)) || !fc["wait"].Earliest.IsZero() {
		t.Fatalf("forecast %+v, want the projection %+v without a range", fc["wait"], proj["wait"])
	}
}

// forecastEvent is a job ending (or arriving, with arrive set) in forecastStream.
type forecastEvent struct {
	at     time.Time
	job    int
	arrive bool
}

type forecastQueue []forecastEvent

func (q forecastQueue) Len() int { return len(q) }
func (q forecastQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].job < q[j].job
}
func (q forecastQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *forecastQueue) Push(x any)   { *q = append(*q, x.(forecastEvent)) }
func (q *forecastQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// forecastOutcome is how one stream's expected starts, asked just after each submission, fared
// once the jobs started.
type forecastOutcome struct {
	ranged, inside int
	pointErr       []time.Duration // |forecast − start|
	projErr        []time.Duration // |projection − start|
}

// forecastStream plays n jobs through a pool of 4 one-GPU nodes: they arrive about every
// 20 minutes and run 30 to 150 minutes, while their estimates (RunEstimated) are the true
// runtime times estimateFactor, so the projection is wrong the same way for all of them, as a
// learned estimate is for a shape. After each job's submission it asks Forecast and Project
// for it; after the first half of the stream it keeps what they said.
func forecastStream(t *testing.T, seed uint64, n int, estimateFactor float64) forecastOutcome {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	p := mustPool(t, nodesOf("n", "a", 4, 1, 8, 64), Policy{})
	runtime := make([]time.Duration, n)
	asked := make([]ExpectedStart, n)
	projected := make([]time.Time, n)
	q := &forecastQueue{}
	now := at(0)
	for i := range n {
		now = now.Add(time.Duration(rng.IntN(40)) * time.Minute)
		runtime[i] = time.Duration(30+rng.IntN(120)) * time.Minute
		heap.Push(q, forecastEvent{at: now, job: i, arrive: true})
	}
	var out forecastOutcome
	for q.Len() > 0 {
		e := heap.Pop(q).(forecastEvent)
		now = e.at
		job := fmt.Sprintf("j%03d", e.job)
		if e.arrive {
			r := makeJob(job, "a").GPUs(1).Seq(int64(e.job + 1)).Obj()
			r.SubmittedAt = now
			r.RunLimit, r.RunEstimated = time.Duration(float64(runtime[e.job])*estimateFactor), true
			mustEnqueue(t, p, r)
		} else {
			p.BeginRelease(job)
			p.Release(job, 0, 0)
		}
		d := p.Schedule(now)
		p.SampleForecasts(now, 0)
		for _, g := range d.Grants {
			var k int
			if _, err := fmt.Sscanf(g.Job, "j%d", &k); err != nil {
				t.Fatal(err)
			}
			heap.Push(q, forecastEvent{at: now.Add(runtime[k]), job: k})
			if k < n/2 || asked[k].At.IsZero() {
				continue
			}
			if a := asked[k]; !a.Earliest.IsZero() {
				out.ranged++
				if !now.Before(a.Earliest) && !now.After(a.Latest) {
					out.inside++
				}
			}
			out.pointErr = append(out.pointErr, absDur(now.Sub(asked[k].At)))
			out.projErr = append(out.projErr, absDur(now.Sub(projected[k])))
		}
		if !e.arrive {
			continue
		}
		if _, waits := p.Waiting(job); !waits {
			continue
		}
		fc, err := p.Forecast(now, 0, []string{job})
		if err != nil {
			t.Fatal(err)
		}
		pr, err := p.Project(now, 0, []string{job})
		if err != nil {
			t.Fatal(err)
		}
		asked[e.job], projected[e.job] = fc[job], pr[job].At
	}
	slices.Sort(out.pointErr)
	slices.Sort(out.projErr)
	return out
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestForecastCorrectsAndRanges: when every estimate is a third of the true runtime, the
// projection expects each job far too early; the forecast, which has seen how wrong it was,
// halves the projection's median error, and about 8 in 10 jobs start inside their range.
// Without the record's correction (the projection itself) the median error stays as it was.
func TestForecastCorrectsAndRanges(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			o := forecastStream(t, seed, 600, 1.0/3)
			if len(o.pointErr) < 100 || o.ranged < len(o.pointErr)*9/10 {
				t.Fatalf("%d expected starts measured, %d with a range: the stream does not queue", len(o.pointErr), o.ranged)
			}
			share := float64(o.inside) / float64(o.ranged)
			point, proj := o.pointErr[len(o.pointErr)/2], o.projErr[len(o.projErr)/2]
			t.Logf("%d ranged, %.0f%% inside; median error forecast %s, projection %s", o.ranged, 100*share, point, proj)
			if share < 0.7 || share > 0.9 {
				t.Errorf("%.0f%% of the starts inside their 80%% range, want 70 to 90%%", 100*share)
			}
			if 2*point > proj {
				t.Errorf("median error of the forecast %s, of the projection %s: want it at most half", point, proj)
			}
		})
	}
}

// TestForecastSurvivesSnapshot: the record goes through continue-as-new whole, and a pool
// restored from it forecasts as the original does.
func TestForecastSurvivesSnapshot(t *testing.T) {
	p, now := sampledPool(t)
	for i := range 3 {
		mustEnqueue(t, p, makeJob(fmt.Sprintf("w%d", i), "a").GPUs(1).Seq(int64(1000+i)).Obj())
	}
	sched(t, p, now)
	p.SampleForecasts(now.Add(ForecastSampleEvery), 0)
	if len(p.forecast.done) == 0 || len(p.forecast.pending) == 0 {
		t.Fatalf("the stream left %d finished and %d pending samples, want some of each", len(p.forecast.done), len(p.forecast.pending))
	}
	q := roundTrip(t, p)
	if a, b := mustJSON(t, q.Snapshot().Forecast), mustJSON(t, p.Snapshot().Forecast); a != b {
		t.Fatalf("restored record differs:\n%s\n%s", a, b)
	}
	want, _ := p.Forecast(now, 0, nil)
	got, _ := q.Forecast(now, 0, nil)
	if mustJSON(t, got) != mustJSON(t, want) {
		t.Fatalf("restored pool forecasts %s, the original %s", mustJSON(t, got), mustJSON(t, want))
	}
}

// TestCarryForecast: a pool rebuilt from the jobs (the allocator's recovery) keeps what the old
// one learned of its errors, and forecasts with a range at once.
func TestCarryForecast(t *testing.T) {
	p, now := sampledPool(t)
	job := p.waiting[0].r.Job
	want, _ := p.Forecast(now, 0, []string{job})
	if want[job].Earliest.IsZero() {
		t.Fatalf("the stream left no range: %+v (%d samples)", want[job], len(p.forecast.done))
	}
	fresh := rebuilt(t, p, true)
	if got, _ := fresh.Forecast(now, 0, []string{job}); !got[job].Earliest.IsZero() {
		t.Fatalf("a pool rebuilt without the record has a range: %+v", got[job])
	}
	q := rebuilt(t, p, true)
	q.CarryForecast(p)
	got, _ := q.Forecast(now, 0, []string{job})
	if !got[job].Earliest.Equal(want[job].Earliest) || !got[job].Latest.Equal(want[job].Latest) {
		t.Fatalf("carried: %+v, the old pool's %+v", got[job], want[job])
	}
}

// sampledPool is a one-GPU pool after 60 rounds of two 10-minute jobs every 20 minutes (one of
// each two waits), sampled as the allocator samples: its record has finished samples. It
// returns the pool and the time of its last pass.
func sampledPool(t *testing.T) (*Pool, time.Time) {
	t.Helper()
	return playRounds(t, 1, 60, 2, 20*time.Minute, 10*time.Minute)
}

// playRounds plays rounds of perRound one-GPU jobs (each with an estimated runLimit; 0: none)
// on a pool of nodes one-GPU nodes: each round queues them, passes, waits every and releases
// every running job, then passes again, sampling after each pass as the allocator does.
func playRounds(t *testing.T, nodes, rounds, perRound int, every, runLimit time.Duration) (*Pool, time.Time) {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", nodes, 1, 8, 64), Policy{})
	now := at(0)
	for i := range rounds {
		for k := range perRound {
			r := makeJob(fmt.Sprintf("j%03d-%d", i, k), "a").GPUs(1).Seq(int64(perRound*i + k + 1)).Obj()
			r.RunLimit, r.RunEstimated = runLimit, runLimit > 0
			mustEnqueue(t, p, r)
		}
		sched(t, p, now)
		p.SampleForecasts(now, 0)
		now = now.Add(every)
		for _, job := range p.RunningJobs() {
			p.BeginRelease(job)
			p.Release(job, 0, 0)
		}
		sched(t, p, now)
		p.SampleForecasts(now, 0)
	}
	return p, now
}

// TestForecastWithoutTimeLimits: when no job has a time limit the projection knows no start, and
// once the record has seen how the queue moved, a waiting job gets an expected start and a range
// from its place in the queue, and says so.
func TestForecastWithoutTimeLimits(t *testing.T) {
	p, now := playRounds(t, 2, 120, 3, 15*time.Minute, 0) // two start, one waits
	job := p.waiting[len(p.waiting)-1].r.Job
	proj, _ := p.Project(now, 0, []string{job})
	if !proj[job].At.IsZero() {
		t.Fatalf("the projection knows a start without time limits: %+v", proj[job])
	}
	got, _ := p.Forecast(now, 0, []string{job})
	e := got[job]
	if e.At.IsZero() || e.Earliest.IsZero() || e.At.Before(e.Earliest) || e.Latest.Before(e.At) {
		t.Fatalf("forecast %+v, want a start inside a range", e)
	}
	t.Log(e.Because)
	if !strings.Contains(e.Because, "from its place in the queue (") || !strings.Contains(e.Because, "the projection has none: the capacity it needs is held by jobs without a time limit") {
		t.Errorf("because %q", e.Because)
	}
}

func TestKaplanMeierQuantile(t *testing.T) {
	done := func(e float64) censoredErr { return censoredErr{err: e} }
	waiting := func(e float64) censoredErr { return censoredErr{err: e, censored: true} }
	for _, tc := range []struct {
		name  string
		given []censoredErr
		q     float64
		want  float64
	}{
		{"nothing censored: the empirical quantile", []censoredErr{done(1), done(2), done(3), done(4)}, 0.5, 2},
		{"nothing censored, the top", []censoredErr{done(1), done(2), done(3), done(4)}, 0.9, 4},
		{"censored below every finished error changes nothing", []censoredErr{waiting(0), waiting(0.5), done(1), done(2), done(3), done(4)}, 0.5, 2},
		// After 1 and 2 (a share of 1/2), 3 of the 4 at risk are still waiting past 2: the
		// finished 5 takes the rest (1/2 + 1/2 ÷ 1).
		{"censored above: the median moves past them", []censoredErr{done(1), done(2), waiting(3), waiting(3), waiting(4), done(5)}, 0.6, 5},
		{"a share past the last finished: the largest error seen", []censoredErr{done(1), done(2), waiting(7)}, 0.9, 7},
		{"a finished and a censored error equal: the finished one counts first", []censoredErr{done(1), done(2), waiting(2)}, 0.6, 2},
		{"none", nil, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := slices.Clone(tc.given)
			slices.SortFunc(s, cmpCensoredErr)
			if got := kaplanMeierQuantile(s, tc.q); got != tc.want {
				t.Errorf("quantile %.2f of %v = %v, want %v", tc.q, tc.given, got, tc.want)
			}
		})
	}
}

// recordOf is a forecast record of n finished samples and m still waiting, all asked when the
// projection and the queue-position figure said 10 minutes: the finished ones waited done and
// had waited doneAge when asked; the waiting ones were asked waitingFor before now, at
// submission.
func recordOf(now time.Time, n int, done, doneAge time.Duration, m int, waitingFor time.Duration) forecastRecord {
	var fc forecastRecord
	for i := range n {
		fc.done = append(fc.done, forecastSample{job: fmt.Sprintf("d%d", i), attempt: 1, asked: now.Add(-48 * time.Hour),
			age: doneAge, proj: 10 * time.Minute, naive: 10 * time.Minute, actual: done})
	}
	for i := range m {
		fc.pending = append(fc.pending, forecastSample{job: fmt.Sprintf("p%d", i), attempt: 1, asked: now.Add(-waitingFor),
			proj: 10 * time.Minute, naive: 10 * time.Minute, actual: -1})
	}
	return fc
}

// TestForecastCountsTheStillWaiting: when the queue has slowed, the samples that finished are the
// short waits and the long ones are still waiting. The range must reach past what the waiting
// ones have waited already, not end at what the finished ones waited.
func TestForecastCountsTheStillWaiting(t *testing.T) {
	now := at(0).Add(72 * time.Hour)
	for _, tc := range []struct {
		name              string
		waiting           int
		wantLatestAtLeast time.Duration
		wantLatestBelow   time.Duration
	}{
		{"none waiting: the finished waits", 0, 10 * time.Minute, 11 * time.Minute},
		{"half of the record waiting for 5 hours", 30, 5 * time.Hour, 1000 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := recordOf(now, 30, 10*time.Minute, 0, tc.waiting, 5*time.Hour)
			f, ok := fc.rangeFit(now, 0, 10*time.Minute, 10*time.Minute)
			if !ok {
				t.Fatal("no fit")
			}
			latest := waitOfLog(blend(f.weight, 10*time.Minute, 10*time.Minute) + f.q[2]).Round(time.Second)
			if latest < tc.wantLatestAtLeast || latest >= tc.wantLatestBelow {
				t.Errorf("the range ends %s from now, want from %s to %s", latest, tc.wantLatestAtLeast, tc.wantLatestBelow)
			}
		})
	}
}

// TestForecastByWaitSoFar: the same figures mean a different wait for a request just queued
// and for one that has been queued for a day; each one's range is what requests like it waited.
func TestForecastByWaitSoFar(t *testing.T) {
	now := at(0).Add(72 * time.Hour)
	fc := recordOf(now, 40, 10*time.Minute, 0, 0, 0)
	old := recordOf(now, 40, 5*time.Hour, 24*time.Hour, 0, 0)
	fc.done = append(fc.done, old.done...)
	for _, tc := range []struct {
		age  time.Duration
		want time.Duration
	}{
		{0, 10 * time.Minute},
		{20 * time.Hour, 5 * time.Hour},
	} {
		f, ok := fc.rangeFit(now, tc.age, 10*time.Minute, 10*time.Minute)
		if !ok {
			t.Fatal("no fit")
		}
		b := blend(f.weight, 10*time.Minute, 10*time.Minute)
		lo, hi := waitOfLog(b+f.q[0]).Round(time.Minute), waitOfLog(b+f.q[2]).Round(time.Minute)
		if lo != tc.want || hi != tc.want {
			t.Errorf("queued %s ago: expected to start %s to %s from now, want %s", tc.age, lo, hi, tc.want)
		}
	}
}
