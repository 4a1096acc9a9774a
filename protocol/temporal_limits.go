package protocol

// Temporal's limits that trainq's workflows depend on, with the server's
// defaults (v1.29) and the dynamic-config names that change them. A workflow
// task that passes one of the "pending" limits fails, and because the cause
// is in the workflow's own code every retry fails the same way: the workflow
// is wedged until its code changes. So trainq does not rely on raising them:
// every fan-out of a workflow is bounded by the budgets below, which stay
// well under the defaults.
const (
	// TemporalPendingSignalsLimit: signals a workflow has sent that the
	// server has not yet delivered (limit.numPendingSignals.error).
	TemporalPendingSignalsLimit = 2000
	// TemporalPendingActivitiesLimit: activities scheduled and not yet
	// closed, cancelled ones included until their cancellation is
	// acknowledged (limit.numPendingActivities.error).
	TemporalPendingActivitiesLimit = 2000
	// TemporalSignalsPerRun: signals one run of a workflow may receive
	// (history.maximumSignalsPerExecution); past it SignalWorkflow is refused.
	TemporalSignalsPerRun = 10000
	// TemporalInFlightUpdates and TemporalUpdatesPerRun: updates admitted and
	// not yet completed (history.maxInFlightUpdates), and updates one run
	// may take in all (history.maxTotalUpdates).
	TemporalInFlightUpdates = 10
	TemporalUpdatesPerRun   = 2000
	// TemporalHistoryEventsLimit and TemporalHistoryBytesLimit: a run past
	// either is terminated (limit.historyCount.error, limit.historySize.error);
	// the server suggests continue-as-new from 4Ki events or 4 MiB
	// (limit.historyCount.suggestContinueAsNew, limit.historySize.suggestContinueAsNew).
	TemporalHistoryEventsLimit = 51200
	TemporalHistoryBytesLimit  = 50 << 20
	// TemporalPayloadBytesLimit: one payload, e.g. a signal's argument or a
	// workflow's input (limit.blobSize.error).
	TemporalPayloadBytesLimit = 2 << 20
	// TemporalBufferedEventsLimit: events (signals received, signals
	// delivered, activities completed...) that may arrive while one workflow
	// task runs (history.maximumBufferedEventsBatch). One more and the server
	// fails the running task (ForceCloseCommand); the worker, which loses
	// the run from its cache, then replays all of it in the next task, during
	// which as many may arrive again.
	TemporalBufferedEventsLimit = 100
)

// trainq's budgets, each a fraction of the limit it guards, so that what one
// workflow does besides the bounded fan-out (a fence, a watch, a timer) can
// never tip it over.
const (
	// AllocatorSignalsInFlight bounds the grants, preemptions and refusals
	// an allocator has in flight (the rest wait in its outbox and go out as
	// earlier ones are delivered). Each delivery is an event that comes in
	// during whatever workflow task is running then: see AllocatorArrivals.
	AllocatorSignalsInFlight = 30
	// AllocatorFenceActivities and AllocatorOtherActivities bound the
	// activities an allocator has pending: its fences (a node's inventory,
	// its fence, the jobs asked about strangers there), and the rest
	// (reclaims' stops, checks). Two shares, so that hundreds of dead nodes,
	// each of whose fences holds its slot until the agent's timeout, never
	// starve the reclaims, nor these the fences. An activity that closes
	// brings in two events (started and closed: with a retry policy the
	// server writes the start only when the activity closes).
	AllocatorFenceActivities = 14
	AllocatorOtherActivities = 10
	// AllocatorCheckTimers bounds the retry timers of the checks that ask a
	// job its attempt (timers due together fire in one batch).
	AllocatorCheckTimers = 4
	// AllocatorArrivals is the most events the allocator's own fan-out can
	// bring in during one of its workflow tasks, however long the task
	// takes: the signals' deliveries, two events per activity, the check
	// timers, and the reclaim and fence ticks, the recovery's registration
	// (two) and two wakes. The rest of TemporalBufferedEventsLimit is left
	// for what others send it unasked (jobs' requests, releases and
	// withdrawals).
	AllocatorArrivals = AllocatorSignalsInFlight + 2*(AllocatorFenceActivities+AllocatorOtherActivities) +
		AllocatorCheckTimers + 2 + 2 + 2
	// JobActivityBudget bounds the activities one job has pending: with
	// MaxNWorkers watches still pending while their workers stop, its stops
	// take what is left.
	JobActivityBudget = TemporalPendingActivitiesLimit * 9 / 10
)
