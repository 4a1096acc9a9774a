package simulate

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

func nodes(n, gpus int) []scheduler.Node {
	out := make([]scheduler.Node, n)
	for i := range out {
		out[i] = scheduler.Node{Name: "n" + string(rune('1'+i)), Family: "a", GPUs: gpus, CPU: 64, RAMGB: 512}
	}
	return out
}

func jb(id string, arrival time.Duration, c scheduler.Class, gpus int, runtime time.Duration) Job {
	return Job{ID: id, Arrival: arrival, Class: c, Demand: scheduler.Demand{Family: "a", GPUs: gpus}, Workers: 1, Runtime: runtime}
}

// fixedClock makes Schedule timings deterministic: every call takes 1µs.
func fixedClock() func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time { t = t.Add(500 * time.Nanosecond); return t }
}

func run(t *testing.T, w *Workload, pol Policy, opt Options) *Result {
	t.Helper()
	opt.Clock = fixedClock()
	r, err := Run(w, pol, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	prio = Policy{Name: "best-effort"}
	fifo = Policy{Name: "fifo", NoPriorities: true}
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// One node of 4 GPUs: a low job runs 10m from 0; a high job arrives at 1m and runs 5m.
func TestPreemptAndRerun(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Low, 4, 10*time.Minute),
		jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
	}}
	for _, tc := range []struct {
		name      string
		pol       Policy
		opt       Options
		makespan  time.Duration
		waitA     time.Duration // low
		waitB     time.Duration // high
		lostHours float64
		preempted int
		givenUp   int
		useful    float64 // useful utilisation
	}{
		// b preempts a at 1m; a stops at 1m30s; b runs 1m30s-6m30s; a reruns from zero 6m30s-16m30s.
		{"priorities", prio, Options{StopDelay: 30 * time.Second, MaxRetry: -1}, 16*time.Minute + 30*time.Second,
			5 * time.Minute, 30 * time.Second, 4.0 / 60, 1, 0, 60.0 / 66},
		// Checkpoints every 20s: a keeps its first minute and reruns for 9m, until 15m30s.
		{"checkpoint", prio, Options{StopDelay: 30 * time.Second, Checkpoint: 20 * time.Second, MaxRetry: -1}, 15*time.Minute + 30*time.Second,
			5 * time.Minute, 30 * time.Second, 0, 1, 0, 60.0 / 62},
		// No retries: a ends when it has stopped; b ends at 6m30s.
		{"max_retry 0", prio, Options{StopDelay: 30 * time.Second, MaxRetry: 0}, 6*time.Minute + 30*time.Second,
			0, 30 * time.Second, 4.0 / 60, 1, 1, 20.0 / 26},
		// Plain FIFO: b waits for a to finish at 10m.
		{"fifo", fifo, Options{StopDelay: 30 * time.Second, MaxRetry: -1}, 15 * time.Minute,
			0, 9 * time.Minute, 0, 0, 0, 1},
		// Burst: both arrive at 0, one event after the other as the allocator sees them: a starts,
		// b preempts it at once (nothing lost), a stops at 30s, b runs 30s-5m30s, a 5m30s-15m30s.
		{"burst", prio, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Burst: true}, 15*time.Minute + 30*time.Second,
			5 * time.Minute, 30 * time.Second, 0, 1, 0, 60.0 / 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, w, tc.pol, tc.opt)
			low, high, all := r.Row("low"), r.Row("high"), r.Row(RowAll)
			if r.Makespan.D() != tc.makespan {
				t.Errorf("makespan %s, want %s", r.Makespan.D(), tc.makespan)
			}
			if low.WaitMax.D() != tc.waitA || high.WaitMax.D() != tc.waitB {
				t.Errorf("waits low %s high %s, want %s and %s", low.WaitMax.D(), high.WaitMax.D(), tc.waitA, tc.waitB)
			}
			if !near(all.LostGPUHours, tc.lostHours) || low.Preemptions != tc.preempted || all.MaxPerJob != tc.preempted || low.GivenUp != tc.givenUp {
				t.Errorf("lost %.4f GPU-h, %d preemptions, most %d, given up %d; want %.4f, %d, %d", all.LostGPUHours, low.Preemptions, all.MaxPerJob, low.GivenUp,
					tc.lostHours, tc.preempted, tc.givenUp)
			}
			if all.ForNothing != 0 {
				t.Errorf("%d preemptions for nothing", all.ForNothing)
			}
			if !near(r.Utilisation, 1) || !near(r.UsefulUtilisation, tc.useful) {
				t.Errorf("utilisation %.4f (useful %.4f), want 1 (%.4f)", r.Utilisation, r.UsefulUtilisation, tc.useful)
			}
			if tc.lostHours > 0 && !near(all.LostPct, 100*tc.lostHours/all.UsefulGPUHours) {
				t.Errorf("lost %.2f%% of %.2f useful GPU-h", all.LostPct, all.UsefulGPUHours)
			}
			if r.Schedule.Calls == 0 || r.Schedule.Mean.D() != 500*time.Nanosecond {
				t.Errorf("schedule timing %+v", r.Schedule)
			}
		})
	}
}

