package main

import (
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/jobview"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The CLI's own shapes of what the scheduler, the allocator and a job
// report, printed with --output json. The commands print these, never the
// structs they are made from, so that the scheduler and the workflows can
// change their structs without changing the JSON that scripts read
// (TestCLIJSON pins it). Each is made by a function named after the command,
// at the edge. They live here, not in client: the CLI is the only one that
// prints them (the REST API has its own in api), and client's Go callers
// want the typed answers.

// queueView is trainq queue's and trainq top's answer: a page of an
// allocation's waiting jobs, its running jobs and its nodes.
type queueView struct {
	Region            string           `json:"region"`
	Allocation        string           `json:"allocation"`
	Waiting           []waitingView    `json:"waiting"` // in launch order
	Running           []runningView    `json:"running"`
	Nodes             []nodeView       `json:"nodes"`
	Offset            int              `json:"offset"`
	Limit             int              `json:"limit"`
	WaitingTotal      int              `json:"waiting_total"`
	WaitingMatched    int              `json:"waiting_matched,omitempty"`
	WaitingByClass    map[string]int   `json:"waiting_by_class"`
	Counters          countersView     `json:"counters"`
	Recovering        bool             `json:"recovering,omitempty"`
	Fenced            []fencedNodeView `json:"fenced,omitempty"`
	FairShare         []fairShareView  `json:"fair_share,omitempty"`
	FairShareHalfLife time.Duration    `json:"fair_share_half_life,omitempty"`
}

func queueOutput(v protocol.QueueView) queueView {
	out := queueView{Region: v.Region, Allocation: v.Allocation, Offset: v.Offset, Limit: v.Limit, WaitingTotal: v.WaitingTotal,
		WaitingMatched: v.WaitingMatched, WaitingByClass: v.WaitingByClass, Recovering: v.Recovering, FairShareHalfLife: v.FairShareHalfLife,
		Counters: countersView{Grants: v.Counters.Grants, Preemptions: v.Counters.Preemptions, Reclaimed: v.Counters.Reclaimed,
			Recoveries: v.Counters.Recoveries, NodesLost: v.Counters.NodesLost}}
	if v.Waiting != nil {
		out.Waiting = make([]waitingView, len(v.Waiting))
		for i, w := range v.Waiting {
			out.Waiting[i] = waitingOf(w)
		}
	}
	if v.Running != nil {
		out.Running = make([]runningView, len(v.Running))
		for i, r := range v.Running {
			out.Running[i] = runningView{Job: r.Job, Attempt: r.Attempt, Kind: string(r.Kind), Class: r.Class.String(), Seq: r.Seq, GPUs: r.GPUs,
				StartedAt: r.StartedAt, Releasing: r.Releasing, HonorsNotice: r.HonorsNotice, Placement: jobview.PlacementOf(r.Placement),
				Released: r.Released, PreemptedBy: jobview.PreemptorOf(r.PreemptedBy), OnLoan: r.OnLoan, Preemptions: r.Preemptions, CheckpointAt: r.CheckpointAt,
				Workspace: r.Workspace, Nominees: r.Nominees}
		}
	}
	if v.Nodes != nil {
		out.Nodes = make([]nodeView, len(v.Nodes))
		for i, n := range v.Nodes {
			out.Nodes[i] = nodeView{Name: n.Name, Family: n.Family, GPUs: n.GPUs, FreeGPUs: n.FreeGPUs, AllocatedGPUs: n.AllocatedGPUs,
				ReleasingGPUs: n.ReleasingGPUs, Lost: n.Lost, ReservedFor: n.ReservedFor, HeldGPUs: n.HeldGPUs, HeldFor: n.HeldFor, Topology: n.Topology}
		}
	}
	for _, f := range v.Fenced {
		out.Fenced = append(out.Fenced, fencedNodeView{Node: f.Node, Reason: f.Reason, Cause: f.Cause})
	}
	for _, u := range v.FairShare {
		out.FairShare = append(out.FairShare, fairShareView{Workspace: u.Workspace, GPUHours: u.GPUHours, Share: u.Share,
			RankedGPUHours: u.RankedGPUHours, GPUs: u.GPUs, Waiting: u.Waiting})
	}
	return out
}

// waitingView is one waiting job: what it asks for, its place in the
// launch order and why it waits.
type waitingView struct {
	Job           string             `json:"job"`
	Attempt       int                `json:"attempt"`
	Kind          string             `json:"kind"`
	Class         string             `json:"class"`
	Workers       int                `json:"workers"`
	MinWorkers    int                `json:"min_workers,omitempty"` // an elastic gang's least size
	Demand        perWorkerView      `json:"demand"`
	GPUs          int                `json:"gpus"`
	Position      int                `json:"position"`
	Reason        string             `json:"reason"`
	WaitingFor    []string           `json:"waiting_for,omitempty"`
	Nominated     []string           `json:"nominated,omitempty"` // jobs whose capacity is reserved for it
	Reserved      []string           `json:"reserved,omitempty"`  // nodes draining for it
	Nodes         []string           `json:"nodes,omitempty"`     // the only nodes it may run on
	SubmittedAt   time.Time          `json:"submitted_at"`
	Seq           int64              `json:"seq"`
	ExpectedStart *expectedStartView `json:"expected_start,omitempty"`
}

func waitingOf(w scheduler.WaitingInfo) waitingView {
	d := w.Demand
	return waitingView{Job: w.Job, Attempt: w.Attempt, Kind: string(w.Kind), Class: w.Class.String(), Workers: w.Workers, MinWorkers: w.MinWorkers,
		Demand: perWorkerView{Family: d.Family, GPUs: d.GPUs, VRAMGB: d.VRAMGB, CPU: d.CPU, RAMGB: d.RAMGB}, GPUs: w.GPUs, Position: w.Position,
		Reason: w.Reason, WaitingFor: w.WaitingFor, Nominated: w.Nominated, Reserved: w.Reserved, Nodes: w.Nodes, SubmittedAt: w.SubmittedAt,
		Seq: w.Seq, ExpectedStart: expectedStartOf(w.ExpectedStart)}
}

// perWorkerView is what one worker of a waiting job needs on one node.
type perWorkerView struct {
	Family string `json:"family"`
	GPUs   int    `json:"gpus"`
	VRAMGB int    `json:"vram_gb,omitempty"`
	CPU    int    `json:"cpu,omitempty"`
	RAMGB  int    `json:"ram_gb,omitempty"`
}

// runningView is one running or releasing job.
type runningView struct {
	Job          string              `json:"job"`
	Attempt      int                 `json:"attempt"`
	Kind         string              `json:"kind"`
	Class        string              `json:"class"`
	Seq          int64               `json:"seq,omitempty"`
	GPUs         int                 `json:"gpus"`
	StartedAt    time.Time           `json:"started_at"`
	Releasing    bool                `json:"releasing"`
	HonorsNotice bool                `json:"honors_notice,omitempty"`
	Placement    []jobview.Placement `json:"placement"`
	Released     []int               `json:"released,omitempty"` // workers already released
	PreemptedBy  *jobview.Preemptor  `json:"preempted_by,omitempty"`
	OnLoan       bool                `json:"on_loan,omitempty"` // started on another job's reservation until its limit or estimate
	Preemptions  int                 `json:"preemptions,omitempty"`
	CheckpointAt time.Time           `json:"checkpoint_at,omitzero"`
	Workspace    string              `json:"workspace,omitempty"`
	Nominees     []string            `json:"nominees,omitempty"` // per worker, who its capacity goes to once preempted
}

// nodeView is one node's GPUs as the allocator uses them now.
type nodeView struct {
	Name          string `json:"name"`
	Family        string `json:"family"`
	GPUs          int    `json:"gpus"`
	FreeGPUs      int    `json:"free_gpus"`
	AllocatedGPUs int    `json:"allocated_gpus"`
	ReleasingGPUs int    `json:"releasing_gpus"`
	Lost          bool   `json:"lost,omitempty"`
	ReservedFor   string `json:"reserved_for,omitempty"`
	HeldGPUs      int    `json:"held_gpus,omitempty"`
	HeldFor       string `json:"held_for,omitempty"`
	// Topology is the node's domain at each of the allocation's topology levels.
	Topology map[string]string `json:"topology,omitempty"`
}

// countersView is an allocator's lifetime totals.
type countersView struct {
	Grants      int64 `json:"grants"`
	Preemptions int64 `json:"preemptions"`
	Reclaimed   int64 `json:"reclaimed"`
	Recoveries  int64 `json:"recoveries,omitempty"`
	NodesLost   int64 `json:"nodes_lost,omitempty"`
}

// fencedNodeView is a node that grants nothing now, and why.
type fencedNodeView struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	Cause  string `json:"cause,omitempty"`
}

