package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// Limits (Policy.Limits): the tests of a workspace's GPU cap in a class.

// of puts the request in a workspace.
func (b jobBuilder) Of(workspace string) jobBuilder { b.r.Workspace = workspace; return b }

// highCap16 caps every workspace at 16 high GPUs, and team-b at 24.
var highCap16 = Policy{Limits: []Limit{{Class: High, MaxGPUs: 16}, {Workspace: "team-b", Class: High, MaxGPUs: 24}}}

// capPool is four 8-GPU nodes on which team-a runs two 8-GPU high jobs (16 GPUs: its cap).
func capPool(t *testing.T, pol Policy) *Pool {
	t.Helper()
	p := mustPool(t, nodesOf("n", "a", 4, 8, 0, 0), pol)
	mustEnqueue(t, p, makeJob("a1", "a").Of("team-a").Class(High).GPUs(8).Seq(1).Obj(), makeJob("a2", "a").Of("team-a").Class(High).GPUs(8).Seq(2).Obj())
	if d := sched(t, p, at(0)); len(d.Grants) != 2 {
		t.Fatalf("setup: grants %v", grantedJobs(d))
	}
	return p
}

func TestLimitCapsAWorkspace(t *testing.T) {
	p := capPool(t, highCap16)
	mustEnqueue(t, p, makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj(),
		makeJob("b1", "a").Of("team-b").Class(High).GPUs(8).Seq(4).Obj(),
		makeJob("a4", "a").Of("team-a").Class(Medium).GPUs(8).Seq(5).Obj())
	d := sched(t, p, at(1))
	got := grantedJobs(d)
	slices.Sort(got)
	if !slices.Equal(got, []string{"a4", "b1"}) {
		t.Fatalf("grants %v, want b1 (another workspace) and a4 (another class), not a3 (team-a is at its high cap)", got)
	}
	wi, ok := p.Explain("a3")
	if want := "team-a holds 16 of its 16 high GPUs (limit high.max_gpus); the job needs 8"; !ok || wi.Reason != want {
		t.Fatalf("reason %q, want %q", wi.Reason, want)
	}
	// Once a1 ends, a3 starts on its node.
	p.Cancel("a1")
	if d := sched(t, p, at(2)); !slices.Equal(grantedJobs(d), []string{"a3"}) {
		t.Fatalf("after a1 ended: grants %v", grantedJobs(d))
	}
}

func TestLimitRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pol     Policy
		extra   []Request // submitted after team-a's two running high jobs, in this order
		granted []string
		victims []string
		reason  map[string]string // job -> a part of its reason
		workers map[string]int    // job -> the workers it started with
	}{{
		name:    "no limit, no cap",
		pol:     Policy{},
		extra:   []Request{makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj()},
		granted: []string{"a3"},
	}, {
		name:    "a workspace's own limit beats the limit of every workspace",
		pol:     Policy{Limits: []Limit{{Class: High, MaxGPUs: 8}, {Workspace: "team-a", Class: High, MaxGPUs: 24}}},
		extra:   []Request{makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj()},
		granted: []string{"a3"},
	}, {
		name:    "a request without a workspace is not capped",
		pol:     highCap16,
		extra:   []Request{makeJob("x", "a").Class(High).GPUs(8).Seq(3).Obj()},
		granted: []string{"x"},
	}, {
		name: "a capped request blocks nobody under strict-fifo",
		pol:  Policy{Queueing: StrictFIFO, Limits: highCap16.Limits},
		extra: []Request{makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj(),
			makeJob("m", "a").Of("team-c").GPUs(8).Seq(4).Obj()},
		granted: []string{"m"},
		reason:  map[string]string{"a3": "team-a holds 16 of its 16 high GPUs"},
	}, {
		name:   "a request larger than its room waits although the room is not nil",
		pol:    Policy{Limits: []Limit{{Class: High, MaxGPUs: 20}}},
		extra:  []Request{makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj()},
		reason: map[string]string{"a3": "team-a holds 16 of its 20 high GPUs (limit high.max_gpus); the job needs 8"},
	}, {
		name:    "an elastic gang starts with what its room allows",
		pol:     Policy{Limits: []Limit{{Class: High, MaxGPUs: 24}}},
		extra:   []Request{makeJob("e", "a").Of("team-a").Class(High).GPUs(8).Workers(2).Elastic(1).Seq(3).Obj()},
		granted: []string{"e"},
		workers: map[string]int{"e": 1}, // its room is 8 GPUs
	}, {
		name:    "a zero cap keeps the class from the workspace",
		pol:     Policy{Limits: []Limit{{Workspace: "team-c", Class: Medium, MaxGPUs: 0}}},
		extra:   []Request{makeJob("c", "a").Of("team-c").GPUs(1).Seq(3).Obj(), makeJob("d", "a").Of("team-d").GPUs(1).Seq(4).Obj()},
		granted: []string{"d"},
		reason:  map[string]string{"c": "team-c holds 0 of its 0 medium GPUs"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := capPool(t, tc.pol)
			mustEnqueue(t, p, tc.extra...)
			d := sched(t, p, at(20))
			got := grantedJobs(d)
			slices.Sort(got)
			if !slices.Equal(got, tc.granted) {
				t.Fatalf("grants %v, want %v", got, tc.granted)
			}
			if v := victims(d); !slices.Equal(v, tc.victims) {
				t.Fatalf("victims %v, want %v", v, tc.victims)
			}
			for job, want := range tc.reason {
				if wi, ok := p.Explain(job); !ok || !strings.Contains(wi.Reason, want) {
					t.Fatalf("%s: reason %q, want it to say %q", job, wi.Reason, want)
				}
			}
			for job, want := range tc.workers {
				if ri, _ := p.Running(job); len(ri.Placement) != want {
					t.Fatalf("%s started with %d workers, want %d", job, len(ri.Placement), want)
				}
			}
		})
	}
}

