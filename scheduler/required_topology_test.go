package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func rackOf(level string, required bool) GangTopology {
	return GangTopology{Level: level, Required: required}
}

// TestRequiredTopology: given racked nodes and jobs on some, when a gang that requires (or
// prefers) a level arrives, then it starts only inside one domain of a required level, waits or
// preempts inside one domain when none has room, and follows the allocation's default unless it
// names its own.
func TestRequiredTopology(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []Node
		pol     Policy
		running []runSpec
		gang    Request
		// then: the gang starts on start, or else preempts victims; neither: it waits.
		start   []string
		victims []string
		reason  string // a waiting gang's Explain says this
	}{{
		name:    "required rack, no rack has room: it waits where preferred would span the block",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(8).On("n3")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj(),
		reason:  "in one rack (required_topology=rack); nodes with room are spread out: no rack has more than 1",
	}, {
		name:    "preferred rack, the same nodes: one block",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(8).On("n3")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("rack", false)).Obj(),
		start:   []string{"n2", "n4"},
	}, {
		name:    "required block: the block with room",
		nodes:   racked("b1/r1", "b1/r2", "b2/r1", "b2/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("block", true)).Obj(),
		start:   []string{"n3", "n4"},
	}, {
		name:  "preferred block is not held to a rack: best fit inside the block",
		nodes: racked("b1/r1", "b1/r2", "b1/r1", "b1/r2"),
		pol:   blockRack,
		// Best fit: n2 and n3 (4 GPUs left each), two racks of one block; a rack preference
		// would take n1 and n3.
		running: []runSpec{running("x").GPUs(4).On("n2"), running("y").GPUs(4).On("n3")},
		gang:    makeJob("g", "a").GPUs(4).Workers(2).Topology(rackOf("block", false)).Obj(),
		start:   []string{"n2", "n3"},
	}, {
		name:    "required rack preempts inside one rack, the cheaper one, not the two free nodes of two racks",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("young").Class(Low).GPUs(8).On("n1").StartedAt(50), running("old").Class(Low).GPUs(8).On("n3")},
		gang:    makeJob("g", "a").Class(High).GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj(),
		victims: []string{"young"},
	}, {
		name:    "without the requirement the same gang starts on the free nodes at once",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("young").Class(Low).GPUs(8).On("n1").StartedAt(50), running("old").Class(Low).GPUs(8).On("n3")},
		gang:    makeJob("g", "a").Class(High).GPUs(8).Workers(2).Obj(),
		start:   []string{"n2", "n4"},
	}, {
		name:    "an elastic gang that requires a rack starts with what one rack holds",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     blockRack,
		running: []runSpec{running("x").GPUs(8).On("n1")},
		gang:    makeJob("g", "a").GPUs(8).Workers(4).Elastic(2).Topology(rackOf("rack", true)).Obj(),
		start:   []string{"n3", "n4"},
	}, {
		name:    "the allocation's default requires a rack",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     Policy{Topology: blockRack.Topology, GangTopology: rackOf("rack", true)},
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(8).On("n3")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Obj(),
	}, {
		name:    "a gang's own preference beats the allocation's requirement",
		nodes:   racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"),
		pol:     Policy{Topology: blockRack.Topology, GangTopology: rackOf("rack", true)},
		running: []runSpec{running("x").GPUs(8).On("n1"), running("y").GPUs(8).On("n3")},
		gang:    makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("block", false)).Obj(),
		start:   []string{"n2", "n4"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.nodes, tc.pol)
			startRunning(t, p, tc.running)
			mustEnqueue(t, p, tc.gang)
			d := sched(t, p, at(60))
			wi, _ := p.Explain(tc.gang.Job)
			var got []string
			if len(d.Grants) == 1 {
				got = grantNodes(d.Grants[0])
				slices.Sort(got)
			}
			if !slices.Equal(got, tc.start) {
				t.Fatalf("started on %v, want %v (%s)", got, tc.start, wi.Reason)
			}
			if !strings.Contains(wi.Reason, tc.reason) {
				t.Fatalf("waits as %q, want it to say %q", wi.Reason, tc.reason)
			}
			if v := victims(d); !slices.Equal(v, tc.victims) {
				t.Fatalf("preempted %v, want %v", v, tc.victims)
			}
			checkInvariants(t, p)
			q := roundTrip(t, p)
			if len(tc.start) == 0 {
				if w, ok := q.Explain(tc.gang.Job); !ok || w.Reason != wi.Reason {
					t.Fatalf("after a snapshot the gang waits as %q, want %q", w.Reason, wi.Reason)
				}
			}
		})
	}
}

