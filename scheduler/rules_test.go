package scheduler

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseInstanceType(t *testing.T) {
	good := []struct {
		in   string
		want Demand
	}{
		{"a100plus.8gpu.80vG.96C.768G", Demand{Family: "a100plus", GPUs: 8, VRAMGB: 80, CPU: 96, RAMGB: 768}},
		{"a100.8gpu", Demand{Family: "a100", GPUs: 8}},
		{"a100.1gpu.40", Demand{Family: "a100", GPUs: 1, VRAMGB: 40}},
		{"a100.1gpu.40vG", Demand{Family: "a100", GPUs: 1, VRAMGB: 40}},
		{"cpu.8C.32G", Demand{Family: "cpu", CPU: 8, RAMGB: 32}},
		{"v100-sxm.4gpu.32vG.24C.192G", Demand{Family: "v100-sxm", GPUs: 4, VRAMGB: 32, CPU: 24, RAMGB: 192}},
	}
	for _, tc := range good {
		got, err := ParseInstanceType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseInstanceType(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "a100", "a100.", ".8gpu", "a100.0gpu", "a100.xgpu", "a100.8GPU", "a100.8gpu.80vG.96C",
		"a100.8gpu.80vG.96C.768", "a100.8gpu.80vG.96.768G", "a100.8gpu.x", "cpu.8C", "cpu.0C.32G", "cpu.8C.32", "a 100.8gpu",
		"a100.8gpu.80vG.96C.768G.x", "a100.-1gpu"} {
		_, err := ParseInstanceType(bad)
		if err == nil {
			t.Errorf("ParseInstanceType(%q): want error", bad)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+bad+`"`) || !strings.Contains(msg, "<family>.<N>gpu.<VRAM>vG.<C>C.<RAM>G") || !strings.Contains(msg, "cpu.<C>C.<RAM>G") {
			t.Errorf("ParseInstanceType(%q): error %q should quote the name and show the forms", bad, msg)
		}
	}
}

func TestClass(t *testing.T) {
	for in, want := range map[string]Class{"": Medium, "low": Low, "medium": Medium, "HIGH": High} {
		if got, err := ParseClass(in); err != nil || got != want {
			t.Errorf("ParseClass(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseClass("urgent"); err == nil || !strings.Contains(err.Error(), "low, medium, high") {
		t.Errorf("ParseClass(urgent): %v", err)
	}
	b, _ := json.Marshal(struct{ C Class }{High})
	if string(b) != `{"C":"high"}` {
		t.Errorf("marshal: %s", b)
	}
	var v struct{ C Class }
	if err := json.Unmarshal([]byte(`{"C":"low"}`), &v); err != nil || v.C != Low {
		t.Errorf("unmarshal: %v %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"C":1}`), &v); err != nil || v.C != Medium {
		t.Errorf("unmarshal number: %v %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"C":"top"}`), &v); err == nil {
		t.Errorf("unmarshal bad class: no error")
	}
}

func TestNewPoolValidation(t *testing.T) {
	node := func(name, fam string, gpus int) Node { return Node{Name: name, Family: fam, GPUs: gpus} }
	for _, tc := range []struct {
		name  string
		nodes []Node
		pol   Policy
		want  string
	}{
		{name: "node without name", nodes: []Node{node("", "a", 0)}, want: "no name"},
		{name: "node without family", nodes: []Node{node("n", "", 0)}, want: "no instance family"},
		{name: "negative GPUs", nodes: []Node{node("n", "a", -1)}, want: "negative"},
		{name: "duplicate name", nodes: []Node{node("n", "a", 0), node("n", "a", 0)}, want: "used twice"},
		{name: "too many GPUs", nodes: []Node{node("n", "a", 65)}, want: "at most 64"},
		{name: "unknown queueing", pol: Policy{Queueing: "lifo"}, want: "unknown queueing"},
		{name: "negative min runtime", pol: Policy{MinRuntimeBeforePreemption: -time.Second}, want: "negative"},
		{name: "negative reserve_after", pol: Policy{ReserveAfter: -time.Second}, want: "reserve_after must not be negative"},
		{name: "negative preemption_notice", pol: Policy{PreemptionNotice: -time.Second}, want: "preemption_notice must not be negative"},
	} {
		if _, err := NewPool(tc.nodes, tc.pol); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewPool(%+v, %+v) = %v, want %q", tc.name, tc.nodes, tc.pol, err, tc.want)
		}
	}
}

// TestPolicyChanges: every setting a reconfiguration may change is named as the config names it;
// a limit left at its default is no change.
func TestPolicyChanges(t *testing.T) {
	a := Policy{MaxPreemptions: DefaultMaxPreemptions}
	b := Policy{Queueing: StrictFIFO, MinRuntimeBeforePreemption: time.Minute, ReserveAfter: time.Hour, MaxPreemptions: 5,
		MaxLossGPUHours: -1, PreemptionNotice: 2 * time.Minute}
	want := []string{"queueing best-effort-fifo -> strict-fifo", "min_runtime_before_preemption 0s -> 1m0s", "reserve_after 0s -> 1h0m0s",
		"max_preemptions 3 -> 5", "max_loss_gpu_hours 24 -> no limit", "preemption_notice 0s -> 2m0s"}
	if got := a.Changes(b); !slices.Equal(got, want) {
		t.Fatalf("Changes = %q, want %q", got, want)
	}
	if got := a.Changes(Policy{}); len(got) != 0 {
		t.Fatalf("defaults: %q", got)
	}
}

func TestAdmit(t *testing.T) {
	nodes := append(nodesOf("big", "a100plus", 2, 8, 96, 768), nodesOf("small", "a100plus", 2, 4, 48, 384)...)
	nodes = append(nodes, nodesOf("cpu", "cpu", 1, 0, 32, 128)...)
	p := mustPool(t, nodes, Policy{})
	d8, _ := ParseInstanceType("a100plus.8gpu.80vG.96C.768G")
	d4, _ := ParseInstanceType("a100plus.4gpu.80vG.48C.384G")
	r := func(d Demand, workers int) Request {
		return Request{Job: "j", Kind: KindJob, Class: Medium, Demand: d, Workers: workers}
	}
	for _, tc := range []struct {
		name string
		req  Request
		want string // "" = admitted
	}{
		{"fits", r(d8, 2), ""},
		{"small fits everywhere", r(d4, 4), ""},
		{"notebook class ignored", Request{Job: "nb", Kind: KindNotebook, Class: 7, Demand: d4, Workers: 1}, ""},
		{"cpu job", r(Demand{Family: "cpu", CPU: 8, RAMGB: 32}, 1), ""},
		{"no job id", Request{Kind: KindJob, Demand: d4, Workers: 1}, "no job id"},
		{"zero workers", r(d8, 0), "at least 1 worker, got 0"},
		{"bad kind", Request{Job: "j", Kind: "vm", Demand: d4, Workers: 1}, `unknown kind "vm"`},
		{"bad class", Request{Job: "j", Kind: KindJob, Class: 5, Demand: d4, Workers: 1}, "unknown priority class 5"},
		{"unknown family", r(Demand{Family: "h100", GPUs: 1}, 1), `instance family "h100" is not in this allocation (it has a100plus, cpu)`},
		{"too many workers", r(d4, 5), "needs 5 workers, each on its own a100plus node, but this allocation has only 4 a100plus nodes"},
		{"too many GPUs", r(Demand{Family: "a100plus", GPUs: 16}, 1), "instance type needs 16 a100plus GPUs per worker but the largest a100plus node in this allocation has 8"},
		{"too much CPU", r(Demand{Family: "a100plus", GPUs: 1, CPU: 128}, 1), "needs 128 CPU cores per worker but the largest a100plus node in this allocation has 96"},
		{"too much RAM", r(Demand{Family: "a100plus", GPUs: 1, RAMGB: 1024}, 1), "needs 1024 GB RAM per worker but the largest a100plus node in this allocation has 768 GB"},
		{"not enough big nodes", r(d8, 3), "needs 3 workers on distinct a100plus nodes with 8 GPUs, 96 CPU cores and 768 GB RAM each, but only 2 nodes in this allocation are that large"},
	} {
		err := p.Admit(tc.req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		case tc.want != "":
			if eerr := p.Enqueue(tc.req); eerr == nil || p.WaitingCount() != 0 {
				t.Errorf("%s: Enqueue accepted an inadmissible request", tc.name)
			}
		}
	}
}

func TestEnqueueIdempotentAndRequeue(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("x", "a").GPUs(4).Seq(5).Obj(), makeJob("x", "a").GPUs(4).Seq(5).Obj())
	if p.WaitingCount() != 1 {
		t.Fatalf("duplicate enqueue: %d waiting", p.WaitingCount())
	}
	nb := Request{Job: "nb", Kind: KindNotebook, Class: Low, Demand: Demand{Family: "a", GPUs: 1}, Workers: 1, Seq: 9}
	mustEnqueue(t, p, nb)
	if wi, _ := p.Explain("nb"); wi.Class != High || wi.Position != 1 {
		t.Fatalf("notebook not forced to high: %+v", wi)
	}
	if d := sched(t, p, at(0)); len(d.Grants) != 2 {
		t.Fatalf("grants %v", grantedJobs(d))
	}
	// Same attempt while running: no-op.
	mustEnqueue(t, p, makeJob("x", "a").GPUs(4).Seq(5).Obj())
	if p.WaitingCount() != 0 {
		t.Fatal("re-enqueue of a running attempt was queued")
	}
	// Later seq of the same class, then the preempted job re-queued with its original seq 5 and a
	// newer attempt: it is ahead of the later one, but waits for its previous attempt to release.
	mustEnqueue(t, p, makeJob("y", "a").GPUs(4).Seq(7).Obj())
	x2 := makeJob("x", "a").GPUs(4).Seq(5).Obj()
	x2.Attempt = 1
	mustEnqueue(t, p, x2)
	wx, _ := p.Explain("x")
	if wx.Position != 1 || wx.Attempt != 1 || !strings.Contains(wx.Reason, "previous attempt (0)") {
		t.Fatalf("re-queued job: %+v", wx)
	}
	old := x2
	old.Attempt = 0
	mustEnqueue(t, p, old) // the running attempt: a no-op
	x3 := x2
	x3.Attempt = 2
	mustEnqueue(t, p, x3) // replaces the waiting attempt 1
	if wx, _ := p.Explain("x"); wx.Attempt != 2 || p.WaitingCount() != 2 {
		t.Fatalf("newer attempt did not replace: %+v", wx)
	}
	if err := p.Enqueue(x2); err == nil {
		t.Fatal("stale attempt 1 accepted while attempt 2 waits")
	}
	if !p.BeginRelease("x") || !p.Release("x", 0, 0) {
		t.Fatal("release of attempt 0")
	}
	d := sched(t, p, at(1))
	if got := grantedJobs(d); !slices.Equal(got, []string{"x"}) || d.Grants[0].Attempt != 2 {
		t.Fatalf("want x attempt 2 granted first, got %+v", d.Grants)
	}
	if p.Release("x", 0, 0) || p.Release("x", 2, 5) || p.Release("nope", 0, 0) {
		t.Fatal("bogus release accepted")
	}
}

func poolWith(t *testing.T, nodes []Node, pol Policy, jobs ...runSpec) *Pool {
	t.Helper()
	p := mustPool(t, nodes, pol)
	slices.SortFunc(jobs, func(a, b runSpec) int { return a.started - b.started })
	for i, rs := range jobs {
		r := makeJob(rs.name, nodes[0].Family).Class(rs.class).GPUs(rs.gpus).Seq(int64(-100 + i)).Obj()
		r.HonorsNotice, r.Preemptions = rs.honors, rs.preempt
		if rs.kind != "" {
			r.Kind = rs.kind
		}
		r.Nodes, r.Workers = rs.on, max(1, rs.workers)
		mustEnqueue(t, p, r)
		if d := sched(t, p, at(rs.started)); len(d.Grants) != 1 {
			t.Fatalf("setup: %s not granted", rs.name)
		}
	}
	return p
}

func TestPreemptionRules(t *testing.T) {
	one := nodesOf("n", "a", 1, 4, 0, 0)
	two := nodesOf("n", "a", 2, 4, 0, 0)
	minRuntime15m := Policy{MinRuntimeBeforePreemption: 15 * time.Minute}
	notice2m := Policy{PreemptionNotice: 2 * time.Minute}
	request := func(c Class) jobBuilder { return makeJob("r", "a").Class(c).GPUs(4).Seq(1) }
	for _, tc := range []struct {
		name    string
		nodes   []Node
		pol     Policy
		running []runSpec
		req     Request
		now     int      // minute
		want    []string // victims
	}{{
		name:    "equal class never preempts",
		nodes:   one,
		running: []runSpec{running("m").GPUs(4)},
		req:     request(Medium).Obj(),
		now:     10,
	}, {
		name:    "higher class never preempted",
		nodes:   one,
		running: []runSpec{running("h").Class(High).GPUs(4)},
		req:     request(Medium).Obj(),
		now:     10,
	}, {
		name:    "low never preempts",
		nodes:   one,
		running: []runSpec{running("l").Class(Low).GPUs(4)},
		req:     request(Low).Obj(),
		now:     10,
	}, {
		name:    "notebooks never preempted",
		nodes:   one,
		running: []runSpec{running("nb").Class(High).Notebook().GPUs(4)},
		req:     request(High).Obj(),
		now:     10,
	}, {
		name:    "high preempts low",
		nodes:   one,
		running: []runSpec{running("l").Class(Low).GPUs(4)},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"l"},
	}, {
		name:    "min runtime protects",
		nodes:   one,
		pol:     minRuntime15m,
		running: []runSpec{running("l").Class(Low).GPUs(4)},
		req:     request(High).Obj(),
		now:     10,
	}, {
		name:    "min runtime elapsed",
		nodes:   one,
		pol:     minRuntime15m,
		running: []runSpec{running("l").Class(Low).GPUs(4)},
		req:     request(High).Obj(),
		now:     15,
		want:    []string{"l"},
	}, {
		name:    "min runtime: only the job that ran long enough",
		nodes:   two,
		pol:     minRuntime15m,
		running: []runSpec{running("old").Class(Low).GPUs(4), running("young").Class(Low).GPUs(4).StartedAt(10)},
		req:     request(High).Obj(),
		now:     16,
		want:    []string{"old"},
	}, {
		name:    "lowest class first",
		nodes:   two,
		running: []runSpec{running("l").Class(Low).GPUs(4), running("m").GPUs(4).StartedAt(5)},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"l"},
	}, {
		name:    "least work lost first: the most recently started",
		nodes:   two,
		running: []runSpec{running("old").Class(Low).GPUs(4), running("new").Class(Low).GPUs(4).StartedAt(5)},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"new"},
	}, {
		name:  "only what is needed",
		nodes: one,
		running: []runSpec{running("a").Class(Low), running("b").Class(Low).StartedAt(1),
			running("c").Class(Low).StartedAt(2)},
		req:  request(High).GPUs(3).Obj(),
		now:  10,
		want: []string{"b", "c"},
	}, {
		name:    "gang needs both nodes",
		nodes:   two,
		running: []runSpec{running("l1").Class(Low).GPUs(4), running("l2").Class(Low).GPUs(4).StartedAt(1)},
		req:     request(Medium).Workers(2).Obj(),
		now:     10,
		want:    []string{"l1", "l2"},
	}, {
		name:    "under a notice, a job that honours it goes first, whatever it ran",
		nodes:   two,
		pol:     notice2m,
		running: []runSpec{running("old").Class(Low).GPUs(4).HonorsNotice(), running("new").Class(Low).GPUs(4).StartedAt(5)},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"old"},
	}, {
		name:    "without a notice, honouring counts for nothing",
		nodes:   two,
		running: []runSpec{running("old").Class(Low).GPUs(4).HonorsNotice(), running("new").Class(Low).GPUs(4).StartedAt(5)},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"new"},
	}, {
		name:    "still the lowest class first",
		nodes:   two,
		pol:     notice2m,
		running: []runSpec{running("l").Class(Low).GPUs(4), running("m").GPUs(4).StartedAt(5).HonorsNotice()},
		req:     request(High).Obj(),
		now:     10,
		want:    []string{"l"},
	}, {
		name:    "a job that honours its notice loses nothing, so max_loss_gpu_hours never holds it back",
		nodes:   one,
		pol:     notice2m,
		running: []runSpec{running("long").Class(Low).GPUs(4).HonorsNotice()},
		req:     request(High).Obj(),
		now:     7 * 60, // 28 GPU-hours since it started
		want:    []string{"long"},
	}, {
		name:    "one that does not is held back",
		nodes:   one,
		pol:     notice2m,
		running: []runSpec{running("long").Class(Low).GPUs(4)},
		req:     request(High).Obj(),
		now:     7 * 60,
	}, {
		name:    "without a notice the loss counts from its start",
		nodes:   one,
		running: []runSpec{running("long").Class(Low).GPUs(4).HonorsNotice()},
		req:     request(High).Obj(),
		now:     7 * 60,
	}, {
		name:    "max_preemptions still applies to a job that honours its notice",
		nodes:   one,
		pol:     notice2m,
		running: []runSpec{running("thrice").Class(Low).GPUs(4).HonorsNotice().Preemptions(3)},
		req:     request(High).Obj(),
		now:     10,
	}, {
		name:    "and min_runtime_before_preemption",
		nodes:   one,
		pol:     Policy{PreemptionNotice: 2 * time.Minute, MinRuntimeBeforePreemption: 15 * time.Minute},
		running: []runSpec{running("young").Class(Low).GPUs(4).HonorsNotice()},
		req:     request(High).Obj(),
		now:     10,
	}, {
		name:    "honouring 3 GPUs lose less than 1 GPU for a minute",
		nodes:   one,
		pol:     notice2m,
		running: []runSpec{running("h3").Class(Low).GPUs(3).HonorsNotice(), running("fresh").Class(Low).StartedAt(9)},
		req:     request(High).GPUs(1).Obj(),
		now:     10,
		want:    []string{"h3"},
	}, {
		name:    "no partial preemption when it cannot fit",
		nodes:   two,
		running: []runSpec{running("l").Class(Low).GPUs(4), running("h").Class(High).GPUs(4).StartedAt(1)},
		req:     request(Medium).Workers(2).Obj(),
		now:     10,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, tc.nodes, tc.pol, tc.running...)
			mustEnqueue(t, p, tc.req)
			d := sched(t, p, at(tc.now))
			got := victims(d)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("victims %v, want %v", got, tc.want)
			}
			for _, v := range tc.want {
				ri, _ := p.Running(v)
				if !ri.Releasing || ri.PreemptedBy == nil || ri.PreemptedBy.Job != tc.req.Job || ri.PreemptedBy.Class != tc.req.Class {
					t.Fatalf("victim %s: %+v", v, ri)
				}
			}
			wi, _ := p.Explain(tc.req.Job)
			if len(tc.want) > 0 && !slices.Equal(wi.Nominated, tc.want) {
				t.Fatalf("nominated %v, want %v (%s)", wi.Nominated, tc.want, wi.Reason)
			}
			// Nothing more is preempted on the next pass.
			if d := sched(t, p, at(tc.now+1)); len(d.Preemptions) != 0 {
				t.Fatalf("second pass preempted %v", victims(d))
			}
		})
	}
}

