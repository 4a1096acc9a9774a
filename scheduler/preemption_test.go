package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The minimal case: nodes A, B, C with one GPU each, low jobs VA, VB, VC on them. P
// (high, little CPU) preempts VA; Q (high, more CPU than A has) preempts VB. A second pass at the
// same instant must decide nothing: P keeps VA's capacity although B fits it better.
func TestSecondPassDecidesNothing(t *testing.T) {
	nodes := []Node{
		{Name: "A", Family: "a", GPUs: 1, CPU: 16, RAMGB: 8},
		{Name: "B", Family: "a", GPUs: 1, CPU: 8, RAMGB: 64},
		{Name: "C", Family: "a", GPUs: 1, CPU: 8, RAMGB: 64},
	}
	p := mustPool(t, nodes, Policy{})
	for i, v := range []string{"VC", "VB", "VA"} { // VA started last: it loses the least work
		if err := p.Adopt(Adoption{Request: makeJob(v, "a").Class(Low).Seq(int64(i)).Obj(), StartedAt: at(i),
			Placement: []WorkerPlacement{{Worker: 0, Node: v[1:], GPUs: []int{0}}}}); err != nil {
			t.Fatal(err)
		}
	}
	pr := makeJob("P", "a").Class(High).Seq(10).Obj()
	pr.Demand.CPU = 2
	mustEnqueue(t, p, pr)
	if d := p.Schedule(at(10)); !slices.Equal(victims(d), []string{"VA"}) {
		t.Fatalf("P preempted %v, want [VA]", victims(d))
	}
	q := makeJob("Q", "a").Class(High).Seq(11).Obj()
	q.Demand.CPU, q.Demand.RAMGB = 8, 64
	mustEnqueue(t, p, q)
	if d := p.Schedule(at(11)); !slices.Equal(victims(d), []string{"VB"}) {
		t.Fatalf("Q preempted %v, want [VB]", victims(d))
	}
	for i := 0; i < 3; i++ {
		p.dirty = true // a full pass, as after an event that changes nothing
		if d := p.Schedule(at(11)); len(d.Grants)+len(d.Preemptions) != 0 {
			t.Fatalf("pass %d at the same instant decided %s", i+2, mustJSON(t, d))
		}
	}
	wp, _ := p.Explain("P")
	wq, _ := p.Explain("Q")
	if !slices.Equal(wp.Nominated, []string{"VA"}) || !slices.Equal(wq.Nominated, []string{"VB"}) {
		t.Fatalf("P nominated %v, Q nominated %v", wp.Nominated, wq.Nominated)
	}
	p.Release("VA", 0, 0)
	p.Release("VB", 0, 0)
	d := sched(t, p, at(12))
	if len(d.Grants) != 2 || grantNodes(d.Grants[0])[0] != "A" || grantNodes(d.Grants[1])[0] != "B" {
		t.Fatalf("want P on A and Q on B, got %+v", d.Grants)
	}
}

// A preemptor keeps the capacity of its victims against requests of its own class, even one
// ahead of it in the queue (a preempted job that returns with its old place): only a strictly
// better request may take it over.
func TestNominationStaysAgainstEqualClass(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("L", "a").Class(Low).GPUs(4).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("P", "a").GPUs(4).Seq(5).Obj())
	if d := sched(t, p, at(1)); !slices.Equal(victims(d), []string{"L"}) {
		t.Fatalf("victims %v", victims(d))
	}
	// E is ahead of P in the queue (it keeps an older place) and would fit on L's capacity.
	mustEnqueue(t, p, makeJob("E", "a").GPUs(4).Seq(2).Obj())
	sched(t, p, at(2))
	we, _ := p.Explain("E")
	if len(we.Nominated) != 0 || !strings.Contains(we.Reason, "may not be preempted") {
		t.Fatalf("E: %+v", we)
	}
	p.Release("L", 0, 0)
	if d := sched(t, p, at(3)); !slices.Equal(grantedJobs(d), []string{"P"}) {
		t.Fatalf("granted %v, want P", grantedJobs(d))
	}
}

