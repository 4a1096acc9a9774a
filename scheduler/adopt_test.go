package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// adoptionOf describes a running or releasing job the way the job itself would report it.
func adoptionOf(p *Pool, job string) Adoption {
	rj := p.running[job]
	ri := p.runningInfo(rj)
	return Adoption{Request: rj.r, Placement: ri.Placement, StartedAt: ri.StartedAt, Releasing: ri.Releasing, Released: ri.Released}
}

// rebuilt builds a fresh pool with p's nodes and policy from p's jobs alone: the waiting requests
// are enqueued and the jobs holding capacity adopted (adoptFirst: before the waiting requests),
// and p's lost nodes are lost again. It fails the test if any Adopt is refused.
func rebuilt(t testing.TB, p *Pool, adoptFirst bool) *Pool {
	t.Helper()
	q := mustPool(t, p.Nodes(), p.Policy())
	q.CarryUsage(p)
	for _, n := range p.LostNodes() {
		q.MarkNodeLost(n)
	}
	adopt := func() {
		for _, j := range p.RunningJobs() {
			if err := q.Adopt(adoptionOf(p, j)); err != nil {
				t.Fatalf("adopt %s: %v", j, err)
			}
		}
	}
	if adoptFirst {
		adopt()
	}
	for _, w := range p.waiting {
		mustEnqueue(t, q, w.r)
	}
	if !adoptFirst {
		adopt()
	}
	return q
}

// sameHoldings fails unless p and q hold exactly the same capacity for the same jobs and queue the
// same requests. A preemptor is one thing an adoption cannot know.
func sameHoldings(t testing.TB, p, q *Pool) {
	t.Helper()
	strip := func(x *Pool) string {
		s := x.Snapshot()
		s.Now = 0
		// Nor can it know how often jobs were preempted, their checkpoints and progress, nor
		// what the passes remembered.
		s.Heads, s.Memo, s.PreemptSeq, s.Holds = nil, nil, 0, nil
		s.Forecast = nil // the record of the expected starts' errors: CarryForecast's (TestCarryForecast)
		for i := range s.Running {
			sr := &s.Running[i]
			sr.PreemptedBy, sr.PreemptSeq, sr.Preemptions, sr.Checkpoint, sr.Nominees, sr.Progress = nil, 0, 0, 0, nil, nil
		}
		return mustJSON(t, s)
	}
	if a, b := strip(p), strip(q); a != b {
		t.Fatalf("adopted state differs from the granted one:\n%s\n%s", a, b)
	}
	nodes := func(x *Pool) string {
		ns := x.View().Nodes
		for i := range ns {
			ns[i].ReservedFor = "" // reservations start afresh
			// Free capacity a stopped victim left for its preemptor is not rebuilt: the jobs do not know it.
			ns[i].HeldGPUs, ns[i].HeldFor = 0, ""
		}
		return mustJSON(t, ns)
	}
	if a, b := nodes(p), nodes(q); a != b {
		t.Fatalf("adopted nodes differ:\n%s\n%s", a, b)
	}
	checkInvariants(t, q)
}