// TestMinimisation: greedy order adds a victim that turns out unneeded; the minimisation pass drops it.
func TestMinimisation(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	// One node: b (medium, 2 GPUs) and a (low, 2 GPUs, started last); other node: c (low, 4 GPUs, started first).
	mustEnqueue(t, p, makeJob("c", "a").Class(Low).GPUs(4).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("b", "a").GPUs(2).Seq(2).Obj())
	sched(t, p, at(1))
	mustEnqueue(t, p, makeJob("a", "a").Class(Low).GPUs(2).Seq(3).Obj())
	sched(t, p, at(2))
	ra, _ := p.Running("a")
	rb, _ := p.Running("b")
	rc, _ := p.Running("c")
	if ra.Placement[0].Node != rb.Placement[0].Node || ra.Placement[0].Node == rc.Placement[0].Node {
		t.Fatalf("setup: a on %s, b on %s, c on %s", ra.Placement[0].Node, rb.Placement[0].Node, rc.Placement[0].Node)
	}
	// Order: a (low, newest), c (low), b (medium). Greedy adds a (n-1 still short), then c (fits on
	// n-2). Minimisation: c is needed, a is not.
	mustEnqueue(t, p, makeJob("r", "a").Class(High).GPUs(4).Seq(4).Obj())
	d := sched(t, p, at(10))
	if got := victims(d); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("victims %v, want [c]", got)
	}
}

