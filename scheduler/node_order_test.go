package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOneNodeOrder pins the three places that choose a node for a worker to
// the one documented order, cmpNodeCandidate: pickOne (the one-worker hot
// path, which inlines the comparison) and grantOne (its shortcut over the
// free-slot buckets, when nothing is nominated and releasing capacity does
// not count) must pick the first node of the candidates sorted by it. Random
// pools of mixed node sizes, partly filled by jobs of every size, some
// releasing, some nodes lost. Half the shapes are held to some nodes
// (Request.Nodes): the candidates are then those nodes alone, and pickNodes
// (which sends them to pickOne, not grantOne) must pick the first of them.
func TestOneNodeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 300 {
		var nodes []Node
		for i := range 3 + rng.IntN(10) {
			gpus := []int{2, 4, 8}[rng.IntN(3)]
			nodes = append(nodes, Node{Name: fmt.Sprintf("n%d", i), Family: "a", GPUs: gpus, CPU: 8 * gpus * (1 + rng.IntN(2)), RAMGB: 64 * gpus})
		}
		p := mustPool(t, nodes, Policy{})
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
				p.BeginRelease(job) // releasing: counted only with withRel
			}
		}
		for _, n := range nodes {
			if rng.IntN(8) == 0 {
				p.MarkNodeLost(n.Name)
			}
		}
		for range 8 {
			sh := shape{fam: 0, gpu: 1 + rng.IntN(8), cpu: rng.IntN(3) * 8, workers: 1}
			var allowed []string
			if rng.IntN(2) == 0 {
				for _, n := range nodes {
					if rng.IntN(3) == 0 {
						allowed = append(allowed, n.Name)
					}
				}
			}
			if len(allowed) > 0 {
				r := Request{Demand: Demand{Family: "a", GPUs: sh.gpu, CPU: sh.cpu}, Workers: 1, Nodes: allowed}
				sh = p.shapes[p.shapeOf(&r)]
			}
			for _, withRel := range []bool{false, true} {
				sc := newScratch()
				sc.reset(p)
				sc.walkerStamp = 1 // nothing nominated to the request
				var cands []nodeCandidate
				for _, n := range p.fams[0].live {
					if len(allowed) > 0 && !slices.Contains(allowed, p.nodes[n].Name) {
						continue
					}
					if c, ok := sc.candOf(n, &sh, withRel); ok {
						cands = append(cands, c)
					}
				}
				slices.SortFunc(cands, cmpNodeCandidate)
				want := int32(-1)
				if len(cands) > 0 {
					want = cands[0].n
				}
				got := int32(-1)
				if sc.pickOne(p, &sh, withRel) {
					got = sc.pick[0]
				}
				if got != want {
					t.Fatalf("round %d, %+v withRel=%v: pickOne chose node %d, the order's first is %d (candidates %+v)", round, sh, withRel, got, want, cands)
				}
				got = -1
				if sc.pickNodes(p, &sh, withRel) {
					got = sc.pick[0]
				}
				if got != want {
					t.Fatalf("round %d, %+v allowed %v withRel=%v: pickNodes chose node %d, the order's first is %d (candidates %+v)", round, sh, allowed, withRel, got, want, cands)
				}
				if withRel || len(allowed) > 0 {
					continue // grantOne is for unconstrained shapes only
				}
				got = -1
				if sc.grantOne(p, &sh) {
					got = sc.pick[0]
				}
				if got != want {
					t.Fatalf("round %d, %+v: grantOne chose node %d, the order's first is %d (candidates %+v)", round, sh, got, want, cands)
				}
			}
		}
	}
}
