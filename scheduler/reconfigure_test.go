package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// reconfPool has two 2-GPU a100 nodes (n-1, n-2) and one cpu node (c-1): big runs on n-1, cpu on
// c-1, and wide (2 workers) waits because n-2 alone cannot hold it.
func reconfPool(t *testing.T) *Pool {
	t.Helper()
	nodes := append(nodesOf("n", "a100", 2, 2, 16, 128), Node{Name: "c-1", Family: "cpu", CPU: 8, RAMGB: 32})
	p := mustPool(t, nodes, Policy{})
	cpu := Request{Job: "cpu", Kind: KindJob, Class: Medium, Demand: Demand{Family: "cpu", CPU: 4, RAMGB: 8}, Workers: 1, Seq: 2, SubmittedAt: t0}
	mustEnqueue(t, p, makeJob("big", "a100").GPUs(2).Seq(1).Obj(), cpu)
	d := sched(t, p, at(0))
	if got := grantedJobs(d); !slices.Equal(got, []string{"big", "cpu"}) {
		t.Fatalf("granted %v", got)
	}
	if g := d.Grants[0]; grantNodes(g)[0] != "n-1" {
		t.Fatalf("big on %v", grantNodes(g))
	}
	mustEnqueue(t, p, makeJob("wide", "a100").GPUs(2).Workers(2).Seq(3).Obj())
	if d := sched(t, p, at(1)); len(d.Grants) != 0 {
		t.Fatalf("unexpected grants %v", grantedJobs(d))
	}
	return p
}

