package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// candidateJobs is the job ids of node n's candidates for class cl, in order.
//
//nolint:unparam // the call names the node whose candidates are listed; the tests all look at node 0 today
func candidateJobs(p *Pool, now time.Time, n int32, cl Class) []string {
	sc := newScratch()
	sc.reset(p)
	var out []string
	for _, c := range p.candidates(now, sc, n, cl) {
		out = append(out, c.ref.rj.r.Job)
	}
	return out
}

// TestVictimOrderKept: the kept lists give, at every time, the order a sort gives, although that
// order changes with time: a 2-GPU job that started later overtakes a 1-GPU job once it has run
// more than half as long; a job restarted after a preemption is protected, then is not; a
// checkpoint makes a job cheap again; sub-second differences count.
func TestVictimOrderKept(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 16, 64, 512), Policy{})
	start := func(at time.Time, rs ...Request) {
		t.Helper()
		mustEnqueue(t, p, rs...)
		if d := sched(t, p, at); len(d.Grants) != len(rs) {
			t.Fatalf("want %d grants, got %s", len(rs), mustJSON(t, d))
		}
	}
	ms := time.Millisecond
	start(t0, makeJob("one-early", "a").Class(Low).Obj(), makeJob("tie-b", "a").Class(Low).Obj(), makeJob("tie-a", "a").Class(Low).Obj())
	start(t0.Add(10*time.Minute), makeJob("two-late", "a").Class(Low).GPUs(2).Obj())
	start(t0.Add(10*time.Minute+300*ms), makeJob("one-late", "a").Class(Low).Obj())
	start(t0.Add(12*time.Minute), makeJob("restarted", "a").Class(Low).Preemptions(1).Obj(), makeJob("medium", "a").GPUs(3).Obj())

	cases := []struct {
		name string
		at   time.Duration
		want []string
	}{
		{"two-late has lost 2x2m, less than one-early's 12m", 12 * time.Minute,
			[]string{"one-late", "two-late", "one-early", "tie-a", "tie-b", "restarted"}},
		{"two-late (2x15m) now loses more than one-early (25m); restarted is still protected", 25 * time.Minute,
			[]string{"one-late", "one-early", "tie-a", "tie-b", "two-late", "restarted"}},
		{"protection over (15m): restarted is cheapest; two-late 2x30m passes 40m", 40 * time.Minute,
			[]string{"restarted", "one-late", "one-early", "tie-a", "tie-b", "two-late"}},
	}
	for _, c := range cases {
		now := t0.Add(c.at)
		if got := candidateJobs(p, now, 0, Medium); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
		checkVictimOrder(t, p, now)
	}
	// For a high request the medium job comes after every low one.
	if got := candidateJobs(p, t0.Add(40*time.Minute), 0, High); got[len(got)-1] != "medium" {
		t.Errorf("for a high request: %v, want medium last", got)
	}
	// A checkpoint 100ms after one-late's start makes one-early the cheapest 1-GPU job but one.
	if !p.Checkpointed("one-early", 0, t0.Add(10*time.Minute+100*ms)) {
		t.Fatal("checkpoint refused")
	}
	want := []string{"restarted", "one-late", "one-early", "tie-a", "tie-b", "two-late"}
	if got := candidateJobs(p, t0.Add(40*time.Minute), 0, Medium); !slices.Equal(got, want) {
		t.Errorf("after one-early's checkpoint: got %v, want %v", got, want)
	}
	if !p.Checkpointed("one-early", 0, t0.Add(10*time.Minute+400*ms)) {
		t.Fatal("checkpoint refused")
	}
	want = []string{"restarted", "one-early", "one-late", "tie-a", "tie-b", "two-late"}
	if got := candidateJobs(p, t0.Add(40*time.Minute), 0, Medium); !slices.Equal(got, want) {
		t.Errorf("after one-early's second checkpoint: got %v, want %v", got, want)
	}
	checkVictimOrder(t, p, t0.Add(40*time.Minute))
}

