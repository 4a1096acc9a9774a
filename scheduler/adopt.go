package scheduler

import (
	"fmt"
	"math/bits"
	"time"
)

// Adoption is a job that already holds capacity, as the job itself reports it: an allocator that
// lost its state rebuilds the pool from these (see Pool.Adopt).
type Adoption struct {
	Request   Request           `json:"request"`
	Placement []WorkerPlacement `json:"placement"` // one per worker, as in its Grant
	StartedAt time.Time         `json:"started_at"`
	Releasing bool              `json:"releasing,omitempty"`
	Released  []int             `json:"released,omitempty"` // workers already stopped; they hold nothing
}

// Adopt records a job that already holds capacity (running, or releasing with some workers
// already released) exactly as if Schedule had granted it a.Placement at a.StartedAt and, if it
// is releasing, BeginRelease and a Release of each of a.Released had followed. Released workers
// imply releasing, as Release does. Released workers hold nothing: if every worker is released,
// Adopt records nothing and returns nil.
//
// The job may also have a waiting request, but only of a newer attempt: the adopted attempt is
// then its previous attempt, and the waiting one waits for it to release its capacity. A node may
// be lost: the job holds capacity on it all the same, and the node stays lost.
//
// The request's allowed nodes (Request.Nodes) are kept but not checked, neither against the pool
// nor against the placement: the job holds that capacity, whatever it asked for.
//
// Adopt fails, changing nothing, with a plain sentence if the request does not pass Admit (but
// for its allowed nodes), if the pool already holds capacity for the job, or if the placement is
// not one this pool could have granted: its worker count is not Request.Workers, its workers are
// not 0..Workers-1, a node is unknown, of another family or used by two workers, a worker's GPU
// count is not the per-worker demand, or a GPU index does not exist on its node. It also fails
// rather than let anything be held twice: if a GPU, or the CPU cores or RAM a worker needs, are
// already held by another job.
func (p *Pool) Adopt(a Adoption) error {
	r := normalize(a.Request)
	if err := p.admitAnywhere(r); err != nil { // (its allowed nodes bind a waiting request only)
		return fmt.Errorf("cannot adopt job %q: %w", r.Job, err)
	}
	if err := p.admitAllocation(&r); err != nil {
		return fmt.Errorf("cannot adopt job %q: %w", r.Job, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("cannot adopt job %q attempt %d: %s", r.Job, r.Attempt, fmt.Sprintf(format, args...))
	}
	if rj := p.running[r.Job]; rj != nil {
		return fail("the pool already holds capacity for its attempt %d", rj.r.Attempt)
	}
	if w := p.waitIdx[r.Job]; w != nil && w.r.Attempt <= r.Attempt {
		return fail("its attempt %d is waiting, and only an older attempt may hold capacity while a newer one waits", w.r.Attempt)
	}
	released, nReleased, err := releasedWorkers(r.Workers, a.Released)
	if err != nil {
		return fail("%s", err)
	}
	nodes, gpus, err := p.adoptedPlacement(&r, a.Placement)
	if err != nil {
		return fail("%s", err)
	}
	if nReleased == r.Workers {
		return nil
	}
	if err := p.checkUnheld(&r.Demand, nodes, gpus, released); err != nil {
		return fail("%s", err)
	}

	rj := &runJob{r: r, ws: p.workspaceOf(r.Workspace), user: p.userOf(r.Workspace, r.User), fam: p.famIdx[r.Demand.Family], startedAt: normTime(a.StartedAt), nodes: nodes, gpus: gpus,
		released: released, nReleased: nReleased, preemptions: r.Preemptions}
	for w, n := range nodes {
		if released[w] {
			continue
		}
		nd := &p.nodes[n]
		p.nodeChanged(n)
		nd.used |= gpus[w]
		nd.free = nd.free.sub(demandOf(&r.Demand))
	}
	p.running[r.Job] = rj
	p.place(rj)
	p.touch()
	if a.Releasing || nReleased > 0 {
		p.beginRelease(rj)
	}
	if w := p.waitIdx[r.Job]; w != nil {
		p.waitKeys[p.waitPos(w)].prev = true
	}
	p.releaseMovers() // (a mover whose next attempt it is runs again)
	return nil
}

// releasedWorkers turns a list of released workers into a per-worker flag, rejecting bad indices.
func releasedWorkers(workers int, list []int) ([]bool, int, error) {
	released := make([]bool, workers)
	for _, w := range list {
		if w < 0 || w >= workers {
			return nil, 0, fmt.Errorf("released worker %d does not exist (the job has workers 0 to %d)", w, workers-1)
		}
		if released[w] {
			return nil, 0, fmt.Errorf("worker %d is listed as released twice", w)
		}
		released[w] = true
	}
	return released, len(list), nil
}

// adoptedPlacement checks that pl is a placement this pool could have granted r, and returns its
// nodes and GPU masks per worker.
func (p *Pool) adoptedPlacement(r *Request, pl []WorkerPlacement) ([]int32, []uint64, error) {
	if len(pl) != r.Workers {
		return nil, nil, fmt.Errorf("its placement has %d %s but the job has %d",
			len(pl), plural(len(pl), "worker", "workers"), r.Workers)
	}
	nodes := make([]int32, r.Workers)
	gpus := make([]uint64, r.Workers)
	placed := make([]bool, r.Workers)
	worker := map[int32]int{} // node -> the worker placed on it
	for _, wp := range pl {
		w := wp.Worker
		if w < 0 || w >= r.Workers || placed[w] {
			return nil, nil, fmt.Errorf("its placement must list workers 0 to %d once each, but lists worker %d twice or out of range", r.Workers-1, w)
		}
		placed[w] = true
		n, ok := p.nodeIdx[wp.Node]
		if !ok {
			return nil, nil, fmt.Errorf("worker %d is on node %q, which is not in this allocation", w, wp.Node)
		}
		nd := &p.nodes[n]
		if nd.Family != r.Demand.Family {
			return nil, nil, fmt.Errorf("worker %d is on node %s of family %s, but the job runs on %s nodes", w, nd.Name, nd.Family, r.Demand.Family)
		}
		if other, dup := worker[n]; dup {
			return nil, nil, fmt.Errorf("workers %d and %d are both on node %s; a job's workers run on distinct nodes", other, w, nd.Name)
		}
		worker[n] = w
		var m uint64
		for _, g := range wp.GPUs {
			if g < 0 || g >= nd.GPUs {
				return nil, nil, fmt.Errorf("worker %d holds GPU %d on node %s, which has GPUs 0 to %d", w, g, nd.Name, nd.GPUs-1)
			}
			if m&(1<<g) != 0 {
				return nil, nil, fmt.Errorf("worker %d lists GPU %d on node %s twice", w, g, nd.Name)
			}
			m |= 1 << g
		}
		if len(wp.GPUs) != r.Demand.GPUs {
			return nil, nil, fmt.Errorf("worker %d holds %d %s on node %s, but each worker of the job needs %d",
				w, len(wp.GPUs), plural(len(wp.GPUs), "GPU", "GPUs"), nd.Name, r.Demand.GPUs)
		}
		nodes[w], gpus[w] = n, m
	}
	return nodes, gpus, nil
}

// checkUnheld refuses a placement whose unreleased workers need anything another job holds.
func (p *Pool) checkUnheld(d *Demand, nodes []int32, gpus []uint64, released []bool) error {
	for w, n := range nodes {
		if released[w] {
			continue
		}
		nd := &p.nodes[n]
		if clash := gpus[w] & nd.used; clash != 0 {
			g := bits.TrailingZeros64(clash)
			return fmt.Errorf("GPU %d on node %s, which worker %d holds, is already held by %s", g, nd.Name, w, p.gpuHolder(n, g))
		}
		if nd.free.cpu < d.CPU || nd.free.ram < d.RAMGB {
			return fmt.Errorf("worker %d needs %d CPU cores and %d GB RAM on node %s, but other jobs hold all but %d cores and %d GB there",
				w, d.CPU, d.RAMGB, nd.Name, nd.free.cpu, nd.free.ram)
		}
	}
	return nil
}

// gpuHolder names the job holding GPU g on node n (error path only).
func (p *Pool) gpuHolder(n int32, g int) string {
	for _, rj := range p.sortedRunning() {
		for w, wn := range rj.nodes {
			if wn == n && !rj.released[w] && rj.gpus[w]&(1<<g) != 0 {
				return "job " + rj.r.Job
			}
		}
	}
	return "another job"
}
