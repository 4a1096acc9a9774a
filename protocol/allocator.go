package protocol

import (
	"time"

	"github.com/trainq/trainq/scheduler"
)

// What an allocator is started with and carries, and what operators and
// jobs ask of it besides capacity: drains, checkpoints, recoveries.

// AllocatorInput starts (or continues) an allocator.
type AllocatorInput struct {
	Region          string           `json:"region"`
	Allocation      string           `json:"allocation"`
	Nodes           []scheduler.Node `json:"nodes"`
	Policy          scheduler.Policy `json:"policy"`
	StopGracePeriod time.Duration    `json:"stop_grace_period"`
	ReclaimInterval time.Duration    `json:"reclaim_interval"`
	NodeTimeout     time.Duration    `json:"node_timeout,omitempty"`
	// MaxWaiting caps the queue for first attempts (0 = no cap).
	MaxWaiting int `json:"max_waiting,omitempty"`
	// WaitingLimits cap the first attempts a workspace may have waiting in
	// a class (the allocation's limits with max_waiting).
	WaitingLimits WaitingLimits `json:"waiting_limits,omitempty"`
	// PreemptionNotice is how long a preempted job's workers are given,
	// once told, before they are stopped (see PreemptSignal.Notice).
	PreemptionNotice time.Duration `json:"preemption_notice,omitempty"`
	// ClassPreemptionNotice overrides PreemptionNotice for the jobs of a
	// class (keyed by the class's name: low, medium, high).
	ClassPreemptionNotice map[string]time.Duration `json:"class_preemption_notice,omitempty"`
	// NoticeSignal is sent to the workers with every notice ("": none).
	NoticeSignal string `json:"notice_signal,omitempty"`
	// MaxUpdatesPerRun lowers the number of requests after which the
	// allocator continues as new (0 = the default, 1000); tests use it.
	MaxUpdatesPerRun int             `json:"max_updates_per_run,omitempty"`
	State            *AllocatorState `json:"state,omitempty"`
}

// AllocatorState is what an allocator carries through continue-as-new.
type AllocatorState struct {
	// Pool is the pool's state as written before version 3 of the snapshot;
	// since then it travels packed as the allocator's second argument, and
	// this is empty.
	Pool    scheduler.Snapshot `json:"pool,omitzero"`
	NextSeq int64              `json:"next_seq"`
	// Orphans are jobs whose workflow vanished while holding capacity; their
	// workers are being stopped before the capacity is freed.
	Orphans  []string          `json:"orphans,omitempty"`
	Counters AllocatorCounters `json:"counters"`
	// Epoch names this allocator's state: it is new whenever the state is
	// rebuilt by recovery, and kept through continue-as-new. Grants carry
	// it, so that a job can tell a dead allocator's late grant from a live one.
	Epoch string `json:"epoch,omitempty"`
	// Fenced are the nodes the allocator grants nothing on until their agent
	// has confirmed that no stale worker runs there.
	Fenced []FencedNode `json:"fenced,omitempty"`
	// Drained are the nodes an operator took out of service, with why.
	Drained []DrainedNode `json:"drained,omitempty"`
	// Withdrawn remembers withdrawals that arrived before the request they
	// withdraw, so that the late request is refused instead of queued.
	Withdrawn []WithdrawSignal `json:"withdrawn,omitempty"`
	// Forgotten remembers the attempts the allocator gave up because their
	// job no longer knew it held them (a reset): a request for one of them,
	// or an earlier one, is told to rerun as a later attempt.
	Forgotten []WithdrawSignal `json:"forgotten,omitempty"`
	// AfterReclaim are requests of jobs reset to an earlier attempt: each is
	// queued once the newer attempt its job's reset abandoned (an orphan)
	// has been reclaimed.
	AfterReclaim []CapacityRequest `json:"after_reclaim,omitempty"`
	// Unanswered are jobs that did not answer the last recovery's register
	// update; they are asked again until they answer or end.
	Unanswered []string `json:"unanswered,omitempty"`
	// RecoveredAt is when the state was last rebuilt from the jobs.
	RecoveredAt time.Time `json:"recovered_at,omitzero"`
	// ChargedFrom is the time the last recovery charged fair-share usage
	// from: a job it missed is charged from there once it is adopted.
	ChargedFrom time.Time `json:"charged_from,omitzero"`
	// Builds are the worker builds the allocator's runs have run on, the
	// latest last (see allocation.State.NoteBuild).
	Builds []string `json:"builds,omitempty"`
}

// AllocatorCounters are lifetime totals, kept across continue-as-new.
type AllocatorCounters struct {
	Grants      int64 `json:"grants"`
	Preemptions int64 `json:"preemptions"`
	Reclaimed   int64 `json:"reclaimed"`
	Recoveries  int64 `json:"recoveries,omitempty"`
	NodesLost   int64 `json:"nodes_lost,omitempty"`
}

// DrainedNode is a node an operator took out of service (see DrainRequest).
type DrainedNode struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// DrainRequest takes a node of an allocation out of service (Slurm's
// drain, kubectl drain): nothing new starts there, and the jobs running
// there get a notice (reason node_drain) and rerun elsewhere without
// spending max_retry. Undrain puts the node back in service.
type DrainRequest struct {
	Node    string `json:"node"`
	Undrain bool   `json:"undrain,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// DrainReply says what a drain changed: Changed is false when the node was
// already (un)drained; Jobs are the jobs told to leave.
type DrainReply struct {
	Node    string   `json:"node"`
	Drained bool     `json:"drained"`
	Changed bool     `json:"changed"`
	Jobs    []string `json:"jobs,omitempty"`
}

// FencedNode is a node the allocator grants nothing on: its agent did not
// answer (lost), or has yet to confirm which workers run there (after a
// recovery).
type FencedNode struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	// Cause is why the node is fenced, for decisions (Reason is for
	// people): "recovering", "lost" or "added"; empty in states written
	// before it was kept.
	Cause string `json:"cause,omitempty"`
}

// CheckpointReport tells the allocator that Attempt of Job has just saved
// its progress. The allocator stamps it with its own clock, so that a
// worker's skewed clock cannot claim work it has not saved.
type CheckpointReport struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	// Progress, when more than 0, is the share of the job's work done (at
	// most 1): the allocator expects the attempt to end when its rate says
	// (scheduler.Pool.Progressed), for expected starts and backfill.
	Progress float64 `json:"progress,omitempty"`
}

// CheckProgress refuses a progress share out of range, naming the field.
func CheckProgress(p float64) error {
	if !(p >= 0 && p <= 1) {
		return fieldErr("progress", "must be a share of the work done, more than 0 and at most 1 (e.g. 0.4); got %v", p)
	}
	return nil
}

// CheckpointReply is the checkpoint the allocator recorded.
type CheckpointReply struct {
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// RecoverReply says what a recovery found.
type RecoverReply struct {
	Epoch string `json:"epoch"`
	// Listed is how many running jobs of the allocation visibility listed.
	Listed  int `json:"listed"`
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// Conflicts are holds that could not be adopted because another job
	// already held that capacity; each is named with the reason.
	Conflicts []string `json:"conflicts,omitempty"`
	// Fenced are the nodes that grant nothing until their agent confirms
	// which workers run there.
	Fenced []string `json:"fenced,omitempty"`
	// Unanswered are running jobs that did not answer the register update;
	// the nodes where they have workers stay fenced until they do.
	Unanswered []string `json:"unanswered,omitempty"`
}