// TestVictimOrderKeptWithNotice: under a preemption notice, the jobs that honour it lose nothing
// and head the order, by job id, whatever their GPUs, start or checkpoints, also before a job that
// started at this very instant or checkpointed ahead of the pass; the others follow as without a
// notice. A reconfiguration that drops the notice puts them back by their work at stake, and one
// that sets it again puts them first again.
func TestVictimOrderKeptWithNotice(t *testing.T) {
	notice := Policy{PreemptionNotice: 2 * time.Minute}
	p := mustPool(t, nodesOf("n", "a", 1, 16, 64, 512), notice)
	start := func(at time.Time, rs ...Request) {
		t.Helper()
		mustEnqueue(t, p, rs...)
		if d := sched(t, p, at); len(d.Grants) != len(rs) {
			t.Fatalf("want %d grants, got %s", len(rs), mustJSON(t, d))
		}
	}
	start(t0, makeJob("h-two", "a").Class(Low).GPUs(2).HonorsNotice().Obj(), makeJob("one-early", "a").Class(Low).Obj(),
		makeJob("h-one-b", "a").Class(Low).HonorsNotice().Obj())
	start(t0.Add(10*time.Minute), makeJob("one-late", "a").Class(Low).Obj(), makeJob("h-one-a", "a").Class(Low).HonorsNotice().Obj(),
		makeJob("medium-h", "a").HonorsNotice().Obj())
	now := t0.Add(12 * time.Minute)
	start(now, makeJob("fresh", "a").Class(Low).Obj())           // loses exactly nothing so far, too
	if !p.Checkpointed("one-early", 0, now.Add(5*time.Minute)) { // ahead of the pass by more than the notice
		t.Fatal("checkpoint refused")
	}
	want := []string{"h-one-a", "h-one-b", "h-two", "one-early", "fresh", "one-late"}
	if got := candidateJobs(p, now, 0, Medium); !slices.Equal(got, want) {
		t.Errorf("under the notice: got %v, want %v", got, want)
	}
	if got := candidateJobs(p, now, 0, High); !slices.Equal(got, append(want, "medium-h")) {
		t.Errorf("for a high request: got %v, want the medium job last", got)
	}
	checkVictimOrder(t, p, now)
	checkVictimOrder(t, p, now.Add(time.Hour))

	if _, err := p.Reconfigure(p.Nodes(), Policy{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"one-early", "fresh", "h-one-a", "one-late", "h-one-b", "h-two"}
	if got := candidateJobs(p, now, 0, Medium); !slices.Equal(got, want) {
		t.Errorf("without the notice: got %v, want %v", got, want)
	}
	checkVictimOrder(t, p, now)
	if _, err := p.Reconfigure(p.Nodes(), notice); err != nil {
		t.Fatal(err)
	}
	want = []string{"h-one-a", "h-one-b", "h-two", "one-early", "fresh", "one-late"}
	if got := candidateJobs(p, now, 0, Medium); !slices.Equal(got, want) {
		t.Errorf("with the notice again: got %v, want %v", got, want)
	}
	checkVictimOrder(t, p, now)
}

// TestVictimOrderKeptRandom: random starts (at sub-second times), checkpoints, stops and
// preemptions of jobs of few shapes, so that many share a victim list; after every event the
// kept order equals the sorted order, on every node, at several times.
func TestVictimOrderKeptRandom(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomVictimOrder(t, seed) })
	}
}

func randomVictimOrder(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	// Odd seeds run under a notice, where every third job honours it (and saves on it).
	p := mustPool(t, nodesOf("n", "a", 3, 16, 256, 2048), Policy{MinRuntimeBeforePreemption: time.Duration(rng.IntN(2)) * time.Minute,
		PreemptionNotice: time.Duration(seed%2) * 2 * time.Minute})
	now := t0
	for step := range 150 {
		now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
		switch op := rng.IntN(10); {
		case op < 4:
			job := makeJob(fmt.Sprintf("j%d", step), "a").Class(Class(rng.IntN(3))).GPUs(1 + rng.IntN(2)).Workers(1 + rng.IntN(2)).
				Preemptions(rng.IntN(3)).Seq(int64(step))
			if step%3 == 0 {
				job = job.HonorsNotice()
			}
			mustEnqueue(t, p, job.Obj())
			sched(t, p, now)
		case op < 7:
			jobs := p.RunningJobs()
			if len(jobs) == 0 {
				continue
			}
			j := jobs[rng.IntN(len(jobs))]
			ri, _ := p.Running(j)
			p.Checkpointed(j, ri.Attempt, now.Add(-time.Duration(rng.IntN(3000))*time.Millisecond))
		case op < 9:
			jobs := p.RunningJobs()
			if len(jobs) == 0 {
				continue
			}
			j := jobs[rng.IntN(len(jobs))]
			ri, _ := p.Running(j)
			if rng.IntN(2) == 0 {
				p.BeginRelease(j)
			} else {
				for _, wp := range ri.Placement {
					p.Release(j, ri.Attempt, wp.Worker)
				}
			}
		default:
			p.Cancel(fmt.Sprintf("j%d", rng.IntN(step+1)))
		}
		for _, ahead := range []time.Duration{0, 1500 * time.Millisecond, 7 * time.Minute, 40 * time.Minute} {
			checkVictimOrder(t, p, now.Add(ahead))
		}
	}
}