// Two one-GPU nodes: l (low) runs long on n1, x (high) on n2 until 100s. p (medium) preempts l
// at 30s; l needs 60s to stop. h (high) arrives at 45s and takes l's capacity over; when l has
// stopped h starts there, and p starts on n2 when x ends: l's capacity went to h, which would
// have preempted l itself, so the preemption is counted as taken over, not for nothing.
func TestPreemptionForNothing(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(2, 1), Jobs: []Job{
		jb("l", 0, scheduler.Low, 1, 100*time.Minute),
		jb("x", 0, scheduler.High, 1, 100*time.Second),
		jb("p", 30*time.Second, scheduler.Medium, 1, 10*time.Minute),
		jb("h", 45*time.Second, scheduler.High, 1, 10*time.Minute),
	}}
	r := run(t, w, prio, Options{StopDelay: time.Minute, MaxRetry: -1})
	all := r.Row(RowAll)
	if all.Preemptions != 1 || all.ForNothing != 0 || all.TakenOver != 1 || r.Row("low").TakenOver != 1 {
		t.Fatalf("preemptions %d, for nothing %d, taken over %d (low %d); want 1, 0, 1", all.Preemptions, all.ForNothing,
			all.TakenOver, r.Row("low").TakenOver)
	}
	if got := r.Row("high").WaitMax.D(); got != 45*time.Second {
		t.Fatalf("h waited %s, want 45s", got)
	}
	if got := r.Row("medium").WaitMax.D(); got != 70*time.Second {
		t.Fatalf("p waited %s, want 70s", got)
	}
}

// judgePreemptions: a preemption is for nothing when its preemptor starts off the victim's
// nodes, unless a job of a higher class than the preemptor started there first.
func TestJudgePreemptions(t *testing.T) {
	for _, tc := range []struct {
		name         string
		before       *Job // starts before the preemptor, on the victim's node n1
		preemptorOn  string
		forNothing   bool
		takenOverToo bool
	}{
		{"preemptor starts on the victim's node", nil, "n1", false, false},
		{"preemptor starts elsewhere", nil, "n2", true, false},
		{"same class takes the node first", &Job{ID: "s", Class: scheduler.Medium}, "n2", true, false},
		{"lower class takes the node first", &Job{ID: "s", Class: scheduler.Low}, "n2", true, false},
		{"higher class takes the node over", &Job{ID: "s", Class: scheduler.High}, "n2", false, true},
		{"higher class starts beside the preemptor", &Job{ID: "s", Class: scheduler.High}, "n1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Workload{Jobs: []Job{{ID: "v", Class: scheduler.Low}, {ID: "p", Class: scheduler.Medium}}}
			if tc.before != nil {
				w.Jobs = append(w.Jobs, *tc.before)
			}
			s := &sim{w: w, jobs: make([]jobState, len(w.Jobs))}
			s.preempts = []preemptRec{{victim: 0, by: 1, nodes: []string{"n1"}}}
			s.unjudged, s.jobs[1].pending = []int32{0}, []int32{0}
			if tc.before != nil {
				s.judgePreemptions(2, []string{"n1"})
			}
			s.judgePreemptions(1, []string{tc.preemptorOn})
			if pr := s.preempts[0]; pr.forNothing != tc.forNothing || pr.takenOver != tc.takenOverToo {
				t.Errorf("for nothing %t, taken over %t; want %t, %t", pr.forNothing, pr.takenOver, tc.forNothing, tc.takenOverToo)
			}
			if len(s.unjudged) != 0 {
				t.Errorf("still unjudged: %v", s.unjudged)
			}
		})
	}
}

