package allocation

import (
	"slices"
	"testing"
)

// TestReconfigureReachesTheTopology: a config change that only reorders the topology levels, or
// only moves a node to another rack, reaches the pool (a review found the first ignored).
func TestReconfigureReachesTheTopology(t *testing.T) {
	in := input(2)
	for i := range in.Nodes {
		in.Nodes[i].Topology = map[string]string{"block": "b1", "rack": "r1"}
	}
	in.Policy.Topology = []string{"block", "rack"}
	s, err := New(in)
	if err != nil {
		t.Fatal(err)
	}
	reordered := input(2)
	reordered.Nodes = in.Nodes
	reordered.Policy.Topology = []string{"rack", "block"}
	reply, _, err := s.Reconfigure(reordered)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Pool.Policy().Topology; !reply.Changed || !slices.Equal(got, reordered.Policy.Topology) {
		t.Fatalf("levels %v after reconfiguring to %v (reply %+v)", got, reordered.Policy.Topology, reply)
	}
	moved := input(2)
	moved.Policy.Topology = reordered.Policy.Topology
	moved.Nodes[0].Topology = map[string]string{"block": "b1", "rack": "r1"}
	moved.Nodes[1].Topology = map[string]string{"block": "b1", "rack": "r2"}
	if reply, _, err = s.Reconfigure(moved); err != nil {
		t.Fatal(err)
	}
	if got := s.Pool.Nodes()[1].Topology["rack"]; !reply.Changed || got != "r2" {
		t.Fatalf("node 2 in rack %q after the move (reply %+v)", got, reply)
	}
}
