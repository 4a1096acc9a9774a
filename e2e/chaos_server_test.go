package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// This file checks the promise from the server's side: every run's history
// is read (jobs and allocators, reset and terminated runs included) for
// failed workflow tasks, for GPUs handed to a new worker before the server
// saw the last one end, and for release signals the server refused and the
// job never sent again.

// chaosServer is what the histories say.
type chaosServer struct {
	runs, events int
	readErrors   []string

	// failed counts failed workflow tasks by "type: cause", but for the
	// benign ones: unhandled (UnhandledCommand: a task that completed while
	// a new event came in, run again with it, by type) and resets (the
	// harness's own resets and terminates: ResetWorkflow, and
	// ForceCloseCommand right before a terminate, by type and cause).
	failed         map[string]int
	failedExamples []string
	unhandled      map[string]int
	resets         map[string]int
	timedOut       map[string]int // workflow tasks timed out (a killed trainq-worker's), by type
	// cutShort: tasks the worker failed because the server handed it a
	// history shorter than it said (a history service killed mid-read; see
	// cutShortRead), by type. The SDK runs the task again from a fresh read.
	cutShort map[string]int

	// unconfirmed: a worker was started on a GPU of a node before any
	// history showed the previous worker on that GPU gone.
	unconfirmed []string
	// neverEnded: workers whose end no history shows.
	neverEnded []string
	workers    int

	refused int      // release signals the server refused (the allocator existed)
	dropped []string // ... and that the job never got delivered after
	// refusedStarts are the grants a node refused (see chaosWorker.refused):
	// the allocator handed on a GPU that a worker it did not know of held,
	// and the node's own check kept the two apart.
	refusedStarts []string
	// slowStarts are StartWorker activities that took longer than
	// chaosSlowStart from their scheduling to their completion.
	slowStarts []string
	// grants and mostGrants: grant signals the allocators sent, and the most
	// in one workflow task.
	grants, mostGrants int
	mostGrantsAt       string

	// fenceStops are the workers FenceNode answers say they stopped.
	fenceStops []chaosFenceStop

	// What add gathers for finish.
	byID      map[cluster.WorkerID]*chaosWorker
	fences    []chaosFence
	refusedAt map[chaosRelease]enumspb.SignalExternalWorkflowExecutionFailedCause
	delivered map[string][]time.Time // job/attempt/workers -> delivery times
	seen      map[string]bool        // dedupes what a reset run copied from the run it reset
}

func newChaosServer() *chaosServer {
	return &chaosServer{failed: map[string]int{}, unhandled: map[string]int{}, resets: map[string]int{},
		timedOut: map[string]int{}, cutShort: map[string]int{}, byID: map[cluster.WorkerID]*chaosWorker{},
		refusedAt: map[chaosRelease]enumspb.SignalExternalWorkflowExecutionFailedCause{},
		delivered: map[string][]time.Time{}, seen: map[string]bool{}}
}

// cutShortRead says whether a failed workflow task is the worker's report
// that the server's history for it ended before the events it announced
// ("premature end of stream"): Temporal's own read cut short, which the
// campaign's history-service kills cause; no trainq code ran on it.
func cutShortRead(a *historypb.WorkflowTaskFailedEventAttributes) bool {
	return a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE &&
		strings.Contains(a.GetFailure().GetMessage(), "premature end of stream")
}

// chaosSlowStart: a StartWorker that takes longer than this is reported (a
// start whose agent died with it waits out the activity's StartToClose
// timeout: it has no heartbeat).
const chaosSlowStart = 30 * time.Second

type chaosRunRef struct {
	id, run, typ string
}

// listRuns lists every run of every workflow on the server.
func listRuns(c client.Client) ([]chaosRunRef, error) {
	var out []chaosRunRef
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1000, NextPageToken: token})
		cancel()
		if err != nil {
			return out, err
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, chaosRunRef{id: e.GetExecution().GetWorkflowId(), run: e.GetExecution().GetRunId(), typ: e.GetType().GetName()})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// chaosWorker is one worker as the histories know it.
type chaosWorker struct {
	id    cluster.WorkerID
	node  string
	gpus  []int
	start time.Time   // its StartWorker activity started
	ends  []time.Time // a watch, a stop or a release said it was gone
	// refused: its node refused to start it (StartWorker failed with
	// GPUsBusy: a live worker the allocation did not know of uses a GPU of
	// its grant), so it never held the GPUs.
	refused bool
}

