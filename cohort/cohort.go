// Package cohort decides how the allocations of a cohort lend each other idle nodes and take
// them back: pure rules over one carried struct (State) that return commands, as allocation/
// does for one allocation. The caller (trainq simulate today) executes the commands in order.
//
// The unit lent is a whole node. A node is held by one member at a time, its owner or one
// borrower: in every other member's pool it is out of scheduling (as a drained node is), so no
// GPU can have two holders whatever the members' pools decide. A member lends an idle node of its
// own when none of its waiting jobs could use it, to the member whose waiting work could, first
// the one whose best waiting job comes first (higher class, then the longer wait), within the
// lender's LendingLimit and the borrower's BorrowingLimit. Work started on a borrowed node runs on
// loan. When the owner has waiting work that its held nodes cannot serve, it takes lent nodes
// back, idle ones first and then those whose borrowed work would lose least: the borrower's jobs
// there get the allocation's preemption notice and rerun without spending max_retry, and the node
// returns once they have left. A borrowed node that falls idle goes home when its borrower has
// nothing waiting that could use it.
//
// Why whole nodes: a node with one holder needs no agreement finer than "who holds it", which a
// drain already expresses and every one-holder rule of an allocation (fences, recovery, epochs)
// already covers. The price is capacity idle on partly used nodes, which stays unlent; the
// simulation measures it.
package cohort

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// NoLimit is a lending or borrowing limit that does not limit.
const NoLimit = -1

// Member is one allocation of the cohort.
type Member struct {
	Name string
	// LendingLimit caps the GPUs of its own nodes that others may hold at once (NoLimit: all);
	// BorrowingLimit caps the GPUs of others' nodes it may hold at once (NoLimit: any).
	LendingLimit, BorrowingLimit int
}

// Node is one node of the cohort and the member that owns it.
type Node struct {
	Name   string
	Family string
	GPUs   int
	Owner  int // index into State.Members
}

// State is what a cohort carries: its members, its nodes, and who holds each node now.
type State struct {
	Members []Member
	Nodes   []Node
	// Holder[i] is the member that holds Nodes[i]: its owner or a borrower.
	Holder []int
	// Reclaiming[i]: the owner has asked for Nodes[i] back, and its borrower's jobs are leaving.
	Reclaiming []bool
}

// New returns a cohort in which every node is held by its owner.
func New(members []Member, nodes []Node) (*State, error) {
	if len(members) < 2 {
		return nil, fmt.Errorf("a cohort needs at least 2 members, got %d", len(members))
	}
	s := &State{Members: members, Nodes: nodes, Holder: make([]int, len(nodes)), Reclaiming: make([]bool, len(nodes))}
	seen := map[string]bool{}
	for i, n := range nodes {
		if n.Owner < 0 || n.Owner >= len(members) {
			return nil, fmt.Errorf("node %s: owner %d is not a member", n.Name, n.Owner)
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("node %s is listed twice", n.Name)
		}
		seen[n.Name] = true
		s.Holder[i] = n.Owner
	}
	for _, m := range members {
		if m.LendingLimit < NoLimit || m.BorrowingLimit < NoLimit {
			return nil, fmt.Errorf("member %s: a limit is a number of GPUs (at least 0), or unlimited", m.Name)
		}
	}
	return s, nil
}

// Want is a waiting job as the cohort sees it: what one worker needs, and all its GPUs.
type Want struct {
	Family     string
	WorkerGPUs int
	GPUs       int
	Class      int // higher comes first
	Since      time.Time
}

// fits says whether one of w's workers fits an empty node n.
func (w Want) fits(n Node) bool { return w.Family == n.Family && w.WorkerGPUs <= n.GPUs }

// NodeUse is what a node's holder runs there now.
type NodeUse struct {
	// Workers are the workers there (running or leaving, GPU or not) and UsedGPUs their GPUs;
	// AtRisk is the work they would lose if they left now (GPU-seconds since their last
	// checkpoint). A node is empty, and may change hands, only without workers.
	Workers  int
	UsedGPUs int
	AtRisk   float64
}

func (u NodeUse) empty() bool { return u.Workers == 0 }

// View is what the members' pools show now: each member's waiting jobs (Waiting[m]) and each
// node's use by its holder (Use[i] for Nodes[i]).
type View struct {
	Waiting [][]Want
	Use     []NodeUse
}

// Command is one step for the caller: Lend, Reclaim or Return.
type Command interface{ command() }

// Lend moves the idle node to a borrower: out of the owner's scheduling, into the borrower's.
type Lend struct {
	Node     string
	From, To int
}

// Reclaim tells the borrower's jobs on the node to leave (a notice, a rerun that spends no
// retry); nothing new starts there for the borrower. The node returns once it is empty.
type Reclaim struct {
	Node     string
	From, To int // the borrower and the owner
}

// Return moves an empty borrowed node back to its owner.
type Return struct {
	Node     string
	From, To int
}

func (Lend) command()    {}
func (Reclaim) command() {}
func (Return) command()  {}

// Step applies the rules to what the pools show now and returns the commands, in the order to
// execute them; the state already reflects them.
func (s *State) Step(v View) []Command {
	var cmds []Command
	cmds = s.returnIdle(v, cmds)
	unmet := s.unmet(v)
	cmds = s.reclaim(v, unmet, cmds)
	return s.lend(v, unmet, cmds)
}

