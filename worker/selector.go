package main

import (
	"context"
	"log/slog"
	"slices"

	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/activities"
	trainq "github.com/trainq/trainq/client"
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
		nodes, skipped := kb.SelectNodes(ref.Allocation.NodeSelector)
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
func followSelectors(ctx context.Context, c client.Client, cfg *config.Config, kb *kube.Backend, acts *activities.Activities, agents []string, logger *slog.Logger) {
	changes, unsubscribe := kb.NodeChanges()
	defer unsubscribe()
	current := map[string][]scheduler.Node{}
	for _, ref := range cfg.Allocations() {
		current[ref.Region+"/"+ref.Allocation.Name] = ref.Allocation.Nodes
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
		for ref, nodes := range selectedNodes(cfg, kb, logger) {
			name := ref.Region + "/" + ref.Allocation.Name
			if slices.Equal(current[name], nodes) {
				continue
			}
			current[name] = nodes
			in, err := trainq.AllocatorInput(cfg.WithNodes(ref.Region, ref.Allocation.Name, nodes), ref.Region, ref.Allocation.Name)
			if err != nil {
				logger.Warn("cannot build the allocator's new config", "allocation", name, "error", err)
				continue
			}
			logger.Info("the nodes node_selector picks changed; reconfiguring the allocator", "allocation", name, "nodes", len(nodes))
			for _, n := range nodes {
				if !slices.Contains(agents, n.Name) {
					agents = append(agents, n.Name)
					go runKubeAgent(ctx, c, n.Name, acts, kb, logger)
				}
			}
			go reconfigureAllocator(ctx, c, in, logger)
		}
	}
}
