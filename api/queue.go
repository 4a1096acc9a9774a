package api

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/jobview"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// waitingView is a waiting job, in ML Space's awaiting-launch words.
type waitingView struct {
	LaunchOrder  int           `json:"launch_order"`
	JobName      string        `json:"job_name"`
	Type         string        `json:"type"` // job or notebook
	Priority     string        `json:"priority"`
	GPUCount     int           `json:"gpu_count"`
	NWorkers     int           `json:"n_workers"`
	Demand       perWorkerView `json:"per_worker"`
	Attempt      int           `json:"attempt"`
	Reason       string        `json:"reason"`
	WaitingFor   []string      `json:"waiting_for,omitempty"`
	Nominated    []string      `json:"nominated,omitempty"`
	WaitingSince time.Time     `json:"waiting_since"`
	// ExpectedStartAt and ExpectedStart, with ?expected_start=true: when it
	// is expected to start (absent: unknown) and the assumption, or why it
	// is unknown.
	ExpectedStartAt *time.Time `json:"expected_start_at,omitempty"`
	ExpectedStart   string     `json:"expected_start,omitempty"`
	// ExpectedStartEarliest and ExpectedStartLatest: the range it will
	// likely start in (8 in 10 jobs do), once the allocation has a record of
	// how wrong its expected starts were.
	ExpectedStartEarliest *time.Time `json:"expected_start_earliest,omitempty"`
	ExpectedStartLatest   *time.Time `json:"expected_start_latest,omitempty"`
}

type runningView struct {
	JobName         string              `json:"job_name"`
	Type            string              `json:"type"`
	Priority        string              `json:"priority"`
	GPUCount        int                 `json:"gpu_count"`
	Attempt         int                 `json:"attempt"`
	StartedAt       time.Time           `json:"started_at"`
	Releasing       bool                `json:"releasing"`
	ReleasedWorkers []int               `json:"released_workers,omitempty"`
	PreemptedBy     string              `json:"preempted_by,omitempty"`
	OnLoan          bool                `json:"on_loan,omitempty"` // started on another job's reservation until its limit or estimate
	Placement       []jobview.Placement `json:"placement,omitempty"`
}

type queueView struct {
	Region     string `json:"region"`
	Allocation string `json:"allocation_name"`
	gpuTotalsView
	// WaitingTotal counts every waiting job; Waiting lists those from
	// Offset, at most Limit of them (of those the filters keep, when set:
	// WaitingMatched counts them).
	WaitingTotal   int             `json:"waiting_total"`
	WaitingMatched *int            `json:"waiting_matched,omitempty"`
	Offset         int             `json:"offset"`
	Limit          int             `json:"limit"`
	Waiting        []waitingView   `json:"waiting"`
	Running        []runningView   `json:"running"`
	Nodes          []nodeUsageView `json:"nodes"`
	// FairShare, under the fair-share ordering, is each workspace's recent
	// usage, least first (the order its jobs are taken in within a class).
	FairShare []fairShareView `json:"fair_share,omitempty"`
}

// fairShareView is one workspace's usage; a user sees other workspaces'
// figures, not their names.
type fairShareView struct {
	Workspace string  `json:"workspace"`
	GPUHours  float64 `json:"gpu_hours"` // decayed: an hour one half-life ago counts half
	Share     float64 `json:"share"`     // of all workspaces' usage, 0 to 1
	GPUs      int     `json:"gpus"`      // held now
	Waiting   int     `json:"waiting"`
	HalfLife  string  `json:"half_life"`
}

// otherWorkspace stands for a workspace the asker may not see by name.
const otherWorkspace = "(another workspace)"

// queueParams are the query parameters of the queue endpoint.
var queueParams = []string{"region", "offset", "limit", "expected_start", "class", "type", "workspace"}

