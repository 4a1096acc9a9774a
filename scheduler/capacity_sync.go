package scheduler

// A pass works on copies of the nodes' capacity (scratch.free, rel and victim), with per-family
// summaries (freeAtLeast, freeOrRelAtLeast), the free-GPU buckets and the count of nodes with
// releasing capacity in sight. Rebuilding all of that costs every pass time in proportion to the
// node count, even when an event changed one node. So the copies are kept from pass to pass:
// every write to a node's copy (setCapacity, the victim search) and every event that changes a node
// (a grant, a release, a preemption, a lost node) marks the node changed, and the next pass
// restores only the changed nodes to the pool's values. The tests check after every pass that
// the result equals a full rebuild (checkSyncedCapacity).

// markChanged records that node n's copy differs, or may differ, from the pool.
func (sc *scratch) markChanged(n int32) {
	if sc.synced && !sc.changedMark[n] {
		sc.changedMark[n] = true
		sc.changed = append(sc.changed, n)
	}
}

// nodeChanged records an event that changed node n's capacity or its lost flag.
func (p *Pool) nodeChanged(n int32) { p.sc.markChanged(n) }

// restoreChanged brings the copies of the changed nodes back to the pool's values.
func (sc *scratch) restoreChanged(p *Pool) {
	for _, n := range sc.changed {
		sc.restoreNode(p, n)
		sc.changedMark[n] = false
	}
	sc.changed = sc.changed[:0]
}

// restoreNode sets node n's copy to the pool's capacity (none on a lost node), keeping the
// summaries and buckets: a lost node leaves them, a node that answers again rejoins them.
func (sc *scratch) restoreNode(p *Pool, n int32) {
	nd := &p.nodes[n]
	f := nd.fam
	sc.victim[n] = resources{}
	if nd.lost {
		if sc.slotOf[n] >= 0 {
			countNode(sc.freeAtLeast[f], sc.free[n].gpu, -1)
			countNode(sc.freeOrRelAtLeast[f], sc.free[n].gpu+sc.rel[n].gpu, -1)
			sc.unlink(f, n, sc.free[n].gpu)
			sc.slotOf[n] = -1
		}
		sc.free[n], sc.rel[n] = resources{}, resources{}
		sc.noteRel(f, n)
		return
	}
	if sc.slotOf[n] < 0 { // it answers again: it rejoins at 0 GPUs, setCapacity moves it
		sc.free[n].gpu, sc.rel[n].gpu = 0, 0
		countNode(sc.freeAtLeast[f], 0, +1)
		countNode(sc.freeOrRelAtLeast[f], 0, +1)
		sc.link(f, n, 0)
	}
	sc.setCapacity(p, n, nd.free, nd.rel)
}

// countNode adds delta to the "at least g" counts of a node with v GPUs: g = 0..v.
func countNode(c []int32, v int, delta int32) {
	for g := 0; g <= v; g++ {
		c[g] += delta
	}
}

// noteRel keeps relNodes: node n of family f has releasing capacity in sight or not.
func (sc *scratch) noteRel(f, n int32) {
	has := sc.rel[n].positive()
	if has != sc.hasRel[n] {
		sc.hasRel[n] = has
		if has {
			sc.relNodes[f]++
		} else {
			sc.relNodes[f]--
		}
	}
}

// resetRelNodes counts, from the copies, the nodes with releasing capacity in sight.
func (sc *scratch) resetRelNodes(p *Pool) {
	sc.hasRel = grow(sc.hasRel, len(p.nodes))
	sc.relNodes = grow(sc.relNodes, len(p.fams))
	clear(sc.hasRel)
	clear(sc.relNodes)
	for i := range p.nodes {
		sc.noteRel(p.nodes[i].fam, int32(i))
	}
}