func TestRejectedAndRows(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(2, 4), Jobs: []Job{
		jb("big", 0, scheduler.Medium, 8, time.Minute), // no node has 8 GPUs
		{ID: "pair", Class: scheduler.Medium, Demand: scheduler.Demand{Family: "a", GPUs: 4}, Workers: 2, Runtime: time.Hour},
		{ID: "cpu", Class: scheduler.Low, Demand: scheduler.Demand{Family: "a", CPU: 4}, Workers: 1, Runtime: time.Hour},
		jb("two", 0, scheduler.Low, 2, time.Hour),
	}}
	r := run(t, w, prio, Options{MaxRetry: -1})
	if m := r.Row("medium"); m.Jobs != 2 || m.Rejected != 1 || !near(m.UsefulGPUHours, 8) {
		t.Errorf("medium row %+v", m)
	}
	if x := r.Row(Row4GPU); x.Jobs != 2 || x.Rejected != 1 {
		t.Errorf("4+ row %+v", x)
	}
	if x := r.Row(RowNoGPU); x.Jobs != 1 || x.WaitMax != 0 {
		t.Errorf("no-GPU row %+v", x)
	}
	// two (low) waits for the pair, which started first, and runs 1h-2h.
	if x := r.Row(Row2GPU); x.Jobs != 1 || x.WaitMax.D() != time.Hour {
		t.Errorf("2-3 GPU row %+v", x)
	}
	if r.Makespan.D() != 2*time.Hour {
		t.Errorf("makespan %s", r.Makespan.D())
	}
	names := []string{}
	for _, row := range r.Rows {
		names = append(names, row.Name)
	}
	if got := strings.Join(names, ","); got != "medium,low,no GPU,2-3 GPUs,4+ GPUs,all" {
		t.Errorf("rows %s", got)
	}
}

// Waits are nearest-rank quantiles over jobs: ten one-GPU jobs on one one-GPU node, all at 0,
// each running 1m, wait 0, 1m, ..., 9m.
func TestQuantiles(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 1)}
	for i := 0; i < 10; i++ {
		w.Jobs = append(w.Jobs, jb(string(rune('a'+i)), 0, scheduler.Medium, 1, time.Minute))
	}
	r := run(t, w, fifo, Options{MaxRetry: -1})
	all := r.Row(RowAll)
	if all.WaitP50.D() != 4*time.Minute || all.WaitP95.D() != 9*time.Minute || all.WaitMax.D() != 9*time.Minute {
		t.Fatalf("waits p50 %s p95 %s max %s", all.WaitP50.D(), all.WaitP95.D(), all.WaitMax.D())
	}
}

// A multi-worker victim frees its nodes worker by worker, and only reruns once all stopped.
func TestMultiWorkerVictim(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(2, 1), Jobs: []Job{
		{ID: "gang", Class: scheduler.Low, Demand: scheduler.Demand{Family: "a", GPUs: 1}, Workers: 2, Runtime: time.Hour},
		jb("h", time.Minute, scheduler.High, 1, time.Minute),
	}}
	r := run(t, w, prio, Options{StopDelay: 10 * time.Second, MaxRetry: -1})
	// h preempts gang at 1m, starts at 1m10s, ends 2m10s; gang reruns 2m10s-1h2m10s.
	if r.Makespan.D() != time.Hour+2*time.Minute+10*time.Second || !near(r.Row(RowAll).LostGPUHours, 2.0/60) {
		t.Fatalf("makespan %s, lost %.4f", r.Makespan.D(), r.Row(RowAll).LostGPUHours)
	}
}

func TestDeterministic(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(3, 4)}
	for i := 0; i < 200; i++ {
		w.Jobs = append(w.Jobs, jb("j"+string(rune('A'+i%26))+string(rune('a'+i/26)), time.Duration(i*37%300)*time.Second,
			scheduler.Class(i%3), 1+i%4, time.Duration(60+i*53%900)*time.Second))
	}
	sortByArrival(w.Jobs)
	a, _ := json.Marshal(run(t, w, prio, Options{StopDelay: 30 * time.Second, MaxRetry: 3}))
	b, _ := json.Marshal(run(t, w, prio, Options{StopDelay: 30 * time.Second, MaxRetry: 3}))
	if string(a) != string(b) {
		t.Fatal("two runs differ")
	}
}

