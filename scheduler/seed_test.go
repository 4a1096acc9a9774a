package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSeedWorkedExample replays the worked example of priorities.en.md on an 8-GPU pool:
// 4 nodes demo-node-1..4 of family a100 with 2 GPUs, 16 CPU, 128 GB each.
func TestSeedWorkedExample(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  Policy
		preempt bool // Job 3 preempts Job 0 before Job 0 finishes on its own
	}{
		// As in the document: Job 0 is finishing by itself, nobody is preempted.
		{"job0-finishing", Policy{MinRuntimeBeforePreemption: 30 * time.Minute}, false},
		// Default policy: Job 3 preempts low Job 0 as soon as it is submitted; the rest is the same.
		{"job0-preempted", Policy{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { seedExample(t, tc.policy, tc.preempt) })
	}
}

func seedExample(t *testing.T, policy Policy, preempt bool) {
	p := mustPool(t, nodesOf("demo-node", "a100", 4, 2, 16, 128), policy)
	a100x2, err := ParseInstanceType("a100.2gpu")
	if err != nil {
		t.Fatal(err)
	}
	req := func(name string, c Class, workers int, seq int64, minute int) Request {
		return Request{Job: name, Kind: KindJob, Class: c, Demand: a100x2, Workers: workers, Seq: seq, SubmittedAt: at(minute)}
	}
	now := 0
	step := func(wantGrants ...string) Decisions {
		t.Helper()
		now++
		waitingBefore := map[string]bool{}
		for _, w := range p.waiting {
			waitingBefore[w.r.Job] = true
		}
		d := sched(t, p, at(now))
		if got := grantedJobs(d); !slices.Equal(got, wantGrants) {
			t.Fatalf("step %d: granted %v, want %v", now, got, wantGrants)
		}
		for _, g := range d.Grants {
			// Job 2 never gets ahead of Job 4, nor of Job 3, except when Job 3 waits for the
			// capacity of the job it preempted (then free capacity elsewhere serves Job 2).
			if g.Job == "job-2" && (waitingBefore["job-4"] || waitingBefore["job-3"] && !preempt) {
				t.Fatalf("job-2 was granted while job-3 or job-4 waited")
			}
		}
		return d
	}

	// Job 0 (low) and Job 1 (high) occupy all 8 GPUs.
	mustEnqueue(t, p, req("job-0", Low, 2, 0, 0))
	d := step("job-0")
	if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-1", "demo-node-2"}) {
		t.Fatalf("job-0 on %v", got)
	}
	mustEnqueue(t, p, req("job-1", High, 2, 1, 0))
	d = step("job-1")
	if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-3", "demo-node-4"}) {
		t.Fatalf("job-1 on %v", got)
	}

	// Job 2 (low) and Job 3 (medium) are submitted while the pool is full.
	mustEnqueue(t, p, req("job-2", Low, 1, 2, 1))
	if d := step(); len(d.Preemptions) != 0 {
		t.Fatalf("low job-2 preempted %v", victims(d))
	}
	mustEnqueue(t, p, req("job-3", Medium, 2, 3, 2))
	d = step()
	if preempt {
		if got := victims(d); !slices.Equal(got, []string{"job-0"}) || d.Preemptions[0].Preemptor.Job != "job-3" {
			t.Fatalf("want job-3 to preempt job-0, got %+v", d.Preemptions)
		}
		if p.BeginRelease("job-0") {
			t.Fatalf("BeginRelease of an already releasing job reported a change")
		}
	} else {
		if len(d.Preemptions) != 0 {
			t.Fatalf("unexpected preemptions %+v", d.Preemptions)
		}
		// Job 0 begins finishing: its 4 GPUs are releasing, not free.
		if !p.BeginRelease("job-0") {
			t.Fatal("BeginRelease(job-0)")
		}
	}
	if d := step(); len(d.Preemptions) != 0 {
		t.Fatalf("unexpected preemptions %+v", d.Preemptions)
	}
	w3, _ := p.Explain("job-3")
	if w3.Position != 1 || !slices.Equal(w3.WaitingFor, []string{"job-0"}) ||
		!strings.Contains(w3.Reason, "being released by job-0") || !strings.Contains(w3.Reason, "2 nodes with 2 free a100 GPUs each") {
		t.Fatalf("job-3 explanation: %+v", w3)
	}
	if preempt != strings.Contains(w3.Reason, "nominated to you") || preempt != slices.Equal(w3.Nominated, []string{"job-0"}) {
		t.Fatalf("job-3 explanation (preempt=%v): %+v", preempt, w3)
	}
	w2, _ := p.Explain("job-2")
	if w2.Position != 2 || !strings.Contains(w2.Reason, "behind 1 higher-priority job") {
		t.Fatalf("job-2 explanation: %+v", w2)
	}
	t.Logf("job-3: %s", w3.Reason)
	t.Logf("job-2: %s", w2.Reason)

	// Job 4 (high, newest) arrives: it goes first.
	mustEnqueue(t, p, req("job-4", High, 1, 4, 3))
	if d := step(); len(d.Preemptions) != 0 {
		t.Fatalf("unexpected preemptions %+v", d.Preemptions)
	}
	for want, j := range []string{"job-4", "job-3", "job-2"} {
		if wi, _ := p.Explain(j); wi.Position != want+1 {
			t.Fatalf("%s at position %d, want %d", j, wi.Position, want+1)
		}
	}

	// Job 1 finishes; its workers stop one by one.
	if !p.BeginRelease("job-1") {
		t.Fatal("BeginRelease(job-1)")
	}
	step() // everything is releasing: nothing may start
	for _, n := range p.View().Nodes {
		if n.FreeGPUs != 0 || n.ReleasingGPUs != 2 {
			t.Fatalf("node %+v: want all GPUs releasing", n)
		}
	}

	// Job 1's first worker stops: Job 4 starts on exactly that node, before Job 3.
	if !p.Release("job-1", 0, 0) {
		t.Fatal("Release(job-1, 0)")
	}
	d = step("job-4")
	if got := d.Grants[0].Placement[0]; got.Node != "demo-node-3" || !slices.Equal(got.GPUs, []int{0, 1}) {
		t.Fatalf("job-4 placed on %+v, want demo-node-3 GPUs [0 1]", got)
	}

	// Job 0's first worker stops: one node is free but Job 3 needs two, and that free node is
	// nominated to Job 3, so Job 2 (which would fit) must not take it.
	if !p.Release("job-0", 0, 0) {
		t.Fatal("Release(job-0, 0)")
	}
	step()
	w3, _ = p.Explain("job-3")
	w2, _ = p.Explain("job-2")
	if w3.Position != 1 || w2.Position != 2 {
		t.Fatalf("positions %d %d", w3.Position, w2.Position)
	}
	t.Logf("job-3: %s", w3.Reason)
	t.Logf("job-2: %s", w2.Reason)

	// Job 1's second worker stops: two whole nodes are free.
	if !p.Release("job-1", 0, 1) {
		t.Fatal("Release(job-1, 1)")
	}
	if preempt {
		// Job 3 preempted Job 0 for its capacity and waits for it rather than start elsewhere
		// (so that Job 0 was not preempted for nothing); the free node serves Job 2.
		d = step("job-2")
		if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-4"}) {
			t.Fatalf("job-2 on %v", got)
		}
		if !p.Release("job-0", 0, 1) {
			t.Fatal("Release(job-0, 1)")
		}
		d = step("job-3")
		if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-1", "demo-node-2"}) {
			t.Fatalf("job-3 on %v", got)
		}
	} else {
		// Job 3 starts on them.
		d = step("job-3")
		if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-1", "demo-node-4"}) {
			t.Fatalf("job-3 on %v", got)
		}
		// Job 0's last worker stops: finally Job 2 starts.
		if !p.Release("job-0", 0, 1) {
			t.Fatal("Release(job-0, 1)")
		}
		d = step("job-2")
		if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"demo-node-2"}) {
			t.Fatalf("job-2 on %v", got)
		}
	}
	if p.WaitingCount() != 0 || !slices.Equal(p.RunningJobs(), []string{"job-2", "job-3", "job-4"}) {
		t.Fatalf("final state: waiting %d running %v", p.WaitingCount(), p.RunningJobs())
	}
}
