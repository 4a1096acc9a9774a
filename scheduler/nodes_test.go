package scheduler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Allowed nodes (Request.Nodes): the tests of every rule for a request held to some nodes.

func TestAdmitAllowedNodes(t *testing.T) {
	nodes := append(nodesOf("big", "a100", 2, 8, 96, 768), nodesOf("small", "a100", 2, 4, 48, 384)...)
	nodes = append(nodes, nodesOf("cpu", "cpu", 1, 0, 32, 128)...)
	p := mustPool(t, nodes, Policy{})
	job := func(gpus, workers int, on ...string) Request {
		return makeJob("j", "a100").GPUs(gpus).Workers(workers).Nodes(on...).Obj()
	}
	for _, tc := range []struct {
		name string
		req  Request
		want string // "" = admitted
	}{
		{"none: any node", job(8, 2), ""},
		{"enough allowed nodes", job(4, 2, "small-1", "big-2"), ""},
		{"named twice", job(8, 1, "big-1", "big-1"), ""},
		{"another family's node is never used", job(8, 1, "big-2", "cpu-1"), ""},
		{"an unknown node", job(4, 1, "big-1", "gpu-9"),
			`node "gpu-9", one of the nodes the job may run on (include_nodes minus exclude_nodes), is not in this allocation`},
		{"unknown nodes", job(4, 1, "x", "big-1", "y"), `nodes "x", "y", among the nodes the job may run on (include_nodes minus exclude_nodes), are not in this allocation`},
		{"too few allowed nodes", job(4, 2, "big-1"),
			"the nodes the job may run on (include_nodes minus exclude_nodes) leave 1 node of family a100 that can hold a worker (big-1); the job needs 2 workers"},
		{"too few large enough", job(8, 2, "big-1", "small-1", "small-2"),
			"leave 1 node of family a100 that can hold a worker (big-1; small-1, small-2 are too small); the job needs 2 workers"},
		{"none large enough", job(8, 1, "small-2"), "leave no node of family a100 that can hold a worker (small-2 is too small); the job needs 1 worker"},
		{"only another family's nodes", job(1, 1, "cpu-1"),
			"the nodes the job may run on (include_nodes minus exclude_nodes: cpu-1) include no node of family a100"},
		// The checks of the empty pool come first.
		{"too many workers anyway", job(4, 5, "big-1"), "needs 5 workers, each on its own a100 node, but this allocation has only 4"},
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
	// Enqueue keeps them sorted, each once.
	mustEnqueue(t, p, job(4, 1, "small-2", "big-1", "small-2"))
	if r, _ := p.Waiting("j"); !slices.Equal(r.Nodes, []string{"big-1", "small-2"}) {
		t.Fatalf("waiting request's nodes %v", r.Nodes)
	}
}

// placementOf is where the job's workers run, in worker order.
func placementOf(t *testing.T, p *Pool, job string) []string {
	t.Helper()
	ri, ok := p.Running(job)
	if !ok {
		t.Fatalf("%s is not running", job)
	}
	var out []string
	for _, w := range ri.Placement {
		out = append(out, w.Node)
	}
	return out
}

func TestAllowedNodesPlacement(t *testing.T) {
	four := nodesOf("n", "a", 4, 4, 0, 0)
	for _, tc := range []struct {
		name    string
		nodes   []Node
		running []runSpec
		release []string // these running jobs begin to stop before the requests come
		reqs    []Request
		want    map[string][]string // granted job -> its nodes; the others wait
		reasons map[string]string   // waiting job -> part of its reason
	}{{
		name:    "best fit is elsewhere: it starts on its allowed node",
		nodes:   four,
		running: []runSpec{running("x").GPUs(3).On("n-1")},
		reqs:    []Request{makeJob("r", "a").Nodes("n-3").Obj()},
		want:    map[string][]string{"r": {"n-3"}},
	}, {
		name:  "a gang on its allowed nodes only",
		nodes: four,
		reqs:  []Request{makeJob("r", "a").GPUs(4).Workers(2).Nodes("n-2", "n-4").Obj()},
		want:  map[string][]string{"r": {"n-2", "n-4"}},
	}, {
		name:    "its allowed node is full: it waits while others are free",
		nodes:   four,
		running: []runSpec{running("x").GPUs(4).On("n-1")},
		reqs:    []Request{makeJob("r", "a").GPUs(2).Nodes("n-1").Obj()},
		reasons: map[string]string{"r": "waiting for 1 node with 2 free a GPUs; its allowed nodes (n-1) are full, though 3 other a nodes have room for a worker; " +
			"not enough capacity there is free or being released, and the jobs holding the rest may not be preempted for it"},
	}, {
		name:    "excluded nodes leave too few",
		nodes:   four,
		running: []runSpec{running("x").GPUs(4).On("n-1")},
		reqs:    []Request{makeJob("r", "a").GPUs(2).Workers(2).Nodes("n-1", "n-2").Obj()},
		reasons: map[string]string{"r": "excluded nodes leave 1 of the 3 a nodes with room for a worker (its allowed nodes are n-1, n-2); it needs 2"},
	}, {
		name:    "room on its allowed nodes, but not for all its workers",
		nodes:   nodesOf("n", "a", 2, 4, 0, 0),
		running: []runSpec{running("x").GPUs(4).On("n-1")},
		reqs:    []Request{makeJob("r", "a").GPUs(2).Workers(2).Nodes("n-1", "n-2").Obj()},
		reasons: map[string]string{"r": "its allowed nodes (n-1, n-2) have room for 1 worker; it needs 2"},
	}, {
		name:    "it holds releasing capacity on its allowed node rather than start elsewhere",
		nodes:   four,
		running: []runSpec{running("x").GPUs(4).On("n-2")},
		release: []string{"x"},
		reqs:    []Request{makeJob("r", "a").GPUs(4).Nodes("n-2").Obj()},
		reasons: map[string]string{"r": "waiting for 1 node with 4 free a GPUs; 4 GPUs on n-2 are being released by x"},
	}, {
		name:  "the requests before it took its allowed nodes' capacity: it names only those",
		nodes: four,
		running: []runSpec{running("x").GPUs(4).On("n-1"), running("y").GPUs(4).On("n-2"), running("z").GPUs(4).On("n-3"),
			running("w").GPUs(4).On("n-4")},
		release: []string{"z", "w"},
		reqs: []Request{makeJob("a", "a").GPUs(4).Seq(1).Nodes("n-3").Obj(), makeJob("b", "a").GPUs(4).Seq(2).Nodes("n-4").Obj(),
			makeJob("r", "a").GPUs(4).Seq(3).Nodes("n-1", "n-3").Obj()},
		reasons: map[string]string{"r": "its allowed nodes (n-1, n-3) are full; the free and releasing capacity there is held for earlier requests (a), and"},
	}, {
		// The pass's failure cache is per shape, and the allowed nodes are part of it.
		name:    "the same demand elsewhere is not taken to fail with it",
		nodes:   four,
		running: []runSpec{running("x").GPUs(4).On("n-1")},
		reqs: []Request{makeJob("c1", "a").GPUs(4).Seq(1).Nodes("n-1").Obj(), makeJob("c2", "a").GPUs(4).Seq(2).Nodes("n-1").Obj(),
			makeJob("c3", "a").GPUs(4).Seq(3).Nodes("n-1", "n-4").Obj(), makeJob("any", "a").GPUs(4).Seq(4).Obj()},
		want: map[string][]string{"c3": {"n-4"}, "any": {"n-2"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, tc.nodes, Policy{}, tc.running...)
			for _, j := range tc.release {
				p.BeginRelease(j)
			}
			mustEnqueue(t, p, tc.reqs...)
			d := sched(t, p, at(10))
			got := map[string][]string{}
			for _, g := range d.Grants {
				got[g.Job] = grantNodes(g)
			}
			if a, b := mustJSON(t, got), mustJSON(t, tc.want); tc.want != nil && a != b {
				t.Fatalf("grants %s, want %s", a, b)
			} else if tc.want == nil && len(got) > 0 {
				t.Fatalf("grants %s, want none", a)
			}
			for job, want := range tc.reasons {
				wi, ok := p.Explain(job)
				if !ok || !strings.Contains(wi.Reason, want) {
					t.Fatalf("%s: reason %q, want %q", job, wi.Reason, want)
				}
				if r, _ := p.Waiting(job); !slices.Equal(wi.Nodes, r.Nodes) {
					t.Fatalf("%s: explained nodes %v, want %v", job, wi.Nodes, r.Nodes)
				}
			}
		})
	}
}

func TestAllowedNodesPreemption(t *testing.T) {
	three := nodesOf("n", "a", 3, 4, 0, 0)
	for _, tc := range []struct {
		name    string
		nodes   []Node
		running []runSpec
		req     Request
		want    []string // victims
	}{{
		name:  "it preempts the job on its allowed node, not the cheaper one elsewhere",
		nodes: three,
		running: []runSpec{running("dear").Class(Low).GPUs(4).On("n-2"), running("cheap").Class(Low).GPUs(4).On("n-1").StartedAt(5),
			running("h3").Class(High).GPUs(4).On("n-3")},
		req:  makeJob("r", "a").Class(High).GPUs(4).Nodes("n-2").Obj(),
		want: []string{"dear"},
	}, {
		name:    "it never preempts for capacity it may not use",
		nodes:   three,
		running: []runSpec{running("hi").Class(High).GPUs(4).On("n-2"), running("lo").Class(Low).GPUs(4).On("n-1"), running("lo3").Class(Low).GPUs(4).On("n-3")},
		req:     makeJob("r", "a").Class(High).GPUs(4).Nodes("n-2").Obj(),
	}, {
		name:  "a gang preempts on its allowed nodes",
		nodes: three,
		running: []runSpec{running("l1").Class(Low).GPUs(4).On("n-1"), running("l2").Class(Low).GPUs(4).On("n-2").StartedAt(1),
			running("l3").Class(Low).GPUs(4).On("n-3").StartedAt(9)},
		req:  makeJob("r", "a").Class(High).GPUs(4).Workers(2).Nodes("n-1", "n-2").Obj(),
		want: []string{"l1", "l2"},
	}, {
		// v2's capacity on n-1 would make a node fit without w, but not one it may use.
		name:  "it does not count a victim's capacity outside its allowed nodes",
		nodes: three,
		running: []runSpec{running("v2").Class(Low).GPUs(2).Workers(2).On("n-1", "n-2"), running("w").Class(Low).GPUs(2).On("n-2").StartedAt(1),
			running("h3").Class(High).GPUs(4).On("n-3")},
		req:  makeJob("r", "a").Class(High).GPUs(4).Nodes("n-2").Obj(),
		want: []string{"v2", "w"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, tc.nodes, Policy{}, tc.running...)
			mustEnqueue(t, p, tc.req)
			d := sched(t, p, at(10))
			got := victims(d)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("victims %v, want %v", got, tc.want)
			}
			if d := sched(t, p, at(11)); len(d.Preemptions) != 0 {
				t.Fatalf("second pass preempted %v", victims(d))
			}
			// Once the victims stopped, it starts on its allowed nodes (sched checks it).
			for _, v := range tc.want {
				ri, _ := p.Running(v)
				for _, w := range ri.Placement {
					p.Release(v, ri.Attempt, w.Worker)
				}
			}
			if d := sched(t, p, at(12)); len(tc.want) > 0 && !slices.Equal(grantedJobs(d), []string{"r"}) {
				t.Fatalf("after its victims stopped: grants %v", grantedJobs(d))
			}
		})
	}
}