func TestRunRefuses(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 1), Jobs: []Job{jb("a", 0, scheduler.Low, 1, time.Minute), jb("a", 0, scheduler.Low, 1, time.Minute)}}
	if _, err := Run(w, prio, Options{}); err == nil || !strings.Contains(err.Error(), `"a" is used twice`) {
		t.Fatalf("duplicate ids: %v", err)
	}
	if _, err := Run(&Workload{}, prio, Options{StopDelay: -1}); err == nil {
		t.Fatal("negative stop delay accepted")
	}
}

func TestWriteMarkdown(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Low, 4, 10*time.Minute),
		jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
	}}
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1}
	var b strings.Builder
	WriteMarkdown(&b, []*Result{run(t, w, fifo, opt), run(t, w, prio, opt)})
	out := b.String()
	for _, want := range []string{
		"Workload t: 2 jobs on 1 nodes (4 GPUs)",
		"### fifo (best-effort-fifo, no priorities",
		"| high | 1 | 9m00s | 9m00s | 9m00s | 9m00s | 0.0 (0.00%) | 0 | 0 (-) | 0 |",
		"| low | 1 | 5m00s | 5m00s | 5m00s | 5m00s | 0.1 (10.00%) | 1 | 0 (0.0%) | 1 |",
		"### Side by side (against fifo)",
		"| makespan vs fifo | +0.0% | +10.0% |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// With min_runtime_before_preemption, nothing happens when the low job becomes preemptible
// unless the allocator schedules at the pool's NextWake.
func TestWakeTimer(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Low, 4, 10*time.Minute),
		jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
	}}
	pol := Policy{Name: "min2m", Scheduler: scheduler.Policy{MinRuntimeBeforePreemption: 2 * time.Minute}}
	for _, tc := range []struct {
		wake bool
		want time.Duration
	}{
		{false, 9 * time.Minute},             // b waits for a to finish
		{true, time.Minute + 30*time.Second}, // a is preempted at 2m and stops at 2m30s
	} {
		r := run(t, w, pol, Options{StopDelay: 30 * time.Second, MaxRetry: -1, EventsOnly: !tc.wake})
		if got := r.Row("high").WaitMax.D(); got != tc.want {
			t.Errorf("wake timer %v: b waited %s, want %s", tc.wake, got, tc.want)
		}
	}
}