func TestNominations(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("l1", "a").Class(Low).GPUs(4).Seq(1).Obj(), makeJob("l2", "a").Class(Low).GPUs(4).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("m", "a").GPUs(4).Workers(2).Seq(3).Obj())
	d := sched(t, p, at(5))
	if got := victims(d); len(got) != 2 {
		t.Fatalf("victims %v", got)
	}
	// A low request that would fit on l1's node once released must not take the capacity
	// nominated to m.
	mustEnqueue(t, p, makeJob("small", "a").Class(Low).GPUs(2).Seq(4).Obj())
	p.Release("l1", 0, 0)
	d = sched(t, p, at(6))
	if len(d.Grants) != 0 {
		t.Fatalf("granted %v on capacity nominated to m", grantedJobs(d))
	}
	wm, _ := p.Explain("m")
	if !strings.Contains(wm.Reason, "nominated to you") || !slices.Equal(wm.Nominated, []string{"l2"}) || !strings.Contains(wm.Reason, "1 node is already free") {
		t.Fatalf("m: %+v", wm)
	}
	// A better request arriving later takes the nomination over: h (high) gets the free node
	// first; m waits (and may not preempt further: nothing lower is left running).
	mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(4).Seq(5).Obj())
	d = sched(t, p, at(7))
	if got := grantedJobs(d); !slices.Equal(got, []string{"h"}) || d.Grants[0].Placement[0].Node != "n-1" {
		t.Fatalf("want h granted on n-1, got %+v", d.Grants)
	}
	wm, _ = p.Explain("m")
	if !strings.Contains(wm.Reason, "may not be preempted") {
		t.Fatalf("m: %+v", wm)
	}
	// l2 stops: n-2 stays held for m (small may not take it) until m starts or is withdrawn.
	p.Release("l2", 0, 0)
	if d = sched(t, p, at(8)); len(d.Grants) != 0 {
		t.Fatalf("granted %v on capacity held for m", grantedJobs(d))
	}
	if !p.Cancel("m") {
		t.Fatal("cancel m")
	}
	if d = sched(t, p, at(9)); !slices.Equal(grantedJobs(d), []string{"small"}) {
		t.Fatalf("granted %v, want small", grantedJobs(d))
	}
}

