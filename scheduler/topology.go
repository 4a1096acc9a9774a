package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// topology is Policy.Topology over the pool's nodes: for each level (coarsest first), each
// node's domain as a small index, so that a placement counts candidates per domain in a slice.
type topology struct {
	levels  []string
	domain  [][]int32 // domain[l][n]: node n's domain at level l
	domains []int     // domains[l]: how many domains level l has
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
		// Sorted keys: with two stray levels the error names the same one on every replay.
		//workflowcheck:ignore
		for _, l := range slices.Sorted(maps.Keys(n.Topology)) {
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
	type domainKey struct {
		parent int32 // the domain one level up (-1 at the coarsest)
		name   string
	}
	for l, level := range levels {
		idx := map[domainKey]int32{}
		t.domain[l] = make([]int32, len(nodes))
		for i, n := range nodes {
			name := n.Topology[level]
			if name == "" {
				return topology{}, fmt.Errorf("node %q has no topology.%s (every node names its domain at each of the levels %s)", n.Name, level, strings.Join(levels, ", "))
			}
			// A domain is named within its parent.
			key := domainKey{parent: -1, name: name}
			if l > 0 {
				key.parent = t.domain[l-1][i]
			}
			d, ok := idx[key]
			if !ok {
				d = int32(len(idx))
				idx[key] = d
			}
			t.domain[l][i] = d
		}
		t.domains[l] = len(idx)
	}
	return t, nil
}

// level is the index of the named level, or -1.
func (t *topology) level(name string) int { return slices.Index(t.levels, name) }

// checkGang checks a gang topology (a request's, or the policy's default) against the levels;
// field names it in the error.
func (t *topology) checkGang(g GangTopology, field string) error {
	switch {
	case g.Level == "" && g.Required:
		return fmt.Errorf("%s: a required topology names its level (one of %s)", field, t.levelsText())
	case g.Level == "":
		return nil
	case len(t.levels) == 0:
		return fmt.Errorf("%s: %q names a topology level, but the allocation has no topology", field, g.Level)
	case t.level(g.Level) < 0:
		return fmt.Errorf("%s: %q is not one of the allocation's topology levels (%s)", field, g.Level, t.levelsText())
	}
	return nil
}

func (t *topology) levelsText() string {
	if len(t.levels) == 0 {
		return "none: the allocation has no topology"
	}
	return strings.Join(t.levels, ", ")
}

// gangLevel is the topology level r's workers should share, and whether they must: r's own
// Topology, else the policy's GangTopology, else the finest level preferred; -1 for a single
// worker or a pool without a topology. r passed Admit.
func (p *Pool) gangLevel(r *Request) (level int8, required bool) {
	if r.Workers < 2 || len(p.topo.levels) == 0 {
		return -1, false
	}
	g := r.Topology
	if g == (GangTopology{}) {
		g = p.policy.GangTopology
	}
	if g.Level == "" {
		return int8(len(p.topo.levels) - 1), false
	}
	return int8(p.topo.level(g.Level)), g.Required
}

// gang chooses k of the candidates, sorted in cmpNodeCandidate order, for the workers of a gang
// that should share a domain of the given level (-1: none): the first k of the domain of that
// level that holds k of them and whose k-th candidate comes earliest in that order; if no domain
// of that level holds k, the same one level up, and so on; else the first k. So a gang goes where
// it would without a topology whenever that keeps it in one domain, and otherwise stays as tight
// as the order allows. The preferred rule never turns a start into a wait nor leaves capacity
// preempted for the gang unused: a gang with capacity nominated to it (its victims', chosen as
// without a topology) takes the first k, and, counting releasing capacity (withRel), a candidate
// that needs some competes only if the k-th does. A required level is tried alone, and no domain
// of it holding k gives nil: the gang does not fit. counts and chosen are scratch space; the
// result may be either cands or chosen.
func (t *topology) gang(cands []nodeCandidate, k int, level int8, required, withRel bool, counts *[]int32, chosen *[]nodeCandidate) []nodeCandidate {
	if k < 2 || level < 0 || (!required && cands[0].elsewhere == 0) {
		return cands[:k]
	}
	if withRel && cands[k-1].gpuFit == 0 {
		// Sorted by GPUs taken from releasing capacity: those that take none are a prefix.
		m := k
		for m < len(cands) && cands[m].gpuFit == 0 {
			m++
		}
		if out := t.inOneDomain(cands[:m], k, level, required, counts, chosen); out != nil || !required {
			if out == nil {
				return cands[:k]
			}
			return out
		}
	}
	if out := t.inOneDomain(cands, k, level, required, counts, chosen); out != nil {
		return out
	}
	if required {
		return nil
	}
	return cands[:k]
}

// inOneDomain is gang's search: the first k candidates of the domain whose k-th comes earliest,
// at the level given, then (unless required) at each level up; nil if none holds k.
func (t *topology) inOneDomain(cands []nodeCandidate, k int, level int8, required bool, counts *[]int32, chosen *[]nodeCandidate) []nodeCandidate {
	for l := int(level); l >= 0; l-- {
		*counts = grow(*counts, t.domains[l])
		c := *counts
		clear(c)
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
			if required {
				return nil
			}
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
	return nil
}
