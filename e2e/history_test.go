package e2e

import (
	"fmt"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/converter"

	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
)

// allocatorGrant is one grant the allocator recorded in its history.
type allocatorGrant struct {
	Job   string
	Grant protocol.GrantSignal
}

// fetchHistory returns every event of a workflow's current run on the shared
// dev server.
func fetchHistory(t *testing.T, workflowID string) []*historypb.HistoryEvent {
	t.Helper()
	return history(t, env.client, workflowID, "")
}

// fetchChainHistory returns the events of a workflow's current run and of
// every run it continued from, oldest first. An idle allocator continues as
// new every few thousand reclaim ticks, so on a slow machine one may hand
// over in the middle of a test: its earlier grants are then in the run
// before. Runs left by a reset are not in the chain (the reset run copies
// the events before its reset point).
func fetchChainHistory(t *testing.T, workflowID string) []*historypb.HistoryEvent {
	t.Helper()
	const maxRuns = 100
	var runs [][]*historypb.HistoryEvent
	runID := ""
	for range maxRuns {
		events := history(t, env.client, workflowID, runID)
		require.NotEmpty(t, events, "history of %s run %q", workflowID, runID)
		runs = append(runs, events)
		runID = events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if runID == "" {
			break
		}
	}
	require.Empty(t, runID, "%s has more than %d runs", workflowID, maxRuns)
	var all []*historypb.HistoryEvent
	for i := len(runs) - 1; i >= 0; i-- {
		all = append(all, runs[i]...)
	}
	return all
}

// checkAllocatorHistory replays the allocator's recorded decisions: every
// grant it sent and every release and withdrawal it received (signal or
// update), in history order, through every run of the allocation's
// allocator. It fails the test if a grant ever lands on a GPU that another
// job still holds (running or releasing), and returns the grants in order.
func checkAllocatorHistory(t *testing.T, allocation string) []allocatorGrant {
	t.Helper()
	events := fetchChainHistory(t, protocol.AllocatorWorkflowID("T", allocation))
	dc := converter.GetDefaultDataConverter()
	type gpu struct {
		node  string
		index int
	}
	type holding struct {
		job     string
		attempt int
		worker  int
	}
	held := map[gpu]holding{}
	release := func(input *commonpb.Payloads) {
		var r protocol.ReleaseSignal
		require.NoError(t, dc.FromPayloads(input, &r))
		released := map[int]bool{}
		for _, w := range r.Workers {
			released[w] = true
		}
		for k, h := range held {
			if h.job == r.Job && h.attempt == r.Attempt && released[h.worker] {
				delete(held, k)
			}
		}
	}
	withdraw := func(input *commonpb.Payloads) {
		var w protocol.WithdrawSignal
		require.NoError(t, dc.FromPayloads(input, &w))
		for k, h := range held {
			if h.job == w.Job && h.attempt == w.Attempt {
				delete(held, k)
			}
		}
	}
	var grants []allocatorGrant
	updates := updateInputs{}
	for _, e := range events {
		updates.admitted(e)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			// A node agent's release (activities.SendRelease), a
			// cancelled job's withdrawal (ReportWithdrawal).
			switch in := updates.accepted(e); in.GetName() {
			case protocol.UpdateRelease:
				release(in.GetArgs())
			case protocol.UpdateWithdraw:
				withdraw(in.GetArgs())
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			attrs := e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes()
			if attrs.GetSignalName() != protocol.SignalGrant {
				continue
			}
			var g protocol.GrantSignal
			require.NoError(t, dc.FromPayloads(attrs.GetInput(), &g))
			job := attrs.GetWorkflowExecution().GetWorkflowId()
			for _, p := range g.Placement {
				for _, i := range p.GPUs {
					k := gpu{p.Node, i}
					if h, busy := held[k]; busy {
						t.Fatalf("event %d: %s attempt %d was granted GPU %d of %s, still held by %s attempt %d worker %d",
							e.GetEventId(), job, g.Attempt, i, p.Node, h.job, h.attempt, h.worker)
					}
					held[k] = holding{job, g.Attempt, p.Worker}
				}
			}
			grants = append(grants, allocatorGrant{Job: job, Grant: g})
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			attrs := e.GetWorkflowExecutionSignaledEventAttributes()
			switch attrs.GetSignalName() {
			case protocol.SignalRelease:
				release(attrs.GetInput())
			case protocol.SignalWithdraw:
				withdraw(attrs.GetInput())
			}
		}
	}
	return grants
}

// updateInputs are the inputs of the updates admitted in a history, by
// update ID: an update a reset reapplied is written as admitted, and its
// accepted event then carries no request.
type updateInputs map[string]*updatepb.Input

// admitted notes e's input if e admits an update.
func (u updateInputs) admitted(e *historypb.HistoryEvent) {
	if a := e.GetWorkflowExecutionUpdateAdmittedEventAttributes(); a != nil {
		u[a.GetRequest().GetMeta().GetUpdateId()] = a.GetRequest().GetInput()
	}
}

// accepted is the input of the update e accepts (nil if e accepts none).
func (u updateInputs) accepted(e *historypb.HistoryEvent) *updatepb.Input {
	a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes()
	if in := a.GetAcceptedRequest().GetInput(); in != nil {
		return in
	}
	return u[a.GetProtocolInstanceId()]
}

func grantOrder(grants []allocatorGrant, names map[string]string) []string {
	var out []string
	for _, g := range grants {
		label, ok := names[g.Job]
		if !ok {
			label = g.Job
		}
		out = append(out, fmt.Sprintf("%s#%d", label, g.Grant.Attempt))
	}
	return out
}
