package scheduler

import (
	"fmt"
	"slices"
	"strings"
)

// topology is Policy.Topology over the pool's nodes: for each level (coarsest first), each
// node's domain as a small index, so that a placement counts candidates per domain in a slice.
type topology struct {
	levels  []string
	domain  [][]int32 // domain[l][n]: node n's domain at level l
	domains []int     // domains[l]: how many domains level l has
	names   [][]string
}

// newTopology indexes the nodes' domains. Every node names a domain at every level, and no
// level the policy does not list: a node left out of the topology would quietly split gangs.
func newTopology(levels []string, nodes []Node) (topology, error) {
	t := topology{levels: levels}
	for i, l := range levels {
		if l == "" {
			return topology{}, fmt.Errorf("topology level %d has no name", i+1)
		}
		if slices.Index(levels, l) != i {
			return topology{}, fmt.Errorf("topology level %q is listed twice", l)
		}
	}
	for _, n := range nodes {
		for l := range n.Topology {
			if !slices.Contains(levels, l) {
				if len(levels) == 0 {
					return topology{}, fmt.Errorf("node %q: topology.%s is set, but the allocation has no topology levels", n.Name, l)
				}
				return topology{}, fmt.Errorf("node %q: topology.%s is not one of the allocation's topology levels (%s)", n.Name, l, strings.Join(levels, ", "))
			}
		}
	}
	t.domain = make([][]int32, len(levels))
	t.domains = make([]int, len(levels))
	t.names = make([][]string, len(levels))
	for l, level := range levels {
		idx := map[string]int32{}
		t.domain[l] = make([]int32, len(nodes))
		for i, n := range nodes {
			name := n.Topology[level]
			if name == "" {
				return topology{}, fmt.Errorf("node %q has no topology.%s (every node names its domain at each of the levels %s)", n.Name, level, strings.Join(levels, ", "))
			}
			// A domain is named within its parent: the key carries every coarser level.
			key := name
			if l > 0 {
				key = t.names[l-1][t.domain[l-1][i]] + "/" + name
			}
			d, ok := idx[key]
			if !ok {
				d = int32(len(t.names[l]))
				idx[key] = d
				t.names[l] = append(t.names[l], key)
			}
			t.domain[l][i] = d
		}
		t.domains[l] = len(t.names[l])
	}
	return t, nil
}

// gang chooses k of the candidates, sorted in cmpNodeCandidate order, for the workers of one
// gang: the first k of the domain of the finest level that holds k of them and whose k-th
// candidate comes earliest in that order; if no domain of that level holds k, the same one level
// up; else the first k. So a gang goes where it would without a topology whenever that keeps it in
// one domain, and otherwise stays as tight as the order allows. counts and chosen are scratch
// space; the result may be either cands or chosen.
func (t *topology) gang(cands []nodeCandidate, k int, counts *[]int32, chosen *[]nodeCandidate) []nodeCandidate {
	if k < 2 || len(t.levels) == 0 {
		return cands[:k]
	}
	for l := len(t.levels) - 1; l >= 0; l-- {
		c := growZero(counts, t.domains[l])
		dom := t.domain[l]
		in := int32(-1)
		for _, cand := range cands {
			d := dom[cand.n]
			if c[d]++; c[d] == int32(k) {
				in = d
				break
			}
		}
		if in < 0 {
			continue
		}
		out := (*chosen)[:0]
		for _, cand := range cands {
			if dom[cand.n] == in {
				if out = append(out, cand); len(out) == k {
					break
				}
			}
		}
		*chosen = out
		return out
	}
	return cands[:k]
}

func growZero(s *[]int32, n int) []int32 {
	if cap(*s) < n {
		*s = make([]int32, n)
	}
	*s = (*s)[:n]
	clear(*s)
	return *s
}