func TestAdoptRebuildsTheGrantedState(t *testing.T) {
	nodes := append(nodesOf("n", "a", 3, 4, 32, 256), Node{Name: "c-1", Family: "cpu", CPU: 16, RAMGB: 64})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p *Pool)
	}{
		{"running jobs", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, makeJob("gang", "a").GPUs(2).Workers(2).Seq(1).Obj(), makeJob("one", "a").Class(Low).GPUs(3).Seq(2).Obj())
			sched(t, p, at(0))
		}},
		{"a notebook and a cpu job", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, Request{Job: "nb", Kind: KindNotebook, Demand: Demand{Family: "a", GPUs: 1, CPU: 4, RAMGB: 16}, Workers: 1, Seq: 1, SubmittedAt: at(0)},
				Request{Job: "cpu", Kind: KindJob, Class: High, Demand: Demand{Family: "cpu", CPU: 8, RAMGB: 32}, Workers: 1, Seq: 2, SubmittedAt: at(0)})
			sched(t, p, at(1))
		}},
		{"a releasing job with one worker released", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, makeJob("gang", "a").GPUs(4).Workers(3).Seq(1).Obj())
			sched(t, p, at(0))
			p.Release("gang", 0, 1)
		}},
		{"a releasing job with no worker released yet", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, makeJob("gang", "a").GPUs(4).Workers(2).Seq(1).Obj())
			sched(t, p, at(0))
			p.BeginRelease("gang")
		}},
		{"a preempted job and its re-queued attempt", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, makeJob("low", "a").Class(Low).GPUs(4).Workers(3).Seq(1).Obj())
			sched(t, p, at(0))
			mustEnqueue(t, p, makeJob("high", "a").Class(High).GPUs(4).Seq(2).Obj())
			if d := sched(t, p, at(5)); !slices.Equal(victims(d), []string{"low"}) {
				t.Fatalf("setup: victims %v", victims(d))
			}
			p.Release("low", 0, 2)
			again := makeJob("low", "a").Class(Low).GPUs(4).Workers(3).Seq(1).Obj()
			again.Attempt = 1
			mustEnqueue(t, p, again)
		}},
		{"a job on a lost node", func(t *testing.T, p *Pool) {
			mustEnqueue(t, p, makeJob("gang", "a").GPUs(2).Workers(2).Seq(1).Obj(), makeJob("w", "a").GPUs(4).Workers(3).Seq(2).Obj())
			sched(t, p, at(0))
			p.MarkNodeLost("n-1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodes, Policy{})
			tc.setup(t, p)
			for _, adoptFirst := range []bool{true, false} {
				q := rebuilt(t, p, adoptFirst)
				sameHoldings(t, p, q)
				// From here on both decide alike.
				a, b := mustJSON(t, p.View().Waiting), mustJSON(t, q.View().Waiting)
				if !strings.Contains(tc.name, "preempted") && a != b {
					t.Fatalf("explanations differ:\n%s\n%s", a, b)
				}
			}
			q := rebuilt(t, p, false)
			for _, j := range p.RunningJobs() {
				ri, _ := p.Running(j)
				for w := range ri.Placement {
					p.Release(j, ri.Attempt, w)
					q.Release(j, ri.Attempt, w)
				}
			}
			if a, b := mustJSON(t, sched(t, p, at(20))), mustJSON(t, sched(t, q, at(20))); a != b {
				t.Fatalf("decisions differ after adoption:\n%s\n%s", a, b)
			}
		})
	}
}

