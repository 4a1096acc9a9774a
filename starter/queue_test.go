package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func TestQueueShowsReservedNodes(t *testing.T) {
	var out bytes.Buffer
	g := newGlobals(strings.NewReader(""), &out, &out)
	v := protocol.QueueView{Region: "R", Allocation: "a", View: scheduler.View{
		Nodes: []scheduler.NodeInfo{
			{Name: "n-1", Family: "a100", GPUs: 8, FreeGPUs: 2, AllocatedGPUs: 6, ReservedFor: "big"},
			{Name: "n-2", Family: "a100", GPUs: 8, AllocatedGPUs: 8},
		},
		Waiting: []scheduler.WaitingInfo{{Job: "big", Class: scheduler.Medium, Kind: scheduler.KindJob, GPUs: 8, Position: 1,
			Reserved: []string{"n-1"}, Reason: "waiting for 1 node with 8 free a100 GPUs; it has been the first medium-priority request for 45m0s (reserve_after 30m0s), so node n-1 is reserved for it"}},
	}}
	printQueue(g, v)
	text := out.String()
	for _, want := range []string{"n-1   a100", "reserved for big (draining: no later job starts here)", "so node n-1 is reserved for it"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	if strings.Count(text, "reserved for big") != 1 {
		t.Errorf("n-2 shown as reserved:\n%s", text)
	}
}