// TestAllowedNodesVictimElsewhere: a victim with a worker outside the preemptor's allowed nodes
// stops it too, and that capacity is nominated to the preemptor while it waits; once that worker
// has stopped, its free capacity is held for the preemptor, which must not start there.
func TestAllowedNodesVictimElsewhere(t *testing.T) {
	p := poolWith(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("v", "a").Class(Low).GPUs(4).Workers(2).Obj())
	if d := sched(t, p, at(0)); !slices.Equal(grantedJobs(d), []string{"v"}) {
		t.Fatal("setup: v not granted")
	}
	mustEnqueue(t, p, makeJob("r", "a").Class(High).GPUs(4).Nodes("n-2").Obj())
	if d := sched(t, p, at(10)); !slices.Equal(victims(d), []string{"v"}) {
		t.Fatalf("victims %v", victims(d))
	}
	p.Release("v", 0, 0) // its worker on n-1 stops first: held for r, which may not use it
	if d := sched(t, p, at(11)); len(d.Grants) > 0 {
		t.Fatalf("r started on %v before its allowed node was free", grantNodes(d.Grants[0]))
	}
	wi, _ := p.Explain("r")
	if !strings.Contains(wi.Reason, "4 GPUs on n-2 are being released by v (nominated to you)") {
		t.Fatalf("reason %q", wi.Reason)
	}
	p.Release("v", 0, 1)
	d := sched(t, p, at(12))
	if len(d.Grants) != 1 || !slices.Equal(grantNodes(d.Grants[0]), []string{"n-2"}) {
		t.Fatalf("grants %+v", d.Grants)
	}
}

