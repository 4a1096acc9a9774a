package protocol

import (
	"time"

	"github.com/trainq/trainq/scheduler"
)

// What a job and its allocator tell each other about capacity: requests,
// replies, grants, preemptions with their notices, refusals, releases,
// withdrawals and the holds a recovery registers.

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
	// Demand is one worker's demand, InstanceType as the job parsed it from
	// its spec, so that neither the job's admission nor the allocator parses
	// it again (nil from jobs older than the field: they parse it).
	Demand *scheduler.Demand `json:"demand,omitempty"`
	// NoMove: the job opted out of being moved for a gang (JobSpec.NoMove).
	NoMove bool `json:"no_move,omitempty"`
	// Topology is how the gang's workers share the allocation's topology
	// levels (JobSpec.Topology; zero: the allocation's default).
	Topology scheduler.GangTopology `json:"topology,omitzero"`
}

// SchedulerRequest is the request in the scheduler's form: with the demand
// the job parsed, else its instance type parsed (see SchedulerRequestOf).
func (r CapacityRequest) SchedulerRequest() (scheduler.Request, error) {
	if r.Demand != nil {
		return r.SchedulerRequestOf(*r.Demand), nil
	}
	demand, err := scheduler.ParseInstanceType(r.InstanceType)
	if err != nil {
		return scheduler.Request{}, err
	}
	return r.SchedulerRequestOf(demand), nil
}

// SchedulerRequestOf is the request in the scheduler's form, with demand, its
// instance type already parsed: the one conversion from a capacity request,
// which the allocator, the job's own admission and the dry run share. A
// learned estimate stands in for a time limit the job does not have.
func (r CapacityRequest) SchedulerRequestOf(demand scheduler.Demand) scheduler.Request {
	s := scheduler.Request{
		Job: r.Job, Attempt: r.Attempt, Kind: r.Kind, Class: r.Class,
		Demand: demand, Workers: r.Workers, Seq: r.Seq, SubmittedAt: r.SubmittedAt, Preemptions: r.Preemptions,
		HonorsNotice: r.HonorsNotice, Nodes: r.Nodes, MinWorkers: r.MinWorkers, Workspace: r.Workspace, RunLimit: r.RunLimit,
		User: r.User, Topology: r.Topology, NoMove: r.NoMove,
	}
	if r.RunLimit == 0 && r.RunEstimate > 0 {
		s.RunLimit, s.RunEstimated = r.RunEstimate, true
	}
	return s
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
	// Move says the attempt is moved out of a topology domain so that a gang
	// that requires one (Preemptor) can start there: notice reason
	// defragment; the rerun does not spend max_retry.
	Move bool `json:"move,omitempty"`
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
	// NoticeReasonDefragment: the job is moved out of a rack (or another
	// topology domain) so that a gang that needs the whole of one can start
	// (By names its class and kind): it reruns elsewhere without spending
	// max_retry.
	NoticeReasonDefragment = "defragment"
)

// RefuseSignal tells a job that its waiting Attempt can never be granted.
type RefuseSignal struct {
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	// Rerun: the allocator gave the attempt up, not the job: the job reruns
	// as its next attempt without spending max_retry (a job reset to before
	// it took the grant of an attempt the allocator was already releasing).
	Rerun bool `json:"rerun,omitempty"`
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
