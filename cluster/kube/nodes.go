package kube

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trainq/trainq/scheduler"
)

// FamilyLabel is the node label that names a selected node's family (the
// a100 of instance type a100.2gpu).
const FamilyLabel = "trainq.io/family"

// SkippedNode is a node that matched a selector but cannot be scheduled on.
type SkippedNode struct {
	Name, Why string
}

// SelectNodes returns the nodes, as last seen, whose labels match all of
// selector, ordered by name, as trainq schedules them: GPUs, CPU (whole
// cores) and memory (whole GiB) from the node's allocatable, and the family
// from its FamilyLabel, and its domain at each topology level from its label
// of the level's name (without it, a domain of its own). A matching node
// without a family or with a name trainq cannot use is skipped, and said why.
func (b *Backend) SelectNodes(selector map[string]string, topology []string) ([]scheduler.Node, []SkippedNode) {
	sel := labels.SelectorFromSet(selector)
	var out []scheduler.Node
	var skipped []SkippedNode
	for _, obj := range b.nodes.GetStore().List() {
		n := obj.(*corev1.Node)
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		sn, why := SchedulerNode(n, topology)
		if why != "" {
			skipped = append(skipped, SkippedNode{Name: n.Name, Why: why})
			continue
		}
		out = append(out, sn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Name < skipped[j].Name })
	return out, skipped
}

// UnlabelledDomain is the domain of a node without the label of a topology level: its own, named
// so that no label value can be the same ("~" is not allowed in one).
func UnlabelledDomain(node string) string { return "~" + node }

// SchedulerNode is a Kubernetes node as trainq schedules it, in an
// allocation with these topology levels (label keys), or why it cannot be one.
func SchedulerNode(n *corev1.Node, topology []string) (scheduler.Node, string) {
	if len(n.Name) > 63 {
		return scheduler.Node{}, "its name is longer than the 63 characters trainq allows"
	}
	family := n.Labels[FamilyLabel]
	if family == "" {
		return scheduler.Node{}, fmt.Sprintf("it has no %s label (such as a100), which instance types name", FamilyLabel)
	}
	var domains map[string]string
	for _, level := range topology {
		d := n.Labels[level]
		if d == "" {
			// Without the label the node is a domain of its own: it serves single workers and
			// gangs that fit nowhere else. Leaving it out would remove it, which the allocator
			// refuses while jobs run there, holding back every other node change.
			d = UnlabelledDomain(n.Name)
		}
		if domains == nil {
			domains = map[string]string{}
		}
		domains[level] = d
	}
	alloc := n.Status.Allocatable
	gpus := alloc[corev1.ResourceName(GPUResource)]
	return scheduler.Node{
		Name:     n.Name,
		Family:   family,
		GPUs:     int(gpus.Value()),
		CPU:      int(alloc.Cpu().MilliValue() / 1000),
		RAMGB:    int(alloc.Memory().Value() >> 30),
		Topology: domains,
	}, ""
}