// One node of 4 GPUs: a low job a runs 10m from 0; a high job b arrives at 1m and runs 5m; the
// allocation gives a 2m notice.
func TestPreemptionNotice(t *testing.T) {
	notice := Policy{Name: "notice", Scheduler: scheduler.Policy{PreemptionNotice: 2 * time.Minute}}
	for _, tc := range []struct {
		name      string
		runtimeA  time.Duration
		opt       Options
		makespan  time.Duration
		waitB     time.Duration // b's wait: the preemptor's
		lostHours float64
		honoured  int
		done      bool // a completed during the notice: no rerun
	}{
		// a saves when told at 1m and exits at 1m10s (the default save time): b runs 1m10s-6m10s,
		// a reruns its last 9m, 6m10s-15m10s.
		{"honours", 10 * time.Minute, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 1}, 15*time.Minute + 10*time.Second,
			10 * time.Second, 0, 1, false},
		{"saves in 20s", 10 * time.Minute, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 1, SaveTime: 20 * time.Second}, 15*time.Minute + 20*time.Second,
			20 * time.Second, 0, 1, false},
		// a ignores the notice: it runs on to 3m, is stopped at 3m30s and loses its 3m (0.2 GPU-h);
		// b runs 3m30s-8m30s, a reruns from zero, 8m30s-18m30s.
		{"ignores", 10 * time.Minute, Options{StopDelay: 30 * time.Second, MaxRetry: -1}, 18*time.Minute + 30*time.Second,
			2*time.Minute + 30*time.Second, 0.2, 0, false},
		// With checkpoints every minute, the one at 3m (in the notice) saves all it did.
		{"ignores, checkpoints", 10 * time.Minute, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Checkpoint: time.Minute}, 15*time.Minute + 30*time.Second,
			2*time.Minute + 30*time.Second, 0, 0, false},
		// a's work ends at 2m, before its deadline: it completes, and b starts then.
		{"completes in the notice", 2 * time.Minute, Options{StopDelay: 30 * time.Second, MaxRetry: -1}, 7 * time.Minute,
			time.Minute, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
				jb("a", 0, scheduler.Low, 4, tc.runtimeA),
				jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
			}}
			r := run(t, w, notice, tc.opt)
			all, low := r.Row(RowAll), r.Row("low")
			if r.Makespan.D() != tc.makespan || r.Row("high").WaitMax.D() != tc.waitB {
				t.Errorf("makespan %s, b waited %s; want %s, %s", r.Makespan.D(), r.Row("high").WaitMax.D(), tc.makespan, tc.waitB)
			}
			if !near(all.LostGPUHours, tc.lostHours) || all.Honoured != tc.honoured || low.Preemptions != 1 {
				t.Errorf("lost %.4f GPU-h, %d honoured, %d preemptions; want %.4f, %d, 1", all.LostGPUHours, all.Honoured, low.Preemptions, tc.lostHours, tc.honoured)
			}
			if pw := r.PreemptorWait; pw.N != 1 || pw.Max.D() != tc.waitB {
				t.Errorf("preemptor wait %+v, want one of %s", pw, tc.waitB)
			}
			if tc.done && r.Row("low").WaitMax.D() != 0 {
				t.Errorf("a waited %s: it should not have rerun", r.Row("low").WaitMax.D())
			}
		})
	}
	// Without a notice nothing changes: a is stopped 30s after 1m and reruns from zero.
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{jb("a", 0, scheduler.Low, 4, 10*time.Minute), jb("b", time.Minute, scheduler.High, 4, 5*time.Minute)}}
	if r := run(t, w, prio, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 1}); r.Makespan.D() != 16*time.Minute+30*time.Second || r.Row(RowAll).Honoured != 0 {
		t.Errorf("without a notice: makespan %s, %d honoured", r.Makespan.D(), r.Row(RowAll).Honoured)
	}
}

// The pool learns that a job honours its notices: after a saved on its first notice, its
// preemption loses nothing, so max_loss_gpu_hours (1 here) no longer holds it back once it has
// run 30m on 4 GPUs. Without HonorsNotice in its requests the second preemptor waits for a.
func TestHonorsNoticeReachesThePool(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Low, 4, 100*time.Minute),
		jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
		jb("c", 40*time.Minute, scheduler.High, 4, 5*time.Minute),
	}}
	base := scheduler.Policy{PreemptionNotice: 2 * time.Minute, MaxLossGPUHours: 1}
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 1}
	// a saves at 1m (1m of work) and exits at 1m10s; b runs 1m10s-6m10s; a reruns from 6m10s.
	aware := run(t, w, Policy{Name: "aware", Scheduler: base}, opt)
	if h := aware.Row("high"); h.WaitMax.D() != 10*time.Second || aware.Row("low").Preemptions != 2 || aware.Row(RowAll).Honoured != 2 {
		t.Errorf("aware: high waits up to %s, a preempted %d times, %d honoured", h.WaitMax.D(), aware.Row("low").Preemptions, aware.Row(RowAll).Honoured)
	}
	// c waits for a to finish its last 99m, at 1h45m10s.
	blind := run(t, w, Policy{Name: "blind", Scheduler: base, NoHonorsNotice: true}, opt)
	if h := blind.Row("high"); h.WaitMax.D() != time.Hour+5*time.Minute+10*time.Second || blind.Row("low").Preemptions != 1 {
		t.Errorf("blind: high waits up to %s, a preempted %d times", h.WaitMax.D(), blind.Row("low").Preemptions)
	}
}