func TestAdopt(t *testing.T) {
	// n-1 and n-2: 4 GPUs, 16 cores, 64 GB; c-1: a cpu node. held runs on n-1 with GPUs 0,1 and 12
	// cores; waiting (attempt 1) waits.
	nodes := append(nodesOf("n", "a", 2, 4, 16, 64), Node{Name: "c-1", Family: "cpu", CPU: 8, RAMGB: 32})
	setup := func(t *testing.T) *Pool {
		p := mustPool(t, nodes, Policy{})
		mustEnqueue(t, p, Request{Job: "held", Kind: KindJob, Class: Medium, Demand: Demand{Family: "a", GPUs: 2, CPU: 12}, Workers: 1, Seq: 1})
		if d := sched(t, p, at(0)); len(d.Grants) != 1 || grantNodes(d.Grants[0])[0] != "n-1" {
			t.Fatalf("setup: %+v", d.Grants)
		}
		w := makeJob("waiting", "a").GPUs(4).Workers(2).Seq(2).Obj()
		w.Attempt = 1
		mustEnqueue(t, p, w)
		return p
	}
	req := func(name string, gpus, workers int) Request {
		return makeJob(name, "a").GPUs(gpus).Workers(workers).Seq(9).Obj()
	}
	on := func(node string, gpus ...int) WorkerPlacement { return WorkerPlacement{Node: node, GPUs: gpus} }
	placed := func(ws ...WorkerPlacement) []WorkerPlacement {
		for i := range ws {
			ws[i].Worker = i
		}
		return ws
	}
	older := func(r Request, attempt int) Request { r.Attempt = attempt; return r }

	for _, tc := range []struct {
		name string
		a    Adoption
		err  string // "" = adopted
		// then checks the pool after a successful Adopt.
		then func(t *testing.T, p *Pool)
	}{
		{name: "a running job", a: Adoption{Request: req("x", 2, 2), Placement: placed(on("n-1", 2, 3), on("n-2", 0, 1)), StartedAt: at(3)},
			then: func(t *testing.T, p *Pool) {
				ri, _ := p.Running("x")
				if ri.Releasing || ri.StartedAt != at(3) || !slices.Equal(ri.Placement[0].GPUs, []int{2, 3}) || ri.GPUs != 4 {
					t.Fatalf("x: %+v", ri)
				}
				if v := p.View(); v.Nodes[0].FreeGPUs != 0 || v.Nodes[1].FreeGPUs != 2 {
					t.Fatalf("nodes %+v", v.Nodes)
				}
			}},
		{name: "workers listed out of order", a: Adoption{Request: req("x", 1, 2), Placement: []WorkerPlacement{{Worker: 1, Node: "n-1", GPUs: []int{3}}, {Worker: 0, Node: "n-2", GPUs: []int{0}}}},
			then: func(t *testing.T, p *Pool) {
				if ri, _ := p.Running("x"); ri.Placement[0].Node != "n-2" || ri.Placement[1].Node != "n-1" {
					t.Fatalf("x: %+v", ri.Placement)
				}
			}},
		{name: "a releasing job with a worker released", a: Adoption{Request: req("x", 4, 2), Placement: placed(on("n-1", 0, 1, 2, 3), on("n-2", 0, 1, 2, 3)), Releasing: true, Released: []int{0}},
			// Worker 0's GPUs overlap held's: a released worker holds nothing.
			then: func(t *testing.T, p *Pool) {
				ri, _ := p.Running("x")
				if !ri.Releasing || !slices.Equal(ri.Released, []int{0}) {
					t.Fatalf("x: %+v", ri)
				}
				if v := p.View(); v.Nodes[1].ReleasingGPUs != 4 || v.Nodes[0].ReleasingGPUs != 0 {
					t.Fatalf("nodes %+v", v.Nodes)
				}
			}},
		{name: "released workers imply releasing", a: Adoption{Request: req("x", 2, 2), Placement: placed(on("n-1", 2, 3), on("n-2", 0, 1)), Released: []int{1}},
			then: func(t *testing.T, p *Pool) {
				if ri, _ := p.Running("x"); !ri.Releasing {
					t.Fatalf("x: %+v", ri)
				}
			}},
		{name: "every worker released: nothing to hold", a: Adoption{Request: req("x", 4, 2), Placement: placed(on("n-1", 0, 1, 2, 3), on("n-2", 0, 1, 2, 3)), Releasing: true, Released: []int{1, 0}},
			then: func(t *testing.T, p *Pool) {
				if _, ok := p.Running("x"); ok {
					t.Fatal("a fully released job was recorded")
				}
			}},
		{name: "an older attempt of a waiting job", a: Adoption{Request: older(req("waiting", 4, 1), 0), Placement: placed(on("n-2", 0, 1, 2, 3)), Releasing: true},
			then: func(t *testing.T, p *Pool) {
				wi, _ := p.Explain("waiting")
				if !strings.Contains(wi.Reason, "previous attempt (0)") {
					t.Fatalf("waiting: %s", wi.Reason)
				}
				p.Release("waiting", 0, 0)
				if wi, _ := p.Explain("waiting"); strings.Contains(wi.Reason, "previous attempt") {
					t.Fatalf("waiting still waits for its previous attempt: %s", wi.Reason)
				}
			}},
		{name: "onto a lost node", a: Adoption{Request: req("x", 4, 1), Placement: placed(on("n-2", 0, 1, 2, 3))},
			then: func(t *testing.T, p *Pool) {
				if !slices.Equal(p.LostNodes(), []string{"n-2"}) {
					t.Fatalf("lost %v", p.LostNodes())
				}
			}},
		{name: "a notebook is high", a: Adoption{Request: Request{Job: "nb", Kind: KindNotebook, Class: Low, Demand: Demand{Family: "a", GPUs: 1}, Workers: 1}, Placement: placed(on("n-2", 0))},
			then: func(t *testing.T, p *Pool) {
				if ri, _ := p.Running("nb"); ri.Class != High {
					t.Fatalf("nb: %+v", ri)
				}
			}},
		{name: "a cpu job", a: Adoption{Request: Request{Job: "c", Kind: KindJob, Demand: Demand{Family: "cpu", CPU: 8, RAMGB: 32}, Workers: 1}, Placement: placed(on("c-1"))}},

		{name: "inadmissible request", a: Adoption{Request: req("x", 8, 1), Placement: placed(on("n-2", 0, 1, 2, 3, 4, 5, 6, 7))},
			err: `cannot adopt job "x": instance type needs 8 a GPUs per worker but the largest a node in this allocation has 4`},
		{name: "no job id", a: Adoption{Request: req("", 1, 1), Placement: placed(on("n-2", 0))}, err: "the request has no job id"},
		{name: "already held", a: Adoption{Request: req("held", 2, 1), Placement: placed(on("n-2", 0, 1))},
			err: `cannot adopt job "held" attempt 0: the pool already holds capacity for its attempt 0`},
		{name: "another attempt already held", a: Adoption{Request: older(req("held", 2, 1), 3), Placement: placed(on("n-2", 0, 1))},
			err: "the pool already holds capacity for its attempt 0"},
		{name: "the waiting attempt itself", a: Adoption{Request: older(req("waiting", 4, 2), 1), Placement: placed(on("n-1", 0), on("n-2", 0))},
			err: "its attempt 1 is waiting, and only an older attempt may hold capacity while a newer one waits"},
		{name: "newer than the waiting attempt", a: Adoption{Request: older(req("waiting", 4, 1), 2), Placement: placed(on("n-2", 0, 1, 2, 3))},
			err: "its attempt 1 is waiting"},
		{name: "too few workers placed", a: Adoption{Request: req("x", 1, 2), Placement: placed(on("n-2", 0))},
			err: "its placement has 1 worker but the job has 2"},
		{name: "a worker twice", a: Adoption{Request: req("x", 1, 2), Placement: []WorkerPlacement{{Worker: 0, Node: "n-1", GPUs: []int{2}}, {Worker: 0, Node: "n-2", GPUs: []int{0}}}},
			err: "its placement must list workers 0 to 1 once each, but lists worker 0 twice or out of range"},
		{name: "a worker out of range", a: Adoption{Request: req("x", 1, 1), Placement: []WorkerPlacement{{Worker: 1, Node: "n-2", GPUs: []int{0}}}},
			err: "lists worker 1 twice or out of range"},
		{name: "unknown node", a: Adoption{Request: req("x", 1, 1), Placement: placed(on("n-9", 0))},
			err: `worker 0 is on node "n-9", which is not in this allocation`},
		{name: "node of another family", a: Adoption{Request: req("x", 0, 1), Placement: placed(on("c-1"))},
			err: "worker 0 is on node c-1 of family cpu, but the job runs on a nodes"},
		{name: "two workers on one node", a: Adoption{Request: req("x", 1, 2), Placement: placed(on("n-2", 0), on("n-2", 1))},
			err: "workers 0 and 1 are both on node n-2; a job's workers run on distinct nodes"},
		{name: "GPU count differs from the demand", a: Adoption{Request: req("x", 2, 1), Placement: placed(on("n-2", 0, 1, 2))},
			err: "worker 0 holds 3 GPUs on node n-2, but each worker of the job needs 2"},
		{name: "GPU index does not exist", a: Adoption{Request: req("x", 1, 1), Placement: placed(on("n-2", 4))},
			err: "worker 0 holds GPU 4 on node n-2, which has GPUs 0 to 3"},
		{name: "GPU listed twice", a: Adoption{Request: req("x", 2, 1), Placement: placed(on("n-2", 1, 1))},
			err: "worker 0 lists GPU 1 on node n-2 twice"},
		{name: "GPU held by another job", a: Adoption{Request: req("x", 2, 2), Placement: placed(on("n-2", 0, 1), on("n-1", 1, 2))},
			err: "GPU 1 on node n-1, which worker 1 holds, is already held by job held"},
		{name: "CPU held by another job", a: Adoption{Request: Request{Job: "x", Kind: KindJob, Demand: Demand{Family: "a", GPUs: 1, CPU: 8}, Workers: 1}, Placement: placed(on("n-1", 3))},
			err: "worker 0 needs 8 CPU cores and 0 GB RAM on node n-1, but other jobs hold all but 4 cores and 64 GB there"},
		{name: "a released worker that does not exist", a: Adoption{Request: req("x", 1, 1), Placement: placed(on("n-2", 0)), Released: []int{1}},
			err: "released worker 1 does not exist (the job has workers 0 to 0)"},
		{name: "a worker released twice", a: Adoption{Request: req("x", 1, 2), Placement: placed(on("n-1", 3), on("n-2", 0)), Released: []int{1, 1}},
			err: "worker 1 is listed as released twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup(t)
			if strings.Contains(tc.name, "lost") {
				p.MarkNodeLost("n-2")
			}
			before := mustJSON(t, p.Snapshot())
			err := p.Adopt(tc.a)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if mustJSON(t, p.Snapshot()) != before {
					t.Fatal("a refused Adopt changed the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, p)
			roundTrip(t, p)
			if tc.then != nil {
				tc.then(t, p)
			}
			checkInvariants(t, p)
		})
	}
}
