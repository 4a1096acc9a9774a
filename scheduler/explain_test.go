package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWaitingAgreesWithExplain(t *testing.T) {
	p, err := NewPool([]Node{{Name: "n1", Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}}, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := ParseInstanceType("a100.2gpu")
	for i, job := range []string{"a", "b", "c"} {
		if err := p.Enqueue(Request{Job: job, Attempt: i + 1, Class: Medium, Demand: d, Workers: 1, Seq: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Schedule(time.Unix(0, 0)) // a runs; b and c wait
	for _, job := range []string{"a", "b", "c", "nobody"} {
		w, okW := p.Waiting(job)
		e, okE := p.Explain(job)
		if okW != okE || (okW && (w.Attempt != e.Attempt || w.Seq != e.Seq)) {
			t.Errorf("%s: Waiting = %+v %v, Explain = attempt %d seq %d %v", job, w.Attempt, okW, e.Attempt, e.Seq, okE)
		}
	}
}

// With the default policy (no reservations for high requests) a request that can neither start
// nor preempt is told which jobs it may not preempt stand in its way on the node where the
// fewest do: n-2, where a notebook alone is in the way (not the low job there, which it could
// preempt), not n-1 with two high jobs.
func TestExplainNamesTheJobsANoFitRequestWaitsFor(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{})
	on := func(r Request, node string) Request { r.Nodes = []string{node}; return r }
	for _, r := range []Request{
		on(bfJob("high-a", High, 1, time.Hour, 1), "n-1"),
		on(bfJob("high-b", High, 1, 3*time.Hour, 2), "n-1"),
		on(bfJob("low-a", Low, 6, 0, 3), "n-1"),
		on(makeJob("nb", "a").Class(High).Notebook().GPUs(1).Seq(4).Obj(), "n-2"),
		on(bfJob("low-b", Low, 7, 0, 5), "n-2"),
	} {
		r.RunEstimated = r.RunLimit > 0
		mustEnqueue(t, p, r)
	}
	sched(t, p, at(0))
	mustEnqueue(t, p, bfJob("big", High, 8, 0, 6))
	sched(t, p, at(120))
	wi, ok := p.Explain("big")
	if !ok {
		t.Fatal("big is not waiting")
	}
	want := "; on n-2, where the fewest jobs it may not preempt stand in its way, it waits for nb (high notebook, running 2h, no time limit) to end"
	if !strings.HasSuffix(wi.Reason, want) || !slices.Equal(wi.WaitingFor, []string{"nb"}) {
		t.Fatalf("want the reason to end %q and big waiting for nb, got %q, waiting for %v", want, wi.Reason, wi.WaitingFor)
	}
}
