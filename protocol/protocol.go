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

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

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
	// SignalRequest carries a CapacityRequest (sent with signal-with-start,
	// which no per-workflow update limit throttles); the allocator answers
	// with a grant, or a refusal if the request can never fit.
	SignalRequest  = "request"
	SignalRelease  = "release"
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

// JobSpec is ML Space's RunJobRequest plus what trainq records about the submitter.
type JobSpec struct {
	Script             string            `json:"script"`
	BaseImage          string            `json:"base_image"`
	InstanceType       string            `json:"instance_type"`
	Region             string            `json:"region"`
	AllocationName     string            `json:"allocation_name"`
	NWorkers           int               `json:"n_workers"`
	Type               string            `json:"type"`
	ProcessesPerWorker int               `json:"processes_per_worker"` // 0 = "default": GPUs per worker
	JobDesc            string            `json:"job_desc,omitempty"`
	PriorityClass      string            `json:"priority_class"`
	MaxRetry           int               `json:"max_retry"`
	EnvVariables       map[string]string `json:"env_variables,omitempty"`
	Flags              map[string]string `json:"flags,omitempty"`
	CheckpointDir      string            `json:"checkpoint_dir,omitempty"`
	// Health is ML Space's health_params: stuck-job detection (nil = off).
	Health *JobHealth `json:"health,omitempty"`
	// The rest of ML Space's RunJobRequest (protocol/mlspace_fields.go says
	// what trainq does with each).
	QueueName string `json:"queue_name,omitempty"`
	// RequestedClass is a shared-queue class the request named
	// (shared-low, shared-medium); PriorityClass is the class it runs as.
	RequestedClass string `json:"requested_class,omitempty"`
	Internet       *bool  `json:"internet,omitempty"`
	CondaEnv       string `json:"conda_env,omitempty"`
	ShmSizeClass   string `json:"shm_size_class,omitempty"`
	PytorchUseEnv  bool   `json:"pytorch_use_env,omitempty"`
	// ElasticMinWorkers..ElasticMaxWorkers is a pytorch_elastic job's
	// --nnodes range (0: not elastic).
	ElasticMinWorkers  int      `json:"elastic_min_workers,omitempty"`
	ElasticMaxWorkers  int      `json:"elastic_max_workers,omitempty"`
	ElasticMaxRestarts int      `json:"elastic_max_restarts,omitempty"`
	IncludeNodes       []string `json:"include_nodes,omitempty"`
	ExcludeNodes       []string `json:"exclude_nodes,omitempty"`
	TmpStorage         string   `json:"tmp_storage,omitempty"`
	// TimeLimit is ML Space's stop_timer: the job is stopped after this
	// long Running (0 = never).
	TimeLimit time.Duration `json:"time_limit,omitempty"`
	// Autoshutdown is when a Jupyter server stops by itself: its own
	// shutdown_in and shutdown_at, and its allocation's or queue's
	// idle_timeout (nil: never; jobs have none).
	Autoshutdown *NotebookShutdown `json:"autoshutdown,omitempty"`
	// Deprecated are the deprecated fields the request set, with their values.
	Deprecated map[string]bool `json:"deprecated,omitempty"`
	// Warnings say what the request asked that trainq does not do.
	Warnings  []string       `json:"warnings,omitempty"`
	Kind      scheduler.Kind `json:"kind"`
	Author    string         `json:"author,omitempty"`
	Workspace string         `json:"workspace,omitempty"`
	// AllowedNodes are the only nodes the job's workers may run on, worked
	// out at submission from its queue's nodes, include_nodes and
	// exclude_nodes (see scheduler.Request.Nodes); empty: any node.
	AllowedNodes []string `json:"allowed_nodes,omitempty"`
}

// durationText is d as people write it, or "" for none.
func durationText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// Warn records a warning about the request (once).
func (s *JobSpec) Warn(w string) {
	if !slices.Contains(s.Warnings, w) {
		s.Warnings = append(s.Warnings, w)
	}
}

// Stuck-job actions (health_params.action).
const (
	HealthActionRestart = "restart"
	HealthActionDelete  = "delete"
)