// fairShareView is one workspace's recent usage under fair-share ordering.
type fairShareView struct {
	Workspace      string  `json:"workspace"`
	GPUHours       float64 `json:"gpu_hours"`
	Share          float64 `json:"share"`
	RankedGPUHours float64 `json:"ranked_gpu_hours"`
	GPUs           int     `json:"gpus"`
	Waiting        int     `json:"waiting"`
}

// expectedStartView is when a waiting job is expected to start and on what
// assumption, or with At zero why that is unknown.
type expectedStartView struct {
	At      time.Time `json:"at,omitempty"`
	Because string    `json:"because"`
	// Earliest and Latest are the range it will likely start in (8 in 10
	// jobs of the allocation do), once the allocation can say it.
	Earliest *time.Time `json:"earliest,omitempty"`
	Latest   *time.Time `json:"latest,omitempty"`
}

func expectedStartOf(e *scheduler.ExpectedStart) *expectedStartView {
	if e == nil {
		return nil
	}
	v := &expectedStartView{At: e.At, Because: e.Because}
	if !e.Earliest.IsZero() && !e.Latest.IsZero() {
		lo, hi := e.Earliest, e.Latest
		v.Earliest, v.Latest = &lo, &hi
	}
	return v
}

// statusView is trainq status's answer: the job's status, its attempts and
// its spec, and with --eta the expected start of a pending job. The spec is
// the request as submitted (protocol.JobSpec, the form trainq submit -f
// reads), printed as it is.
type statusView struct {
	JobName       string              `json:"job_name"`
	State         string              `json:"status"`
	Kind          string              `json:"type"`
	Priority      string              `json:"priority_class"`
	Region        string              `json:"region"`
	Allocation    string              `json:"allocation_name"`
	InstanceType  string              `json:"instance_type"`
	NWorkers      int                 `json:"n_workers"`
	GPUs          int                 `json:"gpu_count"`
	MaxRetry      int                 `json:"max_retry"`
	Attempt       int                 `json:"attempt"`
	Restarts      int                 `json:"restarts"`
	NodeLosses    int                 `json:"node_losses,omitempty"`
	Message       string              `json:"message,omitempty"`
	CreatedAt     time.Time           `json:"created_at"`
	PendingAt     *time.Time          `json:"pending_at,omitempty"`
	RunningAt     *time.Time          `json:"running_at,omitempty"`
	CompletedAt   *time.Time          `json:"completed_at,omitempty"`
	Position      int                 `json:"position,omitempty"`
	Reason        string              `json:"reason,omitempty"`
	WaitingFor    []string            `json:"waiting_for,omitempty"`
	Preemptors    []jobview.Preemptor `json:"preemptors,omitempty"`
	Warning       string              `json:"warning,omitempty"`
	Estimate      *estimateView       `json:"runtime_estimate,omitempty"`
	Attempts      []jobview.Attempt   `json:"attempts"`
	Spec          protocol.JobSpec    `json:"spec"`
	ExpectedStart *expectedStartView  `json:"expected_start,omitempty"`
}

