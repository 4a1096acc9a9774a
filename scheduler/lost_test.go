package scheduler

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestMarkNodeLostAndUp(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{})
	for _, step := range []struct {
		name string
		call func() bool
		want bool
		lost []string
	}{
		{"unknown node cannot be lost", func() bool { return p.MarkNodeLost("nope") }, false, nil},
		{"lose n-3", func() bool { return p.MarkNodeLost("n-3") }, true, []string{"n-3"}},
		{"lose n-1", func() bool { return p.MarkNodeLost("n-1") }, true, []string{"n-1", "n-3"}},
		{"n-1 already lost", func() bool { return p.MarkNodeLost("n-1") }, false, []string{"n-1", "n-3"}},
		{"unknown node cannot be up", func() bool { return p.MarkNodeUp("nope") }, false, []string{"n-1", "n-3"}},
		{"n-2 is not lost", func() bool { return p.MarkNodeUp("n-2") }, false, []string{"n-1", "n-3"}},
		{"n-3 is back", func() bool { return p.MarkNodeUp("n-3") }, true, []string{"n-1"}},
		{"n-3 already back", func() bool { return p.MarkNodeUp("n-3") }, false, []string{"n-1"}},
	} {
		if got := step.call(); got != step.want {
			t.Fatalf("%s: got %v, want %v", step.name, got, step.want)
		}
		if got := p.LostNodes(); !slices.Equal(got, step.lost) {
			t.Fatalf("%s: lost nodes %v, want %v", step.name, got, step.lost)
		}
		for _, ni := range p.View().Nodes {
			if ni.Lost != slices.Contains(step.lost, ni.Name) {
				t.Fatalf("%s: view of %s says lost=%v", step.name, ni.Name, ni.Lost)
			}
		}
		checkInvariants(t, p)
	}
}