// JobHealth is health_params in the form the workflows use: a job none of
// whose workers wrote a log line for LogPeriod is stuck; Action says what
// happens then (HealthActionRestart, the default, or HealthActionDelete).
type JobHealth struct {
	LogPeriod time.Duration `json:"log_period"`
	Action    string        `json:"action"`
	// Notify (sub_actions [notify]) also reports a stuck job as an event.
	Notify bool `json:"notify,omitempty"`
}

// SpecField is one field of a job spec as text, for showing the spec.
type SpecField struct {
	Name, Value string
}

// Fields lists the spec's fields in the order trainq shows them (the CLI's
// dry run, the Web UI's details): the request's, the submitter's, then one
// per environment variable ("env K") and flag ("flag --K") in key order. A
// field that is not set has an empty Value; Kind is not listed.
func (s JobSpec) Fields() []SpecField {
	f := []SpecField{
		{"script", s.Script},
		{"type", s.Type},
		{"base_image", s.BaseImage},
		{"instance_type", s.InstanceType},
		{"n_workers", strconv.Itoa(s.NWorkers)},
		{"processes_per_worker", strconv.Itoa(s.ProcessesPerWorker)},
		{"priority_class", s.PriorityClass},
		{"max_retry", strconv.Itoa(s.MaxRetry)},
		{"region", s.Region},
		{"allocation_name", s.AllocationName},
		{"job_desc", s.JobDesc},
		{"checkpoint_dir", s.CheckpointDir},
		{"time_limit", durationText(s.TimeLimit)},
		{"shutdown_in", s.Autoshutdown.shutdownInText()},
		{"shutdown_at", s.Autoshutdown.shutdownAtText()},
		{"idle_timeout", s.Autoshutdown.idleText()},
		{"queue_name", s.QueueName},
		{"conda_env", s.CondaEnv},
		{"shm_size_class", s.ShmSizeClass},
		{"author", s.Author},
		{"workspace", s.Workspace},
		{"allowed_nodes", strings.Join(s.AllowedNodes, ",")},
	}
	for _, k := range slices.Sorted(maps.Keys(s.EnvVariables)) {
		f = append(f, SpecField{"env " + k, s.EnvVariables[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Flags)) {
		f = append(f, SpecField{"flag --" + k, s.Flags[k]})
	}
	return f
}

// JobInput starts a JobWorkflow.
type JobInput struct {
	Name string  `json:"name"`
	Spec JobSpec `json:"spec"`
	// Carry is the job so far, when a long job continues as new.
	Carry *JobCarry `json:"carry,omitempty"`
	// MaxEventsPerRun lowers the history length past which the job
	// continues as new between attempts (0 = the default); tests use it.
	MaxEventsPerRun int `json:"max_events_per_run,omitempty"`
	// RequestCheckInterval, when set, replaces how long a waiting attempt
	// waits for its grant before it makes sure the allocator has its
	// request (30 minutes); tests with scaled-down timeouts use it.
	RequestCheckInterval time.Duration `json:"request_check_interval,omitempty"`
}

// JobCarry is what a job workflow carries through continue-as-new.
type JobCarry struct {
	Status JobStatus `json:"status"`
	Seq    int64     `json:"seq"`
	Epoch  string    `json:"epoch,omitempty"`
}

// JobState uses ML Space's status words, plus Preempted.
type JobState string

const (
	StatePending    JobState = "Pending"
	StateStarting   JobState = "Starting"
	StateRunning    JobState = "Running"
	StateRestarting JobState = "Restarting"
	StateCompleting JobState = "Completing"
	StateStopping   JobState = "Stopping"
	StateCompleted  JobState = "Completed"
	StateFailed     JobState = "Failed"
	StateStopped    JobState = "Stopped"
	StatePreempted  JobState = "Preempted"
)

// JobStates lists every job state, in the order a job goes through them.
var JobStates = []JobState{StatePending, StateStarting, StateRunning, StateRestarting, StateCompleting,
	StateStopping, StateCompleted, StateFailed, StateStopped, StatePreempted}

// ParseJobState finds a job state by its name, in any case. The error
// names the states allowed.
func ParseJobState(s string) (JobState, error) {
	names := make([]string, len(JobStates))
	for i, st := range JobStates {
		if strings.EqualFold(s, string(st)) {
			return st, nil
		}
		names[i] = string(st)
	}
	return "", fmt.Errorf("%q is not a job state; use one of %s", s, strings.Join(names, ", "))
}

// Terminal says whether a job in this state is finished for good.
func (s JobState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateStopped, StatePreempted:
		return true
	}
	return false
}

// AttemptRecord is one run of a job: from queueing to its end.
type AttemptRecord struct {
	Number    int                         `json:"number"`
	QueuedAt  time.Time                   `json:"queued_at"`
	StartedAt *time.Time                  `json:"started_at,omitempty"`
	EndedAt   *time.Time                  `json:"ended_at,omitempty"`
	EndReason string                      `json:"end_reason,omitempty"`
	ExitCode  *int                        `json:"exit_code,omitempty"`
	Preemptor *scheduler.Preemptor        `json:"preemptor,omitempty"`
	Placement []scheduler.WorkerPlacement `json:"placement,omitempty"`
	// OnLoan says the attempt started on capacity reserved for a job that
	// waits longer, because its time limit or runtime estimate ends it
	// first (GrantSignal.OnLoan): past that, it may have to yield.
	OnLoan bool `json:"on_loan,omitempty"`
	// URL is where a Jupyter server of this attempt serves.
	URL string `json:"url,omitempty"`
	// NoticeDeadline is when the attempt's workers, told they were to be
	// stopped (see WorkerNotice), had to have exited.
	NoticeDeadline *time.Time `json:"notice_deadline,omitempty"`
	// NoticeReason is the notice's reason (a NoticeReason constant), and
	// NoticedAt when the job decided to give it.
	NoticeReason string     `json:"notice_reason,omitempty"`
	NoticedAt    *time.Time `json:"noticed_at,omitempty"`
	// CheckpointAt is the attempt's last checkpoint (trainq checkpoint).
	CheckpointAt *time.Time `json:"checkpoint_at,omitempty"`
	// ExitedOnNoticeAt is when the last of the attempt's workers exited on
	// its own after the notice, before the deadline: the release came
	// NoticeDeadline - ExitedOnNoticeAt early.
	ExitedOnNoticeAt *time.Time `json:"exited_on_notice_at,omitempty"`
	// Warning is the last warning the attempt gave that it was to be
	// stopped (a Jupyter server idle for most of its idle_timeout, or near
	// its shutdown_in or shutdown_at), and WarnedAt when.
	Warning  string     `json:"warning,omitempty"`
	WarnedAt *time.Time `json:"warned_at,omitempty"`
	// Released is when each worker's capacity was released, in release
	// order (attempts recorded before it existed have none).
	Released []WorkerRelease `json:"released,omitempty"`
}

// WorkerRelease is when one worker of an attempt released its capacity.
type WorkerRelease struct {
	Worker int       `json:"worker"`
	At     time.Time `json:"at"`
}

// HonouredNotice says whether the attempt was given a notice and saved a
// checkpoint within its window (after the notice, by its deadline).
func (a AttemptRecord) HonouredNotice() bool {
	return a.NoticedAt != nil && a.NoticeDeadline != nil && a.CheckpointAt != nil &&
		!a.CheckpointAt.Before(*a.NoticedAt) && !a.CheckpointAt.After(*a.NoticeDeadline)
}

// JobStatus answers the status query. Position, Reason and WaitingFor come
// from the allocator while the job waits.
type JobStatus struct {
	JobName      string         `json:"job_name"`
	State        JobState       `json:"status"`
	Kind         scheduler.Kind `json:"type"`
	Priority     string         `json:"priority_class"`
	Region       string         `json:"region"`
	Allocation   string         `json:"allocation_name"`
	InstanceType string         `json:"instance_type"`
	NWorkers     int            `json:"n_workers"`
	GPUs         int            `json:"gpu_count"`
	MaxRetry     int            `json:"max_retry"`
	Attempt      int            `json:"attempt"`
	Restarts     int            `json:"restarts"`
	// NodeLosses counts attempts that ended because a node was lost; they
	// do not count against max_retry.
	NodeLosses  int                   `json:"node_losses,omitempty"`
	Message     string                `json:"message,omitempty"`
	CreatedAt   time.Time             `json:"created_at"`
	PendingAt   *time.Time            `json:"pending_at,omitempty"`
	RunningAt   *time.Time            `json:"running_at,omitempty"`
	CompletedAt *time.Time            `json:"completed_at,omitempty"`
	Position    int                   `json:"position,omitempty"`
	Reason      string                `json:"reason,omitempty"`
	WaitingFor  []string              `json:"waiting_for,omitempty"`
	Preemptors  []scheduler.Preemptor `json:"preemptors,omitempty"`
	// Warning says the running job is about to be stopped, and why (see
	// AttemptRecord.Warning); it is cleared when that no longer holds (the
	// Jupyter server was used again) and when the attempt ends.
	Warning string `json:"warning,omitempty"`
	// Estimate is how long a job without a time limit is expected to run,
	// learned at submission from the completed jobs like it (nil: it has a
	// time limit, or too few jobs like it completed).
	Estimate *RuntimeEstimate `json:"runtime_estimate,omitempty"`
	Attempts []AttemptRecord  `json:"attempts"`
	Spec     JobSpec          `json:"spec"`
}

// URL is where the job's Jupyter server serves while it runs (its latest
// attempt's URL), or "".
func (s JobStatus) URL() string {
	if s.State.Terminal() || len(s.Attempts) == 0 {
		return ""
	}
	a := s.Attempts[len(s.Attempts)-1]
	if a.EndedAt != nil {
		return ""
	}
	return a.URL
}

// CapacityRequest asks an allocator for capacity for one attempt of a job.
type CapacityRequest struct {
	Job          string          `json:"job"`
	Attempt      int             `json:"attempt"`
	Kind         scheduler.Kind  `json:"kind"`
	Class        scheduler.Class `json:"class"`
	InstanceType string          `json:"instance_type"`
	Workers      int             `json:"workers"`
	// Seq is 0 on the first request; re-queued attempts pass the Seq they
	// were given so that they keep their place in the queue.
	Seq         int64     `json:"seq"`
	SubmittedAt time.Time `json:"submitted_at"`
	// Preemptions counts the job's earlier attempts that were preempted
	// (see scheduler.Request.Preemptions); older jobs send none.
	Preemptions int `json:"preemptions,omitempty"`
	// HonorsNotice: the job saved and exited on every preemption notice it
	// was given (see scheduler.Request.HonorsNotice).
	HonorsNotice bool `json:"honors_notice,omitempty"`
	// Nodes are the only nodes the job may run on (JobSpec.AllowedNodes).
	Nodes []string `json:"nodes,omitempty"`
	// MinWorkers, for an elastic gang (pytorch_elastic), is the fewest
	// workers it may start with; Workers is the most (0: Workers).
	MinWorkers int `json:"min_workers,omitempty"`
	// Workspace is the job's workspace, for the allocation's limits
	// (scheduler.Request.Workspace).
	Workspace string `json:"workspace,omitempty"`
	// User is who submitted the job (JobSpec.Author), for the allocation's
	// fair-share ordering (scheduler.Request.User).
	User string `json:"user,omitempty"`
	// RunLimit is the most the attempt will run: the job's time limit less
	// what its earlier attempts ran (0: none), for expected start times.
	RunLimit time.Duration `json:"run_limit,omitempty"`
	// RunEstimate, for a job without a time limit, is how long the attempt
	// is expected to run: its learned runtime estimate less what its
	// earlier attempts ran (0: none). Nobody stops it there.
	RunEstimate time.Duration `json:"run_estimate,omitempty"`
}

// CapacityReply tells a job its place in the queue.
type CapacityReply struct {
	// Estimate is the runtime estimate the request learned and carried
	// (RequestCapacityInput.Learn), or nil.
	Estimate *RuntimeEstimate `json:"estimate,omitempty"`
	// Epoch names the allocator state that accepted the request (see
	// AllocatorState.Epoch).
	Epoch    string `json:"epoch,omitempty"`
	Seq      int64  `json:"seq"`
	Granted  bool   `json:"granted"`
	Position int    `json:"position,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// GrantSignal tells a job it may start Attempt on Placement.
type GrantSignal struct {
	// Epoch names the allocator state that made the grant. A job that has
	// registered with a newer allocator ignores grants of an older one.
	Epoch string `json:"epoch,omitempty"`
	// Seq is the request's place in its class's queue; a rerun asks with
	// it so that it keeps its place.
	Seq       int64                       `json:"seq,omitempty"`
	Attempt   int                         `json:"attempt"`
	Placement []scheduler.WorkerPlacement `json:"placement"`
	// OnLoan is scheduler.Grant.OnLoan: the attempt runs on another job's
	// reservation until its time limit or estimate; past it, it yields
	// (PreemptSignal.Loan).
	OnLoan bool `json:"on_loan,omitempty"`
	// StopGracePeriod is the allocation's time between SIGTERM and SIGKILL.
	StopGracePeriod time.Duration `json:"stop_grace_period"`
	// NodeTimeout is how long a node's agent may leave an activity waiting
	// before the node counts as lost (0 = DefaultNodeTimeout).
	NodeTimeout time.Duration `json:"node_timeout,omitempty"`
	// Notice is how long this job's workers are given, once told why, to
	// save their work and exit before a stop the job decides on (a cancel,
	// its time limit, stuck): the allocation's preemption_notice for the
	// job's class. 0: they are stopped at once, as before.
	Notice time.Duration `json:"notice,omitempty"`
	// NoticeSignal, when set, is sent to the workers with every notice
	// (the allocation's notice_signal, e.g. SIGUSR1).
	NoticeSignal string `json:"notice_signal,omitempty"`
}

// DefaultNodeTimeout applies where no node_timeout was handed down (grants of
// allocators started before the setting existed).
const DefaultNodeTimeout = time.Minute

// PreemptSignal tells a job to stop Attempt because Preemptor needs its capacity.
type PreemptSignal struct {
	Epoch     string              `json:"epoch,omitempty"`
	Attempt   int                 `json:"attempt"`
	Preemptor scheduler.Preemptor `json:"preemptor"`
	Reason    string              `json:"reason"`
	// Notice is the allocation's preemption_notice: the victim's workers are
	// told (WorkerNotice) and get this long to save their work and exit
	// before they are stopped. 0: stopped at once, as before.
	Notice time.Duration `json:"notice,omitempty"`
	// Loan says the attempt ran on loan past its time limit or estimate and
	// yields to the job whose reservation it borrowed (Preemptor): notice
	// reason loan_due; the rerun does not spend max_retry.
	Loan bool `json:"loan,omitempty"`
	// Drain, when set, names the node an operator drains: the job is not
	// preempted but moved (notice reason node_drain; the rerun does not
	// spend max_retry). Preemptor is empty then.
	Drain string `json:"drain,omitempty"`
}

// NoticeFor is the notice a job of this class and kind gets before it is
// stopped: ClassPreemptionNotice's, else PreemptionNotice. A Jupyter server
// gets none: it is stopped at once, as before notices.
func (in AllocatorInput) NoticeFor(class scheduler.Class, kind scheduler.Kind) time.Duration {
	if kind == scheduler.KindNotebook {
		return 0
	}
	if d, ok := in.ClassPreemptionNotice[class.String()]; ok {
		return d
	}
	return in.PreemptionNotice
}

// WorkerNotice is what a worker is told before it is stopped: why, by whom
// (the class and kind of the preemptor, never its name, which may be another
// workspace's), and by when it must have exited. It reaches the worker as
// the JSON file named by $TRAINQ_NOTICE_FILE.
type WorkerNotice struct {
	Reason   string    `json:"reason"` // one of the NoticeReason constants
	By       *NoticeBy `json:"by,omitempty"`
	Deadline time.Time `json:"deadline"`
	Job      string    `json:"job"`
	Attempt  int       `json:"attempt"`
}

// NoticeBy is who a preemption notice is for.
type NoticeBy struct {
	Class string         `json:"class"`
	Kind  scheduler.Kind `json:"kind"`
}

// A notice's reasons.
const (
	// NoticeReasonPreempted: a higher class takes the capacity (By names its class and kind).
	NoticeReasonPreempted = "preempted"
	// NoticeReasonCancelled: the job was cancelled (trainq cancel, DELETE, the Web UI).
	NoticeReasonCancelled = "cancelled"
	// NoticeReasonTimeLimit: the job reached its time limit (stop_timer).
	NoticeReasonTimeLimit = "time_limit"
	// NoticeReasonStuck: no worker wrote a log line for health_params.log_period.
	NoticeReasonStuck = "stuck"
	// NoticeReasonNodeDrain: an operator drains the node the worker runs on.
	NoticeReasonNodeDrain = "node_drain"
	// NoticeReasonLoanDue: the job started on capacity reserved for another
	// (By names its class and kind) because it was to end first, and ran
	// longer: it gives the capacity back and reruns without spending max_retry.
	NoticeReasonLoanDue = "loan_due"
)

// RefuseSignal tells a job that its waiting Attempt can never be granted.
type RefuseSignal struct {
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// ReconfigureReply says what a reconfigure update changed.
type ReconfigureReply struct {
	// Changed is false when the config was already in effect.
	Changed bool `json:"changed"`
	// Summary lists the changes, e.g. "added node(s) demo-node-5; stop_grace_period 5s -> 30s".
	Summary string `json:"summary,omitempty"`
	// Refused are the waiting jobs that can no longer fit and were told so.
	Refused []string `json:"refused,omitempty"`
}

// ReleaseSignal reports that workers of a job's attempt have stopped. With
// Stopping set and no workers, it says the job has begun to stop.
type ReleaseSignal struct {
	Job      string `json:"job"`
	Attempt  int    `json:"attempt"`
	Workers  []int  `json:"workers,omitempty"`
	Stopping bool   `json:"stopping,omitempty"`
	// LostNodes are nodes whose agent did not answer: the workers listed
	// in Workers that were placed there could not be confirmed stopped, so
	// the allocator fences those nodes (grants nothing on them) until their
	// agent answers again and has stopped every stale worker.
	LostNodes []string `json:"lost_nodes,omitempty"`
	// GPUsBusy are the nodes of LostNodes where the job found the GPUs it
	// was granted used by a live worker of another job or attempt, and so
	// started nothing: the allocator fences them the same way, and its
	// fence learns who runs there.
	GPUsBusy []string `json:"gpus_busy,omitempty"`
}

// HoldPhase says what a job holds or waits for in its allocation.
type HoldPhase string

const (
	HoldNone    HoldPhase = "none"
	HoldWaiting HoldPhase = "waiting"
	HoldHolding HoldPhase = "holding"
)

// RegisterRequest is a recovering allocator's word to a job: from now on
// only grants and preemptions of Epoch count.
type RegisterRequest struct {
	Epoch string `json:"epoch"`
}

// JobHold answers UpdateRegister: what one job holds or waits for, so that
// a recovering allocator can rebuild its state from the jobs.
type JobHold struct {
	Job   string    `json:"job"`
	Phase HoldPhase `json:"phase"`
	// Request is the current attempt's capacity request (Seq 0 if the
	// allocator never answered it).
	Request CapacityRequest `json:"request"`
	// Placement, StartedAt, Releasing and Released describe a held grant.
	Placement []scheduler.WorkerPlacement `json:"placement,omitempty"`
	StartedAt time.Time                   `json:"started_at,omitempty"`
	Releasing bool                        `json:"releasing,omitempty"`
	Released  []int                       `json:"released,omitempty"`
}

// WithdrawSignal removes a waiting request (the job was cancelled while pending).
type WithdrawSignal struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
}

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
	// AfterReclaim are requests of jobs reset to an earlier attempt: each is
	// queued once the newer attempt its job's reset abandoned (an orphan)
	// has been reclaimed.
	AfterReclaim []CapacityRequest `json:"after_reclaim,omitempty"`
	// Unanswered are jobs that did not answer the last recovery's register
	// update; they are asked again until they answer or end.
	Unanswered []string `json:"unanswered,omitempty"`
	// RecoveredAt is when the state was last rebuilt from the jobs.
	RecoveredAt time.Time `json:"recovered_at,omitzero"`
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

// QueueView answers the queue query.
type QueueView struct {
	Region     string `json:"region"`
	Allocation string `json:"allocation"`
	// View lists one page of the waiting jobs, in launch order (see
	// QueuePage), every running job and every node.
	scheduler.View
	// Offset and Limit are the page listed: Waiting[k] is waiting job
	// Offset+k+1 in launch order (of those the page's filters keep; its
	// Position is its place in the whole queue).
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	// WaitingTotal and WaitingByClass count every waiting job.
	WaitingTotal int `json:"waiting_total"`
	// WaitingMatched counts the waiting jobs the page's filters keep (see
	// QueuePage.Class): the list Offset and Limit page through. 0 without a
	// filter.
	WaitingMatched int               `json:"waiting_matched,omitempty"`
	WaitingByClass map[string]int    `json:"waiting_by_class"`
	Counters       AllocatorCounters `json:"counters"`
	// Recovering is true while the allocator rebuilds its state; it grants
	// nothing meanwhile.
	Recovering bool `json:"recovering,omitempty"`
	// Fenced lists the nodes that grant nothing now, and why.
	Fenced []FencedNode `json:"fenced,omitempty"`
	// FairShare is each workspace's recent usage, in the order its jobs are
	// taken within a class, when the allocation's ordering is fair-share;
	// FairShareHalfLife is how fast it is forgotten.
	FairShare         []scheduler.WorkspaceUsage `json:"fair_share,omitempty"`
	FairShareHalfLife time.Duration              `json:"fair_share_half_life,omitempty"`
}

// GPUTotals counts an allocation's GPUs by state, over all its nodes.
type GPUTotals struct {
	Total     int `json:"total_gpus"`
	Free      int `json:"free_gpus"`
	Allocated int `json:"allocated_gpus"`
	Releasing int `json:"releasing_gpus"`
}

// GPUTotals adds up the GPUs of the view's nodes.
func (v QueueView) GPUTotals() GPUTotals {
	var t GPUTotals
	for _, n := range v.Nodes {
		t.Total += n.GPUs
		t.Free += n.FreeGPUs
		t.Allocated += n.AllocatedGPUs
		t.Releasing += n.ReleasingGPUs
	}
	return t
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

// ExpectedStartQuery asks QueryExpectedStart for one job. Now is the
// asker's clock, projected from when it is later than the allocator's last
// workflow task.
type ExpectedStartQuery struct {
	Job string    `json:"job"`
	Now time.Time `json:"now,omitzero"`
}

// ExplainReply answers QueryExplain: where a job stands in its allocation.
type ExplainReply struct {
	Waiting *scheduler.WaitingInfo `json:"waiting,omitempty"`
	Running *scheduler.RunningInfo `json:"running,omitempty"`
}

// QueueFullError says an allocation's queue holds max_waiting jobs.
type QueueFullError struct {
	Region, Allocation string
	Waiting            int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("allocation %s/%s has %d waiting jobs (max_waiting); try later", e.Region, e.Allocation, e.Waiting)
}

// WaitingLimit caps the jobs a workspace may have waiting in one class of an
// allocation, as Slurm's MaxSubmitJobs caps an account: a submission past it
// is refused, before anything starts. Without a workspace it caps every
// workspace, each on its own, that has no waiting limit of its own for the
// class.
type WaitingLimit struct {
	Workspace  string          `json:"workspace,omitempty"`
	Class      scheduler.Class `json:"class"`
	MaxWaiting int             `json:"max_waiting"`
}

// WaitingLimits are an allocation's waiting limits.
type WaitingLimits []WaitingLimit

// Cap is how many jobs of class c workspace ws may have waiting, or -1 for
// no limit (a job without a workspace has none).
func (ls WaitingLimits) Cap(ws string, c scheduler.Class) int {
	if ws == "" {
		return -1
	}
	limit := -1
	for _, l := range ls {
		if l.Class != c {
			continue
		}
		if l.Workspace == ws {
			return l.MaxWaiting
		}
		if l.Workspace == "" {
			limit = l.MaxWaiting
		}
	}
	return limit
}

// WorkspaceQueueFullError says a workspace has as many jobs waiting in a
// class of an allocation as its waiting limit allows.
type WorkspaceQueueFullError struct {
	Region, Allocation, Workspace string
	Class                         scheduler.Class
	Waiting, Limit                int
}

func (e *WorkspaceQueueFullError) Error() string {
	jobs := "jobs"
	if e.Waiting == 1 {
		jobs = "job"
	}
	return fmt.Sprintf("%s has %d %s %s waiting in %s/%s, its limit (%s.max_waiting %d); try later",
		e.Workspace, e.Waiting, e.Class, jobs, e.Region, e.Allocation, e.Class, e.Limit)
}

// QueueCounts answers the counts query.
type QueueCounts struct {
	Waiting    int `json:"waiting"`
	MaxWaiting int `json:"max_waiting,omitempty"`
	// WorkspaceWaiting counts the waiting jobs of each workspace that has
	// any, by class name.
	WorkspaceWaiting map[string]map[string]int `json:"workspace_waiting,omitempty"`
	Running          int                       `json:"running"`
	Recovering       bool                      `json:"recovering,omitempty"`
	// RecoveredAt is when the allocator last rebuilt its state from the
	// jobs (its workflow clock; zero if it never did). trainq-worker
	// compares it with the run's last reset (see worker/watchdog.go).
	RecoveredAt time.Time `json:"recovered_at,omitzero"`
}

// QueuePage is the queue query's argument: which waiting jobs to list, in
// launch order. Only the listed jobs are explained, so that a query of a
// long queue stays cheap. The zero value, which is also what a query sent
// without an argument decodes to, lists the first DefaultQueuePageLimit.
type QueuePage struct {
	Limit  int `json:"limit,omitempty"`  // 0 = DefaultQueuePageLimit
	Offset int `json:"offset,omitempty"` // waiting jobs to skip
	// ExpectedStarts asks for each listed job's expected start
	// (scheduler.Pool.Project: a copy of the pool played forward, which
	// costs more than the page).
	ExpectedStarts bool `json:"expected_starts,omitempty"`
	// Now is the asker's clock, from which expected starts are projected
	// when it is later than the allocator's last workflow task (an idle
	// allocator's clock stands still).
	Now time.Time `json:"now,omitempty"`
	// Class, Kind and Workspace, when set, list only the waiting jobs of that
	// class, kind and workspace (all of them that are set): the page is a page of
	// those, and QueueView.WaitingMatched counts them. The jobs listed are
	// explained as the whole queue's view explains them: a filter chooses what
	// is listed, not what is scheduled.
	Class     *scheduler.Class `json:"class,omitempty"`
	Kind      scheduler.Kind   `json:"kind,omitempty"`
	Workspace string           `json:"workspace,omitempty"`
}

// Filtered says whether the page lists only some of the waiting jobs.
func (p QueuePage) Filtered() bool {
	return p.Class != nil || p.Kind != "" || p.Workspace != ""
}

// Keeps says whether the page's filters keep waiting request r.
func (p QueuePage) Keeps(r *scheduler.Request) bool {
	return (p.Class == nil || r.Class == *p.Class) && (p.Kind == "" || r.Kind == p.Kind) &&
		(p.Workspace == "" || r.Workspace == p.Workspace)
}

// QueueKinds are the values of QueuePage.Kind (and of a waiting job's kind).
var QueueKinds = []scheduler.Kind{scheduler.KindJob, scheduler.KindNotebook}

// Bounds of QueuePage.Limit.
const (
	DefaultQueuePageLimit = 100
	MaxQueuePageLimit     = 1000
)

// Validate refuses a page out of bounds, naming the field.
func (p QueuePage) Validate() error {
	if p.Limit < 0 || p.Limit > MaxQueuePageLimit {
		return fieldErr("limit", "must be between 1 and %d, got %d", MaxQueuePageLimit, p.Limit)
	}
	if p.Offset < 0 {
		return fieldErr("offset", "must be 0 or more, got %d", p.Offset)
	}
	if p.Class != nil && (*p.Class < scheduler.Low || *p.Class > scheduler.High) {
		return fieldErr("class", "must be one of low, medium, high, got %d", int(*p.Class))
	}
	if p.Kind != "" && !slices.Contains(QueueKinds, p.Kind) {
		return fieldErr("kind", "must be one of job, notebook, got %q", p.Kind)
	}
	return nil
}

// WithDefaults fills in the default limit.
func (p QueuePage) WithDefaults() QueuePage {
	if p.Limit == 0 {
		p.Limit = DefaultQueuePageLimit
	}
	return p
}

// Search attributes on job workflows.
const (
	SAState      = "TrainqState"
	SAPriority   = "TrainqPriority"
	SAAllocation = "TrainqAllocation"
	SARegion     = "TrainqRegion"
	SAAuthor     = "TrainqAuthor"
	SAWorkspace  = "TrainqWorkspace"
	SAKind       = "TrainqKind"
	SAAttempt    = "TrainqAttempt"
	SAGPUs       = "TrainqGPUs"
	// SAQueue is the job's queue inside its allocation (absent on jobs
	// submitted before queues: they are in the default queue).
	SAQueue = "TrainqQueue"
	// SAShape (JobSpec.Shape) and SARunSeconds, how long the job ran in
	// all, are set when a job completes: later jobs of its shape learn
	// their runtime estimate from them.
	SAShape      = "TrainqShape"
	SARunSeconds = "TrainqRunSeconds"
)