// A preemptor waits for its victims' capacity rather than start on capacity that frees
// elsewhere meanwhile: that capacity serves the requests behind it, and no victim is preempted
// for nothing.
func TestPreemptorWaitsForItsVictims(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("L", "a").Class(Low).GPUs(4).Seq(1).Obj(), makeJob("M", "a").GPUs(4).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("H", "a").Class(High).GPUs(4).Seq(3).Obj())
	if d := sched(t, p, at(1)); !slices.Equal(victims(d), []string{"L"}) {
		t.Fatalf("victims %v", victims(d))
	}
	mustEnqueue(t, p, makeJob("W", "a").Class(Low).GPUs(4).Seq(4).Obj())
	rl, _ := p.Running("L")
	rm, _ := p.Running("M")
	p.BeginRelease("M") // M finishes while L is still stopping
	p.Release("M", 0, 0)
	if d := sched(t, p, at(2)); !slices.Equal(grantedJobs(d), []string{"W"}) || grantNodes(d.Grants[0])[0] != rm.Placement[0].Node {
		t.Fatalf("want W on M's node (H waits for L), got %+v", d.Grants)
	}
	p.Release("L", 0, 0)
	if d := sched(t, p, at(3)); !slices.Equal(grantedJobs(d), []string{"H"}) || grantNodes(d.Grants[0])[0] != rl.Placement[0].Node {
		t.Fatalf("want H on L's node, got %+v", d.Grants)
	}
}

