package scheduler

import (
	"slices"
	"strings"
	"testing"
)

// TestDryRun: a dry run says where a request would start, or whom it would preempt, or why it
// would wait, and leaves the pool as it was.
func TestDryRun(t *testing.T) {
	p := poolWith(t, nodesOf("n", "a", 2, 8, 0, 0), Policy{},
		running("low").Class(Low).GPUs(8).On("n-1"), running("hi").Class(High).GPUs(4).On("n-2"))
	before := mustJSON(t, p.Snapshot())
	for _, tc := range []struct {
		name     string
		req      Request
		start    []string // its nodes, if it starts
		preempts []string
		reason   string
	}{
		{"it starts on free capacity", makeJob("x", "a").GPUs(4).Seq(9).Obj(), []string{"n-2"}, nil, ""},
		{"it preempts a lower class", makeJob("x", "a").Class(High).GPUs(8).Seq(9).Obj(), nil, []string{"low"}, "waiting for"},
		{"it waits", makeJob("x", "a").Class(Low).GPUs(8).Seq(9).Obj(), nil, nil, "not enough capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.DryRun(tc.req, at(30))
			if err != nil {
				t.Fatal(err)
			}
			var nodes []string
			for _, w := range d.Placement {
				nodes = append(nodes, w.Node)
			}
			if d.Start != (tc.start != nil) || !slices.Equal(nodes, tc.start) || !slices.Equal(d.Preempts, tc.preempts) {
				t.Fatalf("dry run %s", mustJSON(t, d))
			}
			if tc.reason != "" && (d.Waiting == nil || !strings.Contains(d.Waiting.Reason, tc.reason)) {
				t.Fatalf("dry run %s, want a reason with %q", mustJSON(t, d), tc.reason)
			}
			if after := mustJSON(t, p.Snapshot()); after != before {
				t.Fatalf("the dry run changed the pool:\n%s\n%s", before, after)
			}
		})
	}
	if _, err := p.DryRun(makeJob("low", "a").Obj(), at(30)); err == nil || !strings.Contains(err.Error(), "already in the pool") {
		t.Fatalf("a job already running: %v", err)
	}
	if _, err := p.DryRun(makeJob("y", "a").GPUs(16).Obj(), at(30)); err == nil {
		t.Fatal("a request that can never fit was answered")
	}
}