func TestLostNodeRules(t *testing.T) {
	two := nodesOf("n", "a", 2, 4, 0, 0)
	three := nodesOf("n", "a", 3, 4, 0, 0)
	// poolWith places 4-GPU jobs on n-1, n-2, ... in the order they started.
	for _, tc := range []struct {
		name      string
		nodes     []Node
		running   []runSpec
		releasing []string // BeginRelease'd before the node is lost
		lost      []string
		req       Request
		grant     []string // nodes of req's grant; nil: not granted
		victims   []string
		reason    []string // substrings of req's reason when it waits
		waits     []string // its WaitingFor when it waits
		waitFor   []string
	}{
		{name: "a worker is never placed on a lost node", nodes: two, lost: []string{"n-1"},
			req: makeJob("r", "a").GPUs(2).Seq(1).Obj(), grant: []string{"n-2"}},
		{name: "a gang that needs the lost node cannot fit at all", nodes: two, lost: []string{"n-2"},
			req:    makeJob("r", "a").Class(High).GPUs(4).Workers(2).Seq(1).Obj(),
			reason: []string{"only 1 of the 2 a nodes large enough for one of its workers is answering (node n-2 is lost: its agent is not answering)"}},
		{name: "no node answers", nodes: nodesOf("n", "a", 1, 4, 0, 0), lost: []string{"n-1"},
			req:    makeJob("r", "a").Class(Low).Seq(1).Obj(),
			reason: []string{"waiting for 1 node with 1 free a GPU; no a node large enough for one of its workers is answering (node n-1 is lost: its agent is not answering)"}},
		{name: "two of three nodes lost", nodes: three, lost: []string{"n-1", "n-3"},
			req:    makeJob("r", "a").GPUs(4).Workers(3).Seq(1).Obj(),
			reason: []string{"only 1 of the 3 a nodes large enough for one of its workers is answering (nodes n-1, n-3 are lost: their agents are not answering)"}},
		{name: "free capacity on a lost node is not counted", nodes: two, running: []runSpec{running("h").Class(High).GPUs(4)}, lost: []string{"n-2"},
			req:    makeJob("r", "a").GPUs(4).Seq(1).Obj(),
			reason: []string{"not enough capacity is free or being released", "node n-2 is lost: its agent is not answering, so its capacity is not counted"}, waits: []string{"h"}},
		{name: "releasing capacity on a lost node is not nominated", nodes: two,
			running: []runSpec{running("h1").Class(High).GPUs(4), running("h2").Class(High).GPUs(4).StartedAt(1)}, releasing: []string{"h2"}, lost: []string{"n-2"},
			req:    makeJob("r", "a").GPUs(4).Seq(1).Obj(),
			reason: []string{"not enough capacity is free or being released", "node n-2 is lost"}, waits: []string{"h1"}},
		{name: "nobody is preempted for capacity on a lost node", nodes: two,
			running: []runSpec{running("h").Class(High).GPUs(4), running("l").Class(Low).GPUs(4).StartedAt(1)}, lost: []string{"n-2"},
			req:    makeJob("r", "a").Class(High).GPUs(4).Seq(1).Obj(),
			reason: []string{"may not be preempted", "node n-2 is lost"}, waits: []string{"h"}},
		{name: "the victim is taken on a node that answers", nodes: two,
			running: []runSpec{running("old").Class(Low).GPUs(4), running("new").Class(Low).GPUs(4).StartedAt(1)}, lost: []string{"n-2"},
			req: makeJob("r", "a").Class(High).GPUs(4).Seq(1).Obj(), victims: []string{"old"}},
		{name: "a gang still fits on the nodes that answer", nodes: three, lost: []string{"n-2"},
			req: makeJob("r", "a").GPUs(4).Workers(2).Seq(1).Obj(), grant: []string{"n-1", "n-3"}},
		{name: "a node of another family being lost changes nothing", nodes: append(nodesOf("n", "a", 1, 4, 0, 0), nodesOf("b", "b", 1, 4, 0, 0)...),
			lost: []string{"b-1"}, req: makeJob("r", "a").GPUs(4).Seq(1).Obj(), grant: []string{"n-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, tc.nodes, Policy{}, tc.running...)
			for _, j := range tc.releasing {
				if !p.BeginRelease(j) {
					t.Fatalf("setup: begin release %s", j)
				}
			}
			for _, n := range tc.lost {
				if !p.MarkNodeLost(n) {
					t.Fatalf("setup: lose %s", n)
				}
			}
			mustEnqueue(t, p, tc.req)
			d := sched(t, p, at(10))
			var grant []string
			if len(d.Grants) > 0 {
				grant = grantNodes(d.Grants[0])
			}
			if !slices.Equal(grant, tc.grant) || len(d.Grants) > 1 {
				t.Fatalf("granted %+v, want %s on %v", d.Grants, tc.req.Job, tc.grant)
			}
			if got := victims(d); !slices.Equal(got, tc.victims) {
				t.Fatalf("victims %v, want %v", got, tc.victims)
			}
			if tc.grant != nil {
				return
			}
			wi, _ := p.Explain(tc.req.Job)
			for _, want := range tc.reason {
				if !strings.Contains(wi.Reason, want) {
					t.Errorf("reason %q\nwant it to contain %q", wi.Reason, want)
				}
			}
			if len(tc.victims) == 0 && (len(wi.Nominated) != 0 || !slices.Equal(wi.WaitingFor, tc.waits)) {
				t.Errorf("waits for %v, nominated %v, want it waiting for %v (the jobs in its way on a node that answers) and nothing nominated: nothing on a lost node can serve it", wi.WaitingFor, wi.Nominated, tc.waits)
			}
		})
	}
}

