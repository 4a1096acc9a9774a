package allocation

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The views read the state and never change it.

// Explain is one job's place: waiting (with position and reason) or running.
func (s *State) Explain(job string) protocol.ExplainReply {
	var out protocol.ExplainReply
	if w, ok := s.Pool.Explain(job); ok {
		out.Waiting = &w
	}
	if r, ok := s.Pool.Running(job); ok {
		out.Running = &r
	}
	return out
}

// DryRun answers the dry-run query: what req, of a job that is not in the
// allocation, would get if it were queued now (at the end of its class's
// queue, as a new request is).
func (s *State) DryRun(req protocol.CapacityRequest, now time.Time) (scheduler.DryRun, error) {
	if req.Job == "" {
		return scheduler.DryRun{}, errors.New("job: must not be empty")
	}
	req.Attempt, req.Seq = 1, s.NextSeq
	if req.SubmittedAt.IsZero() {
		req.SubmittedAt = now
	}
	r, err := RequestFor(s.Pool, req)
	if err != nil {
		return scheduler.DryRun{}, err
	}
	d, err := s.Pool.DryRun(r, now)
	if err != nil || d.Start {
		return d, err
	}
	// As for the queue's expected starts: a stopping worker takes its notice, then its grace period, at most.
	e, err := s.Pool.DryRunStart(r, now, s.Pool.Policy().PreemptionNotice+s.Config.StopGracePeriod)
	if err != nil {
		e = scheduler.ExpectedStart{Because: "unknown: the projection failed: " + err.Error()}
	}
	d.ExpectedStart = &e
	return d, nil
}

// Counts answers the counts query (admission, the watchdog).
func (s *State) Counts(recovering bool) protocol.QueueCounts {
	c := protocol.QueueCounts{Waiting: s.Pool.WaitingCount(), MaxWaiting: s.Config.MaxWaiting,
		Running: len(s.Pool.RunningJobs()), Recovering: recovering, RecoveredAt: s.RecoveredAt}
	if len(s.Config.WaitingLimits) > 0 {
		c.WorkspaceWaiting = map[string]map[string]int{}
		// Map order does not reach the result: it is a map too.
		//workflowcheck:ignore
		for ws, n := range s.Pool.WaitingByWorkspace() {
			byClass := map[string]int{}
			for class, k := range n {
				if k > 0 {
					byClass[scheduler.Class(class).String()] = k
				}
			}
			c.WorkspaceWaiting[ws] = byClass
		}
	}
	return c
}

// View is one page of the queue, every running job and every node.
func (s *State) View(page protocol.QueuePage, recovering bool, now time.Time) protocol.QueueView {
	v := protocol.QueueView{Region: s.Config.Region, Allocation: s.Config.Allocation,
		Offset: page.Offset, Limit: page.Limit, Counters: s.Counters, WaitingTotal: s.Pool.WaitingCount(),
		WaitingByClass: map[string]int{}, Recovering: recovering, Fenced: append(s.Fenced(), s.Drained()...)}
	if page.Filtered() {
		v.View, v.WaitingMatched = s.Pool.ViewPageWhere(page.Offset, page.Limit, page.Keeps)
	} else {
		v.View = s.Pool.ViewPage(page.Offset, page.Limit)
	}
	for class, n := range s.Pool.WaitingByClass() {
		v.WaitingByClass[scheduler.Class(class).String()] = n
	}
	if v.FairShare = s.Pool.Usage(); v.FairShare != nil {
		v.FairShareHalfLife = s.Pool.Policy().FairShareHalfLifeInEffect()
	}
	if page.ExpectedStarts && len(v.Waiting) > 0 {
		jobs := make([]string, len(v.Waiting))
		for i := range v.Waiting {
			jobs[i] = v.Waiting[i].Job
		}
		expected := s.expectedStarts(now, jobs)
		for i := range v.Waiting {
			if e, ok := expected[v.Waiting[i].Job]; ok {
				v.Waiting[i].ExpectedStart = &e
			}
		}
	}
	return v
}

// ExpectedStart is when job, if it waits, is expected to start, with the
// range it will likely start in (see scheduler.Pool.Forecast); nil if it does
// not wait.
func (s *State) ExpectedStart(job string, now time.Time) *scheduler.ExpectedStart {
	if _, ok := s.Pool.Waiting(job); !ok {
		return nil
	}
	if e, ok := s.expectedStarts(now, []string{job})[job]; ok {
		return &e
	}
	return nil
}

// stopBound is how long a stopping worker takes at most: its notice, then its
// grace period.
func (s *State) stopBound() time.Duration {
	return s.Pool.Policy().PreemptionNotice + s.Config.StopGracePeriod
}

