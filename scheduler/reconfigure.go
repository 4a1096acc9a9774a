package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Unfit is a waiting request that a reconfiguration made impossible: it could not fit even the
// empty pool of the new node set (see Admit). Reconfigure removes it from the queue; the caller
// must tell its job.
type Unfit struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"` // Admit's sentence against the new node set
}

// CheckReconfigure is the read-only form of Reconfigure: it returns what Reconfigure would
// return, and changes nothing.
func (p *Pool) CheckReconfigure(nodes []Node, policy Policy) ([]Unfit, error) {
	_, unfit, err := p.planReconfigure(nodes, policy)
	return unfit, err
}

// Reconfigure replaces the pool's nodes and policy, keeping its running and waiting jobs. It is
// all-or-nothing: on error the pool is unchanged.
//
// Nodes may be added and reordered. A node may be removed, or its family, GPUs, CPU or RAM
// changed, only if no running or releasing job has a worker placed on it; otherwise the error
// names the node and the jobs. The nodes and policy are validated as by NewPool.
//
// Waiting requests that no longer pass Admit against the new node set are removed from the queue
// and returned, in launch order, so that the caller can tell their jobs. Running jobs keep their
// placement (nodes are matched by name), start time and preemptor. A lost node that stays (by
// name) stays lost; a lost node may be removed under the same rule as any other.
func (p *Pool) Reconfigure(nodes []Node, policy Policy) ([]Unfit, error) {
	q, unfit, err := p.planReconfigure(nodes, policy)
	if err != nil {
		return nil, err
	}
	q.notes = p.notes
	*p = *q
	return unfit, nil
}

// DropOverCap removes, in queue order, the waiting requests that their workspace's cap in their
// class (Policy.Limits) could never let start (AdmitCap), and returns them with the reason. A
// reconfigure that lowers a cap under a waiting job calls it, so that the job ends with the reason
// instead of waiting for ever; running jobs keep running (a cap bounds starts).
func (p *Pool) DropOverCap() []Unfit {
	if len(p.policy.Limits) == 0 {
		return nil
	}
	var over []Unfit
	for _, w := range p.waiting {
		if err := p.policy.AdmitCap(w.r); err != nil {
			over = append(over, Unfit{Job: w.r.Job, Attempt: w.r.Attempt, Reason: err.Error()})
		}
	}
	for _, u := range over {
		p.CancelAttempt(u.Job, u.Attempt)
	}
	return over
}

// planReconfigure builds the reconfigured pool without touching p: it checks that every node
// that goes or changes is unused, carries the state over through a snapshot on the new node set
// (Restore re-checks it all), and drops the waiting requests the new node set cannot admit.
func (p *Pool) planReconfigure(nodes []Node, policy Policy) (*Pool, []Unfit, error) {
	empty, err := NewPool(nodes, policy)
	if err != nil {
		return nil, nil, err
	}
	if err := p.checkChangedNodesUnused(empty, nodes); err != nil {
		return nil, nil, err
	}
	s := p.Snapshot()
	s.Nodes, s.Policy = empty.Nodes(), policy
	p.remapSnapshotNodes(&s, empty)
	var unfit []Unfit
	s.Waiting, unfit = p.admitWaiting(s.Waiting, empty)
	q, err := Restore(s)
	if err != nil {
		return nil, nil, fmt.Errorf("reconfigure: %w", err)
	}
	return q, unfit, nil
}

// nodeHolder is a job placed on a node, with a sentence saying what it holds there.
type nodeHolder struct {
	job  string
	text string
}

// holdersByNode lists, per node, the running and releasing jobs placed on it.
func (p *Pool) holdersByNode() [][]nodeHolder {
	held := make([][]nodeHolder, len(p.nodes))
	for _, rj := range p.sortedRunning() {
		for w, n := range rj.nodes {
			var text string
			switch {
			case rj.released[w]:
				text = fmt.Sprintf("%s is still releasing (its worker %d ran on it)", rj.r.Job, w)
			case rj.r.Demand.GPUs > 0:
				text = fmt.Sprintf("%s holds GPUs %s on it", rj.r.Job, intList(maskIndices(rj.gpus[w])))
			default:
				text = fmt.Sprintf("%s holds %d CPU cores and %d GB RAM on it", rj.r.Job, rj.r.Demand.CPU, rj.r.Demand.RAMGB)
			}
			held[n] = append(held[n], nodeHolder{rj.r.Job, text})
		}
	}
	return held
}