// TestLimitCountsNominations: capacity nominated to a workspace's preemptor counts against its
// cap, so a second request of that workspace does not preempt too; a cap never makes a victim.
func TestLimitCountsNominations(t *testing.T) {
	pol := Policy{Limits: []Limit{{Class: High, MaxGPUs: 16}}}
	p := poolWith(t, nodesOf("n", "a", 2, 8, 0, 0), pol, running("l1").Class(Low).GPUs(8).On("n-1"), running("l2").Class(Low).GPUs(8).On("n-2").StartedAt(1))
	mustEnqueue(t, p, makeJob("h1", "a").Of("team-a").Class(High).GPUs(8).Workers(2).Seq(1).Obj(),
		makeJob("h2", "a").Of("team-a").Class(High).GPUs(8).Seq(2).Obj())
	d := sched(t, p, at(10))
	if v := victims(d); len(v) != 2 {
		t.Fatalf("victims %v: h1 preempts both low jobs", v)
	}
	// h1 has 16 GPUs nominated: h2 is capped, not a preemptor of anything.
	wi, _ := p.Explain("h2")
	if want := "team-a holds 16 of its 16 high GPUs"; !strings.Contains(wi.Reason, want) {
		t.Fatalf("h2: reason %q, want %q", wi.Reason, want)
	}
	q := roundTrip(t, p) // the count survives a snapshot
	for _, x := range []*Pool{p, q} {
		for _, v := range []string{"l1", "l2"} {
			ri, _ := x.Running(v)
			x.Release(v, ri.Attempt, 0)
		}
		d := sched(t, x, at(11))
		if !slices.Equal(grantedJobs(d), []string{"h1"}) || len(d.Preemptions) != 0 {
			t.Fatalf("after the victims stopped: %s", mustJSON(t, d))
		}
		if wi, _ := x.Explain("h2"); !strings.Contains(wi.Reason, "team-a holds 16 of its 16 high GPUs") {
			t.Fatalf("h2 after h1 started: %q", wi.Reason)
		}
	}
}

// TestLimitLoweredStopsNothing: a reconfiguration that lowers a cap below what a workspace holds
// stops none of its jobs; its next request waits until it is under again.
func TestLimitLoweredStopsNothing(t *testing.T) {
	p := capPool(t, Policy{})
	if _, err := p.Reconfigure(p.Nodes(), Policy{Limits: []Limit{{Class: High, MaxGPUs: 8}}}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, p, makeJob("a3", "a").Of("team-a").Class(High).GPUs(8).Seq(3).Obj())
	d := sched(t, p, at(5))
	if len(d.Grants)+len(d.Preemptions) != 0 {
		t.Fatalf("decided %s", mustJSON(t, d))
	}
	if len(p.RunningJobs()) != 2 {
		t.Fatalf("running %v", p.RunningJobs())
	}
	if wi, _ := p.Explain("a3"); !strings.Contains(wi.Reason, "team-a holds 16 of its 8 high GPUs") {
		t.Fatalf("reason %q", wi.Reason)
	}
	p.Cancel("a1")
	p.Cancel("a2")
	if d := sched(t, p, at(6)); !slices.Equal(grantedJobs(d), []string{"a3"}) {
		t.Fatalf("under its cap again: grants %v", grantedJobs(d))
	}
}