// Which jobs honour notices is drawn per job, the same in every run and, at a higher share, a
// superset; the share comes out near the one asked.
func TestHonoursDraw(t *testing.T) {
	n, n8, n5 := 20000, 0, 0
	for i := range n {
		id := "pod-" + strconv.Itoa(i)
		a, b := honours(1, id, 0.5), honours(1, id, 0.8)
		if a && !b {
			t.Fatalf("%s honours at 0.5 but not at 0.8", id)
		}
		if honours(1, id, 0) || !honours(1, id, 1) || b != honours(1, id, 0.8) {
			t.Fatalf("%s: the draw is not fixed", id)
		}
		if a {
			n5++
		}
		if b {
			n8++
		}
	}
	if math.Abs(float64(n5)/float64(n)-0.5) > 0.02 || math.Abs(float64(n8)/float64(n)-0.8) > 0.02 {
		t.Fatalf("shares %.3f and %.3f, want about 0.5 and 0.8", float64(n5)/float64(n), float64(n8)/float64(n))
	}
	if honours(1, "pod-7", 0.5) == honours(2, "pod-7", 0.5) && honours(1, "pod-8", 0.5) == honours(2, "pod-8", 0.5) &&
		honours(1, "pod-9", 0.5) == honours(2, "pod-9", 0.5) && honours(1, "pod-10", 0.5) == honours(2, "pod-10", 0.5) {
		t.Fatal("another seed draws the same jobs")
	}
}

func TestRunRefusesNoticeSettings(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 1), Jobs: []Job{jb("a", 0, scheduler.Low, 1, time.Minute)}}
	short := Policy{Name: "n", Scheduler: scheduler.Policy{PreemptionNotice: 5 * time.Second}}
	if _, err := Run(w, short, Options{Honor: 0.5}); err == nil || !strings.Contains(err.Error(), "save time 10s must be shorter than the preemption notice 5s") {
		t.Errorf("save time past the notice: %v", err)
	}
	if _, err := Run(w, short, Options{}); err != nil {
		t.Errorf("no job honours, so the save time does not matter: %v", err)
	}
	bad := 1.5
	if _, err := Run(w, Policy{Name: "x", Honor: &bad}, Options{}); err == nil || !strings.Contains(err.Error(), "between 0 and 1") {
		t.Errorf("honor 1.5: %v", err)
	}
}

func TestWriteMarkdownNotice(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("a", 0, scheduler.Low, 4, 10*time.Minute),
		jb("b", time.Minute, scheduler.High, 4, 5*time.Minute),
	}}
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1, Honor: 1}
	zero := 0.0
	notice := scheduler.Policy{PreemptionNotice: 2 * time.Minute}
	var b strings.Builder
	WriteMarkdown(&b, []*Result{run(t, w, fifo, opt), run(t, w, Policy{Name: "h1", Scheduler: notice}, opt),
		run(t, w, Policy{Name: "h0", Scheduler: notice, Honor: &zero}, opt)})
	out := b.String()
	for _, want := range []string{
		"a job that honours notices (100% of them unless a policy says otherwise) saves and exits 10s later",
		"### h0 (best-effort-fifo, preemption_notice 2m00s, 0% of jobs honour notices)",
		"Preemptors waited for their victims (1 starts): p50 10s, p95 10s, longest 10s; 1 of 1 victims saved on the notice.",
		"| high waits > stop delay + 5s | 1 (100.0%) | 0 (0.0%) | 1 (100.0%) |",
		"| jobs honouring notices | - | 100% | 0% |",
		"| victims that saved on the notice | 0 (-) | 1 (100.0%) | 0 (0.0%) |",
		"| preemptor wait p50 / p95 | - | 10s / 10s | 2m30s / 2m30s |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// Three 4-GPU nodes: low a on n1 from 0, low b on n2 from 1m (it loses less), a notebook on n3.
// A high job held to one node preempts the job there, whichever loses more, and starts there; one
// held to the notebook's node waits for it.
func TestAllowedNodes(t *testing.T) {
	for _, tc := range []struct {
		on          []string
		preemptions int
		lostHours   float64
		highWait    time.Duration
	}{
		{nil, 1, 4 * 9.0 / 60, 30 * time.Second},             // b, the cheaper
		{[]string{"n1"}, 1, 4 * 10.0 / 60, 30 * time.Second}, // a
		{[]string{"n3"}, 0, 0, 2 * time.Hour},                // the notebook's node: it waits for it
	} {
		h := jb("h", 10*time.Minute, scheduler.High, 4, time.Hour)
		h.Nodes = tc.on
		nb := jb("nb", 2*time.Minute, scheduler.High, 4, 2*time.Hour+8*time.Minute) // on n3 until 2h10m
		nb.Kind = scheduler.KindNotebook
		w := &Workload{Name: "t", Nodes: nodes(3, 4), Jobs: []Job{
			jb("a", 0, scheduler.Low, 4, 2*time.Hour), jb("b", time.Minute, scheduler.Low, 4, 2*time.Hour), nb, h}}
		r := run(t, w, prio, Options{StopDelay: 30 * time.Second, MaxRetry: -1})
		all := r.Row(RowAll)
		if all.Preemptions != tc.preemptions || all.ForNothing != 0 || !near(all.LostGPUHours, tc.lostHours) {
			t.Errorf("h on %v: %d preemptions (%d for nothing), %.3f GPU-hours lost; want %d, 0, %.3f",
				tc.on, all.Preemptions, all.ForNothing, all.LostGPUHours, tc.preemptions, tc.lostHours)
		}
		if got := r.Row("high").WaitMax.D(); got != tc.highWait {
			t.Errorf("h on %v waited %s, want %s", tc.on, got, tc.highWait)
		}
	}
}

// A random workload of which a third of the jobs are held to random nodes: the simulator refuses
// a grant outside a job's nodes and a preemption for a job that may not use the victim's nodes, so
// the run succeeding says neither happened.
func TestAllowedNodesRandom(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(6, 4)}
	for i := 0; i < 300; i++ {
		j := jb(fmt.Sprintf("j%03d", i), time.Duration(i*37%900)*time.Second, scheduler.Class(i%3), 1+i%4, time.Duration(60+i*53%900)*time.Second)
		j.Workers = 1 + i%5/3
		if i%3 == 0 {
			for k, n := range w.Nodes {
				if (i/3+k)%3 != 0 {
					j.Nodes = append(j.Nodes, n.Name)
				}
			}
		}
		w.Jobs = append(w.Jobs, j)
	}
	sortByArrival(w.Jobs)
	for _, opt := range []Options{{StopDelay: 30 * time.Second, MaxRetry: -1}, {StopDelay: 10 * time.Second, MaxRetry: 2, Checkpoint: time.Minute}} {
		r := run(t, w, prio, opt)
		if all := r.Row(RowAll); all.Preemptions == 0 || all.Rejected != 0 {
			t.Fatalf("%d preemptions, %d rejected: the workload does not exercise what it should", all.Preemptions, all.Rejected)
		} else {
			t.Logf("%d preemptions, %d for nothing", all.Preemptions, all.ForNothing)
		}
	}
}