// TestAllowedNodesTakeover: a strictly better request takes over nominated capacity only on its
// allowed nodes.
func TestAllowedNodesTakeover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		on    string
		taken bool
	}{{"on its allowed node", "n-1", true}, {"elsewhere", "n-2", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{}, running("lo").Class(Low).GPUs(4).On("n-1"), running("hi").Class(High).GPUs(4).On("n-2"))
			mustEnqueue(t, p, makeJob("med", "a").GPUs(4).Seq(1).Nodes("n-1").Obj())
			if d := sched(t, p, at(10)); !slices.Equal(victims(d), []string{"lo"}) {
				t.Fatalf("victims %v", victims(d))
			}
			mustEnqueue(t, p, makeJob("top", "a").Class(High).GPUs(4).Seq(2).Nodes(tc.on).Obj())
			sched(t, p, at(11))
			top, _ := p.Explain("top")
			med, _ := p.Explain("med")
			if got := slices.Contains(top.Nominated, "lo"); got != tc.taken {
				t.Fatalf("top took over lo's capacity: %v, want %v (%s)", got, tc.taken, top.Reason)
			}
			if got := slices.Contains(med.Nominated, "lo"); got == tc.taken {
				t.Fatalf("med keeps lo's capacity: %v (%s)", got, med.Reason)
			}
		})
	}
}