// expectedStarts forecasts the waiting jobs listed; a failed projection
// answers unknown, with why.
func (s *State) expectedStarts(now time.Time, jobs []string) map[string]scheduler.ExpectedStart {
	expected, err := s.Pool.Forecast(now, s.stopBound(), jobs)
	if err != nil {
		expected = map[string]scheduler.ExpectedStart{}
		for _, job := range jobs {
			expected[job] = scheduler.ExpectedStart{Because: "unknown: the projection failed: " + err.Error()}
		}
	}
	return expected
}

// detailsListed is how many waiting jobs the Web UI's details list.
const detailsListed = 20

// DetailStarts are the expected starts of the waiting jobs the details list, as of now.
func (s *State) DetailStarts(now time.Time) ExpectedStarts {
	v := s.Pool.ViewPage(0, detailsListed)
	jobs := make([]string, len(v.Waiting))
	for i, w := range v.Waiting {
		jobs[i] = w.Job
	}
	if len(jobs) == 0 {
		return ExpectedStarts{At: now, Starts: map[string]scheduler.ExpectedStart{}}
	}
	return ExpectedStarts{At: now, Starts: s.expectedStarts(now, jobs)}
}

// ExpectedStarts are the expected starts of some waiting jobs, projected at At.
type ExpectedStarts struct {
	At     time.Time
	Starts map[string]scheduler.ExpectedStart
}

// Stale says whether the details' starts are to be projected again: they are older than
// interval, or the details now list a waiting job they lack or no longer list one they have
// (a details render that stayed as it was could otherwise outlive the last event for good).
func (e ExpectedStarts) Stale(s *State, now time.Time, interval time.Duration) bool {
	if e.At.IsZero() || now.Sub(e.At) >= interval {
		return true
	}
	v := s.Pool.ViewPage(0, detailsListed)
	if len(v.Waiting) != len(e.Starts) {
		return true
	}
	for _, w := range v.Waiting {
		if _, ok := e.Starts[w.Job]; !ok {
			return true
		}
	}
	return false
}

// Details renders the allocation for the Web UI's current details; each waiting job listed
// shows its expected start if starts has it.
func (s *State) Details(recovering bool, lastEvent string, starts ExpectedStarts) string {
	v := s.Pool.ViewPage(0, detailsListed)
	var b strings.Builder
	fmt.Fprintf(&b, "## Allocation %s\n\n", s.Name())
	if recovering {
		b.WriteString("**Recovering**: rebuilding the state from the jobs and the node agents; nothing is granted until it is done.\n\n")
	}
	if lastEvent != "" {
		fmt.Fprintf(&b, "Last event: %s\n\n", lastEvent)
	}
	for _, f := range s.Fenced() {
		fmt.Fprintf(&b, "- **%s fenced**: %s\n", f.Node, f.Reason)
	}
	for _, f := range s.Drained() {
		fmt.Fprintf(&b, "- **%s %s**\n", f.Node, f.Reason)
	}
	b.WriteString("| node | family | GPUs | free | allocated | releasing |\n|---|---|---|---|---|---|\n")
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", n.Name, n.Family, n.GPUs, n.FreeGPUs, n.AllocatedGPUs, n.ReleasingGPUs)
	}
	fmt.Fprintf(&b, "\n### Running (%d)\n\n", len(v.Running))
	for _, r := range v.Running {
		state := "running"
		if r.Releasing {
			state = "releasing"
		}
		fmt.Fprintf(&b, "- %s · %s · %d GPUs · %s · %s\n", r.Job, r.Class, r.GPUs, state, scheduler.PlacementText(r.Placement))
	}
	waiting := s.Pool.WaitingCount()
	fmt.Fprintf(&b, "\n### Waiting (%d)\n\n", waiting)
	if len(starts.Starts) > 0 {
		fmt.Fprintf(&b, "Expected starts as of %s UTC (`trainq queue %s --region %s --eta` for the live answer).\n\n",
			starts.At.UTC().Format("15:04:05"), s.Config.Allocation, s.Config.Region)
	}
	for _, w := range v.Waiting {
		fmt.Fprintf(&b, "%d. %s · %s · %d GPUs — %s", w.Position, w.Job, w.Class, w.GPUs, w.Reason)
		if e, ok := starts.Starts[w.Job]; ok {
			fmt.Fprintf(&b, " · **expected start %s**", detailStart(e))
		}
		b.WriteString("\n")
	}
	if waiting > len(v.Waiting) {
		fmt.Fprintf(&b, "- … and %d more\n", waiting-len(v.Waiting))
	}
	return b.String()
}

// detailStart is an expected start in the details: "14:05 UTC (if … ends by its time limit at
// …)" or "unknown (… has no estimate)".
func detailStart(e scheduler.ExpectedStart) string {
	if e.At.IsZero() {
		return "unknown (" + strings.TrimPrefix(e.Because, "unknown: ") + ")"
	}
	return e.At.UTC().Format("15:04:05") + " UTC (" + e.Because + ")"
}