// TestBackfillRunLimits: a policy with backfill decides by the RunLimits of its one estimates
// model, so its plain run carries them. One node of 4 GPUs: hold (high, 3 GPUs) runs 0-100m,
// one (low, 1 GPU) 0-40m; big (medium, 4 GPUs) arrives at 1m and reserves the node at 40m (it
// starts at 100m); short (low, 1 GPU, 30m) arrives at 45m. With backfill it ends by 100m and
// starts at once; without, the drain holds the GPU from it until big has run (110m).
func TestBackfillRunLimits(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 4), Jobs: []Job{
		jb("hold", 0, scheduler.High, 3, 100*time.Minute),
		jb("one", 0, scheduler.Low, 1, 40*time.Minute),
		jb("big", time.Minute, scheduler.Medium, 4, 10*time.Minute),
		jb("short", 45*time.Minute, scheduler.Low, 1, 30*time.Minute),
	}}
	base := Policy{Name: "bf", Scheduler: scheduler.Policy{ReserveAfter: 30 * time.Minute}}
	bf := base
	bf.Scheduler.Backfill = true
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1}
	if _, err := Run(w, bf, opt); err == nil || !strings.Contains(err.Error(), "give one --estimates model") {
		t.Fatalf("backfill without estimates: want an error, got %v", err)
	}
	opt.Estimates = []Estimates{{Kind: EstimateExact}}
	for _, tc := range []struct {
		pol      Policy
		lowWait  time.Duration
		makespan time.Duration
	}{{bf, 0, 110 * time.Minute}, {base, 65 * time.Minute, 140 * time.Minute}} {
		r := run(t, w, tc.pol, opt)
		if got := r.Rows[2].WaitMax.D(); got != tc.lowWait {
			t.Errorf("backfill %v: longest low wait %s, want %s", tc.pol.Scheduler.Backfill, got, tc.lowWait)
		}
		if got := r.Makespan.D(); got != tc.makespan {
			t.Errorf("backfill %v: makespan %s, want %s", tc.pol.Scheduler.Backfill, got, tc.makespan)
		}
	}
}
