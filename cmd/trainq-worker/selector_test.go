package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/scheduler"
)

func selNode(name string) scheduler.Node {
	return scheduler.Node{Name: name, Family: "a100", GPUs: 2, CPU: 16, RAMGB: 128}
}

func stepNames(steps []handoverStep) map[string][]string {
	out := map[string][]string{}
	for _, s := range steps {
		names := []string{}
		for _, n := range s.nodes {
			names = append(names, n.Name)
		}
		out[s.name] = names
	}
	return out
}

// TestHandoverMovesANodeOnlyOnceItsOldAllocatorLetItGo: x is relabelled
// from allocation a to allocation b. b gets x only once a's allocator took
// the config without it; while a refuses (a job holds x), the drop is asked
// again and b waits: x is never in two allocators at once.
func TestHandoverMovesANodeOnlyOnceItsOldAllocatorLetItGo(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := config.AllocationRef{Region: "K", Allocation: &config.Allocation{Name: "a"}}
	b := config.AllocationRef{Region: "K", Allocation: &config.Allocation{Name: "b"}}
	h := &handover{current: map[string][]scheduler.Node{"K/a": {selNode("x"), selNode("y")}, "K/b": nil},
		owner: map[string]string{"x": "K/a", "y": "K/a"}, waiting: map[string]string{}}
	relabelled := map[config.AllocationRef][]scheduler.Node{a: {selNode("y")}, b: {selNode("x")}}

	steps := h.next(relabelled, logger)
	assert.Equal(t, map[string][]string{"K/a": {"y"}}, stepNames(steps), "a drops x first; b does not get it yet")

	// a's allocator refuses: nothing is taken, and the next round asks again.
	steps = h.next(relabelled, logger)
	require.Equal(t, map[string][]string{"K/a": {"y"}}, stepNames(steps), "the refused drop is asked again")
	assert.Equal(t, "K/a", h.owner["x"])

	h.taken(steps[0])
	steps = h.next(relabelled, logger)
	assert.Equal(t, map[string][]string{"K/b": {"x"}}, stepNames(steps), "once a let x go, b gets it")
	h.taken(steps[0])
	assert.Empty(t, h.next(relabelled, logger), "nothing left to do")
	assert.Equal(t, "K/b", h.owner["x"])
	assert.Equal(t, "K/a", h.owner["y"])
}
