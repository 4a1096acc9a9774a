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

// What a job is: its spec as submitted, its input and carried state, its
// states, attempts and status.

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
	// Topology is the request's required_topology or preferred_topology
	// (trainq's; ML Space has none): how the gang's workers share the
	// allocation's topology levels. Zero: the allocation's default.
	Topology scheduler.GangTopology `json:"topology,omitzero"`
	// NoMove is the request's no_move (trainq's): the job is never moved out
	// of a rack to make room for a gang that requires one.
	NoMove       bool     `json:"no_move,omitempty"`
	ExcludeNodes []string `json:"exclude_nodes,omitempty"`
	TmpStorage   string   `json:"tmp_storage,omitempty"`
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
