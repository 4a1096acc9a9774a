package scheduler

import (
	"slices"
	"testing"
	"time"
)

// TestViewPageWhere checks that a filtered page of the queue lists the requests its filter
// keeps, in launch order, each explained exactly as the whole view explains it (reason, what it
// waits for, its position in the whole queue), and counts the matches over the whole queue.
func TestViewPageWhere(t *testing.T) {
	two := nodesOf("n", "a", 2, 8, 0, 0)
	three := nodesOf("n", "a", 3, 8, 0, 0)
	ofWorkspace := func(ws string) func(*Request) bool { return func(r *Request) bool { return r.Workspace == ws } }
	ofClass := func(c Class) func(*Request) bool { return func(r *Request) bool { return r.Class == c } }
	notebooks := func(r *Request) bool { return r.Kind == KindNotebook }
	for _, tc := range []struct {
		name    string
		nodes   []Node
		policy  Policy
		running []runSpec
		waiting []Request
		keep    func(*Request) bool
		listed  []string            // the whole filtered list, in order
		waitFor map[string][]string // WaitingFor of some listed jobs, as the whole view says
		// unscheduled explains the queue as it is enqueued, before a pass grants anything.
		unscheduled bool
	}{{
		// a-mid, filtered out between b-first and b-last, still takes n-2: b-last waits for both.
		name:        "a request the filter skips still takes capacity",
		nodes:       two,
		unscheduled: true,
		waiting: []Request{
			makeJob("b-first", "a").GPUs(8).Seq(1).Workspace("b").Obj(),
			makeJob("a-mid", "a").GPUs(8).Seq(2).Workspace("a").Obj(),
			makeJob("b-last", "a").GPUs(8).Seq(3).Workspace("b").Obj(),
		},
		keep:    ofWorkspace("b"),
		listed:  []string{"b-first", "b-last"},
		waitFor: map[string][]string{"b-last": {"a-mid", "b-first"}},
	}, {
		name:    "a preemptor of another workspace",
		nodes:   two,
		running: []runSpec{running("l1").Class(Low).GPUs(8).On("n-1"), running("h2").Class(High).GPUs(8).On("n-2")},
		waiting: []Request{
			makeJob("hi-a", "a").Class(High).GPUs(8).Seq(1).Workspace("a").Obj(),
			makeJob("hi-b", "a").Class(High).GPUs(8).Seq(2).Workspace("b").Obj(),
			makeJob("med-b", "a").GPUs(8).Seq(3).Workspace("b").Obj(),
			makeJob("low-a", "a").Class(Low).GPUs(1).Seq(4).Workspace("a").Obj(),
		},
		keep:    ofWorkspace("b"),
		listed:  []string{"hi-b", "med-b"},
		waitFor: map[string][]string{"hi-b": {"hi-a"}},
	}, {
		name:    "by class",
		nodes:   two,
		running: []runSpec{running("h1").Class(High).GPUs(8).On("n-1")},
		waiting: []Request{
			makeJob("h", "a").Class(High).GPUs(8).Seq(1).Obj(),
			makeJob("m1", "a").GPUs(8).Seq(2).Obj(),
			makeJob("m2", "a").GPUs(4).Seq(3).Obj(),
			makeJob("l", "a").Class(Low).GPUs(1).Seq(4).Obj(),
		},
		keep:   ofClass(Medium),
		listed: []string{"m1", "m2"},
	}, {
		name:  "by kind",
		nodes: two,
		waiting: []Request{
			makeJob("j1", "a").Class(High).GPUs(8).Workers(2).Seq(1).Obj(),
			makeJob("nb", "a").Notebook().Class(High).GPUs(1).Seq(2).Obj(),
			makeJob("j2", "a").GPUs(1).Seq(3).Obj(),
		},
		keep:   notebooks,
		listed: []string{"nb"},
	}, {
		// Behind a strict-fifo blocker the filtered requests are still blocked by it.
		name:    "strict fifo",
		nodes:   two,
		policy:  Policy{Queueing: StrictFIFO},
		running: []runSpec{running("r1").GPUs(8).On("n-1")},
		waiting: []Request{
			makeJob("big", "a").GPUs(8).Workers(2).Seq(1).Workspace("a").Obj(),
			makeJob("small-a", "a").GPUs(1).Seq(2).Workspace("a").Obj(),
			makeJob("small-b", "a").GPUs(1).Seq(3).Workspace("b").Obj(),
		},
		keep:    ofWorkspace("b"),
		listed:  []string{"small-b"},
		waitFor: map[string][]string{"small-b": {"big"}},
	}, {
		name:   "a reservation",
		nodes:  three,
		policy: Policy{ReserveAfter: 30 * time.Minute},
		running: []runSpec{running("r1").GPUs(8).On("n-1"), running("r2").GPUs(8).On("n-2"),
			running("r3").GPUs(4).On("n-3")},
		waiting: []Request{
			makeJob("big-a", "a").GPUs(8).Workers(2).Seq(1).Workspace("a").Obj(),
			makeJob("x-b", "a").GPUs(8).Seq(2).Workspace("b").Obj(),
			makeJob("y-a", "a").GPUs(8).Seq(3).Workspace("a").Obj(),
			makeJob("z-b", "a").GPUs(8).Seq(4).Workspace("b").Obj(),
		},
		keep:   ofWorkspace("b"),
		listed: []string{"x-b", "z-b"},
	}, {
		name:    "nothing matches",
		nodes:   two,
		waiting: []Request{makeJob("j", "a").Seq(1).Workspace("a").Obj()},
		keep:    ofWorkspace("b"),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := poolWith(t, tc.nodes, tc.policy, tc.running...)
			mustEnqueue(t, p, tc.waiting...)
			if tc.unscheduled {
				checkInvariants(t, p)
			} else {
				sched(t, p, at(10)) // (checks every page, filtered ones too, against the view)
				sched(t, p, at(60)) // past reserve_after
			}
			whole := p.View()
			var want []WaitingInfo
			for i, wi := range whole.Waiting {
				if tc.keep(&p.waiting[i].r) {
					want = append(want, wi)
				}
			}
			var names []string
			for _, wi := range want {
				names = append(names, wi.Job)
			}
			if !slices.Equal(names, tc.listed) {
				t.Fatalf("the filter keeps %v, want %v (the queue: %s)", names, tc.listed, mustJSON(t, whole.Waiting))
			}
			for _, limit := range []int{1, 2, len(want) + 1} {
				for offset := 0; offset <= len(want); offset++ {
					got, matched := p.ViewPageWhere(offset, limit, tc.keep)
					if matched != len(want) {
						t.Fatalf("offset %d limit %d: %d matched, want %d", offset, limit, matched, len(want))
					}
					page := want[offset:min(offset+limit, len(want))]
					if len(got.Waiting) != len(page) {
						t.Fatalf("offset %d limit %d: %d listed, want %d", offset, limit, len(got.Waiting), len(page))
					}
					for k, wi := range got.Waiting {
						w := page[k]
						if wi.Job != w.Job || wi.Position != w.Position || wi.Reason != w.Reason || !slices.Equal(wi.WaitingFor, w.WaitingFor) {
							t.Fatalf("offset %d limit %d: %s is explained\n  %d %q waiting for %v\nthe whole view says\n  %d %q waiting for %v",
								offset, limit, wi.Job, wi.Position, wi.Reason, wi.WaitingFor, w.Position, w.Reason, w.WaitingFor)
						}
						if a, b := mustJSON(t, wi), mustJSON(t, w); a != b {
							t.Fatalf("offset %d limit %d: %s\n%s\nwant\n%s", offset, limit, wi.Job, a, b)
						}
					}
				}
			}
			for job, wantFor := range tc.waitFor {
				for _, wi := range want {
					if wi.Job == job && !slices.Equal(wi.WaitingFor, wantFor) {
						t.Fatalf("%s waits for %v, want %v: %s", job, wi.WaitingFor, wantFor, wi.Reason)
					}
				}
			}
			if v, n := p.ViewPageWhere(0, 10, nil); n != len(whole.Waiting) || mustJSON(t, v) != mustJSON(t, p.ViewPage(0, 10)) {
				t.Fatalf("no filter: %d matched, or a page unlike ViewPage's", n)
			}
		})
	}
}
