package allocation

import (
	"fmt"
	"slices"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// FencesCarried fences again the nodes a previous run left fenced: their
// agents have yet to confirm which workers run there.
func (s *State) FencesCarried() []Command {
	var cmds commands
	for _, node := range s.Pool.LostNodes() {
		if s.drainedOnly(node) {
			continue // out of service, not in doubt
		}
		f := s.FenceOf(node)
		cmds.add(s.fence(node, f.Cause, f.Why))
	}
	return cmds
}

// OrphansToResume lists the carried orphans a run reclaims first thing: all
// of them. Older code walked the list while each reclaim of an orphan that
// held nothing any more deleted it in place, so the orphan after such a one
// was skipped in that run (and the tail read as ""); that walk is kept for
// the histories that recorded it.
func (s *State) OrphansToResume(g Gates) []string {
	orphans := slices.Clone(s.Orphans)
	skips := false
	for _, job := range orphans[:max(len(orphans)-1, 0)] {
		if _, held := s.Pool.Running(job); !held {
			skips = true
			break
		}
	}
	if !skips || g.On(GateResumeEveryOrphan) {
		return orphans
	}
	return s.legacyOrphanWalk()
}

// legacyOrphanWalk is the order older code reclaimed the carried orphans in
// (see OrphansToResume).
func (s *State) legacyOrphanWalk() []string {
	walked := slices.Clone(s.Orphans)
	live := walked[:len(walked):len(walked)]
	var visited []string
	for i := range walked {
		job := walked[i]
		visited = append(visited, job)
		if _, held := s.Pool.Running(job); !held {
			live = slices.DeleteFunc(live, func(j string) bool { return j == job })
		}
	}
	return visited
}

// ReclaimPlan is what a reclaim stops: every worker of the job's attempt not
// released yet, with its node.
type ReclaimPlan struct {
	Attempt int
	Workers []cluster.WorkerID
	Nodes   []string
	// Generation is the recovery count when the reclaim began: a reclaim
	// that outlives a recovery changes nothing (see ReclaimDone).
	Generation int64
}

// BeginReclaim starts reclaiming a vanished job: it becomes an orphan until
// its workers are stopped. A job that holds nothing any more is done at once
// (ok false), and the requests that waited for it are queued.
func (s *State) BeginReclaim(job string) (plan ReclaimPlan, cmds []Command, ok bool) {
	r, held := s.Pool.Running(job)
	if !held {
		s.dropOrphan(job)
		return ReclaimPlan{}, s.requestsAfterReclaim(job), false
	}
	s.addOrphan(job)
	plan = ReclaimPlan{Attempt: r.Attempt, Generation: s.Counters.Recoveries}
	for _, p := range r.Placement {
		if slices.Contains(r.Released, p.Worker) {
			continue
		}
		plan.Workers = append(plan.Workers, cluster.WorkerID{Job: job, Attempt: r.Attempt, Worker: p.Worker})
		plan.Nodes = append(plan.Nodes, p.Node)
	}
	return plan, nil, true
}

// ReclaimStopFailed fences the node of a worker a reclaim could not stop:
// its capacity stays unused until the agent confirms.
func (s *State) ReclaimStopFailed(job, node string) []Command {
	return s.NodeLost(node, fmt.Sprintf("could not stop a worker of vanished job %s there", job))
}

// ReclaimDone frees a reclaimed job's capacity once its workers are stopped,
// and queues the requests that waited for it. It says whether the reclaim
// counted: one that outlived a recovery does not, since what the rebuilt pool
// holds for the job (maybe a new attempt with the same number) is not what it
// was for, and the recovery fences every node itself.
func (s *State) ReclaimDone(job string, plan ReclaimPlan, g Gates) ([]Command, bool) {
	if s.Counters.Recoveries != plan.Generation && g.On(GateReclaimGeneration) {
		return nil, false
	}
	if cur, ok := s.Pool.Running(job); ok && cur.Attempt == plan.Attempt {
		s.Pool.CancelAttempt(job, plan.Attempt)
	}
	// Counted even when the capacity is back already: stopping the workers
	// made their node agents report the exits first (see
	// activities.WatchWorkerInput.ReleaseTo).
	s.Counters.Reclaimed++
	var cmds commands
	cmds.add(Count{Metric: MetricReclaimed})
	cmds.note("reclaimed the capacity of vanished job %s", job)
	s.dropOrphan(job)
	cmds.add(s.requestsAfterReclaim(job)...)
	cmds.add(Schedule{})
	return cmds, true
}

// requestsAfterReclaim hands back the requests that waited for job's reclaim.
func (s *State) requestsAfterReclaim(job string) []Command {
	var cmds commands
	s.AfterReclaim = slices.DeleteFunc(s.AfterReclaim, func(q protocol.CapacityRequest) bool {
		if q.Job == job {
			cmds.add(Requeue{Request: q})
			return true
		}
		return false
	})
	return cmds
}

func (s *State) addOrphan(job string) {
	if !slices.Contains(s.Orphans, job) {
		s.Orphans = append(s.Orphans, job)
	}
}

func (s *State) dropOrphan(job string) {
	s.Orphans = slices.DeleteFunc(s.Orphans, func(j string) bool { return j == job })
}

// GhostsFound drops waiting requests nobody waits for any more (the ghost
// check found their job ended or moved on).
func (s *State) GhostsFound(ghosts []GhostRequest) []Command {
	var cmds commands
	dropped := 0
	for _, gh := range ghosts {
		if w, ok := s.Pool.Waiting(gh.Job); ok && w.Attempt == gh.Attempt && s.Pool.CancelAttempt(gh.Job, gh.Attempt) {
			dropped++
			cmds.note("dropped the request of %s attempt %d: nobody waits for it", gh.Job, gh.Attempt)
		}
	}
	if dropped > 0 {
		cmds.add(Schedule{})
	}
	return cmds
}

// GhostRequest is a waiting attempt the ghost check found nobody waits for.
type GhostRequest struct {
	Job     string
	Attempt int
}

// The ghost check walks the queue a slice at a time. ghostSweepSlices is
// how many slices a whole sweep takes at most (with the defaults, 30 s x 10 x
// 12: an hour), so a slice grows with the queue, up to ghostBatchMax (one
// activity that describes that many workflows in a few seconds): a
// 50,000-job queue is swept in about an hour and a quarter, where slices of a
// fixed 64 would take two days.
const (
	ghostBatch       = 64
	ghostSweepSlices = 12
	ghostBatchMax    = 1000
)

// GhostBatch is the size of the next slice of the ghost check.
func (s *State) GhostBatch(g Gates) int {
	n := min(max(ghostBatch, s.Pool.WaitingCount()/ghostSweepSlices), ghostBatchMax)
	if n == ghostBatch || !g.On(GateGhostSweepScales) {
		return ghostBatch
	}
	return n
}
