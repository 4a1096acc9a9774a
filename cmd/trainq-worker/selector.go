package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/scheduler"
)

// selectedNodes resolves the node_selector of every allocation that has one
// into the nodes it picks now, in cfg order: a node listed in the config or
// picked by an earlier allocation is not picked again (no GPU is promised
// twice), and is logged, as is a node that cannot be scheduled on.
func selectedNodes(cfg *config.Config, kb *kube.Backend, logger *slog.Logger) map[config.AllocationRef][]scheduler.Node {
	taken := map[string]string{}
	for _, ref := range cfg.Allocations() {
		if len(ref.Allocation.NodeSelector) == 0 {
			for _, n := range ref.Allocation.Nodes {
				taken[n.Name] = ref.Region + "/" + ref.Allocation.Name
			}
		}
	}
	out := map[config.AllocationRef][]scheduler.Node{}
	for _, ref := range cfg.Allocations() {
		if len(ref.Allocation.NodeSelector) == 0 {
			continue
		}
		name := ref.Region + "/" + ref.Allocation.Name
		nodes, skipped := kb.SelectNodes(ref.Allocation.NodeSelector, ref.Allocation.Topology)
		for _, s := range skipped {
			logger.Warn("a node the allocation's node_selector matches is left out: "+s.Why, "allocation", name, "node", s.Name)
		}
		var picked []scheduler.Node
		for _, n := range nodes {
			if owner, dup := taken[n.Name]; dup {
				logger.Warn("a node the allocation's node_selector matches already belongs to another allocation; left out", "allocation", name, "node", n.Name, "owner", owner)
				continue
			}
			taken[n.Name] = name
			picked = append(picked, n)
		}
		out[config.AllocationRef{Region: ref.Region, Allocation: ref.Allocation}] = picked
	}
	return out
}

// applySelectors fills the nodes of the allocations with a node_selector,
// before anything reads the config.
func applySelectors(cfg *config.Config, kb *kube.Backend, logger *slog.Logger) {
	for ref, nodes := range selectedNodes(cfg, kb, logger) {
		ref.Allocation.Nodes = nodes
		logger.Info("node_selector picked the allocation's nodes", "allocation", ref.Region+"/"+ref.Allocation.Name, "nodes", len(nodes))
	}
}

// followSelectors hands the allocator of an allocation with a node_selector
// its new nodes whenever the nodes it picks change (a node joins, leaves,
// is relabelled or its allocatable changes), as the reconfigure step does
// at start, and starts the agents of nodes that joined. cfg is not changed:
// the control activities keep the nodes picked at start.
//
// A node relabelled from one allocation to another moves only once its old
// allocator has let it go: that allocator refuses to drop a node a job still
// holds, and until it takes the drop the node stays out of the new one (the
// new allocator also fences a node it is given until its agent confirms no
// stray worker runs there). A refused or failed reconfigure is tried again
// every selectorRetry, not only on the next node event.
func followSelectors(ctx context.Context, c client.Client, cfg *config.Config, kb *kube.Backend, acts *activities.Activities, agents []string, logger *slog.Logger) {
	changes, unsubscribe := kb.NodeChanges()
	defer unsubscribe()
	h := newHandover(cfg)
	retry := time.NewTicker(selectorRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-retry.C:
		}
		for _, step := range h.next(selectedNodes(cfg, kb, logger), logger) {
			in, err := cfg.WithNodes(step.ref.Region, step.ref.Allocation.Name, step.nodes).AllocatorInput(step.ref.Region, step.ref.Allocation.Name)
			if err != nil {
				logger.Warn("cannot build the allocator's new config", "allocation", step.name, "error", err)
				continue
			}
			logger.Info("the nodes node_selector picks changed; reconfiguring the allocator", "allocation", step.name, "nodes", len(step.nodes))
			for _, n := range step.nodes {
				if !slices.Contains(agents, n.Name) {
					agents = append(agents, n.Name)
					go runKubeAgent(ctx, c, n.Name, acts, kb, logger)
				}
			}
			if reconfigureAllocator(ctx, c, in, logger) {
				h.taken(step)
			}
		}
	}
}

// selectorRetry is how often a node_selector change an allocator has not
// taken yet is tried again.
const selectorRetry = 5 * time.Second

// handover tracks which allocator has which node_selector node, so that a
// node is never in two allocators at once.
type handover struct {
	// current are the nodes each allocation's allocator has taken.
	current map[string][]scheduler.Node
	// owner is the allocation whose allocator has each node.
	owner map[string]string
	// waiting remembers the nodes held back, so that each is logged once.
	waiting map[string]string
}

// handoverStep is one reconfigure to send: allocation ref gets nodes.
type handoverStep struct {
	ref   config.AllocationRef
	name  string
	nodes []scheduler.Node
}

func newHandover(cfg *config.Config) *handover {
	h := &handover{current: map[string][]scheduler.Node{}, owner: map[string]string{}, waiting: map[string]string{}}
	for _, ref := range cfg.Allocations() {
		name := ref.Region + "/" + ref.Allocation.Name
		h.current[name] = ref.Allocation.Nodes
		for _, n := range ref.Allocation.Nodes {
			h.owner[n.Name] = name
		}
	}
	return h
}

// next lists the reconfigures that bring each allocation closer to the
// nodes its selector picks, in config order, holding back every node that
// another allocator still has. Drops come first, so that a node can move in
// the same round once its old allocator took the drop.
func (h *handover) next(picked map[config.AllocationRef][]scheduler.Node, logger *slog.Logger) []handoverStep {
	var drops, adds []handoverStep
	refs := make([]config.AllocationRef, 0, len(picked))
	for ref := range picked {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b config.AllocationRef) int {
		return strings.Compare(a.Region+"/"+a.Allocation.Name, b.Region+"/"+b.Allocation.Name)
	})
	for _, ref := range refs {
		name := ref.Region + "/" + ref.Allocation.Name
		var nodes []scheduler.Node
		for _, n := range picked[ref] {
			if o, ok := h.owner[n.Name]; ok && o != name {
				if h.waiting[n.Name] != o {
					h.waiting[n.Name] = o
					logger.Info("a node the allocation's node_selector picks is still in another allocation; it moves once that allocation lets it go",
						"allocation", name, "node", n.Name, "owner", o)
				}
				continue
			}
			nodes = append(nodes, n)
		}
		if slices.EqualFunc(h.current[name], nodes, scheduler.Node.Equal) {
			continue
		}
		step := handoverStep{ref: ref, name: name, nodes: nodes}
		if dropsAny(h.current[name], nodes) {
			drops = append(drops, step)
		} else {
			adds = append(adds, step)
		}
	}
	return append(drops, adds...)
}

// taken records that step's allocator took its nodes.
func (h *handover) taken(step handoverStep) {
	for _, n := range h.current[step.name] {
		if h.owner[n.Name] == step.name {
			delete(h.owner, n.Name)
		}
	}
	for _, n := range step.nodes {
		h.owner[n.Name] = step.name
		delete(h.waiting, n.Name)
	}
	h.current[step.name] = step.nodes
}

// dropsAny says whether next leaves out a node of prev.
func dropsAny(prev, next []scheduler.Node) bool {
	for _, p := range prev {
		if !slices.ContainsFunc(next, func(n scheduler.Node) bool { return n.Name == p.Name }) {
			return true
		}
	}
	return false
}
