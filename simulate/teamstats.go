package simulate

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// NoWorkspace names the row of the jobs without a workspace, in a workload where others have one.
const NoWorkspace = "(none)"

// TeamRow is the figures of one workspace's jobs (Result.Teams).
type TeamRow struct {
	Workspace string `json:"workspace"`
	Jobs      int    `json:"jobs"`
	// UsefulGPUHours is the work of its completed jobs, Share that over every job's (0 to 1), and
	// HighGPUHours the part of its high jobs.
	UsefulGPUHours float64 `json:"useful_gpu_hours"`
	Share          float64 `json:"useful_share"`
	HighGPUHours   float64 `json:"high_useful_gpu_hours"`
	// PeakGPUs is, per class of its requests (high, medium, low), the most GPUs its running and
	// stopping workers held at once.
	PeakGPUs map[string]int `json:"peak_gpus"`
	// Waits of its jobs by their own class, as in Row (jobs that never fit are not counted).
	High   Waits `json:"high_wait"`
	Medium Waits `json:"medium_wait"`
	Low    Waits `json:"low_wait"`
	// CapHits counts its jobs that, at least once after a scheduling pass, waited on their
	// workspace's cap: Pool.Explain gave the cap as the reason (see sim.checkCaps). Only counted
	// under a policy with caps.
	CapHits  int `json:"cap_hits"`
	Rejected int `json:"rejected,omitempty"`
}

// teamState follows the workspaces of a run: what each holds, and which of its jobs waited on
// its caps.
type teamState struct {
	on      bool
	names   []string     // workspaces, in Workload.Workspaces order
	of      []int32      // per job, its workspace's index (-1: none)
	held    [][3]int     // per workspace and class of request: the GPUs of its running and stopping workers
	peak    [][3]int     // the most of held
	caps    [][3]int     // per workspace and class: its cap (Policy.Limits), -1 for none
	capped  bool         // some workspace has a cap
	waiting [][3][]int32 // per workspace and class with a cap: its waiting jobs
	// releasing is the GPUs of the unreleased workers of preempted jobs (told or stopping).
	releasing int
	// explains counts the Pool.Explain calls checkCaps made; cands is its scratch.
	explains int
	cands    []int32
}

func (t *teamState) init(s *sim) {
	t.names = s.w.Workspaces()
	if len(t.names) == 0 {
		return
	}
	t.on = true
	idx := make(map[string]int32, len(t.names))
	for i, n := range t.names {
		idx[n] = int32(i)
	}
	t.of = make([]int32, len(s.w.Jobs))
	for i := range s.w.Jobs {
		t.of[i] = -1
		if ws := s.w.Jobs[i].Workspace; ws != "" {
			t.of[i] = idx[ws]
		}
	}
	t.held = make([][3]int, len(t.names))
	t.peak = make([][3]int, len(t.names))
	t.caps = make([][3]int, len(t.names))
	t.waiting = make([][3][]int32, len(t.names))
	for k, name := range t.names {
		for c := range t.caps[k] {
			t.caps[k][c] = scheduler.LimitOf(s.pol.Scheduler.Limits, name, scheduler.Class(c))
			t.capped = t.capped || t.caps[k][c] >= 0
		}
	}
}

// hold counts delta GPUs held by job i's workspace.
func (t *teamState) hold(s *sim, i int32, delta int) {
	if !t.on || t.of[i] < 0 {
		return
	}
	h := &t.held[t.of[i]][s.class(i)]
	*h += delta
	p := &t.peak[t.of[i]][s.class(i)]
	*p = max(*p, *h)
}

// queued notes that job i is queued, in a class its workspace has a cap in.
func (t *teamState) queued(s *sim, i int32) {
	if !t.capped || t.of[i] < 0 {
		return
	}
	ws, c := t.of[i], s.class(i)
	if t.caps[ws][c] < 0 {
		return
	}
	s.jobs[i].capPos = int32(len(t.waiting[ws][c]))
	t.waiting[ws][c] = append(t.waiting[ws][c], i)
}

// started notes that job i runs: its GPUs are held, and it no longer waits.
func (t *teamState) started(s *sim, i int32) {
	if !t.on || t.of[i] < 0 {
		return
	}
	t.hold(s, i, s.w.Jobs[i].GPUs())
	ws, c := t.of[i], s.class(i)
	if t.caps[ws][c] < 0 {
		return
	}
	l := t.waiting[ws][c]
	k := s.jobs[i].capPos
	last := l[len(l)-1]
	l[k] = last
	s.jobs[last].capPos = k
	t.waiting[ws][c] = l[:len(l)-1]
}