// chaosFence is one FenceNode answer: every worker of node that started
// before it, but those it kept, is gone by its completion.
type chaosFence struct {
	node              string
	keep              []cluster.WorkerID
	started, answered time.Time
}

// chaosFenceStop is one worker a FenceNode answer stopped.
type chaosFenceStop struct {
	id                  cluster.WorkerID
	node                string
	scheduled, answered time.Time
}

type chaosRelease struct {
	job     string
	attempt int
	workers string
	at      time.Time
}

// checkServer reads every history and says what they show.
func (r *chaosRun) checkServer() *chaosServer {
	s := newChaosServer()
	runs, err := listRuns(r.c)
	if err != nil {
		s.readErrors = append(s.readErrors, "listing the workflows: "+err.Error())
	}
	for _, ref := range runs {
		events, err := chaosHistory(r.c, ref.id, ref.run)
		if err != nil {
			s.readErrors = append(s.readErrors, fmt.Sprintf("%s run %s: %v", ref.id, ref.run, err))
			continue
		}
		s.runs++
		s.events += len(events)
		s.add(ref, events)
	}
	s.finish()
	return s
}

// finish judges what add gathered.
func (s *chaosServer) finish() {
	// GPUs handed on before the server saw their worker end.
	byNode := map[string][]*chaosWorker{}
	for _, w := range s.byID {
		switch {
		case w.refused:
			s.refusedStarts = append(s.refusedStarts, fmt.Sprintf("%s on %s GPUs %v at %s", w.id, w.node, w.gpus, w.start.Format("15:04:05.000")))
		case !w.start.IsZero():
			byNode[w.node] = append(byNode[w.node], w)
			s.workers++
		}
	}
	sort.Strings(s.refusedStarts)
	for node, ws := range byNode {
		sort.Slice(ws, func(i, j int) bool { return ws[i].start.Before(ws[j].start) })
		for i, x := range ws {
			end, how := x.end(s.fences)
			if end.IsZero() {
				s.neverEnded = append(s.neverEnded, fmt.Sprintf("%s on %s GPUs %v, started %s", x.id, node, x.gpus, x.start.Format("15:04:05.000")))
			}
			for _, y := range ws[i+1:] {
				if !sharesGPU(x.gpus, y.gpus) {
					continue
				}
				if end.IsZero() || end.After(y.start) {
					seenEnd := "no history shows it gone"
					if !end.IsZero() {
						seenEnd = fmt.Sprintf("seen gone %s later (%s)", end.Sub(y.start).Round(time.Millisecond), how)
					}
					s.unconfirmed = append(s.unconfirmed, fmt.Sprintf("%s started on %s GPUs %v at %s while %s (GPUs %v, started %s) held them: %s",
						y.id, node, y.gpus, y.start.Format("15:04:05.000"), x.id, x.gpus, x.start.Format("15:04:05.000"), seenEnd))
					break
				}
			}
		}
	}
	sort.Strings(s.unconfirmed)
	sort.Strings(s.neverEnded)
	sort.Strings(s.slowStarts)

	// Refused releases that were never delivered after.
	for rel, cause := range s.refusedAt {
		s.refused++
		ok := false
		for _, at := range s.delivered[rel.key()] {
			if !at.Before(rel.at) {
				ok = true
			}
		}
		if !ok {
			s.dropped = append(s.dropped, fmt.Sprintf("%s attempt %d workers %s at %s: %s", rel.job, rel.attempt, rel.workers,
				rel.at.Format("15:04:05.000"), cause))
		}
	}
	sort.Strings(s.dropped)
}

func (r chaosRelease) key() string { return fmt.Sprintf("%s/%d/%s", r.job, r.attempt, r.workers) }