// TestRequiredTopologyStartsOnItsVictims: when the victims preempted for a gang that requires a
// rack have stopped, it starts in that rack and nowhere else.
func TestRequiredTopologyStartsOnItsVictims(t *testing.T) {
	p := mustPool(t, racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"), blockRack)
	startRunning(t, p, []runSpec{running("young").Class(Low).GPUs(8).On("n1").StartedAt(50), running("old").Class(Low).GPUs(8).On("n3")})
	mustEnqueue(t, p, makeJob("g", "a").Class(High).GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj())
	if d := sched(t, p, at(60)); !slices.Equal(victims(d), []string{"young"}) {
		t.Fatalf("preempted %v, want [young]", victims(d))
	}
	p.Release("young", 0, 0)
	d := sched(t, p, at(61))
	if len(d.Grants) != 1 {
		t.Fatalf("the gang did not start once its victim stopped")
	}
	if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("started on %v, want [n1 n2]", got)
	}
	checkInvariants(t, p)
}

// TestRequiredTopologyReserves: a gang that requires a rack reserves nodes of one rack.
func TestRequiredTopologyReserves(t *testing.T) {
	p := mustPool(t, racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"), Policy{Topology: blockRack.Topology, ReserveAfter: 1})
	// n1 and n3 are nearly free, n2 and n4 full: without the rack rule it would reserve n1 and n3.
	startRunning(t, p, []runSpec{running("a").GPUs(1).On("n1"), running("b").GPUs(8).On("n2"), running("c").GPUs(1).On("n3"), running("d").GPUs(8).On("n4")})
	mustEnqueue(t, p, makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj())
	sched(t, p, at(60))
	sched(t, p, at(61))
	wi, _ := p.Explain("g")
	res := wi.Reserved
	slices.Sort(res)
	if !slices.Equal(res, []string{"n1", "n2"}) && !slices.Equal(res, []string{"n3", "n4"}) {
		t.Fatalf("reserved %v, want the two nodes of one rack (%s)", res, wi.Reason)
	}
	rack := map[string]string{"n1": "r1", "n3": "r2"}[res[0]]
	if want := fmt.Sprintf("nodes %s, %s (rack %s of block b1) are reserved for it", res[0], res[1], rack); !strings.Contains(wi.Reason, want) {
		t.Fatalf("reason %q, want it to name the rack: %q", wi.Reason, want)
	}
}

// TestRequiredTopologyAdmission: a level the allocation does not have, and a required level no
// domain can ever hold, are refused naming the field.
func TestRequiredTopologyAdmission(t *testing.T) {
	nodes := racked("b1/r1", "b1/r1", "b1/r2", "b1/r2")
	for _, tc := range []struct {
		name  string
		pol   Policy
		nodes []Node
		r     Request
		want  string
	}{
		{"three in one rack of two", blockRack, nodes, makeJob("g", "a").GPUs(8).Workers(3).Topology(rackOf("rack", true)).Obj(),
			"required_topology: the job needs 3 workers in one rack, but no rack in this allocation has more than 2 a nodes large enough"},
		{"within its allowed nodes", blockRack, nodes, makeJob("g", "a").GPUs(8).Workers(2).Nodes("n1", "n3").Topology(rackOf("rack", true)).Obj(),
			"no rack among the nodes the job may run on (include_nodes minus exclude_nodes) has more than 1 a node"},
		{"by the allocation's default", Policy{Topology: blockRack.Topology, GangTopology: rackOf("rack", true)}, nodes, makeJob("g", "a").GPUs(8).Workers(3).Obj(),
			"the allocation's gang_topology (a job may set its own preferred_topology): the job needs 3 workers in one rack"},
		{"an unknown level", blockRack, nodes, makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("row", false)).Obj(),
			`preferred_topology: "row" is not one of the allocation's topology levels (block, rack)`},
		{"no topology", Policy{}, unracked(racked("b1/r1", "b1/r1")), makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj(),
			`required_topology: "rack" names a topology level, but the allocation has no topology`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, tc.nodes, tc.pol)
			err := p.Admit(tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit: %v, want an error with %q", err, tc.want)
			}
		})
	}
	// Two in one rack of two, and a single worker whatever its requirement, are admitted.
	p := mustPool(t, nodes, blockRack)
	for _, r := range []Request{
		makeJob("g", "a").GPUs(8).Workers(2).Topology(rackOf("rack", true)).Obj(),
		makeJob("one", "a").GPUs(8).Topology(rackOf("rack", true)).Obj(),
	} {
		if err := p.Admit(r); err != nil {
			t.Fatalf("Admit %s: %v", r.Job, err)
		}
	}
	if _, err := NewPool(nodes, Policy{Topology: blockRack.Topology, GangTopology: rackOf("row", true)}); err == nil ||
		!strings.Contains(err.Error(), `gang_topology: "row" is not one of`) {
		t.Fatalf("a default naming an unknown level: %v", err)
	}
}

