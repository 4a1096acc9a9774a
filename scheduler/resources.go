package scheduler

import "cmp"

// resources is an amount of the three resources the scheduler counts on a node: GPUs, CPU cores
// and RAM in GB, in the units of Demand and Node. It is a demand, a capacity, or the difference
// of two (then a field may be negative: what is lacking). It is the one type for such a triple,
// as the KAI scheduler has one resource type, so that a rule is written once for all three.
type resources struct {
	gpu, cpu, ram int
}

// demandOf is one worker's demand of d.
func demandOf(d *Demand) resources { return resources{gpu: d.GPUs, cpu: d.CPU, ram: d.RAMGB} }

// capacityOf is node n's whole capacity.
func capacityOf(n *Node) resources { return resources{gpu: n.GPUs, cpu: n.CPU, ram: n.RAMGB} }

func (a resources) add(b resources) resources {
	return resources{gpu: a.gpu + b.gpu, cpu: a.cpu + b.cpu, ram: a.ram + b.ram}
}

func (a resources) sub(b resources) resources {
	return resources{gpu: a.gpu - b.gpu, cpu: a.cpu - b.cpu, ram: a.ram - b.ram}
}

// lessEqual reports whether a is at most b in every resource: a demand of a fits in b.
func (a resources) lessEqual(b resources) bool {
	return a.gpu <= b.gpu && a.cpu <= b.cpu && a.ram <= b.ram
}

// atMost is a with each resource cut down to b's.
func (a resources) atMost(b resources) resources {
	return resources{gpu: min(a.gpu, b.gpu), cpu: min(a.cpu, b.cpu), ram: min(a.ram, b.ram)}
}

// nonNegative is a with each negative resource raised to 0.
func (a resources) nonNegative() resources {
	return resources{gpu: max(0, a.gpu), cpu: max(0, a.cpu), ram: max(0, a.ram)}
}

// compare orders a and b by GPUs, then CPU, then RAM: the order in which a shortfall matters.
func (a resources) compare(b resources) int {
	return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.cpu, b.cpu), cmp.Compare(a.ram, b.ram))
}

// positive reports whether a has more than nothing of some resource.
func (a resources) positive() bool { return a.gpu > 0 || a.cpu > 0 || a.ram > 0 }

// meets reports whether a gives something of a resource that need still lacks (is positive in).
func (a resources) meets(need resources) bool {
	return need.gpu > 0 && a.gpu > 0 || need.cpu > 0 && a.cpu > 0 || need.ram > 0 && a.ram > 0
}

// perClass is a count for each priority class, indexed by Class (Low, Medium, High): a type of
// its own, so that it is never mistaken for a resources triple.
type perClass [3]int

// times is a with each resource multiplied by k (k = -1 takes an amount back).
func (a resources) times(k int) resources {
	return resources{gpu: k * a.gpu, cpu: k * a.cpu, ram: k * a.ram}
}
