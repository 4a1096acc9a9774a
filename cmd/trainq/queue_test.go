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

// An allocation with a topology shows each node's place; one without shows no such column.
func TestQueueShowsWhereNodesSit(t *testing.T) {
	for _, racked := range []bool{true, false} {
		var out bytes.Buffer
		g := newGlobals(strings.NewReader(""), &out, &out)
		nodes := []scheduler.NodeInfo{{Name: "n-1", Family: "a100", GPUs: 8, FreeGPUs: 8}, {Name: "n-2", Family: "a100", GPUs: 8, FreeGPUs: 8}}
		if racked {
			nodes[0].Topology = map[string]string{"rack": "r1", "block": "b1"}
			nodes[1].Topology = map[string]string{"rack": "r2", "block": "b1"}
		}
		printQueue(g, protocol.QueueView{Region: "R", Allocation: "a", View: scheduler.View{Nodes: nodes}})
		text := out.String()
		if got := strings.Contains(text, "PLACE"); got != racked {
			t.Errorf("racked=%v: PLACE column shown %v in\n%s", racked, got, text)
		}
		if racked && !strings.Contains(text, "block=b1 rack=r2") {
			t.Errorf("n-2's place missing in\n%s", text)
		}
	}
}

// --limit and --offset are checked before anything is asked, naming the flag.
func TestQueuePageFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--limit 0":    "--limit must be between 1 and 1000, got 0",
		"--limit 1001": "--limit: must be between 1 and 1000, got 1001",
		"--offset -2":  "--offset: must be 0 or more, got -2",
		"--limit x":    "invalid value",
	} {
		var out bytes.Buffer
		g := newGlobals(strings.NewReader(""), &out, &out)
		err := runQueue(t.Context(), g, strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// A page of a long queue says which jobs it shows and how to see others.
func TestQueueShowsItsPage(t *testing.T) {
	var out bytes.Buffer
	g := newGlobals(strings.NewReader(""), &out, &out)
	v := protocol.QueueView{Region: "R", Allocation: "a", Offset: 100, Limit: 2, WaitingTotal: 20000, View: scheduler.View{
		Waiting: []scheduler.WaitingInfo{{Job: "j-101", Position: 101, Reason: "r"}, {Job: "j-102", Position: 102, Reason: "r"}}}}
	printQueue(g, v)
	if want := "Waiting, in launch order (101 to 102 of 20000; --offset and --limit show others):"; !strings.Contains(out.String(), want) {
		t.Errorf("missing %q in\n%s", want, out.String())
	}
}