// TestReconfigureKeepsWaitingRequestsWhole: a reconfigure keeps every field of a waiting request
// the snapshot carries (it once dropped the user and whether the RunLimit was an estimate).
func TestReconfigureKeepsWaitingRequestsWhole(t *testing.T) {
	nodes := racked("b1/r1", "b1/r1")
	p := mustPool(t, nodes, blockRack)
	startRunning(t, p, []runSpec{running("x").GPUs(8).On("n1")})
	r := makeJob("g", "a").GPUs(8).Workers(2).Workspace("ws").Topology(rackOf("rack", true)).Obj()
	r.User, r.RunLimit, r.RunEstimated = "ann", 3600e9, true
	mustEnqueue(t, p, r)
	sched(t, p, at(1))
	before := p.Snapshot().Waiting
	if _, err := p.Reconfigure(append(nodes, racked("b1/r1", "b1/r1", "b1/r2")[2]), blockRack); err != nil {
		t.Fatal(err)
	}
	after := p.Snapshot().Waiting
	if mustJSON(t, before) != mustJSON(t, after) {
		t.Fatalf("the waiting request changed in a reconfigure:\n%s\n%s", mustJSON(t, before), mustJSON(t, after))
	}
}

// TestRequiredTopologyUsesItsVictimsDomain: given a gang that requires a rack and preempted v in
// rack r1, when another rack fits it better by the time v has stopped, then it still starts in
// r1, on v's capacity: starting elsewhere would have preempted v for nothing.
func TestRequiredTopologyUsesItsVictimsDomain(t *testing.T) {
	p := mustPool(t, racked("b1/r1", "b1/r1", "b1/r2", "b1/r2"), blockRack)
	startRunning(t, p, []runSpec{running("v").Class(Low).GPUs(8).On("n1"), running("x").GPUs(8).On("n3"), running("y").GPUs(8).On("n4")})
	mustEnqueue(t, p, makeJob("g", "a").GPUs(4).Workers(2).Seq(1).Topology(rackOf("rack", true)).Obj())
	if d := sched(t, p, at(60)); !slices.Equal(victims(d), []string{"v"}) {
		t.Fatalf("preempted %v, want [v]", victims(d))
	}
	// x and y end; two 4-GPU jobs take half of n3 and of n4, so that r2's nodes now fit a worker
	// of g best.
	p.Release("x", 0, 0)
	p.Release("y", 0, 0)
	mustEnqueue(t, p, makeJob("a", "a").Class(Low).GPUs(4).Seq(2).Nodes("n3").Obj())
	mustEnqueue(t, p, makeJob("b", "a").Class(Low).GPUs(4).Seq(3).Nodes("n4").Obj())
	if d := sched(t, p, at(61)); !slices.Equal(grantedJobs(d), []string{"a", "b"}) {
		t.Fatalf("granted %v, want [a b]", grantedJobs(d))
	}
	p.Release("v", 0, 0)
	d := sched(t, p, at(62))
	if len(d.Grants) != 1 {
		t.Fatalf("g did not start once v stopped: %+v", d)
	}
	if got := grantNodes(d.Grants[0]); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("g started on %v, want [n1 n2] (v's rack)", got)
	}
	checkInvariants(t, p)
}
