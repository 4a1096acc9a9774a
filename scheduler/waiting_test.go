package scheduler

import (
	"slices"
	"testing"
)

func TestWaitingAfterWalksTheQueueInSlices(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a100", 1, 2, 0, 0), Policy{})
	// Launch order (class, then seq) differs from name order on purpose.
	mustEnqueue(t, p, makeJob("c", "a100").Class(High).Seq(3).Obj(), makeJob("a", "a100").Class(Low).Seq(1).Obj(), makeJob("d", "a100").Seq(4).Obj(), makeJob("b", "a100").Seq(2).Obj())
	mustEnqueue(t, p, Request{Job: "b", Attempt: 2, Kind: KindJob, Class: Medium, Demand: Demand{Family: "a100", GPUs: 1}, Workers: 1, Seq: 2, SubmittedAt: t0})
	names := func(ws []WaitingAttempt) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Job)
		}
		return out
	}
	for _, tc := range []struct {
		after string
		limit int
		want  []string
	}{
		{"", 2, []string{"a", "b"}},
		{"b", 2, []string{"c", "d"}},
		{"d", 2, nil},
		{"", 10, []string{"a", "b", "c", "d"}},
		{"", 0, nil},
		{"", -1, nil},
	} {
		if got := names(p.WaitingAfter(tc.after, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("WaitingAfter(%q, %d) = %v, want %v", tc.after, tc.limit, got, tc.want)
		}
	}
	if w := p.WaitingAfter("a", 1); len(w) != 1 || w[0].Attempt != 2 {
		t.Errorf("b waits with attempt 2, got %+v", w)
	}
}