func TestAllowedNodesReserve(t *testing.T) {
	// n-1 would drain soonest (1 GPU held), but the request may use n-3 alone.
	p := poolWith(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{ReserveAfter: 30 * time.Minute},
		running("a").GPUs(1).On("n-1"), running("b").GPUs(3).On("n-2"), running("c").GPUs(3).On("n-3"))
	mustEnqueue(t, p, makeJob("r", "a").GPUs(4).Seq(1).Nodes("n-2", "n-3").Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("small", "a").Seq(2).Nodes("n-2", "n-3").Obj(), makeJob("any", "a").Seq(3).Obj())
	d := sched(t, p, at(31))
	wi, _ := p.Explain("r")
	if !slices.Equal(wi.Reserved, []string{"n-2"}) {
		t.Fatalf("reserved %v, want [n-2] (%s)", wi.Reserved, wi.Reason)
	}
	// Behind it, "small" may not start on n-2, but on n-3; "any" anywhere else.
	got := map[string][]string{}
	for _, g := range d.Grants {
		got[g.Job] = grantNodes(g)
	}
	if mustJSON(t, got) != `{"any":["n-1"],"small":["n-3"]}` {
		t.Fatalf("grants %s", mustJSON(t, got))
	}
}

func TestAllowedNodesLost(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{})
	p.MarkNodeLost("n-1")
	mustEnqueue(t, p, makeJob("r", "a").GPUs(4).Workers(2).Nodes("n-1", "n-2").Obj())
	if d := sched(t, p, at(0)); len(d.Grants) > 0 {
		t.Fatalf("granted %v", grantNodes(d.Grants[0]))
	}
	wi, _ := p.Explain("r")
	if want := "only 1 of the 2 a nodes large enough for one of its workers among its allowed nodes is answering (node n-1 is lost"; !strings.Contains(wi.Reason, want) {
		t.Fatalf("reason %q, want %q", wi.Reason, want)
	}
	p.MarkNodeUp("n-1")
	if d := sched(t, p, at(1)); len(d.Grants) != 1 || !slices.Equal(grantNodes(d.Grants[0]), []string{"n-1", "n-2"}) {
		t.Fatalf("grants %+v", d.Grants)
	}
}