// TestVictimOrder: lowest class first; among equals, jobs that restarted after a preemption only
// recently last; then the least work lost (GPUs × time since the attempt started or last
// checkpointed). Jobs preempted MaxPreemptions times, or whose preemption would lose more than
// MaxLossGPUHours, are never victims.
func TestVictimOrder(t *testing.T) {
	type running struct {
		name      string
		class     Class
		gpus, cpu int
		node      int // index into the nodes
		started   int // minute
		ckpt      int // minute of the last checkpoint, 0: none
		preempted int // earlier preemptions
	}
	for _, tc := range []struct {
		name    string
		nodes   []Node
		pol     Policy
		running []running
		req     Request
		now     int
		want    []string
	}{
		{"least GPU-hours lost, not the most recently started",
			[]Node{{Name: "n-1", Family: "a", GPUs: 8}, {Name: "n-2", Family: "a", GPUs: 2}}, Policy{},
			[]running{{"big", Low, 8, 0, 0, 50, 0, 0}, {"small", Low, 1, 0, 1, 30, 0, 0}, {"h", High, 1, 0, 1, 0, 0, 0}},
			makeJob("r", "a").Class(High).Seq(9).Obj(), 60, []string{"small"}},
		{"a lower class first, whatever it loses",
			nodesOf("n", "a", 2, 4, 0, 0), Policy{},
			[]running{{"low", Low, 4, 0, 0, 0, 0, 0}, {"med", Medium, 4, 0, 1, 55, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 60, []string{"low"}},
		{"since the last checkpoint",
			nodesOf("n", "a", 2, 4, 0, 0), Policy{},
			[]running{{"old-ckpt", Low, 4, 0, 0, 0, 55, 0}, {"young", Low, 4, 0, 1, 50, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 60, []string{"old-ckpt"}},
		{"a job that restarted after a preemption is protected for a while",
			nodesOf("n", "a", 2, 4, 0, 0), Policy{},
			[]running{{"restarted", Low, 4, 0, 0, 55, 0, 1}, {"fresh", Low, 4, 0, 1, 30, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 60, []string{"fresh"}},
		{"protection ends",
			nodesOf("n", "a", 2, 4, 0, 0), Policy{},
			[]running{{"restarted", Low, 4, 0, 0, 40, 0, 1}, {"fresh", Low, 4, 0, 1, 30, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 60, []string{"restarted"}},
		{"never more than MaxPreemptions",
			nodesOf("n", "a", 1, 4, 0, 0), Policy{},
			[]running{{"thrice", Low, 4, 0, 0, 0, 0, 3}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 120, nil},
		{"MaxPreemptions set higher",
			nodesOf("n", "a", 1, 4, 0, 0), Policy{MaxPreemptions: 5},
			[]running{{"thrice", Low, 4, 0, 0, 0, 0, 3}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 120, []string{"thrice"}},
		{"never a job that would lose more than MaxLossGPUHours",
			nodesOf("n", "a", 1, 4, 0, 0), Policy{},
			[]running{{"long", Low, 4, 0, 0, 0, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 6*60 + 1, nil},
		{"unless it checkpointed",
			nodesOf("n", "a", 1, 4, 0, 0), Policy{},
			[]running{{"long", Low, 4, 0, 0, 0, 6 * 60, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 6*60 + 1, []string{"long"}},
		{"no loss limit",
			nodesOf("n", "a", 1, 4, 0, 0), Policy{MaxLossGPUHours: -1},
			[]running{{"long", Low, 4, 0, 0, 0, 0, 0}},
			makeJob("r", "a").Class(High).GPUs(4).Seq(9).Obj(), 6*60 + 1, []string{"long"}},
		{"a CPU-only request preempts the job holding the CPU it lacks, not a GPU job",
			[]Node{{Name: "n-1", Family: "a", GPUs: 4, CPU: 16}}, Policy{},
			[]running{{"gpu", Low, 4, 2, 0, 50, 0, 0}, {"cpu", Low, 0, 10, 0, 0, 0, 0}},
			Request{Job: "r", Kind: KindJob, Class: High, Demand: Demand{Family: "a", CPU: 8}, Workers: 1, Seq: 9}, 60, []string{"cpu"}},
		{"a GPU job is preempted for CPU when CPU is what blocks",
			[]Node{{Name: "n-1", Family: "a", GPUs: 4, CPU: 16}}, Policy{},
			[]running{{"gpu", Low, 4, 14, 0, 50, 0, 0}},
			Request{Job: "r", Kind: KindJob, Class: High, Demand: Demand{Family: "a", CPU: 8}, Workers: 1, Seq: 9}, 60, []string{"gpu"}},
		{"nobody is preempted for a resource it does not hold",
			[]Node{{Name: "n-1", Family: "a", GPUs: 4, CPU: 16}}, Policy{},
			[]running{{"gpu", Low, 2, 0, 0, 0, 0, 0}, {"cpu", Low, 0, 8, 0, 59, 0, 0}},
			Request{Job: "r", Kind: KindJob, Class: High, Demand: Demand{Family: "a", GPUs: 4}, Workers: 1, Seq: 9}, 60, []string{"gpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.nodes, tc.pol)
			rs := slices.Clone(tc.running)
			slices.SortStableFunc(rs, func(a, b running) int { return a.started - b.started })
			for i, r := range rs {
				rq := Request{Job: r.name, Kind: KindJob, Class: r.class, Demand: Demand{Family: "a", GPUs: r.gpus, CPU: r.cpu},
					Workers: 1, Seq: int64(i), Preemptions: r.preempted}
				if err := p.Adopt(Adoption{Request: rq, StartedAt: at(r.started),
					Placement: []WorkerPlacement{{Worker: 0, Node: tc.nodes[r.node].Name, GPUs: freeIndices(p, r.node, r.gpus)}}}); err != nil {
					t.Fatal(err)
				}
				if r.ckpt > 0 && !p.Checkpointed(r.name, 0, at(r.ckpt)) {
					t.Fatalf("checkpoint of %s refused", r.name)
				}
			}
			mustEnqueue(t, p, tc.req)
			got := victims(sched(t, p, at(tc.now)))
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("victims %v, want %v", got, tc.want)
			}
		})
	}
}

// freeIndices picks n GPU indices not yet used on node i.
func freeIndices(p *Pool, i, n int) []int {
	return maskIndices(lowestFree(p.nodes[i].used, p.nodes[i].GPUs, n))
}

func TestCheckpointed(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("x", "a").Class(Low).GPUs(4).Seq(1).Obj())
	sched(t, p, at(10))
	for _, tc := range []struct {
		job     string
		attempt int
		at      int
		want    bool
	}{
		{"x", 0, 20, true},
		{"x", 0, 15, false}, // older than the last one
		{"x", 0, 20, false}, // the same
		{"x", 1, 30, false}, // another attempt
		{"y", 0, 30, false}, // unknown
		{"x", 0, 5, false},  // before the attempt started
		{"x", 0, 30, true},
	} {
		if got := p.Checkpointed(tc.job, tc.attempt, at(tc.at)); got != tc.want {
			t.Errorf("Checkpointed(%s, %d, %d) = %v, want %v", tc.job, tc.attempt, tc.at, got, tc.want)
		}
	}
	if ri, _ := p.Running("x"); !ri.CheckpointAt.Equal(at(30)) {
		t.Fatalf("checkpoint %v", ri.CheckpointAt)
	}
	if q := roundTrip(t, p); !q.running["x"].ckpt.Equal(at(30)) {
		t.Fatal("checkpoint lost in a snapshot")
	}
}

// A job's preemptions are counted across attempts, also when its next attempt comes after its
// capacity is gone, and given back to the caller in RunningInfo.
func TestPreemptionsCountAcrossAttempts(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{MaxPreemptions: -1, MaxLossGPUHours: -1})
	x := makeJob("x", "a").Class(Low).GPUs(4).Seq(1).Obj()
	mustEnqueue(t, p, x)
	sched(t, p, at(0))
	for i := 1; i <= 4; i++ {
		h := "h" + string(rune('0'+i))
		mustEnqueue(t, p, makeJob(h, "a").Class(High).GPUs(4).Seq(int64(10+i)).Obj())
		if d := sched(t, p, at(10*i)); !slices.Equal(victims(d), []string{"x"}) {
			t.Fatalf("round %d: victims %v", i, victims(d))
		}
		if ri, _ := p.Running("x"); ri.Preemptions != i {
			t.Fatalf("round %d: %d preemptions", i, ri.Preemptions)
		}
		p.Release("x", i-1, 0)
		if i == 2 {
			p = roundTrip(t, p) // the count survives a snapshot between attempts
		}
		if d := sched(t, p, at(10*i+1)); !slices.Equal(grantedJobs(d), []string{h}) {
			t.Fatalf("round %d: granted %v", i, grantedJobs(d))
		}
		x.Attempt = i
		mustEnqueue(t, p, x) // as the job does once its workers stopped
		p.BeginRelease(h)
		p.Release(h, 0, 0)
		if d := sched(t, p, at(10*i+2)); !slices.Equal(grantedJobs(d), []string{"x"}) {
			t.Fatalf("round %d: granted %v", i, grantedJobs(d))
		}
	}
	// The memory is bounded: a preempted job that never returns is forgotten after an hour.
	p.running["x"].preemptedBy = &Preemptor{Job: "h", Class: High}
	p.Cancel("x")
	mustEnqueue(t, p, makeJob("y", "a").Class(Low).GPUs(4).Seq(20).Obj())
	sched(t, p, at(100))
	p.BeginRelease("y")
	p.running["y"].preemptedBy = &Preemptor{Job: "h", Class: High}
	p.Release("y", 0, 0)
	if _, ok := p.memo["y"]; !ok {
		t.Fatal("y's preemption count was not kept")
	}
	sched(t, p, at(100+61))
	if len(p.memo) != 0 || len(p.memoOrder) != 0 {
		t.Fatalf("memo not forgotten: %v %v", p.memo, p.memoOrder)
	}
}

// TestReserveAfter: a medium request that needs a whole node and has waited first in its class
// for ReserveAfter reserves the node closest to fitting; later jobs no longer start there, and it
// starts once the node has drained.
func TestReserveAfter(t *testing.T) {
	setup := func(t *testing.T, pol Policy) *Pool {
		p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), pol)
		// n-1: two high jobs, 1 and 2 GPUs; n-2: one high job of 3 GPUs.
		for i, r := range []Request{makeJob("h1", "a").Class(High).Seq(1).Obj(), makeJob("h2", "a").Class(High).GPUs(2).Seq(2).Obj(), makeJob("h3", "a").Class(High).GPUs(3).Seq(3).Obj()} {
			mustEnqueue(t, p, r)
			sched(t, p, at(i))
		}
		mustEnqueue(t, p, makeJob("big", "a").GPUs(4).Seq(10).Obj())
		sched(t, p, at(5))
		return p
	}
	placed := func(p *Pool, j string) string {
		ri, _ := p.Running(j)
		return ri.Placement[0].Node
	}
	t.Run("waits ReserveAfter first", func(t *testing.T) {
		p := setup(t, Policy{ReserveAfter: 30 * time.Minute})
		if w, ok := p.NextWake(); !ok || !w.Equal(at(35)) {
			t.Fatalf("NextWake %v %v, want %v", w, ok, at(35))
		}
		mustEnqueue(t, p, makeJob("small", "a").Class(Low).Seq(11).Obj())
		if d := sched(t, p, at(20)); !slices.Equal(grantedJobs(d), []string{"small"}) {
			t.Fatalf("before reserve_after: granted %v", grantedJobs(d))
		}
	})
	t.Run("reserves the node closest to fitting", func(t *testing.T) {
		p := setup(t, Policy{ReserveAfter: 30 * time.Minute})
		if placed(p, "h1") != "n-1" || placed(p, "h2") != "n-1" || placed(p, "h3") != "n-2" {
			t.Fatal("setup: h1 and h2 should be on n-1, h3 on n-2")
		}
		p.BeginRelease("h1")
		p.Release("h1", 0, 0) // now n-1 lacks 2 GPUs for big, n-2 lacks 3
		mustEnqueue(t, p, makeJob("small", "a").Class(Low).GPUs(2).Seq(11).Obj(), makeJob("m2", "a").Seq(12).Obj())
		d := sched(t, p, at(40))
		// small and m2 may start, but not on the reserved node.
		for _, g := range d.Grants {
			if g.Placement[0].Node == placed(p, "h2") {
				t.Fatalf("%s started on the node reserved for big", g.Job)
			}
		}
		v := p.View()
		var reserved []string
		for _, n := range v.Nodes {
			if n.ReservedFor == "big" {
				reserved = append(reserved, n.Name)
			}
		}
		wb, _ := p.Explain("big")
		if !slices.Equal(reserved, []string{placed(p, "h2")}) || !slices.Equal(wb.Reserved, reserved) ||
			!strings.Contains(wb.Reason, "first medium-priority request for 35m0s (reserve_after 30m0s)") || !strings.Contains(wb.Reason, "reserved for it") {
			t.Fatalf("reserved %v; big: %+v", reserved, wb)
		}
		// The node drains: big starts there.
		p.BeginRelease("h2")
		p.Release("h2", 0, 0)
		if d := sched(t, p, at(41)); !slices.Equal(grantedJobs(d), []string{"big"}) {
			t.Fatalf("granted %v, want big", grantedJobs(d))
		}
	})
	t.Run("without ReserveAfter a later job takes the free GPU", func(t *testing.T) {
		p := setup(t, Policy{})
		p.BeginRelease("h1")
		p.Release("h1", 0, 0)
		mustEnqueue(t, p, makeJob("small", "a").Class(Low).GPUs(2).Seq(11).Obj())
		if d := sched(t, p, at(40)); !slices.Equal(grantedJobs(d), []string{"small"}) || d.Grants[0].Placement[0].Node != placed(p, "h2") {
			t.Fatalf("granted %+v", d.Grants)
		}
		if _, ok := p.NextWake(); ok {
			t.Fatal("NextWake without reservations or min runtime")
		}
	})
	t.Run("a high request never reserves", func(t *testing.T) {
		p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{ReserveAfter: time.Minute})
		mustEnqueue(t, p, makeJob("h1", "a").Class(High).GPUs(2).Seq(1).Obj())
		sched(t, p, at(0))
		mustEnqueue(t, p, makeJob("bigh", "a").Class(High).GPUs(4).Seq(2).Obj())
		sched(t, p, at(1))
		mustEnqueue(t, p, makeJob("h2", "a").Class(High).Seq(3).Obj())
		if d := sched(t, p, at(30)); !slices.Equal(grantedJobs(d), []string{"h2"}) {
			t.Fatalf("granted %v, want h2", grantedJobs(d))
		}
	})
	t.Run("strict-fifo never reserves", func(t *testing.T) {
		p := setup(t, Policy{Queueing: StrictFIFO, ReserveAfter: time.Minute})
		sched(t, p, at(60))
		if wb, _ := p.Explain("big"); len(wb.Reserved) != 0 {
			t.Fatalf("big: %+v", wb)
		}
	})
}

// TestIdlePassIsFree: with no event since a pass that decided nothing, Schedule returns at once,
// whatever the pool's size, until NextWake.
func TestIdlePassIsFree(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 50, 4, 0, 0), Policy{MinRuntimeBeforePreemption: 10 * time.Minute})
	for i := 0; i < 50; i++ {
		mustEnqueue(t, p, makeJob("l"+string(rune('A'+i%26))+string(rune('a'+i/26)), "a").Class(Low).GPUs(4).Seq(int64(i)).Obj())
	}
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(4).Seq(100).Obj())
	sched(t, p, at(1)) // nothing to decide: every job is too young to be preempted
	epoch := p.sc.failed.epoch
	for m := 2; m < 10; m++ {
		if d := p.Schedule(at(m)); len(d.Grants)+len(d.Preemptions) != 0 || p.sc.failed.epoch != epoch {
			t.Fatalf("minute %d: an idle pass ran in full", m)
		}
	}
	if w, ok := p.NextWake(); !ok || !w.Equal(at(10)) {
		t.Fatalf("NextWake = %v, %v; want %v", w, ok, at(10))
	}
	// At NextWake the pass runs and preempts; an event also makes the next pass run.
	if d := sched(t, p, at(10)); len(d.Preemptions) != 1 {
		t.Fatalf("at NextWake: %+v", d)
	}
	epoch = p.sc.failed.epoch
	p.Schedule(at(11))
	if p.sc.failed.epoch != epoch {
		t.Fatal("an idle pass after the preemption ran in full")
	}
	mustEnqueue(t, p, makeJob("l2", "a").Class(Low).Seq(200).Obj())
	p.Schedule(at(11))
	if p.sc.failed.epoch == epoch {
		t.Fatal("the pass after an Enqueue was skipped")
	}
}
