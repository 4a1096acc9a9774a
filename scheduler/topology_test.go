package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// racked is nodes of 8 GPUs named n1.. in order, each in the block and rack its entry names
// ("b1/r1"): a rack is named within its block.
func racked(places ...string) []Node {
	var out []Node
	for i, pl := range places {
		block, rack, _ := strings.Cut(pl, "/")
		out = append(out, Node{Name: "n" + string(rune('1'+i)), Family: "a", GPUs: 8, CPU: 64, RAMGB: 512,
			Topology: map[string]string{"block": block, "rack": rack}})
	}
	return out
}

// unracked is nodes without their topology.
func unracked(nodes []Node) []Node {
	for i := range nodes {
		nodes[i].Topology = nil
	}
	return nodes
}

var blockRack = Policy{Topology: []string{"block", "rack"}}

// TestGangPlacementByTopology: given nodes in racks and blocks and jobs already on some, when
// a gang arrives, then it is placed in one rack if a rack has room, else in one block, else as
// without a topology; a single worker and a pool without a topology are placed by best fit alone.
func TestGangPlacementByTopology(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []Node
		pol     Policy
		running []runSpec // each on the nodes it names
		gang    Request
		want    []string
	}{{
		name:  "best fit already keeps it in one rack",
		nodes: racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:   blockRack,
		gang:  makeJob("g", "a").GPUs(8).Workers(2).Obj(),
		want:  []string{"n1", "n2"},
	}, {
		name:    "best fit would split it across racks: it stays in the rack that holds it tightest",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(4).On("n2"), running("y").GPUs(4).On("n3")},
		// Best fit: n2 and n3 (4 GPUs left each), one in each rack.
		gang: makeJob("g", "a").GPUs(4).Workers(2).Obj(),
		want: []string{"n1", "n2"},
	}, {
		name:    "without a topology the same gang takes the best fit",
		nodes:   unracked(racked("b1/r1", "b1/r1", "b1/r2", "b1/r2", "b1/r2")),
		running: []runSpec{running("x").GPUs(4).On("n2"), running("y").GPUs(4).On("n3")},
		gang:    makeJob("g", "a").GPUs(4).Workers(2).Obj(),
		want:    []string{"n2", "n3"},
	}, {
		name:    "no rack has room: one block",
		nodes:   racked("b1/r1", "b1/r1", "b2/r1", "b2/r2", "b2/r3"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Obj(),
		want:    []string{"n3", "n4"},
	}, {
		name:  "racks of one name in two blocks are two racks",
		nodes: racked("b1/r1", "b2/r1", "b2/r2", "b2/r2"),
		pol:   blockRack,
		gang:  makeJob("g", "a").GPUs(8).Workers(2).Obj(),
		want:  []string{"n3", "n4"},
	}, {
		name:    "no domain has room: placed as without a topology",
		nodes:   racked("b1/r1", "b1/r1", "b2/r2", "b2/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(8).On("n3")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Obj(),
		want:    []string{"n2", "n4"},
	}, {
		name:    "a single worker takes the best fit, whatever the racks",
		nodes:   racked("b1/r1", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(4).On("n2")},
		gang:    makeJob("g", "a").GPUs(4).Obj(),
		want:    []string{"n2"},
	}, {
		name:    "an elastic gang that does not fit whole takes every worker it can, across racks",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(4).On("n2"), running("z").GPUs(4).On("n3")},
		// Four workers of 4 GPUs, at least two: three fit (n2, n3, n4), two racks' worth.
		gang: makeJob("g", "a").GPUs(4).Workers(4).Elastic(2).Obj(),
		want: []string{"n2", "n3", "n4"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.nodes, tc.pol)
			startRunning(t, p, tc.running)
			mustEnqueue(t, p, tc.gang)
			d := sched(t, p, at(1))
			if len(d.Grants) != 1 {
				wi, _ := p.Explain(tc.gang.Job)
				t.Fatalf("the gang was not granted: %s", wi.Reason)
			}
			var got []string
			for _, pl := range d.Grants[0].Placement {
				got = append(got, pl.Node)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("placed on %v, want %v", got, tc.want)
			}
			checkInvariants(t, p)
		})
	}
}