func TestReconfigureRules(t *testing.T) {
	a100 := func(name string, gpus int) Node {
		return Node{Name: name, Family: "a100", GPUs: gpus, CPU: 16, RAMGB: 128}
	}
	cpu1 := Node{Name: "c-1", Family: "cpu", CPU: 8, RAMGB: 32}
	cases := []struct {
		name   string
		nodes  []Node
		policy Policy
		// err, if set, are substrings of the refusal; the pool must then be unchanged.
		err   []string
		unfit []string // job ids dropped from the queue
		// then checks the pool after a successful reconfigure.
		then func(t *testing.T, p *Pool)
	}{
		{name: "add a node", nodes: []Node{a100("n-1", 2), a100("n-2", 2), cpu1, a100("n-3", 2)},
			then: func(t *testing.T, p *Pool) {
				d := sched(t, p, at(2))
				if got := grantedJobs(d); !slices.Equal(got, []string{"wide"}) || !slices.Equal(grantNodes(d.Grants[0]), []string{"n-2", "n-3"}) {
					t.Fatalf("want wide on n-2, n-3; got %+v", d.Grants)
				}
			}},
		{name: "reorder nodes", nodes: []Node{cpu1, a100("n-2", 2), a100("n-1", 2)},
			then: func(t *testing.T, p *Pool) {
				ri, _ := p.Running("big")
				if ri.Placement[0].Node != "n-1" || !slices.Equal(ri.Placement[0].GPUs, []int{0, 1}) {
					t.Fatalf("big moved: %+v", ri.Placement)
				}
			}},
		{name: "grow an idle node", nodes: []Node{a100("n-1", 2), a100("n-2", 4), cpu1}},
		{name: "shrink an idle node", nodes: []Node{a100("n-1", 2), a100("n-2", 1), cpu1}, unfit: []string{"wide"}},
		{name: "change an idle node's family", nodes: []Node{a100("n-1", 2), {Name: "n-2", Family: "h100", GPUs: 2, CPU: 16, RAMGB: 128}, cpu1},
			unfit: []string{"wide"}},
		{name: "remove an idle node", nodes: []Node{a100("n-1", 2), cpu1}, unfit: []string{"wide"},
			then: func(t *testing.T, p *Pool) {
				if p.WaitingCount() != 0 || len(p.Nodes()) != 2 {
					t.Fatalf("waiting %d, nodes %v", p.WaitingCount(), p.Nodes())
				}
				if err := p.Enqueue(makeJob("wide", "a100").GPUs(2).Workers(2).Seq(3).Obj()); err == nil {
					t.Fatalf("an impossible request was admitted")
				}
			}},
		{name: "remove a busy node", nodes: []Node{a100("n-2", 2), cpu1},
			err: []string{"node n-1 cannot be removed: big holds GPUs 0,1 on it; stop it first"}},
		{name: "shrink a busy node", nodes: []Node{a100("n-1", 1), a100("n-2", 2), cpu1},
			err: []string{"node n-1 cannot be changed (GPUs 2 -> 1): big holds GPUs 0,1 on it"}},
		{name: "grow a busy node", nodes: []Node{a100("n-1", 4), a100("n-2", 2), cpu1},
			err: []string{"node n-1 cannot be changed (GPUs 2 -> 4)", "big"}},
		{name: "change a busy cpu node", nodes: []Node{a100("n-1", 2), a100("n-2", 2), {Name: "c-1", Family: "cpu", CPU: 4, RAMGB: 32}},
			err: []string{"node c-1 cannot be changed (CPU 8 -> 4): cpu holds 4 CPU cores and 8 GB RAM on it"}},
		{name: "two busy nodes", nodes: []Node{a100("n-2", 2)},
			err: []string{"node n-1 cannot be removed: big", "node c-1 cannot be removed: cpu"}},
		{name: "bad node", nodes: []Node{a100("n-1", 2), a100("n-1", 2), cpu1}, err: []string{`node name "n-1" is used twice`}},
		{name: "bad policy", nodes: []Node{a100("n-1", 2), a100("n-2", 2), cpu1}, policy: Policy{Queueing: "lifo"}, err: []string{"unknown queueing"}},
		{name: "change the policy", nodes: []Node{a100("n-1", 2), a100("n-2", 2), cpu1},
			policy: Policy{Queueing: StrictFIFO, MinRuntimeBeforePreemption: time.Hour},
			then: func(t *testing.T, p *Pool) {
				if p.Policy().Queueing != StrictFIFO || p.Policy().MinRuntimeBeforePreemption != time.Hour {
					t.Fatalf("policy %+v", p.Policy())
				}
				// strict-fifo: a small job behind wide no longer starts on n-2.
				mustEnqueue(t, p, makeJob("small", "a100").Seq(4).Obj())
				if d := sched(t, p, at(2)); len(d.Grants) != 0 {
					t.Fatalf("strict-fifo ignored: %v", grantedJobs(d))
				}
			}},
		{name: "unchanged", nodes: []Node{a100("n-1", 2), a100("n-2", 2), cpu1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := reconfPool(t)
			before := mustJSON(t, p.Snapshot())
			checked, cerr := p.CheckReconfigure(tc.nodes, tc.policy)
			if mustJSON(t, p.Snapshot()) != before {
				t.Fatalf("CheckReconfigure changed the pool")
			}
			unfit, err := p.Reconfigure(tc.nodes, tc.policy)
			if (err == nil) != (cerr == nil) || mustJSON(t, checked) != mustJSON(t, unfit) {
				t.Fatalf("CheckReconfigure (%v, %v) disagrees with Reconfigure (%v, %v)", checked, cerr, unfit, err)
			}
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("want an error")
				}
				for _, want := range tc.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				if mustJSON(t, p.Snapshot()) != before {
					t.Fatalf("a refused reconfigure changed the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var dropped []string
			for _, u := range unfit {
				dropped = append(dropped, u.Job)
				if u.Attempt != 0 || u.Reason == "" {
					t.Errorf("bad unfit %+v", u)
				}
				if _, ok := p.Explain(u.Job); ok {
					t.Errorf("%s still waits", u.Job)
				}
			}
			if !slices.Equal(dropped, tc.unfit) {
				t.Fatalf("unfit %v, want %v", dropped, tc.unfit)
			}
			if !slices.EqualFunc(p.Nodes(), tc.nodes, Node.Equal) {
				t.Fatalf("nodes %v", p.Nodes())
			}
			for _, j := range []string{"big", "cpu"} {
				if _, ok := p.Running(j); !ok {
					t.Fatalf("%s no longer runs", j)
				}
			}
			checkInvariants(t, p)
			q := roundTrip(t, p)
			if mustJSON(t, q.View()) != mustJSON(t, p.View()) {
				t.Fatalf("restored view differs")
			}
			if tc.then != nil {
				tc.then(t, p)
			}
		})
	}
}

func TestReconfigureReleasingJob(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a100", 2, 2, 16, 128), Policy{})
	mustEnqueue(t, p, makeJob("gang", "a100").GPUs(2).Workers(2).Seq(1).Obj())
	sched(t, p, at(0))
	// Releasing, with worker 0 (on n-1) already gone: n-2 is still held, n-1 still named.
	p.Release("gang", 0, 0)
	for _, n := range []Node{{Name: "n-1", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}, {Name: "n-2", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}} {
		_, err := p.Reconfigure([]Node{n}, Policy{})
		if err == nil || !strings.Contains(err.Error(), "gang") {
			t.Fatalf("keeping only %s: want a refusal naming gang, got %v", n.Name, err)
		}
	}
	n2 := []Node{{Name: "n-2", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}}
	if got := errText(p.Reconfigure(n2, Policy{})); !strings.Contains(got, "node n-1 cannot be removed: gang is still releasing") {
		t.Fatalf("removing n-1 must be refused while gang releases: %q", got)
	}
	p.Release("gang", 0, 1)
	if _, err := p.Reconfigure(nodesOf("n", "a100", 1, 2, 16, 128), Policy{}); err != nil {
		t.Fatalf("once released, the node may go: %v", err)
	}
	checkInvariants(t, p)
}

func TestReconfigureKeepsPreemptionState(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a100", 1, 2, 16, 128), Policy{})
	mustEnqueue(t, p, makeJob("low", "a100").Class(Low).GPUs(2).Seq(1).Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("high", "a100").Class(High).GPUs(2).Seq(2).Obj())
	if d := sched(t, p, at(5)); !slices.Equal(victims(d), []string{"low"}) {
		t.Fatalf("want low preempted, got %v", victims(d))
	}
	if _, err := p.Reconfigure(nodesOf("n", "a100", 2, 2, 16, 128), Policy{}); err != nil {
		t.Fatal(err)
	}
	ri, _ := p.Running("low")
	if !ri.Releasing || ri.PreemptedBy == nil || ri.PreemptedBy.Job != "high" {
		t.Fatalf("low lost its preemption state: %+v", ri)
	}
	// The new node serves the queue at once. high waits for the capacity of the job preempted
	// for it, so the new node goes to the next waiting job.
	mustEnqueue(t, p, makeJob("next", "a100").Class(Low).GPUs(2).Seq(3).Obj())
	if d := sched(t, p, at(6)); !slices.Equal(grantedJobs(d), []string{"next"}) || grantNodes(d.Grants[0])[0] != "n-2" {
		t.Fatalf("want next on n-2, got %+v", d.Grants)
	}
	roundTrip(t, p)
	p.Release("low", 0, 0)
	if d := sched(t, p, at(7)); !slices.Equal(grantedJobs(d), []string{"high"}) || grantNodes(d.Grants[0])[0] != "n-1" {
		t.Fatalf("want high on n-1, got %+v", d.Grants)
	}
}

func errText(_ []Unfit, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestReconfigureLostNodes(t *testing.T) {
	a100 := func(name string, gpus int) Node {
		return Node{Name: name, Family: "a100", GPUs: gpus, CPU: 16, RAMGB: 128}
	}
	// big runs on n-1; n-1 and n-3 are lost; w (2 GPUs) waits as n-2 is its only node.
	setup := func(t *testing.T) *Pool {
		p := mustPool(t, []Node{a100("n-1", 2), a100("n-2", 2), a100("n-3", 2)}, Policy{})
		mustEnqueue(t, p, makeJob("big", "a100").GPUs(2).Seq(1).Obj())
		if d := sched(t, p, at(0)); grantNodes(d.Grants[0])[0] != "n-1" {
			t.Fatalf("setup: big on %v", grantNodes(d.Grants[0]))
		}
		p.MarkNodeLost("n-1")
		p.MarkNodeLost("n-3")
		mustEnqueue(t, p, makeJob("w", "a100").GPUs(2).Workers(2).Seq(2).Obj())
		return p
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		err   string
		lost  []string // after a successful reconfigure
		unfit []string
	}{
		{name: "reorder", nodes: []Node{a100("n-3", 2), a100("n-2", 2), a100("n-1", 2)}, lost: []string{"n-3", "n-1"}},
		{name: "add a node", nodes: []Node{a100("n-1", 2), a100("n-4", 2), a100("n-2", 2), a100("n-3", 2)}, lost: []string{"n-1", "n-3"}},
		{name: "change an idle lost node", nodes: []Node{a100("n-1", 2), a100("n-2", 2), a100("n-3", 4)}, lost: []string{"n-1", "n-3"}},
		{name: "remove an idle lost node", nodes: []Node{a100("n-1", 2), a100("n-2", 2)}, lost: []string{"n-1"}},
		{name: "remove a busy lost node", nodes: []Node{a100("n-2", 2), a100("n-3", 2)},
			err: "node n-1 cannot be removed: big holds GPUs 0,1 on it; stop it first"},
		{name: "remove both lost nodes while one is busy", nodes: []Node{a100("n-2", 2)}, err: "node n-1 cannot be removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup(t)
			before := mustJSON(t, p.Snapshot())
			unfit, err := p.Reconfigure(tc.nodes, Policy{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if mustJSON(t, p.Snapshot()) != before {
					t.Fatal("a refused reconfigure changed the pool")
				}
				return
			}
			if err != nil || len(unfit) != 0 {
				t.Fatalf("reconfigure: %v, unfit %v", err, unfit)
			}
			if got := p.LostNodes(); !slices.Equal(got, tc.lost) {
				t.Fatalf("lost %v, want %v", got, tc.lost)
			}
			checkInvariants(t, p)
			roundTrip(t, p)
			// Nothing starts on a lost node: w starts only where two nodes answer.
			d := sched(t, p, at(1))
			for _, g := range d.Grants {
				for _, n := range grantNodes(g) {
					if slices.Contains(tc.lost, n) {
						t.Fatalf("granted %s on lost node %s", g.Job, n)
					}
				}
			}
			if wantW := len(tc.nodes)-len(tc.lost) >= 2; (len(d.Grants) == 1) != wantW {
				t.Fatalf("granted %+v; want w granted: %v", d.Grants, wantW)
			}
		})
	}
	// Once big is gone, its lost node may go too.
	p := setup(t)
	p.Cancel("big")
	if _, err := p.Reconfigure([]Node{a100("n-2", 2), a100("n-3", 2)}, Policy{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.LostNodes(), []string{"n-3"}) {
		t.Fatalf("lost %v", p.LostNodes())
	}
}
