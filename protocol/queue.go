package protocol

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// What an allocator's queue looks like from outside: the queue view and
// page, counts, expected starts, and the refusals of a full queue.

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
