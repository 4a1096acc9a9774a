package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEveryPlacementPathOrdersNodesAlike pins every path that places workers
// to cmpNodeCandidate: for gangs of one to four workers, with and without
// releasing capacity counted, held to some nodes or not, and with capacity
// nominated to the request on some nodes (its own nodes, which come first),
// pickNodes must take the first nodes of the candidates sorted by that order,
// pickSome (an elastic gang that does not fit whole) the first it can, and
// the one-worker paths (pickOne, pickOwn, grantOne) the very first. A path
// that orders nodes its own way fails here.
func TestEveryPlacementPathOrdersNodesAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for round := range 300 {
		var nodes []Node
		var pol Policy
		racks := round%2 == 1 // half the rounds on nodes in racks of one to three
		if racks {
			pol.Topology = []string{"rack"}
		}
		for i := range 3 + rng.IntN(10) {
			gpus := []int{2, 4, 8}[rng.IntN(3)]
			nodes = append(nodes, Node{Name: fmt.Sprintf("n%d", i), Family: "a", GPUs: gpus, CPU: 8 * gpus * (1 + rng.IntN(2)), RAMGB: 64 * gpus})
			if racks {
				nodes[i].Topology = map[string]string{"rack": fmt.Sprint(rng.IntN(1 + len(nodes)/2))}
			}
		}
		p := mustPool(t, nodes, pol)
		for j := range rng.IntN(3 * len(nodes)) {
			r := makeJob(fmt.Sprintf("r%d-%d", round, j), "a").GPUs(1 + rng.IntN(4)).Obj()
			r.Seq = int64(j + 1)
			r.Demand.CPU = rng.IntN(3) * 4
			if p.Admit(r) == nil {
				mustEnqueue(t, p, r)
			}
		}
		p.Schedule(t0)
		for _, job := range p.RunningJobs() {
			if rng.IntN(4) == 0 {
				p.BeginRelease(job)
			}
		}
		for _, n := range nodes {
			if rng.IntN(8) == 0 {
				p.MarkNodeLost(n.Name)
			}
		}
		for range 8 {
			workers := 1 + rng.IntN(4)
			r := Request{Demand: Demand{Family: "a", GPUs: 1 + rng.IntN(8), CPU: rng.IntN(3) * 8}, Workers: workers}
			if rng.IntN(2) == 0 {
				for _, n := range nodes {
					if rng.IntN(3) == 0 {
						r.Nodes = append(r.Nodes, n.Name)
					}
				}
			}
			sh := p.shapes[p.shapeOf(&r)]
			owned := rng.IntN(2) == 0
			for _, withRel := range []bool{false, true} {
				sc := newScratch()
				sc.reset(p)
				sc.walkerStamp = 1
				sc.capWorkers = workers
				if owned { // capacity nominated to the request on some nodes
					for _, n := range p.fams[0].nodes {
						if rng.IntN(3) == 0 {
							sc.walkerOwns[n] = sc.walkerStamp
							sc.walkerNoms = append(sc.walkerNoms, int32(len(sc.nominations)))
							sc.nominations = append(sc.nominations, nomination{node: n})
						}
					}
				}
				var cands []nodeCandidate
				for _, n := range p.placeable(&sh) {
					if c, ok := sc.candOf(n, &sh, withRel); ok {
						cands = append(cands, c)
					}
				}
				slices.SortFunc(cands, cmpNodeCandidate)
				// The first k in that order; for a gang on racked nodes, the first k of one rack
				// where a rack holds them (topology.gang, TestGangPlacementByTopology).
				first := func(k int) []int32 {
					var out []int32
					var counts []int32
					var chosen []nodeCandidate
					for _, c := range p.topo.gang(cands, k, sh.level, sh.required, withRel, &counts, &chosen) {
						out = append(out, c.n)
					}
					slices.Sort(out)
					return out
				}
				where := fmt.Sprintf("round %d, %+v, own nodes %v, withRel=%v (candidates %+v)", round, sh, sc.walkerNoms, withRel, cands)
				var want []int32
				if len(cands) >= workers {
					want = first(workers)
				}
				if got := pick(sc, sc.pickNodes(p, &sh, withRel)); !slices.Equal(got, want) {
					t.Fatalf("%s: pickNodes chose %v, the order's first are %v", where, got, want)
				}
				if workers == 1 {
					if got := pick(sc, sc.pickOne(p, &sh, withRel)); !slices.Equal(got, want) {
						t.Fatalf("%s: pickOne chose %v, the order's first is %v", where, got, want)
					}
					if len(sc.walkerNoms) > 0 && len(cands) > 0 && cands[0].elsewhere == 0 {
						if got := sc.pickOwn(p, &sh, withRel); got != cands[0].n {
							t.Fatalf("%s: pickOwn chose %d, the order's first is %d", where, got, cands[0].n)
						}
					}
					if !withRel && len(sc.walkerNoms) == 0 && sh.allowed == nil {
						if got := pick(sc, sc.grantOne(&sh)); !slices.Equal(got, want) {
							t.Fatalf("%s: grantOne chose %v, the order's first is %v", where, got, want)
						}
					}
				}
				if workers > 1 && !withRel {
					el := sh
					el.minWorkers = 1
					want = nil
					if k := min(len(cands), workers-1); k >= 1 {
						want = first(k)
					}
					if got := pick(sc, sc.pickSome(p, &el)); !slices.Equal(got, want) {
						t.Fatalf("%s: pickSome chose %v, the order's first are %v", where, got, want)
					}
				}
			}
		}
	}
}

// pick is the scratch's pick after a placement that reported ok, or nil.
func pick(sc *scratch, ok bool) []int32 {
	if !ok {
		return nil
	}
	return slices.Clone(sc.pick)
}
