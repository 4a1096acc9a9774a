// Package protocol holds what trainq's workflows, activities and clients
// exchange: task queues, workflow, signal, update and query names, workflow
// IDs, and the messages themselves; and, because a job request is one of
// those messages, how a request is read and checked where it comes in: the
// strict RunJobRequest decoder (DecodeRunJob), the checks that need no
// configuration (ParseSpec, CheckLimits) and the confinement of its
// directories (ConfineDir). It imports only the policy (scheduler) and the
// backend seam (cluster), so every side can import it without import
// cycles.
package protocol

import "time"

// Task queues. The main queue runs job workflows and control activities; the
// allocators have a queue of their own, so that their workflow tasks (which
// every job of an allocation waits for) never queue behind thousands of job
// tasks, on the server or in the worker's sticky queue; each node has its own
// queue for the activities that touch its workers, so that a node agent per
// GPU server can serve it (as slurmd does).
const (
	TaskQueue           = "trainq"
	AllocatorTaskQueue  = "trainq-allocator"
	NodeTaskQueuePrefix = "trainq-node-"
)

// AllocatorTaskTimeout is the allocator's workflow task timeout. After a
// kill -9 of trainq-worker, the task the dead process held is retried once
// this passes, and tasks queued for its sticky queue move on after the
// worker's StickyScheduleToStartTimeout (also 2s, worker/versioning.go):
// together they bound the allocator's stall to 2s after the kill, plus the
// restarted worker's replay of a history the server keeps to a few thousand
// events by suggesting continue-as-new. An allocator task takes milliseconds.
const AllocatorTaskTimeout = 2 * time.Second

// JobTaskTimeout is a job workflow's task timeout.
const JobTaskTimeout = 5 * time.Second

// NodeTaskQueue is the task queue of the agent that runs workers on node.
func NodeTaskQueue(node string) string { return NodeTaskQueuePrefix + node }

// Workflow type names.
const (
	JobWorkflowName       = "JobWorkflow"
	AllocatorWorkflowName = "AllocatorWorkflow"
	// ReadLogWorkflowName reads one chunk of a worker's log through its
	// node's agent (a short workflow: a client cannot run an activity).
	ReadLogWorkflowName = "ReadLogWorkflow"
)

// Allocator messages.
const (
	UpdateRequestCapacity = "request-capacity"
	// UpdateRequest carries a CapacityRequest to a running allocator and
	// answers where it stands (a CapacityReply); the allocator takes it as
	// it takes SignalRequest, and answers it with a grant, or a refusal if
	// the request can never fit. Unlike a signal it is not an event that can
	// come in while a workflow task runs: the server admits
	// TemporalInFlightUpdates at a time and refuses the rest, which the
	// sender retries, so no burst of requests can force-close the
	// allocator's task.
	UpdateRequest = "request"
	// SignalRequest carries a CapacityRequest (sent with signal-with-start,
	// to an allocator that is not running); the allocator answers as to
	// UpdateRequest.
	SignalRequest = "request"
	// UpdateRelease carries a ReleaseSignal from a node agent that saw a
	// worker gone (see activities.SendRelease); the job sends SignalRelease
	// itself when that failed. Updates for the reason of UpdateRequest.
	UpdateRelease = "release"
	SignalRelease = "release"
	// UpdateWithdraw carries a WithdrawSignal from a job cancelled while it
	// waited (activities.ReportWithdrawal), for the same reason;
	// SignalWithdraw from jobs of older builds, and to a run that refuses
	// the update.
	UpdateWithdraw = "withdraw"
	SignalWithdraw = "withdraw"
	QueryQueue     = "queue"
	// QueryCounts answers a QueueCounts: cheap at any queue length.
	QueryCounts  = "counts"
	QueryExplain = "explain"
	// QueryExpectedStart projects when one waiting job is expected to start
	// (ExpectedStartQuery -> *scheduler.ExpectedStart, nil unless it waits).
	QueryExpectedStart = "expected-start"
	// QueryDryRun answers, for a CapacityRequest of a job that does not
	// exist yet, what it would get if it were queued now (a
	// scheduler.DryRun); nothing changes.
	QueryDryRun = "dry-run"

	// UpdateReconfigure applies a changed config (an AllocatorInput) to a
	// running allocator; see ReconfigureReply.
	UpdateReconfigure = "reconfigure"

	// UpdateRecover makes a running allocator rebuild its state from the
	// jobs themselves and the node agents, as a fresh allocator does.
	UpdateRecover = "recover"

	// UpdateDrain takes a node out of service or puts it back (a
	// DrainRequest; see DrainReply).
	UpdateDrain = "drain"

	// UpdateCheckpoint records that a running attempt saved its progress
	// (a CheckpointReport): preempting it from then on loses only the work
	// done since, which the victim ordering weighs (scheduler.Pool.Checkpointed).
	UpdateCheckpoint = "checkpoint"
)

// Job messages.
const (
	SignalGrant   = "grant"
	SignalPreempt = "preempt"
	QueryStatus   = "status"

	// SignalRefuse tells a waiting job that the allocation can no longer
	// run it (it was reconfigured); the attempt fails for good.
	SignalRefuse = "refuse"

	// SignalCheckpointed tells a running job that its attempt saved its
	// progress (a CheckpointReply the allocator recorded): the attempt's
	// record shows it, and a checkpoint within a notice's window counts as
	// honouring the notice.
	SignalCheckpointed = "checkpointed"

	// UpdateRegister is how a recovering allocator learns what a job holds
	// or waits for (a JobHold) and tells it the allocator's new epoch.
	UpdateRegister = "register"
)

// AllocatorWorkflowID is the ID of the allocator of one allocation.
func AllocatorWorkflowID(region, allocation string) string {
	return "allocator/" + region + "/" + allocation
}

// Job kinds and name prefixes (ML Space names jobs lm-mpi-job-<uuid>).
const (
	JobNamePrefix      = "lm-mpi-job-"
	NotebookNamePrefix = "jupyter-"
)

// NotebookScript is what a "Jupyter server" runs when its request names no
// script: it stays alive until it is stopped (Jupyter itself is not
// installed on the local backend).
const NotebookScript = "exec sleep infinity"