func TestNominationTakenOverByBetterRequest(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("l", "a").Class(Low).GPUs(4).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("m", "a").GPUs(4).Seq(2).Obj())
	if d := sched(t, p, at(1)); !slices.Equal(victims(d), []string{"l"}) {
		t.Fatalf("victims %v", victims(d))
	}
	mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(4).Seq(3).Obj())
	if d := sched(t, p, at(2)); len(d.Grants)+len(d.Preemptions) != 0 {
		t.Fatalf("unexpected %+v", d)
	}
	// h took the nomination over: l's capacity is h's now.
	wh, _ := p.Explain("h")
	wm, _ := p.Explain("m")
	if !slices.Equal(wh.WaitingFor, []string{"l"}) || !slices.Equal(wh.Nominated, []string{"l"}) || len(wm.Nominated) != 0 || !slices.Equal(wm.WaitingFor, []string{"h"}) {
		t.Fatalf("h: %+v\nm: %+v", wh, wm)
	}
	p.Release("l", 0, 0)
	if d := sched(t, p, at(3)); !slices.Equal(grantedJobs(d), []string{"h"}) {
		t.Fatalf("granted %v, want h", grantedJobs(d))
	}
}

func TestPartialRelease(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 3, 8, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("big", "a").GPUs(8).Workers(3).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("w2", "a").GPUs(8).Workers(2).Seq(2).Obj(), makeJob("w1", "a").Class(Low).GPUs(8).Seq(3).Obj())
	p.BeginRelease("big")
	if d := sched(t, p, at(1)); len(d.Grants) != 0 {
		t.Fatalf("granted on releasing capacity: %v", grantedJobs(d))
	}
	p.Release("big", 0, 0)
	if d := sched(t, p, at(2)); len(d.Grants) != 0 {
		t.Fatalf("granted %v with one free node (w2 needs 2, w1 must not take w2's node)", grantedJobs(d))
	}
	if v := p.View(); v.Nodes[0].FreeGPUs != 8 || v.Nodes[1].ReleasingGPUs != 8 || v.Nodes[1].FreeGPUs != 0 {
		t.Fatalf("nodes %+v", v.Nodes)
	}
	if ri, _ := p.Running("big"); !slices.Equal(ri.Released, []int{0}) {
		t.Fatalf("released %v", ri.Released)
	}
	p.Release("big", 0, 1)
	if d := sched(t, p, at(3)); !slices.Equal(grantedJobs(d), []string{"w2"}) {
		t.Fatalf("granted %v, want w2", grantedJobs(d))
	}
	p.Release("big", 0, 2)
	if d := sched(t, p, at(4)); !slices.Equal(grantedJobs(d), []string{"w1"}) {
		t.Fatalf("granted %v, want w1", grantedJobs(d))
	}
	if _, ok := p.Running("big"); ok {
		t.Fatal("fully released job still running")
	}
}