// TestTopologyConfigErrors: a topology that would split gangs quietly is refused, naming the
// node and the level.
func TestTopologyConfigErrors(t *testing.T) {
	missing := racked("b1/r1", "b1/r1")
	delete(missing[1].Topology, "rack")
	stray := racked("b1/r1")
	stray[0].Topology["row"] = "x"
	for _, tc := range []struct {
		name  string
		nodes []Node
		pol   Policy
		want  string
	}{
		{"a node without a level", missing, blockRack, `node "n2" has no topology.rack`},
		{"a level the allocation does not list", stray, blockRack, `node "n1": topology.row is not one of the allocation's topology levels (block, rack)`},
		{"labels without levels", racked("b1/r1"), Policy{}, `node "n1": topology.`},
		{"a level twice", racked("b1/r1"), Policy{Topology: []string{"rack", "rack"}}, `topology level "rack" is listed twice`},
		{"a level without a name", racked("b1/r1"), Policy{Topology: []string{""}}, `topology level 1 has no name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPool(tc.nodes, tc.pol)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestRelabelledNodeKeepsItsJobs: a reconfigure that moves a busy node to another rack keeps the
// jobs on it (the topology only steers where gangs go next), and the next gang sees the new racks.
func TestRelabelledNodeKeepsItsJobs(t *testing.T) {
	nodes := racked("b1/r1", "b1/r1", "b1/r2", "b1/r2")
	p := mustPool(t, nodes, blockRack)
	mustEnqueue(t, p, makeJob("x", "a").GPUs(8).Nodes("n1").Obj())
	sched(t, p, at(0))
	// n1 (busy) moves to r2; n2 and n4 now share r1, n3 is in r2 (it was n3 and n4 there).
	moved := racked("b1/r2", "b1/r1", "b1/r2", "b1/r1")
	if _, err := p.Reconfigure(moved, blockRack); err != nil {
		t.Fatalf("relabelling a busy node: %v", err)
	}
	if _, ok := p.Running("x"); !ok {
		t.Fatal("x no longer runs")
	}
	mustEnqueue(t, p, makeJob("g", "a").GPUs(8).Workers(2).Seq(2).Obj())
	d := sched(t, p, at(1))
	if len(d.Grants) != 1 {
		t.Fatalf("gang not granted")
	}
	var got []string
	for _, pl := range d.Grants[0].Placement {
		got = append(got, pl.Node)
	}
	slices.Sort(got)
	if want := []string{"n2", "n4"}; !slices.Equal(got, want) {
		t.Fatalf("placed on %v, want %v (the new rack r1)", got, want)
	}
	checkInvariants(t, p)
}

// TestTopologyKeepsAPreemptorsStart: given a gang that preempted v1 on n1 (rack r1) and v2 on
// n2 (rack r2), and m on n3 (rack r1) releasing for nobody, when both victims are gone, then
// the gang starts on n1 and n2, its own capacity, as it would without a topology: the rack rule
// must not trade its free nodes for one that is still releasing (found by a review: it held n1
// and n3 and waited).
func TestTopologyKeepsAPreemptorsStart(t *testing.T) {
	for _, pol := range []Policy{{}, blockRack} {
		nodes := racked("b1/r1", "b1/r2", "b1/r1")
		if len(pol.Topology) == 0 {
			nodes = unracked(nodes)
		}
		p := mustPool(t, nodes, pol)
		for i, run := range []struct {
			job, node string
			class     Class
		}{{"v1", "n1", Low}, {"v2", "n2", Low}, {"m", "n3", Medium}} {
			mustEnqueue(t, p, makeJob(run.job, "a").Class(run.class).GPUs(8).Seq(int64(-100+i)).Nodes(run.node).Obj())
			if d := sched(t, p, at(0)); len(d.Grants) != 1 {
				t.Fatalf("setup: %s not granted", run.job)
			}
		}
		mustEnqueue(t, p, makeJob("P", "a").Class(High).GPUs(8).Workers(2).Seq(1).Obj())
		if got := victims(sched(t, p, at(5))); !slices.Equal(got, []string{"v1", "v2"}) {
			t.Fatalf("topology %v: victims %v, want v1 and v2", pol.Topology, got)
		}
		p.Release("v1", 0, 0)
		sched(t, p, at(6))
		p.BeginRelease("m")
		p.Release("v2", 0, 0)
		d := sched(t, p, at(7))
		if len(d.Grants) != 1 || d.Grants[0].Job != "P" {
			wi, _ := p.Explain("P")
			t.Fatalf("topology %v: P's own capacity on n1 and n2 is free, yet it waits: %s", pol.Topology, wi.Reason)
		}
		if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"n1", "n2"}) {
			t.Fatalf("topology %v: P on %v, want n1 and n2", pol.Topology, got)
		}
		checkInvariants(t, p)
	}
}