// TestLostNodeLifecycle follows one node through loss and return: the job on it keeps holding,
// releasing it frees the accounting but grants nothing, and MarkNodeUp serves the queue again.
func TestLostNodeLifecycle(t *testing.T) {
	p := poolWith(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{}, running("h").Class(High).GPUs(4), running("x").GPUs(4).StartedAt(1))
	if !p.MarkNodeLost("n-2") {
		t.Fatal("lose n-2")
	}
	mustEnqueue(t, p, makeJob("w", "a").GPUs(4).Seq(1).Obj())
	nodeN2 := func() NodeInfo { return p.View().Nodes[1] }
	for _, step := range []struct {
		name  string
		do    func()
		grant []string
		n2    NodeInfo
	}{
		{"x keeps holding the lost node", func() {}, nil,
			NodeInfo{Name: "n-2", Family: "a", GPUs: 4, AllocatedGPUs: 4, Lost: true}},
		{"x stops: releasing, and not nominated to w", func() { p.BeginRelease("x") }, nil,
			NodeInfo{Name: "n-2", Family: "a", GPUs: 4, ReleasingGPUs: 4, Lost: true}},
		{"x released: free in the accounting, still not granted", func() { p.Release("x", 0, 0) }, nil,
			NodeInfo{Name: "n-2", Family: "a", GPUs: 4, FreeGPUs: 4, Lost: true}},
		{"n-2 is back: w starts on it", func() { p.MarkNodeUp("n-2") }, []string{"n-2"},
			NodeInfo{Name: "n-2", Family: "a", GPUs: 4, AllocatedGPUs: 4}},
	} {
		step.do()
		if wi, ok := p.Explain("w"); ok && step.grant == nil && (len(wi.Nominated) != 0 || !slices.Equal(wi.WaitingFor, []string{"h"}) || !strings.Contains(wi.Reason, "node n-2 is lost")) {
			t.Fatalf("%s: w %+v", step.name, wi)
		}
		d := sched(t, p, at(10))
		var grant []string
		if len(d.Grants) > 0 {
			grant = grantNodes(d.Grants[0])
		}
		if !slices.Equal(grant, step.grant) {
			t.Fatalf("%s: granted %+v, want w on %v", step.name, d.Grants, step.grant)
		}
		if got := nodeN2(); !reflect.DeepEqual(got, step.n2) {
			t.Fatalf("%s: n-2 %+v, want %+v", step.name, got, step.n2)
		}
	}
}

// TestLostNodeMultiWorkerVictim: a victim with one worker on a lost node and one on a node that
// answers frees only the latter for the preemptor.
func TestLostNodeMultiWorkerVictim(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{})
	mustEnqueue(t, p, makeJob("wide", "a").Class(Low).GPUs(4).Workers(2).Seq(1).Obj(), makeJob("one", "a").Class(Low).GPUs(4).Seq(2).Obj())
	if d := sched(t, p, at(0)); len(d.Grants) != 2 {
		t.Fatalf("setup: granted %v", grantedJobs(d))
	}
	if ri, _ := p.Running("wide"); !slices.Equal([]string{ri.Placement[0].Node, ri.Placement[1].Node}, []string{"n-1", "n-2"}) {
		t.Fatalf("setup: wide on %+v", ri.Placement)
	}
	p.MarkNodeLost("n-1")
	// r needs two nodes: n-2 (wide) and n-3 (one). wide counts only for n-2.
	mustEnqueue(t, p, makeJob("r", "a").Class(High).GPUs(4).Workers(2).Seq(3).Obj())
	d := sched(t, p, at(10))
	got := victims(d)
	slices.Sort(got)
	if !slices.Equal(got, []string{"one", "wide"}) {
		t.Fatalf("victims %v, want [one wide]", got)
	}
	wr, _ := p.Explain("r")
	if !strings.Contains(wr.Reason, "n-2") || !strings.Contains(wr.Reason, "n-3") || strings.Contains(wr.Reason, "n-1") {
		t.Fatalf("r: %s", wr.Reason)
	}
	// Both victims stop; the capacity on n-1 stays out of reach, the rest goes to r.
	for _, rel := range [][2]any{{"wide", 0}, {"wide", 1}, {"one", 0}} {
		p.Release(rel[0].(string), 0, rel[1].(int))
	}
	d = sched(t, p, at(11))
	if len(d.Grants) != 1 || !slices.Equal(grantNodes(d.Grants[0]), []string{"n-2", "n-3"}) {
		t.Fatalf("granted %+v, want r on n-2, n-3", d.Grants)
	}
}

func TestLostText(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"n-1"}, "node n-1 is lost: its agent is not answering"},
		{[]string{"n-1", "n-2"}, "nodes n-1, n-2 are lost: their agents are not answering"},
		{[]string{"a", "b", "c"}, "nodes a, b, c are lost: their agents are not answering"},
		{[]string{"a", "b", "c", "d", "e"}, "nodes a, b, c and 2 more are lost: their agents are not answering"},
	} {
		if got := lostText(tc.names); got != tc.want {
			t.Errorf("lostText(%v) = %q, want %q", tc.names, got, tc.want)
		}
	}
}
