package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// Elastic gangs (Request.MinWorkers): the tests of rule (b') and of what an elastic gang
// preempts and reserves for.

func TestAdmitElastic(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 4, 8, 0, 0), Policy{})
	for _, tc := range []struct {
		name string
		req  Request
		want string // "" = admitted
	}{
		{"rigid gang that fits", makeJob("j", "a").Workers(4).Obj(), ""},
		{"rigid gang larger than the pool", makeJob("j", "a").Workers(6).Obj(), "needs 6 workers, each on its own a node, but this allocation has only 4"},
		{"elastic gang whose least size fits", makeJob("j", "a").Workers(6).Elastic(2).Obj(), ""},
		{"elastic gang whose least size does not fit", makeJob("j", "a").Workers(8).Elastic(5).Obj(), "needs at least 5 workers, each on its own a node"},
		{"least size above the gang", makeJob("j", "a").Workers(2).Elastic(3).Obj(), "least size must be between 1 and its 2 workers, got 3"},
		{"negative least size", makeJob("j", "a").Workers(2).Elastic(-1).Obj(), "got -1"},
		{"least size of the whole gang is rigid", makeJob("j", "a").Workers(3).Elastic(3).Obj(), ""},
		{"allowed nodes hold the least size", makeJob("j", "a").Workers(3).Elastic(2).Nodes("n-1", "n-2").Obj(), ""},
		{"allowed nodes too few for the least size", makeJob("j", "a").Workers(3).Elastic(2).Nodes("n-1").Obj(),
			"leave 1 node of family a that can hold a worker (n-1); the job needs at least 2 workers"},
	} {
		err := p.Admit(tc.req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestElasticGangStart(t *testing.T) {
	four := nodesOf("n", "a", 4, 8, 0, 0)
	for _, tc := range []struct {
		name    string
		running []runSpec
		req     Request
		workers int      // how many workers it starts with; 0: it does not start
		victims []string // what it preempts instead
		after   int      // how many workers it starts with once its victims stopped
	}{{
		name:    "it starts whole when it fits whole",
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
		workers: 4,
	}, {
		name:    "it starts with as many workers as fit",
		running: []runSpec{running("h").Class(High).GPUs(8).On("n-1")},
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
		workers: 3,
	}, {
		name:    "it starts at its least size",
		running: []runSpec{running("h1").Class(High).GPUs(8).On("n-1"), running("h2").Class(High).GPUs(8).On("n-2")},
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
		workers: 2,
	}, {
		// Free capacity first: it does not preempt the low job to start whole.
		name:    "it starts smaller rather than preempt",
		running: []runSpec{running("h1").Class(High).GPUs(8).On("n-1"), running("l2").Class(Low).GPUs(8).On("n-2")},
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
		workers: 2,
	}, {
		// Below its least size on free capacity, it preempts for the whole gang, as a rigid gang of
		// its size would (Kueue's partial admission tries the full count first too).
		name:    "below its least size it preempts for the whole gang",
		running: []runSpec{running("l1").Class(Low).GPUs(8).On("n-1"), running("l2").Class(Low).GPUs(8).On("n-2")},
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(3).Obj(),
		victims: []string{"l1", "l2"},
		after:   4,
	}, {
		name: "when the whole gang cannot be made, it preempts for its least size",
		running: []runSpec{running("l1").Class(Low).GPUs(8).On("n-1"), running("h2").Class(High).GPUs(8).On("n-2"),
			running("h3").Class(High).GPUs(8).On("n-3")},
		req:     makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
		victims: []string{"l1"},
		after:   2,
	}, {
		name: "it does not preempt a class it may not",
		running: []runSpec{running("m1").GPUs(8).On("n-1"), running("h2").Class(High).GPUs(8).On("n-2"),
			running("h3").Class(High).GPUs(8).On("n-3")},
		req: makeJob("e", "a").GPUs(8).Workers(4).Elastic(2).Obj(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, four, Policy{}, tc.running...)
			mustEnqueue(t, p, tc.req)
			d := sched(t, p, at(10))
			got := victims(d)
			slices.Sort(got)
			if !slices.Equal(got, tc.victims) {
				t.Fatalf("victims %v, want %v", got, tc.victims)
			}
			if tc.workers == 0 {
				if len(d.Grants) != 0 {
					t.Fatalf("it started with %d workers", len(d.Grants[0].Placement))
				}
				if d := sched(t, p, at(11)); len(d.Grants)+len(d.Preemptions) != 0 {
					t.Fatalf("while its victims stop, a second pass decided %s", mustJSON(t, d))
				}
				// Once its victims stopped, it starts.
				for _, v := range tc.victims {
					ri, _ := p.Running(v)
					for _, w := range ri.Placement {
						if !p.Release(v, ri.Attempt, w.Worker) {
							t.Fatalf("release %s/%d refused", v, w.Worker)
						}
					}
				}
				d = sched(t, p, at(12))
				if len(tc.victims) == 0 {
					if len(d.Grants) != 0 {
						t.Fatalf("it started without victims: %s", mustJSON(t, d.Grants))
					}
					return
				}
				if len(d.Preemptions) != 0 {
					t.Fatalf("after its victims stopped it preempted %v", victims(d))
				}
				if len(d.Grants) != 1 || len(d.Grants[0].Placement) != tc.after {
					t.Fatalf("after its victims stopped: grants %s, want %d workers", mustJSON(t, d.Grants), tc.after)
				}
				return
			}
			if len(d.Grants) != 1 || len(d.Grants[0].Placement) != tc.workers {
				t.Fatalf("grants %s, want it started with %d workers", mustJSON(t, d.Grants), tc.workers)
			}
			ri, ok := p.Running("e")
			if !ok || len(ri.Placement) != tc.workers || ri.GPUs != 8*tc.workers {
				t.Fatalf("running %+v, want %d workers", ri, tc.workers)
			}
			// It keeps its size: capacity that frees later does not grow it, and a restored pool
			// agrees.
			q := roundTrip(t, p)
			if rq, _ := q.Running("e"); len(rq.Placement) != tc.workers {
				t.Fatalf("restored: %d workers, want %d", len(rq.Placement), tc.workers)
			}
		})
	}
}

// TestElasticGangWaiting: a waiting elastic gang says so, and keeps its least size through a
// snapshot and a reconfiguration.
func TestElasticGangWaiting(t *testing.T) {
	p := poolWith(t, nodesOf("n", "a", 3, 8, 0, 0), Policy{},
		running("h1").Class(High).GPUs(8).On("n-1"), running("h2").Class(High).GPUs(8).On("n-2"))
	mustEnqueue(t, p, makeJob("e", "a").GPUs(8).Workers(3).Elastic(2).Obj())
	if d := sched(t, p, at(10)); len(d.Grants) != 0 {
		t.Fatalf("it started with %d workers, below its least size", len(d.Grants[0].Placement))
	}
	wi, ok := p.Explain("e")
	if !ok || wi.MinWorkers != 2 || wi.Workers != 3 {
		t.Fatalf("explain %+v", wi)
	}
	if want := "3 nodes with 8 free a GPUs each (or at least 2 of them: it is elastic)"; !strings.Contains(wi.Reason, want) {
		t.Fatalf("reason %q, want it to say %q", wi.Reason, want)
	}
	q := roundTrip(t, p)
	if r, _ := q.Waiting("e"); r.MinWorkers != 2 {
		t.Fatalf("restored: MinWorkers %d, want 2", r.MinWorkers)
	}
	// Once h1 stops, it starts with 2 workers in the restored pool as in the original.
	for _, x := range []*Pool{p, q} {
		ri, _ := x.Running("h1")
		x.Release("h1", ri.Attempt, 0)
		x.Cancel("h1")
		d := sched(t, x, at(20))
		if len(d.Grants) != 1 || len(d.Grants[0].Placement) != 2 {
			t.Fatalf("after h1 stopped: grants %s", mustJSON(t, d.Grants))
		}
		if wi, ok := x.Explain("e"); ok {
			t.Fatalf("still waiting: %+v", wi)
		}
	}
}