// queue shows an allocation: a page of the waiting jobs in launch order
// with their reasons (offset, limit: default 100; class, type and workspace
// list only the jobs of that class, type and workspace, and the page is a
// page of those), running and releasing jobs, and free/releasing GPUs per
// node. Jobs of other workspaces are shown without their names.
func (s *Server) queue(w http.ResponseWriter, r *http.Request, p Principal) {
	for k := range r.URL.Query() {
		if !slices.Contains(queueParams, k) {
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: %s", k, strings.Join(queueParams, ", "))))
			return
		}
	}
	page, err := queuePage(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Which of another workspace's jobs wait is what redaction hides: a
	// user filters by their own workspace only.
	if page.Workspace != "" && !p.CanSee(page.Workspace) {
		s.fail(w, r, errorf(http.StatusForbidden, codeForbidden, "workspace",
			fmt.Sprintf("a user token lists the jobs of its own workspace only (%q), not of %q", p.Workspace, page.Workspace)))
		return
	}
	region := r.URL.Query().Get("region")
	if region == "" {
		region = s.config().DefaultRegion
	}
	if !validRegion(s.config(), region) {
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "region", fmt.Sprintf("region %q does not exist; see /public/v2/configs", region)))
		return
	}
	name := r.PathValue("name")
	if _, _, err := s.config().Allocation(region, name); err != nil {
		s.fail(w, r, errorf(http.StatusNotFound, codeNotFound, "", err.Error()))
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	v, err := s.backend.QueuePage(ctx, region, name, page)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if page.Filtered() && v.WaitingMatched == 0 && len(v.Waiting) > 0 {
		// An allocator built before the filters ignores them (it decodes the
		// page without them) and lists jobs it was not asked for: during an
		// upgrade, say so rather than answer a page the filters do not hold.
		s.fail(w, r, &Error{Status: http.StatusServiceUnavailable, Code: codeNoWorker,
			Message: "this allocation's allocator does not filter its queue yet (its trainq-worker is older than this API); try again once it is upgraded, or ask without class, type and workspace"})
		return
	}
	var names []string
	for _, q := range v.Waiting {
		names = append(names, q.Job)
		names = append(names, q.WaitingFor...)
		names = append(names, q.Nominated...)
	}
	for _, run := range v.Running {
		names = append(names, run.Job)
		if run.PreemptedBy != nil {
			names = append(names, run.PreemptedBy.Job)
		}
	}
	rd := s.redactor(p)
	if err := rd.learn(ctx, names); err != nil {
		s.fail(w, r, err)
		return
	}
	out := redactedQueue(v, page, rd)
	s.writeRedacted(ctx, w, r, rd, &out)
}

// redactedQueue is the allocator's view in ML Space's words, with the names
// the asker may not see hidden.
func redactedQueue(v protocol.QueueView, page protocol.QueuePage, rd *redactor) queueView {
	out := redactedJobs(v, page, rd)
	for _, u := range v.FairShare {
		ws := u.Workspace
		if !rd.p.CanSee(ws) {
			ws = otherWorkspace
		}
		out.FairShare = append(out.FairShare, fairShareView{Workspace: ws, GPUHours: math.Round(u.GPUHours*1000) / 1000,
			Share: math.Round(u.Share*10000) / 10000, GPUs: u.GPUs, Waiting: u.Waiting, HalfLife: v.FairShareHalfLife.String()})
	}
	return out
}