func TestAllowedNodesSnapshot(t *testing.T) {
	p := poolWith(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{}, running("x").GPUs(4).On("n-1", "n-3"), running("y").GPUs(4), running("z").GPUs(4))
	mustEnqueue(t, p, makeJob("w1", "a").GPUs(4).Seq(1).Nodes("n-1").Obj(), makeJob("w2", "a").GPUs(4).Seq(2).Obj(),
		makeJob("w3", "a").GPUs(4).Seq(3).Nodes("n-1").Obj(), makeJob("w4", "a").GPUs(4).Seq(4).Nodes("n-2", "n-3").Obj())
	sched(t, p, at(1))
	s := p.Snapshot()
	if want := [][]string{{"n-1"}, {"n-2", "n-3"}, {"n-1", "n-3"}}; mustJSON(t, s.NodeSets) != mustJSON(t, want) {
		t.Fatalf("node sets %v, want %v", s.NodeSets, want)
	}
	if !slices.Equal(s.Waiting.NodeSet, []int32{1, 0, 1, 2}) {
		t.Fatalf("waiting node sets %v", s.Waiting.NodeSet)
	}
	q := roundTrip(t, p)
	for _, job := range []string{"w1", "w2", "w3", "w4"} {
		a, _ := p.Waiting(job)
		b, _ := q.Waiting(job)
		if !slices.Equal(a.Nodes, b.Nodes) {
			t.Fatalf("%s: restored nodes %v, want %v", job, b.Nodes, a.Nodes)
		}
	}
	if rj := q.running["x"]; !slices.Equal(rj.r.Nodes, []string{"n-1", "n-3"}) {
		t.Fatalf("running x: restored nodes %v", rj.r.Nodes)
	}
	packed, err := PackSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	u, err := UnpackSnapshot(packed)
	if err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, u.NodeSets) != mustJSON(t, s.NodeSets) || !slices.Equal(u.Waiting.NodeSet, s.Waiting.NodeSet) || u.Running[0].NodeSet != s.Running[0].NodeSet {
		t.Fatal("packed snapshot lost the node sets")
	}
	// Once x stops, w1 starts on n-1 in both.
	for _, x := range []*Pool{p, q} {
		x.BeginRelease("x")
		x.Release("x", 0, 0)
	}
	if a, b := mustJSON(t, sched(t, p, at(2))), mustJSON(t, sched(t, q, at(2))); a != b || !strings.Contains(a, `"job":"w1"`) {
		t.Fatalf("after restore: %s, want %s, granting w1", b, a)
	}
	// Restore checks each waiting request's allowed nodes, even after one of the same demand.
	odd := p.Snapshot()
	odd.NodeSets[1] = []string{"n-2", "n-9"} // w4's
	if _, err := Restore(odd); err == nil || !strings.Contains(err.Error(), `waiting job "w4": node "n-9"`) {
		t.Fatalf("restore of an unknown allowed node: %v", err)
	}
	// A snapshot without node sets that a column names is refused.
	bad := p.Snapshot()
	bad.NodeSets = nil
	if _, err := Restore(bad); err == nil || !strings.Contains(err.Error(), "node set") {
		t.Fatalf("restore of a dangling node set: %v", err)
	}
}

func TestAllowedNodesReconfigure(t *testing.T) {
	nodes := nodesOf("n", "a", 3, 4, 0, 0)
	p := poolWith(t, nodes, Policy{}, running("x").GPUs(4).On("n-1", "n-2"))
	// "keep" and "gone" differ only in their allowed nodes: one verdict each.
	mustEnqueue(t, p, makeJob("keep", "a").GPUs(4).Seq(0).Nodes("n-1").Obj(), makeJob("gone", "a").GPUs(4).Seq(1).Nodes("n-1", "n-3").Obj(),
		makeJob("small", "a").GPUs(4).Workers(2).Seq(2).Nodes("n-1", "n-2").Obj(), makeJob("fine", "a").GPUs(2).Seq(3).Nodes("n-1", "n-2").Obj())
	// n-3 goes, n-4 comes; n-2 (unused) shrinks to 2 GPUs; the running job names n-2 but runs on
	// n-1.
	next := []Node{nodes[0], {Name: "n-2", Family: "a", GPUs: 2}, {Name: "n-4", Family: "a", GPUs: 4}}
	unfit, err := p.Reconfigure(next, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Unfit{
		{Job: "gone", Reason: `node "n-3", one of the nodes the job may run on (include_nodes minus exclude_nodes), is not in this allocation`},
		{Job: "small", Reason: "the nodes the job may run on (include_nodes minus exclude_nodes) leave 1 node of family a that can hold a worker (n-1; n-2 is too small); the job needs 2 workers"},
	}
	if mustJSON(t, unfit) != mustJSON(t, want) {
		t.Fatalf("unfit %s, want %s", mustJSON(t, unfit), mustJSON(t, want))
	}
	if r, ok := p.Waiting("fine"); !ok || !slices.Equal(r.Nodes, []string{"n-1", "n-2"}) {
		t.Fatalf("fine: %+v", r)
	}
	if _, ok := p.Waiting("keep"); !ok {
		t.Fatal("keep was dropped")
	}
	// A running job's allowed nodes may name a node that goes: only its placement counts.
	if _, err := p.Reconfigure(next[:1], Policy{}); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, p)
}

