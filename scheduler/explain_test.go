package scheduler

import (
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
