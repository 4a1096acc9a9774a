package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// Cohorts (Policy.Cohort): allocations a and b share four 8-GPU nodes, 16 GPUs each.

func (b jobBuilder) In(allocation string) jobBuilder { b.r.Allocation = allocation; return b }

// cohortPolicy gives a the borrowing limit borrowA (b borrows without limit).
func cohortPolicy(borrowA int) Policy {
	return Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 16, BorrowingLimit: borrowA}, {Allocation: "b", GPUs: 16, BorrowingLimit: -1}}}
}

func TestCohortRules(t *testing.T) {
	type step struct {
		enqueue  []Request
		cancel   []string // jobs that end before the pass
		granted  []string
		borrowed []string // of granted, those that start beyond their share
		reclaims []string // victims taken back (Preemption.Reclaim)
		victims  []string // every victim
		reason   map[string]string
	}
	job := func(name, alloc string, c Class) jobBuilder {
		return makeJob(name, "a").In(alloc).Class(c).GPUs(8)
	}
	for _, tc := range []struct {
		name  string
		pol   Policy
		steps []step
	}{{
		name: "an allocation borrows what the other leaves unused",
		pol:  cohortPolicy(-1),
		steps: []step{{
			enqueue:  []Request{job("a1", "a", Medium).Seq(1).Obj(), job("a2", "a", Medium).Seq(2).Obj(), job("a3", "a", Medium).Seq(3).Obj(), job("a4", "a", Medium).Seq(4).Obj()},
			granted:  []string{"a1", "a2", "a3", "a4"},
			borrowed: []string{"a3", "a4"},
		}},
	}, {
		name: "the borrowing limit caps what it borrows",
		pol:  cohortPolicy(8),
		steps: []step{{
			enqueue:  []Request{job("a1", "a", Medium).Seq(1).Obj(), job("a2", "a", Medium).Seq(2).Obj(), job("a3", "a", Medium).Seq(3).Obj(), job("a4", "a", Medium).Seq(4).Obj()},
			granted:  []string{"a1", "a2", "a3"},
			borrowed: []string{"a3"},
			reason:   map[string]string{"a4": "allocation a holds 24 GPUs, its cohort share of 16 and up to 8 borrowed (borrowing_limit); the job needs 8"},
		}},
	}, {
		name: "an allocation within its share takes back a borrowed job, whatever its class, the lower class first, and none of the lender's own",
		pol:  cohortPolicy(-1),
		steps: []step{{
			enqueue:  []Request{job("a1", "a", High).Seq(1).Obj(), job("a2", "a", High).Seq(2).Obj(), job("a3", "a", High).Seq(3).Obj(), job("a4", "a", Low).Seq(4).Obj()},
			granted:  []string{"a1", "a2", "a3", "a4"},
			borrowed: []string{"a3", "a4"},
		}, {
			enqueue:  []Request{job("b1", "b", Low).Seq(5).Obj()},
			reclaims: []string{"a4"},
			victims:  []string{"a4"},
		}, {
			enqueue:  []Request{job("b2", "b", Low).Seq(6).Obj()},
			reclaims: []string{"a3"},
			victims:  []string{"a3"},
		}},
	}, {
		name: "taking back comes before preempting a job of its own",
		pol:  cohortPolicy(-1),
		steps: []step{{
			enqueue:  []Request{job("a1", "a", Medium).Seq(1).Obj(), job("a2", "a", Medium).Seq(2).Obj(), job("a3", "a", Medium).Seq(3).Obj(), job("b1", "b", Low).Seq(4).Obj()},
			granted:  []string{"a1", "a2", "a3", "b1"},
			borrowed: []string{"a3"},
		}, {
			enqueue:  []Request{job("b2", "b", High).Seq(5).Obj()},
			reclaims: []string{"a3"},
			victims:  []string{"a3"},
		}},
	}, {
		name: "beyond its share a request takes nothing back and preempts no other allocation's job",
		pol:  cohortPolicy(-1),
		steps: []step{{
			enqueue: []Request{job("a1", "a", Low).Seq(1).Obj(), job("a2", "a", Low).Seq(2).Obj(), job("b1", "b", Low).Seq(3).Obj(), job("b2", "b", Low).Seq(4).Obj()},
			granted: []string{"a1", "a2", "b1", "b2"},
		}, {
			enqueue: []Request{job("b3", "b", High).Seq(5).Obj()},
			victims: []string{"b1"}, // its own lower class, as in a pool of its own
		}},
	}, {
		name: "a notebook does not borrow",
		pol:  cohortPolicy(-1),
		steps: []step{{
			enqueue: []Request{job("a1", "a", High).Seq(1).Obj(), job("a2", "a", High).Seq(2).Obj()},
			granted: []string{"a1", "a2"},
		}, {
			enqueue: []Request{job("n", "a", High).Notebook().Seq(3).Obj()},
			reason:  map[string]string{"n": "a notebook does not borrow beyond the share"},
		}},
	}, {
		name: "a job that ends gives its allocation's share back",
		pol:  cohortPolicy(0),
		steps: []step{{
			enqueue: []Request{job("a1", "a", Medium).Seq(1).Obj(), job("a2", "a", Medium).Seq(2).Obj(), job("a3", "a", Medium).Seq(3).Obj()},
			granted: []string{"a1", "a2"},
		}, {
			cancel:  []string{"a1"},
			granted: []string{"a3"},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, nodesOf("n", "a", 4, 8, 0, 0), tc.pol)
			for k, s := range tc.steps {
				for _, j := range s.cancel {
					p.Cancel(j)
				}
				mustEnqueue(t, p, s.enqueue...)
				d := sched(t, p, at(k*30))
				got := grantedJobs(d)
				slices.Sort(got)
				if want := s.granted; !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("step %d: grants %v, want %v", k, got, want)
				}
				var borrowed []string
				for _, g := range d.Grants {
					if g.Borrowed {
						borrowed = append(borrowed, g.Job)
					}
				}
				slices.Sort(borrowed)
				if !slices.Equal(borrowed, s.borrowed) && !(len(borrowed) == 0 && len(s.borrowed) == 0) {
					t.Fatalf("step %d: borrowed %v, want %v", k, borrowed, s.borrowed)
				}
				var reclaims []string
				for _, v := range d.Preemptions {
					if v.Reclaim {
						reclaims = append(reclaims, v.Victim)
						if !v.Loan || !strings.Contains(v.Reason, "taken back") {
							t.Fatalf("step %d: reclaim of %s: loan %v, reason %q", k, v.Victim, v.Loan, v.Reason)
						}
					}
				}
				if !slices.Equal(reclaims, s.reclaims) && !(len(reclaims) == 0 && len(s.reclaims) == 0) {
					t.Fatalf("step %d: reclaims %v, want %v", k, reclaims, s.reclaims)
				}
				if vs := victims(d); !slices.Equal(vs, s.victims) && !(len(vs) == 0 && len(s.victims) == 0) {
					t.Fatalf("step %d: victims %v, want %v", k, vs, s.victims)
				}
				for job, want := range s.reason {
					if wi, ok := p.Explain(job); !ok || !strings.Contains(wi.Reason, want) {
						t.Fatalf("step %d: %s's reason %q, want it to contain %q", k, job, wi.Reason, want)
					}
				}
			}
		})
	}
}

func TestCohortRefusesWhatHasNoShare(t *testing.T) {
	for _, tc := range []struct {
		pol Policy
		err string
	}{
		{Policy{Cohort: []CohortShare{{Allocation: "", GPUs: 8}}}, "cohort share 1: the allocation is empty"},
		{Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: 8}, {Allocation: "a", GPUs: 8}}}, "allocation a has two shares"},
		{Policy{Cohort: []CohortShare{{Allocation: "a", GPUs: -1}}}, "gpus must not be negative"},
	} {
		if _, err := NewPool(nodesOf("n", "a", 1, 8, 0, 0), tc.pol); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", tc.pol.Cohort, err, tc.err)
		}
	}
	p := mustPool(t, nodesOf("n", "a", 1, 8, 0, 0), cohortPolicy(-1))
	if err := p.Admit(makeJob("x", "a").In("c").GPUs(1).Obj()); err == nil || !strings.Contains(err.Error(), `allocation "c" has no share in this cohort: the shares are [a b]`) {
		t.Fatalf("admit: %v", err)
	}
}