func statusOutput(st protocol.JobStatus, expected *scheduler.ExpectedStart) statusView {
	out := statusView{JobName: st.JobName, State: string(st.State), Kind: string(st.Kind), Priority: st.Priority, Region: st.Region,
		Allocation: st.Allocation, InstanceType: st.InstanceType, NWorkers: st.NWorkers, GPUs: st.GPUs, MaxRetry: st.MaxRetry,
		Attempt: st.Attempt, Restarts: st.Restarts, NodeLosses: st.NodeLosses, Message: st.Message, CreatedAt: st.CreatedAt,
		PendingAt: st.PendingAt, RunningAt: st.RunningAt, CompletedAt: st.CompletedAt, Position: st.Position, Reason: st.Reason,
		WaitingFor: st.WaitingFor, Warning: st.Warning, Attempts: jobview.AttemptsOf(st.Attempts), Spec: st.Spec,
		ExpectedStart: expectedStartOf(expected)}
	for i := range st.Preemptors {
		out.Preemptors = append(out.Preemptors, *jobview.PreemptorOf(&st.Preemptors[i]))
	}
	if e := st.Estimate; e != nil {
		out.Estimate = &estimateView{Runtime: e.Runtime, Runs: e.Runs, Basis: e.Basis, Workspace: e.Workspace}
	}
	return out
}