func TestAllowedNodesAdopt(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	r := makeJob("x", "a").GPUs(4).Nodes("n-1", "old-node").Obj()
	// It runs on n-2, outside its allowed nodes, and names a node the pool does not have: it holds
	// that capacity all the same.
	if err := p.Adopt(Adoption{Request: r, Placement: []WorkerPlacement{{Worker: 0, Node: "n-2", GPUs: []int{0, 1, 2, 3}}}, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if got := placementOf(t, p, "x"); !slices.Equal(got, []string{"n-2"}) {
		t.Fatalf("placement %v", got)
	}
	roundTrip(t, p)
	var s Snapshot
	if err := json.Unmarshal([]byte(mustJSON(t, p.Snapshot())), &s); err != nil || !slices.Equal(s.NodeSets[0], []string{"n-1", "old-node"}) {
		t.Fatalf("node sets %v %v", s.NodeSets, err)
	}
}

// TestAllowedNodesPreemptionRandom: random pools full of low jobs, then high requests held to
// random nodes. sched checks that no worker is placed, and no victim chosen, outside a request's
// allowed nodes; once the victims have stopped, every preemptor starts, and on a node of one of
// its victims (none was preempted for nothing).
func TestAllowedNodesPreemptionRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	preempted := 0
	for round := range 300 {
		var nodes []Node
		for i := range 3 + rng.IntN(6) {
			nodes = append(nodes, Node{Name: fmt.Sprintf("n%d", i), Family: "a", GPUs: []int{4, 8}[rng.IntN(2)]})
		}
		p := mustPool(t, nodes, Policy{})
		for j := range 4 * len(nodes) {
			r := makeJob(fmt.Sprintf("lo%d", j), "a").Class(Low).GPUs(1 + rng.IntN(4)).Workers(1 + rng.IntN(2)).Seq(int64(j)).Obj()
			if p.Admit(r) == nil {
				mustEnqueue(t, p, r)
			}
		}
		sched(t, p, at(0))
		for _, w := range slices.Clone(p.waiting) { // only what runs stays
			p.Cancel(w.r.Job)
		}
		for k := range 1 + rng.IntN(3) {
			var on []string
			for _, n := range nodes {
				if rng.IntN(2) == 0 {
					on = append(on, n.Name)
				}
			}
			r := makeJob(fmt.Sprintf("hi%d", k), "a").Class(High).GPUs(1 + rng.IntN(8)).Workers(1 + rng.IntN(2)).Seq(int64(k)).Nodes(on...).Obj()
			if len(on) > 0 && p.Admit(r) == nil {
				mustEnqueue(t, p, r)
			}
		}
		d := sched(t, p, at(10))
		victimNodes := map[string][]string{} // preemptor -> its victims' nodes
		for _, pe := range d.Preemptions {
			ri, _ := p.Running(pe.Victim)
			for _, w := range ri.Placement {
				victimNodes[pe.Preemptor.Job] = append(victimNodes[pe.Preemptor.Job], w.Node)
			}
			for _, w := range ri.Placement {
				p.Release(pe.Victim, ri.Attempt, w.Worker)
			}
			preempted++
		}
		for _, g := range sched(t, p, at(11)).Grants {
			if vn := victimNodes[g.Job]; vn != nil && !slices.ContainsFunc(grantNodes(g), func(n string) bool { return slices.Contains(vn, n) }) {
				t.Fatalf("round %d: %s preempted jobs on %v but started on %v", round, g.Job, vn, grantNodes(g))
			}
			delete(victimNodes, g.Job)
		}
		for job := range victimNodes {
			wi, _ := p.Explain(job)
			t.Fatalf("round %d: %s preempted, its victims stopped, and it did not start: %s", round, job, wi.Reason)
		}
	}
	if preempted < 100 {
		t.Fatalf("only %d preemptions: the test does not exercise what it should", preempted)
	}
	t.Logf("%d preemptions", preempted)
}