func TestStrictVsBestEffort(t *testing.T) {
	for _, q := range []Queueing{BestEffortFIFO, StrictFIFO} {
		t.Run(string(q), func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{Queueing: q})
			mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(4).Seq(1).Obj())
			sched(t, p, at(0))
			// big (medium) needs both nodes: one is held by a high job, so it cannot start or preempt.
			mustEnqueue(t, p, makeJob("big", "a").GPUs(4).Workers(2).Seq(2).Obj(), makeJob("small", "a").Class(Low).GPUs(4).Seq(3).Obj())
			d := sched(t, p, at(1))
			ws, _ := p.Explain("small")
			if q == StrictFIFO {
				if len(d.Grants) != 0 || !strings.Contains(ws.Reason, "strict-fifo") || !slices.Equal(ws.WaitingFor, []string{"big"}) {
					t.Fatalf("strict: granted %v; small: %+v", grantedJobs(d), ws)
				}
			} else if !slices.Equal(grantedJobs(d), []string{"small"}) {
				t.Fatalf("best-effort: granted %v, want small", grantedJobs(d))
			}
		})
	}
}

func TestCancel(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("r", "a").GPUs(4).Seq(1).Obj(), makeJob("w", "a").GPUs(4).Seq(2).Obj())
	sched(t, p, at(0))
	if !p.Cancel("w") || p.WaitingCount() != 0 || p.Cancel("w") {
		t.Fatal("cancel waiting")
	}
	mustEnqueue(t, p, makeJob("w2", "a").GPUs(4).Seq(3).Obj())
	p.BeginRelease("r")
	sched(t, p, at(1))
	if !p.Cancel("r") {
		t.Fatal("cancel running")
	}
	if d := sched(t, p, at(2)); !slices.Equal(grantedJobs(d), []string{"w2"}) {
		t.Fatalf("granted %v after cancel", grantedJobs(d))
	}
	if !p.CancelAttempt("w2", 0) || len(p.RunningJobs()) != 0 || p.Cancel("nope") {
		t.Fatal("cancel attempt")
	}
	checkInvariants(t, p)
}