// returnIdle sends home every borrowed node that is empty and either reclaimed or of no use to
// its borrower's waiting jobs.
func (s *State) returnIdle(v View, cmds []Command) []Command {
	for i, n := range s.Nodes {
		h := s.Holder[i]
		if h == n.Owner || !v.Use[i].empty() {
			continue
		}
		if s.Reclaiming[i] || !anyFits(v.Waiting[h], n) {
			s.Holder[i], s.Reclaiming[i] = n.Owner, false
			cmds = append(cmds, Return{Node: n.Name, From: h, To: n.Owner})
		}
	}
	return cmds
}

// unmet is, per member, the GPUs of its waiting jobs that the free capacity of the nodes it
// holds (and of its nodes already coming back) cannot take: free GPUs count only in whole
// workers, the largest workers placed first, so that free GPUs scattered in twos do not hide an
// 8-GPU job's need.
func (s *State) unmet(v View) []int {
	out := make([]int, len(s.Members))
	free := make([]int, len(s.Nodes))
	for m, ws := range v.Waiting {
		for i, n := range s.Nodes {
			switch {
			case s.Reclaiming[i] && n.Owner == m:
				free[i] = n.GPUs
			case !s.Reclaiming[i] && s.Holder[i] == m:
				free[i] = n.GPUs - v.Use[i].UsedGPUs
			default:
				free[i] = 0
			}
		}
		for _, w := range slices.SortedStableFunc(slices.Values(ws), func(a, b Want) int { return cmp.Compare(b.WorkerGPUs, a.WorkerGPUs) }) {
			need := w.GPUs
			for i, n := range s.Nodes {
				if need <= 0 || w.WorkerGPUs <= 0 {
					break
				}
				if n.Family != w.Family {
					continue
				}
				take := min(free[i]/w.WorkerGPUs*w.WorkerGPUs, need)
				free[i] -= take
				need -= take
			}
			out[m] += max(need, 0)
		}
	}
	return out
}

// reclaim asks for lent nodes back for each owner whose waiting work its held nodes cannot
// serve: among the nodes one of its waiting jobs fits, the idle ones first, then those whose
// borrowed work would lose least.
func (s *State) reclaim(v View, unmet []int, cmds []Command) []Command {
	for m := range s.Members {
		if unmet[m] <= 0 {
			continue
		}
		var lent []int
		for i, n := range s.Nodes {
			if n.Owner == m && s.Holder[i] != m && !s.Reclaiming[i] && anyFits(v.Waiting[m], n) {
				lent = append(lent, i)
			}
		}
		slices.SortStableFunc(lent, func(a, b int) int {
			ua, ub := v.Use[a], v.Use[b]
			return cmp.Or(cmp.Compare(min(ua.Workers, 1), min(ub.Workers, 1)), cmp.Compare(ua.AtRisk, ub.AtRisk))
		})
		for _, i := range lent {
			if unmet[m] <= 0 {
				break
			}
			n, h := s.Nodes[i], s.Holder[i]
			unmet[m] -= n.GPUs
			unmet[h] += n.GPUs - v.Use[i].UsedGPUs // its free part was counted as the borrower's
			if v.Use[i].empty() {
				s.Holder[i] = m
				cmds = append(cmds, Return{Node: n.Name, From: h, To: m})
				continue
			}
			s.Reclaiming[i] = true
			cmds = append(cmds, Reclaim{Node: n.Name, From: h, To: m})
		}
	}
	return cmds
}

// lend gives each idle node that its owner's waiting jobs cannot use to the member whose waiting
// work can and comes first, within both limits.
func (s *State) lend(v View, unmet []int, cmds []Command) []Command {
	lent, borrowed := s.loans()
	for i, n := range s.Nodes {
		o := n.Owner
		if s.Holder[i] != o || !v.Use[i].empty() || anyFits(v.Waiting[o], n) ||
			!within(s.Members[o].LendingLimit, lent[o]+n.GPUs) {
			continue
		}
		best, bestWant := -1, Want{}
		for m := range s.Members {
			if m == o || unmet[m] <= 0 || !within(s.Members[m].BorrowingLimit, borrowed[m]+n.GPUs) {
				continue
			}
			w, ok := firstFit(v.Waiting[m], n)
			if ok && (best < 0 || before(w, bestWant)) {
				best, bestWant = m, w
			}
		}
		if best < 0 {
			continue
		}
		s.Holder[i] = best
		lent[o] += n.GPUs
		borrowed[best] += n.GPUs
		unmet[best] -= n.GPUs
		cmds = append(cmds, Lend{Node: n.Name, From: o, To: best})
	}
	return cmds
}

// loans sums, per member, the GPUs of its nodes others hold and of others' nodes it holds.
func (s *State) loans() (lent, borrowed []int) {
	lent, borrowed = make([]int, len(s.Members)), make([]int, len(s.Members))
	for i, n := range s.Nodes {
		if h := s.Holder[i]; h != n.Owner {
			lent[n.Owner] += n.GPUs
			borrowed[h] += n.GPUs
		}
	}
	return lent, borrowed
}

// Borrowed says whether the node is held by a member other than its owner.
func (s *State) Borrowed(i int) bool { return s.Holder[i] != s.Nodes[i].Owner }

func within(limit, gpus int) bool { return limit == NoLimit || gpus <= limit }

func anyFits(ws []Want, n Node) bool {
	_, ok := firstFit(ws, n)
	return ok
}

// firstFit is the waiting job that comes first among those one of whose workers fits n.
func firstFit(ws []Want, n Node) (Want, bool) {
	var best Want
	found := false
	for _, w := range ws {
		if w.fits(n) && (!found || before(w, best)) {
			best, found = w, true
		}
	}
	return best, found
}

// before orders waiting jobs across members: the higher class, then the longer wait.
func before(a, b Want) bool {
	if a.Class != b.Class {
		return a.Class > b.Class
	}
	return a.Since.Before(b.Since)
}
