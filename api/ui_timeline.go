package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
)

// The timeline's history is the jobs' own attempt tables: every job
// workflow keeps, durably and for as long as Temporal keeps the job (the
// namespace's retention), each attempt's placement, start, end, end reason
// and preemptor (protocol.AttemptRecord). A timeline lists, through
// visibility, the allocation's jobs that were open at some time in the
// window (open now, or closed since its start), at most
// timelineMaxJobs of them, newest first, and asks each for its status.
// Nothing is kept in trainq-api or in the allocator for it.

// Bounds of a timeline.
const (
	timelineDefaultHours = 6
	timelineMaxHours     = 24
	timelineMaxJobs      = 2000
	timelineConcurrency  = 8
)

// uiTimelineView answers GET /ui/api/allocations/{name}/timeline.
type uiTimelineView struct {
	Region     string    `json:"region"`
	Allocation string    `json:"allocation_name"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	// Nodes are the allocation's nodes, in config order: a lane per GPU.
	Nodes []uiTimelineNode `json:"nodes"`
	Bars  []uiBar          `json:"bars"`
	// Jobs counts the jobs read; Truncated says more jobs were open in the
	// window than a timeline reads (the oldest are left out); Unreadable
	// counts jobs whose status could not be read.
	Jobs       int  `json:"jobs"`
	Truncated  bool `json:"truncated,omitempty"`
	Unreadable int  `json:"unreadable,omitempty"`
}

type uiTimelineNode struct {
	Name string `json:"name"`
	GPUs int    `json:"gpus"`
}

// uiBar is one worker of one attempt on one node: from its start to when
// it released its capacity (attempts recorded before releases were, to the
// attempt's end; none: it still runs). A bar of another workspace's job names it
// hiddenName and keeps class, size and times.
type uiBar struct {
	ID      int        `json:"id"`
	Job     string     `json:"job"`
	Class   string     `json:"class"`
	Type    string     `json:"type"`
	JobGPUs int        `json:"job_gpus"`
	Attempt int        `json:"attempt"`
	Worker  int        `json:"worker"`
	Node    string     `json:"node"`
	GPUs    []int      `json:"gpus"`
	Start   time.Time  `json:"start"`
	End     *time.Time `json:"end,omitempty"`
	// EndReason is why the attempt ended; PreemptedBy names its preemptor,
	// and PreemptorBars are the bars of the preemptor's next attempt (an
	// arrow from this bar to each).
	EndReason     string `json:"end_reason,omitempty"`
	PreemptedBy   string `json:"preempted_by,omitempty"`
	PreemptorBars []int  `json:"preemptor_bars,omitempty"`
}

func (s *Server) uiTimeline(w http.ResponseWriter, r *http.Request, p Principal) {
	region, name, ok := s.uiAllocation(w, r, "region", "hours")
	if !ok {
		return
	}
	hours := timelineDefaultHours
	if h := r.URL.Query().Get("hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > timelineMaxHours {
			s.fail(w, r, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "hours", fmt.Sprintf("%q is not allowed; use a whole number from 1 to %d", h, timelineMaxHours)))
			return
		}
		hours = n
	}
	_, alloc, _ := s.config().Allocation(region, name)
	to := time.Now().UTC()
	out := uiTimelineView{Region: region, Allocation: name, From: to.Add(-time.Duration(hours) * time.Hour), To: to,
		Nodes: []uiTimelineNode{}, Bars: []uiBar{}}
	for _, n := range alloc.Nodes {
		out.Nodes = append(out.Nodes, uiTimelineNode{Name: n.Name, GPUs: n.GPUs})
	}
	ctx, cancel := s.call(r)
	defer cancel()
	jobs, err := s.backend.List(ctx, client.ListFilter{Region: region, Allocation: name, ActiveSince: out.From, HasRun: true, Limit: timelineMaxJobs + 1})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(jobs) > timelineMaxJobs {
		jobs, out.Truncated = jobs[:timelineMaxJobs], true
	}
	// The statuses get three quarters of the call's time, so that what is
	// read in time is answered (the rest counted unreadable), not a 503.
	sctx, scancel := context.WithTimeout(ctx, s.opts.CallTimeout*3/4)
	statuses, unreadable := s.statuses(sctx, jobs)
	scancel()
	out.Jobs, out.Unreadable = len(statuses), unreadable
	rd := s.redactor(p)
	var names []string
	for i, j := range jobs {
		if statuses[i] == nil {
			continue
		}
		if p.CanSee(j.Workspace) && j.Workspace != "" {
			rd.know(j.JobName)
		} else {
			rd.hide(j.JobName)
		}
		for _, a := range statuses[i].Attempts {
			if a.Preemptor != nil {
				names = append(names, a.Preemptor.Job)
			}
			names = append(names, namesIn(a.EndReason)...)
		}
	}
	if err := rd.learn(ctx, names); err != nil {
		s.fail(w, r, err)
		return
	}
	out.Bars = timelineBars(jobs, statuses, out.From, rd)
	writeCompactJSON(w, r, out)
}

// statuses reads the jobs' statuses, a few at once; a job whose status
// cannot be read (it vanished, its worker is away) is nil and counted.
func (s *Server) statuses(ctx context.Context, jobs []client.JobSummary) ([]*protocol.JobStatus, int) {
	out := make([]*protocol.JobStatus, len(jobs))
	sem := make(chan struct{}, timelineConcurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if st, err := s.backend.Status(ctx, j.JobName); err == nil {
				out[i] = &st
			}
		}()
	}
	wg.Wait()
	bad := 0
	for _, st := range out {
		if st == nil {
			bad++
		}
	}
	return out, bad
}

// timelineBars lays the attempts that ran in the window out as bars, and
// links each preempted attempt to its preemptor's next attempt.
func timelineBars(jobs []client.JobSummary, statuses []*protocol.JobStatus, from time.Time, rd *redactor) []uiBar {
	type key struct {
		job     string
		attempt int
	}
	bars := []uiBar{}
	byAttempt := map[key][]int{}
	type victim struct {
		bars      []int
		preemptor string
		at        time.Time
	}
	var victims []victim
	for i, st := range statuses {
		if st == nil {
			continue
		}
		shown := rd.shows(jobs[i].JobName)
		for _, a := range st.Attempts {
			if a.StartedAt == nil || a.EndedAt != nil && a.EndedAt.Before(from) {
				continue
			}
			if len(a.Placement) == 0 {
				continue
			}
			var ids []int
			releasedAt := map[int]time.Time{}
			for _, r := range a.Released {
				if _, ok := releasedAt[r.Worker]; !ok {
					releasedAt[r.Worker] = r.At
				}
			}
			for _, pl := range a.Placement {
				// A worker's bar ends when it released its capacity (workers of a gang stop one
				// by one), else when the attempt ended.
				end := a.EndedAt
				if at, ok := releasedAt[pl.Worker]; ok {
					end = &at
				}
				if end != nil && end.Before(from) {
					continue
				}
				b := uiBar{ID: len(bars), Job: rd.name(st.JobName), Class: st.Priority, Type: string(st.Kind), JobGPUs: st.GPUs,
					Attempt: a.Number, Worker: pl.Worker, Node: pl.Node, GPUs: pl.GPUs, Start: *a.StartedAt, End: end}
				if b.GPUs == nil {
					b.GPUs = []int{}
				}
				if shown {
					b.EndReason = rd.text(a.EndReason)
				}
				if a.Preemptor != nil {
					b.PreemptedBy = rd.name(a.Preemptor.Job)
				}
				ids = append(ids, b.ID)
				bars = append(bars, b)
			}
			byAttempt[key{st.JobName, a.Number}] = ids
			if a.Preemptor != nil && a.EndedAt != nil {
				victims = append(victims, victim{bars: ids, preemptor: a.Preemptor.Job, at: *a.EndedAt})
			}
		}
	}
	// The preemptor's attempt that started on the victim's capacity: its
	// first attempt started at or after the victim was preempted (the
	// victim's end is after the preemption; a start up to a minute before
	// the end counts, as the preemptor may take a worker's node early).
	index := make(map[string]int, len(jobs))
	for i, j := range jobs {
		index[j.JobName] = i
	}
	for _, v := range victims {
		if i, ok := index[v.preemptor]; ok && statuses[i] != nil {
			st := statuses[i]
			var best *protocol.AttemptRecord
			for k := range st.Attempts {
				a := &st.Attempts[k]
				if a.StartedAt != nil && !a.StartedAt.Before(v.at.Add(-time.Minute)) && (best == nil || a.StartedAt.Before(*best.StartedAt)) {
					best = a
				}
			}
			if best != nil {
				// Each victim bar points at the preemptor's bars on its node, if any, else at all.
				to := byAttempt[key{st.JobName, best.Number}]
				for _, id := range v.bars {
					var same []int
					for _, p := range to {
						if bars[p].Node == bars[id].Node {
							same = append(same, p)
						}
					}
					if len(same) == 0 {
						same = to
					}
					bars[id].PreemptorBars = append(bars[id].PreemptorBars, same...)
				}
			}
		}
	}
	sort.SliceStable(bars, func(i, j int) bool { return bars[i].Start.Before(bars[j].Start) })
	// IDs stay as given: PreemptorBars refer to them.
	return bars
}