// checkChangedNodesUnused returns an error naming every node that disappears or changes in the
// new node set (empty is a pool of it) while a job is placed on it, and those jobs.
func (p *Pool) checkChangedNodesUnused(empty *Pool, nodes []Node) error {
	held := p.holdersByNode()
	var problems []string
	for i := range p.nodes {
		old := p.nodes[i].Node
		ni, kept := empty.nodeIdx[old.Name]
		what := "removed"
		if kept {
			nw := nodes[ni]
			if sameCapacity(nw, old) {
				continue
			}
			what = "changed (" + nodeChange(old, nw) + ")"
		}
		if len(held[i]) == 0 {
			continue
		}
		slices.SortFunc(held[i], func(a, b nodeHolder) int { return strings.Compare(a.job, b.job) })
		texts := make([]string, len(held[i]))
		for k, h := range held[i] {
			texts[k] = h.text
		}
		it := "it"
		if len(texts) > 1 {
			it = "them"
		}
		problems = append(problems, fmt.Sprintf("node %s cannot be %s: %s; stop %s first", old.Name, what, strings.Join(texts, " and "), it))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, ". "))
	}
	return nil
}

// remapSnapshotNodes rewrites the node indices in s (of p) to those of the new node set (empty is
// a pool of it), matching nodes by name. A lost node stays lost if it stays; holds and reserved
// nodes on nodes that go are dropped.
func (p *Pool) remapSnapshotNodes(s *Snapshot, empty *Pool) {
	s.Lost = nil
	for i := range empty.nodes {
		if n, ok := p.nodeIdx[empty.nodes[i].Name]; ok && p.nodes[n].lost {
			s.Lost = append(s.Lost, int32(i))
		}
	}
	for i := range s.Running {
		sr := &s.Running[i]
		sr.Nodes = slices.Clone(sr.Nodes)
		for w, n := range sr.Nodes {
			sr.Nodes[w] = empty.nodeIdx[p.nodes[n].Name]
		}
	}
	var holds []SnapshotHold
	for _, h := range s.Holds {
		if ni, ok := empty.nodeIdx[p.nodes[h.Node].Name]; ok {
			h.Node = ni
			holds = append(holds, h)
		}
	}
	s.Holds = holds
	for i := range s.Heads {
		h := &s.Heads[i]
		h.Nodes, h.Pinned = p.remapNodes(h.Nodes, empty), p.remapNodes(h.Pinned, empty)
	}
}

// remapNodes rewrites node indices of p to those of empty's node set, dropping nodes that go.
func (p *Pool) remapNodes(nodes []int32, empty *Pool) []int32 {
	var kept []int32
	for _, n := range nodes {
		if ni, ok := empty.nodeIdx[p.nodes[n].Name]; ok {
			kept = append(kept, ni)
		}
	}
	slices.Sort(kept)
	return kept
}