func TestBestFitAndGPUIndices(t *testing.T) {
	p := mustPool(t, []Node{{Name: "n8", Family: "a", GPUs: 8}, {Name: "n4", Family: "a", GPUs: 4}}, Policy{})
	mustEnqueue(t, p, makeJob("x", "a").Class(High).GPUs(3).Seq(1).Obj())
	d := sched(t, p, at(0))
	if pl := d.Grants[0].Placement[0]; pl.Node != "n4" || !slices.Equal(pl.GPUs, []int{0, 1, 2}) {
		t.Fatalf("best fit: %+v", pl)
	}
	mustEnqueue(t, p, makeJob("y", "a").Class(High).GPUs(2).Workers(2).Seq(2).Obj())
	d = sched(t, p, at(1))
	if len(d.Grants) != 0 {
		t.Fatalf("y needs 2 GPUs on 2 nodes; n4 has 1 free: %v", grantedJobs(d))
	}
	p.Cancel("y")
	mustEnqueue(t, p, makeJob("z", "a").Class(High).Workers(2).Seq(3).Obj())
	d = sched(t, p, at(2))
	if got := d.Grants[0].Placement; got[0].Node != "n8" || got[1].Node != "n4" || !slices.Equal(got[1].GPUs, []int{3}) {
		t.Fatalf("z placement %+v", got)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 3, 4, 16, 64), Policy{MinRuntimeBeforePreemption: time.Minute})
	mustEnqueue(t, p, makeJob("l1", "a").Class(Low).GPUs(4).Workers(2).Seq(1).Obj(), makeJob("l2", "a").Class(Low).GPUs(2).Seq(2).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("h", "a").Class(High).GPUs(4).Workers(2).Seq(3).Obj(), makeJob("m", "a").GPUs(2).Seq(4).Obj(), makeJob("l3", "a").Class(Low).Seq(5).Obj())
	nb := Request{Job: "nb", Kind: KindNotebook, Demand: Demand{Family: "a", GPUs: 1, CPU: 2, RAMGB: 8}, Workers: 1, Seq: 6, SubmittedAt: at(3)}
	mustEnqueue(t, p, nb)
	d1 := sched(t, p, at(5))
	if len(d1.Preemptions) == 0 {
		t.Fatal("setup: expected a preemption")
	}
	p.Release("l1", 0, 0)
	q := roundTrip(t, p)
	if a, b := mustJSON(t, p.View()), mustJSON(t, q.View()); a != b {
		t.Fatalf("views differ:\n%s\n%s", a, b)
	}
	for i, step := range []func(*Pool){
		func(x *Pool) { x.Release("l1", 0, 1) },
		func(x *Pool) { x.Release("l2", 0, 0) },
		func(x *Pool) { x.BeginRelease("h") },
	} {
		step(p)
		step(q)
		a, b := mustJSON(t, sched(t, p, at(6+i))), mustJSON(t, sched(t, q, at(6+i)))
		if a != b {
			t.Fatalf("decisions differ after restore:\n%s\n%s", a, b)
		}
	}
	var bad Snapshot
	if err := json.Unmarshal([]byte(mustJSON(t, p.Snapshot())), &bad); err != nil {
		t.Fatal(err)
	}
	bad.Waiting.Job = append(bad.Waiting.Job, "extra")
	if _, err := Restore(bad); err == nil {
		t.Fatal("Restore accepted ragged columns")
	}
}

