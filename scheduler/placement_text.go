package scheduler

import (
	"slices"
	"strconv"
	"strings"
)

// PlacementText says where a job's workers run, in worker order, for people:
// node-1[0-7] node-2[0-3,6]. The CLI, the REST API and the Web UI details
// all write placements this way.
func PlacementText(p []WorkerPlacement) string {
	if len(p) == 0 {
		return "-"
	}
	ps := slices.Clone(p)
	slices.SortStableFunc(ps, func(a, b WorkerPlacement) int { return a.Worker - b.Worker })
	parts := make([]string, len(ps))
	for i, w := range ps {
		parts[i] = w.Node + GPUListText(w.GPUs)
	}
	return strings.Join(parts, " ")
}

// GPUListText writes GPU indices compactly: [0-3,6]; none is "".
func GPUListText(gpus []int) string {
	if len(gpus) == 0 {
		return ""
	}
	g := slices.Sorted(slices.Values(gpus))
	var parts []string
	for i := 0; i < len(g); {
		j := i
		for j+1 < len(g) && g[j+1] == g[j]+1 {
			j++
		}
		switch {
		case j > i+1:
			parts = append(parts, strconv.Itoa(g[i])+"-"+strconv.Itoa(g[j]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(g[i]), strconv.Itoa(g[j]))
		default:
			parts = append(parts, strconv.Itoa(g[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, ",") + "]"
}