func TestLimitsChecked(t *testing.T) {
	for _, tc := range []struct {
		limits []Limit
		want   string
	}{
		{[]Limit{{Class: Class(7), MaxGPUs: 1}}, "limit 1: unknown priority class 7: allowed values are low, medium, high"},
		{[]Limit{{Class: High, MaxGPUs: -1}}, "limit 1 (high): max_gpus must not be negative, got -1"},
		{[]Limit{{Class: High, MaxGPUs: 1}, {Class: High, MaxGPUs: 2}}, "limit 2: every workspace has two high limits"},
		{[]Limit{{Workspace: "w", Class: Low, MaxGPUs: 1}, {Workspace: "w", Class: Low, MaxGPUs: 2}}, "limit 2: workspace w has two low limits"},
	} {
		if _, err := NewPool(nodesOf("n", "a", 1, 8, 0, 0), Policy{Limits: tc.limits}); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: error %v, want %q", tc.limits, err, tc.want)
		}
	}
}

func TestLimitsChangeIsListed(t *testing.T) {
	was := Policy{Limits: []Limit{{Class: High, MaxGPUs: 16}}}
	next := Policy{Limits: []Limit{{Class: High, MaxGPUs: 16}, {Workspace: "team-b", Class: High, MaxGPUs: 0}}}
	got := was.Changes(next)
	if want := []string{"limits high.max_gpus 16 -> high.max_gpus 16, team-b: high.max_gpus 0"}; !slices.Equal(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if got := next.Changes(next); len(got) != 0 {
		t.Fatalf("no change listed %q", got)
	}
	if got := (Policy{}).Changes(was); !slices.Equal(got, []string{"limits none -> high.max_gpus 16"}) {
		t.Fatalf("changes %q", got)
	}
}

// TestAdmitCap: a request its workspace's cap in its class could never let start is refused,
// naming the workspace, the cap and the need; what fits the cap, a class without one, a request
// without a workspace and a job without GPUs pass.
func TestAdmitCap(t *testing.T) {
	pol := Policy{Limits: []Limit{{Class: High, MaxGPUs: 4}, {Workspace: "big", Class: High, MaxGPUs: 16}, {Workspace: "interns", Class: Medium, MaxGPUs: 0}}}
	for _, tc := range []struct {
		name string
		r    Request
		want string // "" admitted
	}{
		{"over the cap for every workspace", makeJob("j", "a").Class(High).GPUs(8).Workspace("team-a").Obj(),
			"workspace team-a may hold at most 4 high GPUs in this allocation (limit high.max_gpus), and the job needs 8 (1 worker of 8): it could never start"},
		{"a gang over it", makeJob("j", "a").Class(High).GPUs(2).Workers(3).Workspace("team-a").Obj(), "the job needs 6 (3 workers of 2)"},
		{"an elastic gang whose least size fits", makeJob("j", "a").Class(High).GPUs(2).Workers(3).Elastic(2).Workspace("team-a").Obj(), ""},
		{"at the cap", makeJob("j", "a").Class(High).GPUs(4).Workspace("team-a").Obj(), ""},
		{"the workspace's own cap is higher", makeJob("j", "a").Class(High).GPUs(8).Workspace("big").Obj(), ""},
		{"a notebook is high", makeJob("j", "a").Notebook().GPUs(8).Workspace("team-a").Obj(), "at most 4 high GPUs"},
		{"a class capped at 0", makeJob("j", "a").Class(Medium).GPUs(1).Workspace("interns").Obj(), "at most 0 medium GPUs"},
		{"a job without GPUs under a 0 cap", makeJob("j", "a").Class(Medium).GPUs(0).Workspace("interns").Obj(), ""},
		{"a class without a cap", makeJob("j", "a").Class(Low).GPUs(8).Workspace("team-a").Obj(), ""},
		{"no workspace", makeJob("j", "a").Class(High).GPUs(8).Obj(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pol.AdmitCap(tc.r)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