func sharesGPU(a, b []int) bool {
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

// end is when the histories first show w gone, and how.
func (w *chaosWorker) end(fences []chaosFence) (time.Time, string) {
	var end time.Time
	how := ""
	for _, t := range w.ends {
		if !t.Before(w.start) && (end.IsZero() || t.Before(end)) {
			end, how = t, "its watch, its stop or its release"
		}
	}
	for _, f := range fences {
		if f.node == w.node && f.started.After(w.start) && !slices.Contains(f.keep, w.id) && (end.IsZero() || f.answered.Before(end)) {
			end, how = f.answered, "a fence of "+f.node
		}
	}
	return end, how
}

type chaosScheduled struct {
	activity           string
	input              *commonpb.Payloads
	queue              string
	scheduled, started time.Time
}

// add reads one run's events.
func (s *chaosServer) add(ref chaosRunRef, events []*historypb.HistoryEvent) {
	workers, seen := s.byID, s.seen
	scheduled := map[int64]*chaosScheduled{}
	releases := map[int64]chaosRelease{} // signal initiated event -> release
	grantsPerTask := map[int64]int{}
	// once tells whether an event at this time, of this kind, about this
	// thing, is seen for the first time: a reset run starts with a copy of
	// the events of the run it reset.
	once := func(e *historypb.HistoryEvent, what string) bool {
		k := fmt.Sprintf("%s|%d|%s|%s", ref.id, e.GetEventTime().AsTime().UnixNano(), e.GetEventType(), what)
		if seen[k] {
			return false
		}
		seen[k] = true
		return true
	}
	updates := updateInputs{}
	for i, e := range events {
		at := e.GetEventTime().AsTime()
		updates.admitted(e)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			a := e.GetWorkflowTaskFailedEventAttributes()
			if !once(e, "task") {
				continue
			}
			// A terminate (the harness's, or the one that ends a reset
			// run) fails the task in flight with ForceCloseCommand.
			terminated := a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND && endsTerminated(events[i+1:])
			switch {
			case a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND:
				s.unhandled[ref.typ]++
			case a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW || terminated:
				s.resets[ref.typ+": "+a.GetCause().String()]++
			case cutShortRead(a):
				s.cutShort[ref.typ]++
			default:
				s.failed[ref.typ+": "+a.GetCause().String()]++
				if len(s.failedExamples) < 10 {
					s.failedExamples = append(s.failedExamples, fmt.Sprintf("%s run %s event %d (%s): %s: %s", ref.id, ref.run, e.GetEventId(),
						at.Format("15:04:05.000"), a.GetCause(), chaosFirstLine(a.GetFailure().GetMessage())))
				}
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			if once(e, "task") {
				if e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
					s.timedOut[ref.typ+" (sticky queue)"]++
				} else {
					s.timedOut[ref.typ]++
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			scheduled[e.GetEventId()] = &chaosScheduled{activity: a.GetActivityType().GetName(), input: a.GetInput(),
				queue: a.GetTaskQueue().GetName(), scheduled: at}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			sc := scheduled[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]
			if sc == nil {
				continue
			}
			sc.started = at
			if sc.activity == "StartWorker" {
				var spec cluster.WorkerSpec
				if decodeFirst(sc.input, &spec) != nil {
					continue
				}
				w := workers[spec.ID]
				if w == nil {
					w = &chaosWorker{id: spec.ID}
					workers[spec.ID] = w
				}
				if w.start.IsZero() || at.Before(w.start) {
					w.node, w.gpus, w.start = spec.Node, spec.GPUs, at
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			a := e.GetActivityTaskFailedEventAttributes()
			sc := scheduled[a.GetScheduledEventId()]
			if sc == nil || sc.activity != "StartWorker" ||
				a.GetFailure().GetApplicationFailureInfo().GetType() != activities.ErrTypeGPUsBusy {
				continue
			}
			var spec cluster.WorkerSpec
			if decodeFirst(sc.input, &spec) == nil && workers[spec.ID] != nil {
				workers[spec.ID].refused = true
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			sc := scheduled[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]
			if sc == nil {
				continue
			}
			var id cluster.WorkerID
			switch sc.activity {
			case "StartWorker":
				if took := at.Sub(sc.scheduled); took > chaosSlowStart && once(e, "start") {
					var spec cluster.WorkerSpec
					_ = decodeFirst(sc.input, &spec)
					s.slowStarts = append(s.slowStarts, fmt.Sprintf("%s on %s: scheduled %s, completed %s later",
						spec.ID, spec.Node, sc.scheduled.Format("15:04:05.000"), took.Round(100*time.Millisecond)))
				}
				continue
			case "WatchWorker":
				var in activities.WatchWorkerInput
				if decodeFirst(sc.input, &in) != nil {
					continue
				}
				id = in.WorkerID
			case "StopWorker":
				var in activities.StopWorkerInput
				if decodeFirst(sc.input, &in) != nil {
					continue
				}
				id = in.ID
			case "FenceNode":
				var in activities.FenceNodeInput
				node := strings.TrimPrefix(sc.queue, protocol.NodeTaskQueuePrefix)
				if decodeFirst(sc.input, &in) == nil && !sc.started.IsZero() {
					s.fences = append(s.fences, chaosFence{node: node, keep: in.Keep, started: sc.started, answered: at})
				}
				var reply activities.FenceNodeReply
				if decodeFirst(e.GetActivityTaskCompletedEventAttributes().GetResult(), &reply) == nil && once(e, "fence "+node) {
					for _, w := range reply.Stopped {
						s.fenceStops = append(s.fenceStops, chaosFenceStop{id: w.ID, node: node, scheduled: sc.scheduled, answered: at})
					}
				}
				continue
			default:
				continue
			}
			s.ended(id, at)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			// The job's release signal, or a node agent's release update.
			input := updates.accepted(e)
			name, args := input.GetName(), input.GetArgs()
			if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
				name, args = a.GetSignalName(), a.GetInput()
			}
			if name != protocol.SignalRelease || ref.typ != protocol.AllocatorWorkflowName {
				continue
			}
			var rel protocol.ReleaseSignal
			if decodeFirst(args, &rel) != nil || len(rel.LostNodes) > 0 {
				continue // a lost worker's release: nobody saw it stop
			}
			for _, w := range rel.Workers {
				s.ended(cluster.WorkerID{Job: rel.Job, Attempt: rel.Attempt, Worker: w}, at)
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			a := e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes()
			switch a.GetSignalName() {
			case protocol.SignalGrant:
				if ref.typ == protocol.AllocatorWorkflowName && once(e, fmt.Sprint("grant ", a.GetWorkflowExecution().GetWorkflowId())) {
					s.grants++
					task := a.GetWorkflowTaskCompletedEventId()
					grantsPerTask[task]++
					if grantsPerTask[task] > s.mostGrants {
						s.mostGrants = grantsPerTask[task]
						s.mostGrantsAt = fmt.Sprintf("%s run %s, workflow task completed at event %d", ref.id, ref.run, task)
					}
				}
			case protocol.SignalRelease:
				var rel protocol.ReleaseSignal
				if decodeFirst(a.GetInput(), &rel) == nil {
					releases[e.GetEventId()] = chaosRelease{job: ref.id, attempt: rel.Attempt, workers: fmt.Sprint(rel.Workers), at: at}
				}
			}
		case enumspb.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
			if rel, ok := releases[e.GetExternalWorkflowExecutionSignaledEventAttributes().GetInitiatedEventId()]; ok {
				s.delivered[rel.key()] = append(s.delivered[rel.key()], at)
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED:
			a := e.GetSignalExternalWorkflowExecutionFailedEventAttributes()
			rel, ok := releases[a.GetInitiatedEventId()]
			// An allocator that does not exist needs no release: the next
			// one recovers from the jobs.
			if ok && a.GetCause() != enumspb.SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND {
				s.refusedAt[rel] = a.GetCause()
			}
		}
	}
}

// endsTerminated tells whether events end with the run's termination, no
// workflow task in between (the events buffered meanwhile come first).
func endsTerminated(events []*historypb.HistoryEvent) bool {
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
			return true
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			return false
		}
	}
	return false
}

// ended records that the histories saw worker id gone at at.
func (s *chaosServer) ended(id cluster.WorkerID, at time.Time) {
	w := s.byID[id]
	if w == nil {
		// Seen gone before its start is read (another run's history): kept
		// for when the start comes.
		w = &chaosWorker{id: id}
		s.byID[id] = w
	}
	w.ends = append(w.ends, at)
}

func decodeFirst(p *commonpb.Payloads, v any) error {
	if len(p.GetPayloads()) == 0 {
		return fmt.Errorf("no payload")
	}
	return chaosDecode(p.GetPayloads()[0], v)
}

func chaosFirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
