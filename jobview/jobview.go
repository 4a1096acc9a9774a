// Package jobview holds the shapes of a job's attempts, placement and checkpoints that the REST API and the
// CLI's --output json print alike, so that the two answer with the same fields and one change
// reaches both (api/testdata/wire and cmd/trainq/testdata/json pin them).
package jobview

import (
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Placement is where one worker of a job runs: its node and the GPU indices it holds there.
type Placement struct {
	Worker int    `json:"worker"`
	Node   string `json:"node"`
	GPUs   []int  `json:"gpus"`
}

// PlacementOf is nil for no placement, so that omitempty leaves it out.
func PlacementOf(ps []scheduler.WorkerPlacement) []Placement {
	if ps == nil {
		return nil
	}
	out := make([]Placement, len(ps))
	for i, p := range ps {
		out[i] = Placement{Worker: p.Worker, Node: p.Node, GPUs: p.GPUs}
	}
	return out
}

// Preemptor is the job an attempt was preempted for.
type Preemptor struct {
	Job   string `json:"job"`
	Class string `json:"class"` // low, medium or high
	Kind  string `json:"kind"`
}

// PreemptorOf is nil for none.
func PreemptorOf(p *scheduler.Preemptor) *Preemptor {
	if p == nil {
		return nil
	}
	return &Preemptor{Job: p.Job, Class: p.Class.String(), Kind: string(p.Kind)}
}

// Attempt is one attempt of a job: when it queued, ran and ended, where, and what stopped it.
type Attempt struct {
	Number           int             `json:"number"`
	QueuedAt         time.Time       `json:"queued_at"`
	StartedAt        *time.Time      `json:"started_at,omitempty"`
	EndedAt          *time.Time      `json:"ended_at,omitempty"`
	EndReason        string          `json:"end_reason,omitempty"`
	ExitCode         *int            `json:"exit_code,omitempty"`
	Preemptor        *Preemptor      `json:"preemptor,omitempty"`
	Placement        []Placement     `json:"placement,omitempty"`
	OnLoan           bool            `json:"on_loan,omitempty"` // it started on another job's reservation until its limit or estimate
	URL              string          `json:"url,omitempty"`     // where its Jupyter server serves
	NoticeDeadline   *time.Time      `json:"notice_deadline,omitempty"`
	NoticeReason     string          `json:"notice_reason,omitempty"`
	NoticedAt        *time.Time      `json:"noticed_at,omitempty"`
	CheckpointAt     *time.Time      `json:"checkpoint_at,omitempty"`
	ExitedOnNoticeAt *time.Time      `json:"exited_on_notice_at,omitempty"`
	Warning          string          `json:"warning,omitempty"`
	WarnedAt         *time.Time      `json:"warned_at,omitempty"`
	Released         []WorkerRelease `json:"released,omitempty"`
}

// WorkerRelease is when one worker of an attempt released its capacity.
type WorkerRelease struct {
	Worker int       `json:"worker"`
	At     time.Time `json:"at"`
}

// AttemptsOf is nil for no attempts.
func AttemptsOf(attempts []protocol.AttemptRecord) []Attempt {
	if attempts == nil {
		return nil
	}
	out := make([]Attempt, len(attempts))
	for i, a := range attempts {
		v := Attempt{Number: a.Number, QueuedAt: a.QueuedAt, StartedAt: a.StartedAt, EndedAt: a.EndedAt, EndReason: a.EndReason,
			ExitCode: a.ExitCode, Preemptor: PreemptorOf(a.Preemptor), Placement: PlacementOf(a.Placement), OnLoan: a.OnLoan, URL: a.URL,
			NoticeDeadline: a.NoticeDeadline, NoticeReason: a.NoticeReason, NoticedAt: a.NoticedAt, CheckpointAt: a.CheckpointAt,
			ExitedOnNoticeAt: a.ExitedOnNoticeAt, Warning: a.Warning, WarnedAt: a.WarnedAt}
		for _, r := range a.Released {
			v.Released = append(v.Released, WorkerRelease{Worker: r.Worker, At: r.At})
		}
		out[i] = v
	}
	return out
}

// Checkpoint is a checkpoint the allocator booked: on which attempt, and when.
type Checkpoint struct {
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// CheckpointOf is the answer to a checkpoint.
func CheckpointOf(r protocol.CheckpointReply) Checkpoint {
	return Checkpoint{Job: r.Job, Attempt: r.Attempt, At: r.At}
}
