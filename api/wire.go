package api

import (
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The API's own shapes of what the scheduler, the allocator and a job
// report. The answers carry these, never the structs they are made from, so
// that the scheduler and the workflows can change their structs without
// changing the public JSON (TestWireJSON pins it). Each is made by a
// function named after it, at the edge.

// perWorkerView is what one worker of a waiting job needs on one node.
type perWorkerView struct {
	Family string `json:"family"`
	GPUs   int    `json:"gpus"`
	VRAMGB int    `json:"vram_gb,omitempty"`
	CPU    int    `json:"cpu,omitempty"`
	RAMGB  int    `json:"ram_gb,omitempty"`
}

func perWorkerOf(d scheduler.Demand) perWorkerView {
	return perWorkerView{Family: d.Family, GPUs: d.GPUs, VRAMGB: d.VRAMGB, CPU: d.CPU, RAMGB: d.RAMGB}
}

// nodeUsageView is one node's GPUs as the allocator uses them now.
type nodeUsageView struct {
	Name          string `json:"name"`
	Family        string `json:"family"`
	GPUs          int    `json:"gpus"`
	FreeGPUs      int    `json:"free_gpus"`
	AllocatedGPUs int    `json:"allocated_gpus"` // held by running jobs, not releasing
	ReleasingGPUs int    `json:"releasing_gpus"`
	Lost          bool   `json:"lost,omitempty"`         // its agent is not answering: nothing is granted on it
	ReservedFor   string `json:"reserved_for,omitempty"` // the waiting job it drains for
	HeldGPUs      int    `json:"held_gpus,omitempty"`    // free GPUs still nominated to a preemptor
	HeldFor       string `json:"held_for,omitempty"`
	// Topology is the node's domain at each of the allocation's topology levels.
	Topology map[string]string `json:"topology,omitempty"`
}

// nodeUsageOf is never nil: an allocation without nodes lists none.
func nodeUsageOf(nodes []scheduler.NodeInfo) []nodeUsageView {
	out := make([]nodeUsageView, len(nodes))
	for i, n := range nodes {
		out[i] = nodeUsageView{Name: n.Name, Family: n.Family, GPUs: n.GPUs, FreeGPUs: n.FreeGPUs, AllocatedGPUs: n.AllocatedGPUs,
			ReleasingGPUs: n.ReleasingGPUs, Lost: n.Lost, ReservedFor: n.ReservedFor, HeldGPUs: n.HeldGPUs, HeldFor: n.HeldFor, Topology: n.Topology}
	}
	return out
}

// gpuTotalsView counts an allocation's GPUs by state, over all its nodes.
type gpuTotalsView struct {
	Total     int `json:"total_gpus"`
	Free      int `json:"free_gpus"`
	Allocated int `json:"allocated_gpus"`
	Releasing int `json:"releasing_gpus"`
}

func gpuTotalsOf(t protocol.GPUTotals) gpuTotalsView {
	return gpuTotalsView{Total: t.Total, Free: t.Free, Allocated: t.Allocated, Releasing: t.Releasing}
}

// nodeView is one configured machine of an allocation.
type nodeView struct {
	Name    string `json:"name"`
	Family  string `json:"family"`
	GPUs    int    `json:"gpus"`
	CPU     int    `json:"cpu"`
	RAMGB   int    `json:"ram_gb"`
	Address string `json:"address,omitempty"`
}

func nodesOf(nodes []scheduler.Node) []nodeView {
	if nodes == nil {
		return nil
	}
	out := make([]nodeView, len(nodes))
	for i, n := range nodes {
		out[i] = nodeView{Name: n.Name, Family: n.Family, GPUs: n.GPUs, CPU: n.CPU, RAMGB: n.RAMGB, Address: n.Address}
	}
	return out
}