// capReason is how Pool.Explain's reason names a class's cap (see scheduler's capText), and
// strictReason how it says a request waits behind a strict-fifo blocker.
var capReason = [3]string{"(limit low.max_gpus)", "(limit medium.max_gpus)", "(limit high.max_gpus)"}

// askEveryCappedJob makes checkCaps ask about every waiting job of a capped class (the tests
// check that the filter loses no cap hit).
var askEveryCappedJob = false

const strictReason = "the allocation uses strict-fifo queueing, so nothing starts before"

// checkCaps asks the pool, after a pass, why the waiting jobs of a class their workspace has a cap
// in wait, until the cap is the reason once (TeamRow.CapHits). Pool.Explain runs a dry pass of the
// state the pass left, which is what the job waits in until the next event.
//
// A dry pass costs as much as a pass, so it asks only about the jobs the cap could hold back. The
// pool caps job i of workspace ws in class c when held + nominated + taken + need > cap: held is
// what ws's running and releasing workers of class c hold (teamState.held, as the pool counts
// it), nominated the capacity nominated to ws's other waiting requests of class c, taken what
// those before i take in the pass, and need what i needs. Nominations are on the unreleased
// workers of preempted jobs or on free capacity held for a nominee, and what a pass takes is free
// or releasing capacity, so nominated + taken <= 2 × (free + releasing): a job with held + need +
// 2 × (free + releasing) <= cap cannot be capped, and is not asked about. Under strict-fifo the
// jobs are asked about in queue order (class, then arrival: Request.Seq), and once one waits
// behind a blocker, so do all after it: they are not asked about either.
func (t *teamState) checkCaps(s *sim) {
	if !t.capped {
		return
	}
	slack := 2 * (s.w.GPUs() - s.held + t.releasing)
	if askEveryCappedJob {
		slack = math.MaxInt32
	}
	t.cands = t.cands[:0]
	for ws := range t.waiting {
		for c := range t.waiting[ws] {
			for _, i := range t.waiting[ws][c] {
				if !s.jobs[i].capHit && t.held[ws][c]+s.w.Jobs[i].GPUs()+slack > t.caps[ws][c] && s.w.Jobs[i].GPUs() > 0 {
					t.cands = append(t.cands, i)
				}
			}
		}
	}
	strict := s.pol.Scheduler.Queueing == scheduler.StrictFIFO
	if strict {
		slices.SortFunc(t.cands, func(a, b int32) int {
			if ca, cb := s.class(a), s.class(b); ca != cb {
				return int(cb) - int(ca)
			}
			return int(a - b)
		})
	}
	for _, i := range t.cands {
		t.explains++
		wi, ok := s.pool.Explain(s.w.Jobs[i].ID)
		switch {
		case !ok:
		case strings.Contains(wi.Reason, capReason[s.class(i)]):
			s.jobs[i].capHit = true
		case strict && strings.Contains(wi.Reason, strictReason):
			return
		}
	}
}

// rows is a TeamRow per workspace (then one for the jobs without), or nil if no job has one.
func (t *teamState) rows(s *sim) []TeamRow {
	if !t.on {
		return nil
	}
	out := make([]TeamRow, len(t.names), len(t.names)+1)
	waits := make([][3][]time.Duration, len(t.names)+1)
	for k, n := range t.names {
		out[k] = TeamRow{Workspace: n, PeakGPUs: map[string]int{}}
		for c := range t.peak[k] {
			out[k].PeakGPUs[scheduler.Class(c).String()] = t.peak[k][c]
		}
	}
	none := -1
	total := 0.0
	for i := range s.jobs {
		j, st := &s.w.Jobs[i], &s.jobs[i]
		useful := 0.0
		if st.phase == phDone {
			useful = j.Runtime.Hours() * float64(j.GPUs())
		}
		total += useful
		k := int(t.of[i])
		if k < 0 {
			if none < 0 {
				none = len(out)
				out = append(out, TeamRow{Workspace: NoWorkspace})
			}
			k = none
		}
		r := &out[k]
		r.Jobs++
		if st.phase == phRejected {
			r.Rejected++
			continue
		}
		r.UsefulGPUHours += useful
		if j.Class == scheduler.High {
			r.HighGPUHours += useful
		}
		if st.capHit {
			r.CapHits++
		}
		waits[k][j.Class] = append(waits[k][j.Class], st.waited)
	}
	for k := range out {
		if total > 0 {
			out[k].Share = out[k].UsefulGPUHours / total
		}
		out[k].High, out[k].Medium, out[k].Low = waitsOf(waits[k][scheduler.High]), waitsOf(waits[k][scheduler.Medium]), waitsOf(waits[k][scheduler.Low])
	}
	return slices.Clip(out)
}