func TestCPUOnlyExplanation(t *testing.T) {
	p := mustPool(t, nodesOf("c", "cpu", 2, 0, 16, 64), Policy{})
	d, err := ParseInstanceType("cpu.16C.32G")
	if err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, p, Request{Job: "a", Kind: KindJob, Class: Low, Demand: d, Workers: 1, Seq: 1})
	sched(t, p, at(0))
	mustEnqueue(t, p, Request{Job: "b", Kind: KindJob, Class: Medium, Demand: d, Workers: 2, Seq: 2})
	if got := victims(sched(t, p, at(1))); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("victims %v", got)
	}
	wb, _ := p.Explain("b")
	if !strings.Contains(wb.Reason, "2 cpu nodes with 16 free CPU cores and 32 GB free RAM each") ||
		!strings.Contains(wb.Reason, "1 node is already free") || !strings.Contains(wb.Reason, "capacity on c-1 is being released by a (nominated to you)") {
		t.Fatalf("b: %s", wb.Reason)
	}
}

// TestCancelAttempt: x's attempt 0 is releasing (worker 0 released, worker 1 still stopping) and
// its attempt 1 waits. Withdrawing one attempt must leave the other exactly as it was: above all,
// withdrawing attempt 1 must not free what attempt 0 is still releasing.
func TestCancelAttempt(t *testing.T) {
	setup := func(t *testing.T) *Pool {
		p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
		mustEnqueue(t, p, makeJob("x", "a").GPUs(4).Workers(2).Seq(1).Obj())
		sched(t, p, at(0))
		p.Release("x", 0, 0)
		x1 := makeJob("x", "a").GPUs(4).Workers(2).Seq(1).Obj()
		x1.Attempt = 1
		mustEnqueue(t, p, x1, makeJob("y", "a").Class(Low).GPUs(4).Seq(2).Obj())
		return p
	}
	const none = -1
	for _, tc := range []struct {
		name     string
		cancel   func(p *Pool) bool
		want     bool
		waiting  int // x's waiting attempt afterwards
		holding  int // x's attempt holding capacity afterwards
		releases int // GPUs still releasing afterwards
	}{
		{"withdraw the waiting newer attempt", func(p *Pool) bool { return p.CancelAttempt("x", 1) }, true, none, 0, 4},
		{"free the older releasing attempt", func(p *Pool) bool { return p.CancelAttempt("x", 0) }, true, 1, none, 0},
		{"an attempt the pool does not know", func(p *Pool) bool { return p.CancelAttempt("x", 2) }, false, 1, 0, 4},
		{"an unknown job", func(p *Pool) bool { return p.CancelAttempt("nope", 0) }, false, 1, 0, 4},
		{"Cancel forgets every attempt", func(p *Pool) bool { return p.Cancel("x") }, true, none, none, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup(t)
			x0, _ := p.Running("x")
			if got := tc.cancel(p); got != tc.want {
				t.Fatalf("returned %v, want %v", got, tc.want)
			}
			waiting, holding := none, none
			if wi, ok := p.Explain("x"); ok {
				waiting = wi.Attempt
				if prev := strings.Contains(wi.Reason, "previous attempt (0)"); prev != (tc.holding == 0) {
					t.Fatalf("x attempt %d: %s", wi.Attempt, wi.Reason)
				}
			}
			if ri, ok := p.Running("x"); ok {
				holding = ri.Attempt
				if mustJSON(t, ri) != mustJSON(t, x0) {
					t.Fatalf("the releasing attempt changed: %+v, was %+v", ri, x0)
				}
			}
			if waiting != tc.waiting || holding != tc.holding {
				t.Fatalf("x waits with attempt %d and holds with attempt %d; want %d and %d", waiting, holding, tc.waiting, tc.holding)
			}
			rel := 0
			for _, n := range p.View().Nodes {
				rel += n.ReleasingGPUs
			}
			if rel != tc.releases {
				t.Fatalf("%d GPUs releasing, want %d", rel, tc.releases)
			}
			if _, ok := p.Explain("y"); !ok {
				t.Fatal("another job's request was removed")
			}
			checkInvariants(t, p)
			// Nothing starts on capacity that is still releasing.
			d := sched(t, p, at(1))
			for _, g := range d.Grants {
				if tc.holding == 0 && slices.Contains(grantNodes(g), x0.Placement[1].Node) {
					t.Fatalf("%s granted on %s while x attempt 0 still releases there", g.Job, x0.Placement[1].Node)
				}
			}
		})
	}
}