func redactedJobs(v protocol.QueueView, page protocol.QueuePage, rd *redactor) queueView {
	out := queueView{Region: v.Region, Allocation: v.Allocation, gpuTotalsView: gpuTotalsOf(v.GPUTotals()), WaitingTotal: max(v.WaitingTotal, len(v.Waiting)),
		Offset: page.Offset, Limit: page.WithDefaults().Limit, Waiting: []waitingView{}, Running: []runningView{}, Nodes: nodeUsageOf(v.Nodes)}
	if page.Filtered() {
		matched := v.WaitingMatched
		out.WaitingMatched = &matched // 0 matched is an answer too
	}
	for _, q := range v.Waiting {
		out.Waiting = append(out.Waiting, waitingView{LaunchOrder: q.Position, JobName: rd.name(q.Job), Type: string(q.Kind),
			Priority: q.Class.String(), GPUCount: q.GPUs, NWorkers: q.Workers, Demand: perWorkerOf(q.Demand), Attempt: q.Attempt,
			Reason: q.Reason, WaitingFor: rd.names(q.WaitingFor), Nominated: rd.names(q.Nominated), WaitingSince: q.SubmittedAt,
			ExpectedStartAt: expectedAt(q.ExpectedStart), ExpectedStart: expectedText(q.ExpectedStart)})
		last := &out.Waiting[len(out.Waiting)-1]
		last.ExpectedStartEarliest, last.ExpectedStartLatest = expectedRange(q.ExpectedStart)
	}
	for _, run := range v.Running {
		rv := runningView{JobName: rd.name(run.Job), Type: string(run.Kind), Priority: run.Class.String(), GPUCount: run.GPUs,
			Attempt: run.Attempt, StartedAt: run.StartedAt, Releasing: run.Releasing, ReleasedWorkers: run.Released, OnLoan: run.OnLoan}
		if rd.shows(run.Job) {
			rv.Placement = jobview.PlacementOf(run.Placement)
		}
		if run.PreemptedBy != nil {
			rv.PreemptedBy = rd.name(run.PreemptedBy.Job)
		}
		out.Running = append(out.Running, rv)
	}
	return out
}

// queuePage reads the page of waiting jobs asked for: offset (default 0),
// limit (default protocol.DefaultQueuePageLimit), and the filters class
// (low, medium, high), type (job, notebook: a waiting job's type) and
// workspace, each at most once.
func queuePage(q url.Values) (protocol.QueuePage, error) {
	var page protocol.QueuePage
	if v, ok, err := queueFilter(q, "class", []string{"low", "medium", "high"}); err != nil {
		return page, err
	} else if ok {
		c, _ := scheduler.ParseClass(v) // one of the three: checked above
		page.Class = &c
	}
	kinds := make([]string, len(protocol.QueueKinds))
	for i, k := range protocol.QueueKinds {
		kinds[i] = string(k)
	}
	if v, ok, err := queueFilter(q, "type", kinds); err != nil {
		return page, err
	} else if ok {
		page.Kind = scheduler.Kind(v)
	}
	if v, ok, err := queueFilter(q, "workspace", nil); err != nil {
		return page, err
	} else if ok {
		page.Workspace = v
	}
	for _, f := range []struct {
		param  string
		dst    *int
		lo, hi int
	}{{"offset", &page.Offset, 0, math.MaxInt32}, {"limit", &page.Limit, 1, protocol.MaxQueuePageLimit}} {
		v := q.Get(f.param)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < f.lo || n > f.hi {
			return page, errorf(http.StatusUnprocessableEntity, codeInvalidParam, f.param, fmt.Sprintf("%q is not allowed; use a whole number from %d to %d", v, f.lo, f.hi))
		}
		*f.dst = n
	}
	want, err := expectedStartParam(q)
	if want {
		page.ExpectedStarts, page.Now = true, time.Now().UTC()
	}
	return page, err
}

// queueFilter reads filter param: absent (ok false), or one non-empty value,
// one of allowed when allowed is set; anything else is a 422 naming the
// param and the values allowed.
func queueFilter(q url.Values, param string, allowed []string) (v string, ok bool, err error) {
	vs, ok := q[param]
	if !ok {
		return "", false, nil
	}
	if len(vs) != 1 || vs[0] == "" || (allowed != nil && !slices.Contains(allowed, vs[0])) {
		msg := fmt.Sprintf("%q is not allowed; give it once, one of %s", strings.Join(vs, ","), strings.Join(allowed, ", "))
		if allowed == nil {
			msg = fmt.Sprintf("%q is not allowed; give it once, a workspace's name", strings.Join(vs, ","))
		}
		return "", false, errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, msg)
	}
	return vs[0], true, nil
}

func validRegion(cfg *config.Config, region string) bool {
	for _, r := range cfg.Regions {
		if r.Name == region {
			return true
		}
	}
	return false
}

// Configs.

type instanceTypeView struct {
	Name       string `json:"name"`
	Family     string `json:"family"`
	GPUs       int    `json:"gpus"`
	CPU        int    `json:"cpu,omitempty"`
	RAMGB      int    `json:"ram_gb,omitempty"`
	MaxWorkers int    `json:"max_workers"` // nodes that can hold one worker of this type
}

