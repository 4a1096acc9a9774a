package simulate

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// The synthesised topology's levels, coarsest first.
const (
	LevelBlock = "block"
	LevelRack  = "rack"
)

// Rack puts the nodes in racks of perRack nodes and the racks in blocks of perBlock, family by
// family in node order (a rack holds one kind of machine, as racks of GPU servers do), and gives
// the policies that topology (Workload.Topology) unless they turn it off (knob topology=off).
func (w *Workload) Rack(perRack, perBlock int) error {
	if perRack < 1 || perBlock < 1 {
		return fmt.Errorf("racks need at least one node and blocks at least one rack, got %d and %d", perRack, perBlock)
	}
	seen := map[string]int{} // nodes placed so far per family
	racks := 0
	rackOf := map[string]int{} // family -> its current rack's number
	for i := range w.Nodes {
		n := &w.Nodes[i]
		k := seen[n.Family]
		seen[n.Family]++
		if k%perRack == 0 {
			racks++
			rackOf[n.Family] = racks
		}
		r := rackOf[n.Family]
		n.Topology = map[string]string{
			LevelBlock: fmt.Sprintf("b%d", (r-1)/perBlock+1),
			LevelRack:  fmt.Sprintf("r%d", r),
		}
	}
	w.Topology = []string{LevelBlock, LevelRack}
	w.Notes = append(w.Notes, fmt.Sprintf("nodes put in %d racks of up to %d nodes of one family, in blocks of %d racks", racks, perRack, perBlock))
	return nil
}

// Gangs turns a share of the single-worker jobs that fill a whole node of their family into
// gangs of 2 to 4 workers (a hash of seed and the job id picks the jobs and the size, at most the
// nodes of the family that hold one worker), each worker with the job's demand, running for the
// job's runtime ÷ workers: the same GPU-hours, spread over the gang.
func (w *Workload) Gangs(share float64, seed uint64) error {
	if share < 0 || share > 1 {
		return fmt.Errorf("the share of jobs made gangs must be between 0 and 1, got %g", share)
	}
	made := 0
	for i := range w.Jobs {
		j := &w.Jobs[i]
		if j.Workers != 1 || j.Demand.GPUs == 0 || len(j.Nodes) > 0 {
			continue
		}
		fits, full := 0, false
		for _, n := range w.Nodes {
			if n.Family == j.Demand.Family && n.GPUs >= j.Demand.GPUs && n.CPU >= j.Demand.CPU && n.RAMGB >= j.Demand.RAMGB {
				fits++
				full = full || n.GPUs == j.Demand.GPUs
			}
		}
		h := idHash(seed, j.ID)
		if !full || float64(h%1_000_000)/1_000_000 >= share {
			continue
		}
		k := min(2+int(h/1_000_000%3), fits)
		if k < 2 {
			continue
		}
		j.Workers = k
		j.Runtime = (j.Runtime + time.Duration(k) - 1) / time.Duration(k)
		made++
	}
	w.Notes = append(w.Notes, fmt.Sprintf("%d whole-node jobs made gangs of 2 to 4 workers (share %g, seed %d), each running for its runtime ÷ workers", made, share, seed))
	return nil
}

// GangStats are the figures of the jobs of two or more workers: where their first attempts were
// placed and how long they waited.
type GangStats struct {
	Count int `json:"count"`
	// Started counts those whose first attempt started; OneRack and OneBlock those placed
	// within one rack or one block (Workload.Topology; 0 without one).
	Started  int   `json:"started"`
	OneRack  int   `json:"one_rack"`
	OneBlock int   `json:"one_block"`
	Wait     Waits `json:"wait"`
}

// gangStats counts the gangs of a finished run.
func (s *sim) gangStats() *GangStats {
	st := &GangStats{}
	var waits []time.Duration
	for i := range s.w.Jobs {
		j, js := &s.w.Jobs[i], &s.jobs[i]
		if j.Workers < 2 {
			continue
		}
		st.Count++
		if js.firstAt < 0 {
			continue
		}
		st.Started++
		arrived := j.Arrival
		if s.opt.Burst {
			arrived = 0
		}
		waits = append(waits, js.firstAt-arrived)
		if len(s.w.Topology) == 0 {
			continue
		}
		if s.within(js.firstNodes, LevelRack) {
			st.OneRack++
		}
		if s.within(js.firstNodes, LevelBlock) {
			st.OneBlock++
		}
	}
	if st.Count == 0 {
		return nil
	}
	st.Wait = waitsOf(waits)
	return st
}

// within reports whether the nodes share one domain of level.
func (s *sim) within(nodes []string, level string) bool {
	var domains []string
	for _, name := range nodes {
		k := slices.IndexFunc(s.w.Nodes, func(n scheduler.Node) bool { return n.Name == name })
		if d := s.w.Nodes[k].Topology[level]; !slices.Contains(domains, d) {
			domains = append(domains, d)
		}
	}
	return len(domains) == 1
}

// withoutTopology is a copy of nodes that name no domain.
func withoutTopology(nodes []scheduler.Node) []scheduler.Node {
	out := slices.Clone(nodes)
	for i := range out {
		out[i].Topology = nil
	}
	return out
}