// admitWaiting keeps the waiting requests of sw (p's queue, in launch order) that the new node
// set admits, and returns the others as Unfit: among them those whose allowed nodes name a node
// that goes, or no longer leave enough nodes large enough. Requests of the same demand, workers,
// kind, class and allowed nodes share one verdict.
func (p *Pool) admitWaiting(sw SnapshotWaiting, empty *Pool) (SnapshotWaiting, []Unfit) {
	var unfit []Unfit
	var keep SnapshotWaiting
	verdict := map[admitKey]error{}
	for i, w := range p.waiting {
		key := admitKey{d: sw.Demand[i], w: sw.Workers[i], kc: sw.KindClass[i]}
		if sw.NodeSet != nil {
			key.ns = sw.NodeSet[i]
		}
		if sw.MinWorkers != nil {
			key.mw = sw.MinWorkers[i]
		}
		if sw.Topology != nil {
			key.tp = sw.Topology[i]
		}
		if sw.Allocation != nil {
			key.al = sw.Allocation[i]
		}
		err, seen := verdict[key]
		if !seen {
			err = empty.Admit(w.r)
			verdict[key] = err
		}
		if err != nil {
			unfit = append(unfit, Unfit{Job: w.r.Job, Attempt: w.r.Attempt, Reason: err.Error()})
			continue
		}
		keep.Job = append(keep.Job, sw.Job[i])
		keep.Attempt = append(keep.Attempt, sw.Attempt[i])
		keep.KindClass = append(keep.KindClass, sw.KindClass[i])
		keep.Demand = append(keep.Demand, sw.Demand[i])
		keep.Workers = append(keep.Workers, sw.Workers[i])
		keep.Seq = append(keep.Seq, sw.Seq[i])
		keep.SubmittedAt = append(keep.SubmittedAt, sw.SubmittedAt[i])
		if sw.Preemptions != nil {
			keep.Preemptions = append(keep.Preemptions, sw.Preemptions[i])
		}
		if sw.HonorsNotice != nil {
			keep.HonorsNotice = append(keep.HonorsNotice, sw.HonorsNotice[i])
		}
		if sw.NodeSet != nil {
			keep.NodeSet = append(keep.NodeSet, sw.NodeSet[i])
		}
		if sw.MinWorkers != nil {
			keep.MinWorkers = append(keep.MinWorkers, sw.MinWorkers[i])
		}
		if sw.Topology != nil {
			keep.Topology = append(keep.Topology, sw.Topology[i])
		}
		if sw.NoMove != nil {
			keep.NoMove = append(keep.NoMove, sw.NoMove[i])
		}
		if sw.Workspace != nil {
			keep.Workspace = append(keep.Workspace, sw.Workspace[i])
		}
		if sw.RunLimit != nil {
			keep.RunLimit = append(keep.RunLimit, sw.RunLimit[i])
		}
		if sw.User != nil {
			keep.User = append(keep.User, sw.User[i])
		}
		if sw.RunEstimated != nil {
			keep.RunEstimated = append(keep.RunEstimated, sw.RunEstimated[i])
		}
		if sw.Allocation != nil {
			keep.Allocation = append(keep.Allocation, sw.Allocation[i])
		}
	}
	if len(keep.Preemptions) > 0 && !slices.ContainsFunc(keep.Preemptions, func(n int32) bool { return n > 0 }) {
		keep.Preemptions = nil
	}
	if !slices.Contains(keep.HonorsNotice, true) {
		keep.HonorsNotice = nil
	}
	if !slices.ContainsFunc(keep.NodeSet, func(k int32) bool { return k != 0 }) {
		keep.NodeSet = nil
	}
	if !slices.ContainsFunc(keep.MinWorkers, func(k int32) bool { return k != 0 }) {
		keep.MinWorkers = nil
	}
	if !slices.ContainsFunc(keep.Workspace, func(k int32) bool { return k != 0 }) {
		keep.Workspace = nil
	}
	if !slices.ContainsFunc(keep.RunLimit, func(k int64) bool { return k != 0 }) {
		keep.RunLimit = nil
	}
	if !slices.ContainsFunc(keep.User, func(k int32) bool { return k != 0 }) {
		keep.User = nil
	}
	if !slices.Contains(keep.RunEstimated, true) {
		keep.RunEstimated = nil
	}
	if !slices.Contains(keep.NoMove, true) {
		keep.NoMove = nil
	}
	if !slices.ContainsFunc(keep.Topology, func(k int32) bool { return k != 0 }) {
		keep.Topology = nil
	}
	return keep, unfit
}

// nodeChange describes how a node's description changed, e.g. "GPUs 2 -> 1".
func nodeChange(a, b Node) string {
	var parts []string
	if a.Family != b.Family {
		parts = append(parts, fmt.Sprintf("family %s -> %s", a.Family, b.Family))
	}
	if a.GPUs != b.GPUs {
		parts = append(parts, fmt.Sprintf("GPUs %d -> %d", a.GPUs, b.GPUs))
	}
	if a.CPU != b.CPU {
		parts = append(parts, fmt.Sprintf("CPU %d -> %d", a.CPU, b.CPU))
	}
	if a.RAMGB != b.RAMGB {
		parts = append(parts, fmt.Sprintf("RAM %d -> %d GB", a.RAMGB, b.RAMGB))
	}
	return strings.Join(parts, ", ")
}

func intList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
