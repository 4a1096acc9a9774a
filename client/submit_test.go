package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestTimeLimitsOfTheAllocation: a job that names no stop_timer gets the
// allocation's default, else its maximum; one that asks for more than the
// maximum is refused naming stop_timer; a Jupyter server gets none.
func TestTimeLimitsOfTheAllocation(t *testing.T) {
	cfg := config.Default()
	_, alloc, err := cfg.Allocation(cfg.DefaultRegion, "demo")
	require.NoError(t, err)
	job := func(limit time.Duration) protocol.JobSpec {
		return protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo", TimeLimit: limit}
	}
	for _, tc := range []struct {
		name          string
		def, most     time.Duration
		asked, want   time.Duration
		refused, note bool
	}{
		{"no limits", 0, 0, 0, 0, false, false},
		{"the default", time.Hour, 0, 0, time.Hour, false, true},
		{"its own under the maximum", time.Hour, 4 * time.Hour, 2 * time.Hour, 2 * time.Hour, false, false},
		{"none asked, only a maximum", 0, 4 * time.Hour, 0, 4 * time.Hour, false, true},
		{"more than the maximum", 0, 4 * time.Hour, 5 * time.Hour, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc.DefaultTimeLimit, alloc.MaxTimeLimit = config.Duration(tc.def), config.Duration(tc.most)
			spec := job(tc.asked)
			notes, err := Check(cfg, &spec)
			if tc.refused {
				var fe *protocol.FieldError
				require.True(t, errors.As(err, &fe), "%v", err)
				assert.Equal(t, "stop_timer", fe.Field)
				assert.Contains(t, fe.Message, "at most 240 minutes")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, spec.TimeLimit)
			noted := false
			for _, n := range notes {
				noted = noted || len(n) > 10 && n[:10] == "stop_timer"
			}
			assert.Equal(t, tc.note, noted, "notes %q", notes)
		})
	}
	alloc.DefaultTimeLimit, alloc.MaxTimeLimit = config.Duration(time.Hour), config.Duration(time.Hour)
	nb := protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo", Kind: scheduler.KindNotebook}
	_, err = Check(cfg, &nb)
	require.NoError(t, err)
	assert.Zero(t, nb.TimeLimit, "Jupyter servers have no time limit")
}

// TestAllowedNodes: the nodes a job may run on are its queue's, within
// include_nodes, less exclude_nodes; none left, or an include outside the
// queue, is refused naming the field; all of them is no constraint.
func TestAllowedNodes(t *testing.T) {
	cfg := config.Default()
	_, alloc, err := cfg.Allocation(cfg.DefaultRegion, "demo")
	require.NoError(t, err)
	alloc.Queues = []config.Queue{{Name: "default", Default: true}, {Name: "pair", Nodes: []string{"demo-node-2", "demo-node-3"}}}
	t.Cleanup(func() { alloc.Queues = nil })
	for _, tc := range []struct {
		name, queue      string
		include, exclude []string
		want             []string
		field, message   string
	}{
		{name: "no constraint"},
		{name: "include", include: []string{"demo-node-3", "demo-node-1"}, want: []string{"demo-node-1", "demo-node-3"}},
		{name: "exclude", exclude: []string{"demo-node-2"}, want: []string{"demo-node-1", "demo-node-3", "demo-node-4"}},
		{name: "include less exclude", include: []string{"demo-node-1", "demo-node-2"}, exclude: []string{"demo-node-2"}, want: []string{"demo-node-1"}},
		{name: "the queue's nodes", queue: "pair", want: []string{"demo-node-2", "demo-node-3"}},
		{name: "the queue's less exclude", queue: "pair", exclude: []string{"demo-node-3"}, want: []string{"demo-node-2"}},
		{name: "include outside the queue", queue: "pair", include: []string{"demo-node-1"},
			field: "include_nodes[0]", message: "node demo-node-1 is not in queue pair; its nodes are demo-node-2, demo-node-3"},
		{name: "nothing left", exclude: []string{"demo-node-1", "demo-node-2", "demo-node-3", "demo-node-4"},
			field: "exclude_nodes", message: "leaves no node of queue default of allocation demo to run on"},
		{name: "an unknown node", exclude: []string{"demo-node-9"},
			field: "exclude_nodes[0]", message: "allocation demo has no node demo-node-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo", QueueName: tc.queue,
				IncludeNodes: tc.include, ExcludeNodes: tc.exclude}
			_, err := Check(cfg, &spec)
			if tc.field != "" {
				var fe *protocol.FieldError
				require.True(t, errors.As(err, &fe), "%v", err)
				assert.Equal(t, tc.field, fe.Field)
				assert.Contains(t, fe.Message, tc.message)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, spec.AllowedNodes)
			assert.Empty(t, spec.Warnings)
		})
	}
}