type allocationView struct {
	Name                       string             `json:"name"`
	Queueing                   string             `json:"queueing"`
	MinRuntimeBeforePreemption string             `json:"min_runtime_before_preemption"`
	StopGracePeriod            string             `json:"stop_grace_period"`
	TotalGPUs                  int                `json:"total_gpus"`
	Nodes                      []nodeView         `json:"nodes"`
	InstanceTypes              []instanceTypeView `json:"instance_types"`
}

type regionView struct {
	Name        string           `json:"name"`
	Allocations []allocationView `json:"allocations"`
}

// configs lists regions, allocations and the instance types they can run.
func (s *Server) configs(w http.ResponseWriter, r *http.Request, _ Principal) {
	out := struct {
		DefaultRegion     string       `json:"default_region"`
		DefaultAllocation string       `json:"default_allocation"`
		Regions           []regionView `json:"regions"`
	}{DefaultRegion: s.config().DefaultRegion, DefaultAllocation: s.config().DefaultAllocation}
	for _, reg := range s.config().Regions {
		rv := regionView{Name: reg.Name}
		for _, a := range reg.Allocations {
			av := allocationView{Name: a.Name, Queueing: string(a.Queueing), MinRuntimeBeforePreemption: a.MinRuntimeBeforePreemption.D().String(),
				StopGracePeriod: a.StopGracePeriod.D().String(), Nodes: nodesOf(a.Nodes), InstanceTypes: instanceTypes(a.Nodes)}
			for _, n := range a.Nodes {
				av.TotalGPUs += n.GPUs
			}
			rv.Allocations = append(rv.Allocations, av)
		}
		out.Regions = append(out.Regions, rv)
	}
	writeJSON(w, http.StatusOK, out)
}

// instanceTypes lists, per node family, the GPU slices 1, 2, 4, ... up to a
// whole node (in the full ML Space form for a whole node), and for CPU-only
// nodes the whole node.
func instanceTypes(nodes []scheduler.Node) []instanceTypeView {
	var out []instanceTypeView
	seen := map[string]bool{}
	add := func(it instanceTypeView) {
		if seen[it.Name] {
			return
		}
		seen[it.Name] = true
		for _, n := range nodes {
			if n.Family == it.Family && n.GPUs >= it.GPUs && n.CPU >= it.CPU && n.RAMGB >= it.RAMGB {
				it.MaxWorkers++
			}
		}
		out = append(out, it)
	}
	for _, n := range nodes {
		if n.GPUs == 0 {
			add(instanceTypeView{Name: fmt.Sprintf("%s.%dC.%dG", n.Family, n.CPU, n.RAMGB), Family: n.Family, CPU: n.CPU, RAMGB: n.RAMGB})
			continue
		}
		for g := 1; g < n.GPUs; g *= 2 {
			add(instanceTypeView{Name: fmt.Sprintf("%s.%dgpu", n.Family, g), Family: n.Family, GPUs: g})
		}
		add(instanceTypeView{Name: fmt.Sprintf("%s.%dgpu", n.Family, n.GPUs), Family: n.Family, GPUs: n.GPUs})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Family != out[j].Family {
			return out[i].Family < out[j].Family
		}
		return out[i].GPUs < out[j].GPUs
	})
	return out
}

func expectedAt(e *scheduler.ExpectedStart) *time.Time {
	if e == nil || e.At.IsZero() {
		return nil
	}
	at := e.At
	return &at
}

// expectedRange is the range the job will likely start in (8 in 10 jobs of the
// allocation have started in theirs), or nils while the allocation has no
// record to say it.
func expectedRange(e *scheduler.ExpectedStart) (earliest, latest *time.Time) {
	if e == nil || e.Earliest.IsZero() || e.Latest.IsZero() {
		return nil, nil
	}
	lo, hi := e.Earliest, e.Latest
	return &lo, &hi
}

func expectedText(e *scheduler.ExpectedStart) string {
	if e == nil {
		return ""
	}
	return e.Because
}