// estimateView is how long a job without a time limit is expected to run,
// and from which completed jobs that was learned.
type estimateView struct {
	Runtime   time.Duration `json:"runtime"`
	Runs      int           `json:"runs"`
	Basis     string        `json:"basis"`
	Workspace string        `json:"workspace,omitempty"`
}

// dryRunView is trainq submit --test-only's answer: whether the job would
// start now and where, whom it would preempt, or why it would wait.
type dryRunView struct {
	Start         bool                `json:"start"`
	Placement     []jobview.Placement `json:"placement,omitempty"`
	Preempts      []string            `json:"preempts,omitempty"`
	Waiting       *waitingView        `json:"waiting,omitempty"`
	ExpectedStart *expectedStartView  `json:"expected_start,omitempty"`
	Region        string              `json:"region"`
	Allocation    string              `json:"allocation"`
	Idle          bool                `json:"idle,omitempty"` // the allocation has no allocator yet
}

func dryRunOutput(d client.DryRunAnswer) dryRunView {
	out := dryRunView{Start: d.Start, Placement: jobview.PlacementOf(d.Placement), Preempts: d.Preempts, ExpectedStart: expectedStartOf(d.ExpectedStart),
		Region: d.Region, Allocation: d.Allocation, Idle: d.Idle}
	if d.Waiting != nil {
		w := waitingOf(*d.Waiting)
		out.Waiting = &w
	}
	return out
}

// recoverView is trainq allocator recover's answer: what the recovery found.
type recoverView struct {
	Epoch      string   `json:"epoch"`
	Listed     int      `json:"listed"`
	Running    int      `json:"running"`
	Waiting    int      `json:"waiting"`
	Conflicts  []string `json:"conflicts,omitempty"`
	Fenced     []string `json:"fenced,omitempty"`
	Unanswered []string `json:"unanswered,omitempty"`
}

func recoverOutput(r protocol.RecoverReply) recoverView {
	return recoverView{Epoch: r.Epoch, Listed: r.Listed, Running: r.Running, Waiting: r.Waiting, Conflicts: r.Conflicts,
		Fenced: r.Fenced, Unanswered: r.Unanswered}
}

// drainView is trainq allocator drain's and undrain's answer: whether the
// node changed, and the jobs told to leave.
type drainView struct {
	Node    string   `json:"node"`
	Drained bool     `json:"drained"`
	Changed bool     `json:"changed"`
	Jobs    []string `json:"jobs,omitempty"`
}

func drainOutput(r protocol.DrainReply) drainView {
	return drainView{Node: r.Node, Drained: r.Drained, Changed: r.Changed, Jobs: r.Jobs}
}

// noticeView is trainq notice's answer: why the worker is to be stopped,
// for whom (class and kind only) and by when.
type noticeView struct {
	Reason   string        `json:"reason"`
	By       *noticeByView `json:"by,omitempty"`
	Deadline time.Time     `json:"deadline"`
	Job      string        `json:"job"`
	Attempt  int           `json:"attempt"`
}

type noticeByView struct {
	Class string `json:"class"`
	Kind  string `json:"kind"`
}

func noticeOutput(n protocol.WorkerNotice) noticeView {
	out := noticeView{Reason: n.Reason, Deadline: n.Deadline, Job: n.Job, Attempt: n.Attempt}
	if n.By != nil {
		out.By = &noticeByView{Class: n.By.Class, Kind: string(n.By.Kind)}
	}
	return out
}

// listOutput is trainq list's answer, never null. client.JobSummary is
// already the client's own shape (made from visibility's search
// attributes), so it is printed as it is.
func listOutput(jobs []client.JobSummary) []client.JobSummary {
	if jobs == nil {
		return []client.JobSummary{}
	}
	return jobs
}
