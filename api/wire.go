package api

import (
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The API's own shapes of what the scheduler, the allocator and a job
// report. The answers carry these, never the structs they are made from, so
// that the scheduler and the workflows can change their structs without
// changing the public JSON (TestWireJSON pins it). Each is made by a
// function named after it, at the edge.

// perWorkerView is what one worker of a waiting job needs on one node.
type perWorkerView struct {
	Family string `json:"family"`
	GPUs   int    `json:"gpus"`
	VRAMGB int    `json:"vram_gb,omitempty"`
	CPU    int    `json:"cpu,omitempty"`
	RAMGB  int    `json:"ram_gb,omitempty"`
}

func perWorkerOf(d scheduler.Demand) perWorkerView {
	return perWorkerView{Family: d.Family, GPUs: d.GPUs, VRAMGB: d.VRAMGB, CPU: d.CPU, RAMGB: d.RAMGB}
}

// placementView is where one worker of a job runs: its node and the GPU
// indices it holds there.
type placementView struct {
	Worker int    `json:"worker"`
	Node   string `json:"node"`
	GPUs   []int  `json:"gpus"`
}

// placementOf is nil for no placement, so that omitempty leaves it out.
func placementOf(ps []scheduler.WorkerPlacement) []placementView {
	if ps == nil {
		return nil
	}
	out := make([]placementView, len(ps))
	for i, p := range ps {
		out[i] = placementView{Worker: p.Worker, Node: p.Node, GPUs: p.GPUs}
	}
	return out
}

// nodeUsageView is one node's GPUs as the allocator uses them now.
type nodeUsageView struct {
	Name          string `json:"name"`
	Family        string `json:"family"`
	GPUs          int    `json:"gpus"`
	FreeGPUs      int    `json:"free_gpus"`
	AllocatedGPUs int    `json:"allocated_gpus"` // held by running jobs, not releasing
	ReleasingGPUs int    `json:"releasing_gpus"`
	Lost          bool   `json:"lost,omitempty"`         // its agent is not answering: nothing is granted on it
	ReservedFor   string `json:"reserved_for,omitempty"` // the waiting job it drains for
	HeldGPUs      int    `json:"held_gpus,omitempty"`    // free GPUs still nominated to a preemptor
	HeldFor       string `json:"held_for,omitempty"`
}

// nodeUsageOf is never nil: an allocation without nodes lists none.
func nodeUsageOf(nodes []scheduler.NodeInfo) []nodeUsageView {
	out := make([]nodeUsageView, len(nodes))
	for i, n := range nodes {
		out[i] = nodeUsageView{Name: n.Name, Family: n.Family, GPUs: n.GPUs, FreeGPUs: n.FreeGPUs, AllocatedGPUs: n.AllocatedGPUs,
			ReleasingGPUs: n.ReleasingGPUs, Lost: n.Lost, ReservedFor: n.ReservedFor, HeldGPUs: n.HeldGPUs, HeldFor: n.HeldFor}
	}
	return out
}

// gpuTotalsView counts an allocation's GPUs by state, over all its nodes.
type gpuTotalsView struct {
	Total     int `json:"total_gpus"`
	Free      int `json:"free_gpus"`
	Allocated int `json:"allocated_gpus"`
	Releasing int `json:"releasing_gpus"`
}

func gpuTotalsOf(t protocol.GPUTotals) gpuTotalsView {
	return gpuTotalsView{Total: t.Total, Free: t.Free, Allocated: t.Allocated, Releasing: t.Releasing}
}

// nodeView is one configured machine of an allocation.
type nodeView struct {
	Name    string `json:"name"`
	Family  string `json:"family"`
	GPUs    int    `json:"gpus"`
	CPU     int    `json:"cpu"`
	RAMGB   int    `json:"ram_gb"`
	Address string `json:"address,omitempty"`
}

func nodesOf(nodes []scheduler.Node) []nodeView {
	if nodes == nil {
		return nil
	}
	out := make([]nodeView, len(nodes))
	for i, n := range nodes {
		out[i] = nodeView{Name: n.Name, Family: n.Family, GPUs: n.GPUs, CPU: n.CPU, RAMGB: n.RAMGB, Address: n.Address}
	}
	return out
}

// attemptPreemptorView is the job an attempt was preempted for.
type attemptPreemptorView struct {
	Job   string `json:"job"`
	Class string `json:"class"` // low, medium or high
	Kind  string `json:"kind"`
}

// attemptView is one attempt of a job: when it queued, ran and ended, where,
// and what stopped it.
type attemptView struct {
	Number           int                   `json:"number"`
	QueuedAt         time.Time             `json:"queued_at"`
	StartedAt        *time.Time            `json:"started_at,omitempty"`
	EndedAt          *time.Time            `json:"ended_at,omitempty"`
	EndReason        string                `json:"end_reason,omitempty"`
	ExitCode         *int                  `json:"exit_code,omitempty"`
	Preemptor        *attemptPreemptorView `json:"preemptor,omitempty"`
	Placement        []placementView       `json:"placement,omitempty"`
	OnLoan           bool                  `json:"on_loan,omitempty"` // it started on another job's reservation until its limit or estimate
	URL              string                `json:"url,omitempty"`     // where its Jupyter server serves
	NoticeDeadline   *time.Time            `json:"notice_deadline,omitempty"`
	NoticeReason     string                `json:"notice_reason,omitempty"`
	NoticedAt        *time.Time            `json:"noticed_at,omitempty"`
	CheckpointAt     *time.Time            `json:"checkpoint_at,omitempty"`
	ExitedOnNoticeAt *time.Time            `json:"exited_on_notice_at,omitempty"`
	Warning          string                `json:"warning,omitempty"`
	WarnedAt         *time.Time            `json:"warned_at,omitempty"`
	Released         []workerReleaseView   `json:"released,omitempty"`
}

// workerReleaseView is when one worker of an attempt released its capacity.
type workerReleaseView struct {
	Worker int       `json:"worker"`
	At     time.Time `json:"at"`
}

// attemptsOf is never nil: a job without attempts lists none.
func attemptsOf(attempts []protocol.AttemptRecord) []attemptView {
	out := make([]attemptView, len(attempts))
	for i, a := range attempts {
		v := attemptView{Number: a.Number, QueuedAt: a.QueuedAt, StartedAt: a.StartedAt, EndedAt: a.EndedAt, EndReason: a.EndReason,
			ExitCode: a.ExitCode, Placement: placementOf(a.Placement), OnLoan: a.OnLoan, URL: a.URL, NoticeDeadline: a.NoticeDeadline,
			NoticeReason: a.NoticeReason, NoticedAt: a.NoticedAt, CheckpointAt: a.CheckpointAt, ExitedOnNoticeAt: a.ExitedOnNoticeAt,
			Warning: a.Warning, WarnedAt: a.WarnedAt}
		if pr := a.Preemptor; pr != nil {
			v.Preemptor = &attemptPreemptorView{Job: pr.Job, Class: pr.Class.String(), Kind: string(pr.Kind)}
		}
		for _, r := range a.Released {
			v.Released = append(v.Released, workerReleaseView{Worker: r.Worker, At: r.At})
		}
		out[i] = v
	}
	return out
}

// checkpointView answers POST /jobs/{job_name}/checkpoint: the attempt the
// checkpoint was booked on, and when.
type checkpointView struct {
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

func checkpointOf(r protocol.CheckpointReply) checkpointView {
	return checkpointView{Job: r.Job, Attempt: r.Attempt, At: r.At}
}