// TestAllowedNodesMustHoldTheGang: a gang that its allowed nodes cannot
// hold is refused naming the field that narrowed them.
func TestAllowedNodesMustHoldTheGang(t *testing.T) {
	cfg := config.Default()
	spec := protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo", NWorkers: 2, IncludeNodes: []string{"demo-node-1"}}
	_, err := Check(cfg, &spec)
	var fe *protocol.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, "include_nodes", fe.Field)
	assert.NotEmpty(t, fe.Message)
	t.Log(fe.Message)
	spec = protocol.JobSpec{Script: "s", InstanceType: "a100.1gpu", AllocationName: "demo", NWorkers: 2, IncludeNodes: []string{"demo-node-1", "demo-node-2"}}
	_, err = Check(cfg, &spec)
	require.NoError(t, err)
}

// TestJobOverItsWorkspaceCapIsRefused: a job its workspace's cap in its
// class could never let start is refused at submission naming
// priority_class and the cap, instead of waiting for ever; under the cap
// it is accepted.
func TestJobOverItsWorkspaceCapIsRefused(t *testing.T) {
	cfg := config.Default()
	one := 1
	cfg.Regions[0].Allocations[0].Limits = []config.Limit{{Class: "high", MaxGPUs: &one}}
	alloc := cfg.Regions[0].Allocations[0].Name
	spec := protocol.JobSpec{Script: "s", InstanceType: "a100plus.2gpu", AllocationName: alloc, PriorityClass: "high", Workspace: "team-a"}
	_, err := Check(cfg, &spec)
	var fe *protocol.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, "priority_class", fe.Field)
	assert.Contains(t, fe.Message, "workspace team-a may hold at most 1 high GPUs")
	spec = protocol.JobSpec{Script: "s", InstanceType: "a100plus.1gpu", AllocationName: alloc, PriorityClass: "high", Workspace: "team-a"}
	_, err = Check(cfg, &spec)
	require.NoError(t, err)
	spec = protocol.JobSpec{Script: "s", InstanceType: "a100plus.2gpu", AllocationName: alloc, PriorityClass: "medium", Workspace: "team-a"}
	_, err = Check(cfg, &spec)
	require.NoError(t, err, "another class is not capped")
}

// TestRequiredTopologyMustFitADomain: a gang that requires a level no domain
// of its allocation can hold is refused naming required_topology; a level the
// allocation does not have is refused naming the field too; one that fits is
// accepted.
func TestRequiredTopologyMustFitADomain(t *testing.T) {
	cfg := config.Default()
	a := &cfg.Regions[0].Allocations[0]
	a.Topology = []string{"rack"}
	for i := range a.Nodes {
		a.Nodes[i].Topology = map[string]string{"rack": fmt.Sprint("r", i/2)} // racks of two
	}
	for _, tc := range []struct {
		workers  int
		topology scheduler.GangTopology
		field    string
		message  string
	}{
		{3, scheduler.GangTopology{Level: "rack", Required: true}, "required_topology", "the job needs 3 workers in one rack, but no rack in this allocation has more than 2 a100plus nodes"},
		{2, scheduler.GangTopology{Level: "row"}, "preferred_topology", `"row" is not one of the allocation's topology levels (rack)`},
		{2, scheduler.GangTopology{Level: "rack", Required: true}, "", ""},
		{3, scheduler.GangTopology{Level: "rack"}, "", ""},
	} {
		spec := protocol.JobSpec{Script: "s", InstanceType: "a100plus.1gpu", AllocationName: a.Name, NWorkers: tc.workers, Topology: tc.topology}
		_, err := Check(cfg, &spec)
		if tc.field == "" {
			require.NoError(t, err, "%+v", tc)
			continue
		}
		var fe *protocol.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		assert.Equal(t, tc.field, fe.Field)
		assert.Contains(t, fe.Message, tc.message)
		assert.NotContains(t, fe.Message, tc.field+":", "the field is named once")
	}
}
