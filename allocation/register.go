package allocation

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Registered is what the jobs answered a register round: what each holds or
// waits for, how many were listed, and which did not answer.
type Registered struct {
	Holds      []protocol.JobHold
	Listed     int
	Unanswered []string
}

// Recovered rebuilds the state from the jobs' answers under a new epoch
// (drawn at now): held placements are adopted, waiting requests re-queued
// with their sequence, and every node fenced until its agent says what runs
// there. The old state's orphans, fences and requests waiting for a reclaim
// are superseded: every node is fenced, its agent stops whatever nobody
// holds, and each job answered for itself.
func (s *State) Recovered(epoch string, now time.Time, reg Registered) (protocol.RecoverReply, []Command, error) {
	pool, err := scheduler.NewPool(s.Pool.Nodes(), s.Pool.Policy())
	if err != nil {
		return protocol.RecoverReply{}, nil, err
	}
	// The jobs cannot say how much their workspaces used, nor how wrong the
	// expected starts have been: the old pool can.
	pool.CarryUsage(s.Pool)
	pool.CarryForecast(s.Pool)
	s.Epoch, s.RecoveredAt = epoch, now
	reply := protocol.RecoverReply{Epoch: epoch, Listed: reg.Listed, Unanswered: reg.Unanswered}
	var refused []protocol.JobHold
	reply.Conflicts, refused = s.rebuild(pool, reg.Holds)
	if s.ChargesAdopted {
		since := pool.ChargeAdopted(now)
		if s.ChargesStrangers {
			s.ChargedFrom = since
		}
	}
	s.Pool = pool
	s.noteDrains()
	var cmds commands
	for _, h := range refused {
		cmds.add(refuse(h.Job, h.Request.Attempt, fmt.Sprintf("allocation %s can no longer run this job", s.Name())))
	}
	_, over := s.refuseOverCap("can no longer run this job")
	cmds.add(over...)
	s.tellAdoptedToLeave(&cmds)
	s.Orphans, s.AfterReclaim = nil, nil
	s.Unanswered = reg.Unanswered
	s.Counters.Recoveries++
	for _, n := range pool.Nodes() {
		cmds.add(s.fence(n.Name, FenceRecovering, RecoveringReason))
		reply.Fenced = append(reply.Fenced, n.Name)
	}
	reply.Running, reply.Waiting = len(pool.RunningJobs()), pool.WaitingCount()
	note := fmt.Sprintf("recovered epoch %s: %d jobs listed, %d holding, %d waiting", epoch, reply.Listed, reply.Running, reply.Waiting)
	if len(reply.Conflicts) > 0 {
		note += fmt.Sprintf("; %d conflicting holds: %v", len(reply.Conflicts), reply.Conflicts)
	}
	if len(reply.Unanswered) > 0 {
		note += fmt.Sprintf("; %d job(s) did not answer, their nodes stay fenced until they do: %v", len(reply.Unanswered), reply.Unanswered)
	}
	cmds.add(Note{Text: note})
	return reply, cmds, nil
}

// rebuild adopts the holds into pool: held placements first (so that no
// waiting request can be placed on them), then the waiting requests, each
// with its original sequence; requests the lost allocator never answered get
// sequences after every known one. It returns the holds it could not adopt,
// and among them the waiting ones, whose jobs are told so (a config change
// may have left them unable to fit).
func (s *State) rebuild(pool *scheduler.Pool, holds []protocol.JobHold) (conflicts []string, refused []protocol.JobHold) {
	maxSeq := s.NextSeq - 1
	for _, h := range holds {
		maxSeq = max(maxSeq, h.Request.Seq)
	}
	s.NextSeq = maxSeq + 1
	for _, h := range holds {
		if h.Phase != protocol.HoldHolding {
			continue
		}
		r, err := RequestFor(pool, h.Request)
		if err == nil {
			err = pool.Adopt(scheduler.Adoption{Request: r, Placement: h.Placement, StartedAt: h.StartedAt,
				Releasing: h.Releasing, Released: h.Released})
		}
		if err != nil {
			conflicts = append(conflicts, fmt.Sprintf("%s attempt %d: %v", h.Job, h.Request.Attempt, err))
		}
	}
	for _, h := range holds {
		if h.Phase != protocol.HoldWaiting {
			continue
		}
		r, err := RequestFor(pool, h.Request)
		if err == nil {
			if r.Seq == 0 {
				r.Seq = s.NextSeq
				s.NextSeq++
			}
			err = pool.Enqueue(r)
		}
		if err != nil {
			conflicts = append(conflicts, fmt.Sprintf("%s attempt %d: %v", h.Job, h.Request.Attempt, err))
			refused = append(refused, h)
		}
	}
	return conflicts, refused
}

// Strangers are the live workers on a node the pool does not hold, by job:
// a fence asks their jobs what they hold before it stops them.
func (s *State) Strangers(node string, live []cluster.WorkerID) (jobs []string, found map[string][]cluster.WorkerID) {
	held := s.WorkersOn(node)
	found = map[string][]cluster.WorkerID{}
	for _, w := range live {
		if !slices.Contains(held, w) && !slices.Contains(jobs, w.Job) {
			jobs = append(jobs, w.Job)
		}
		found[w.Job] = append(found[w.Job], w)
	}
	return jobs, found
}

// AdoptStranger takes in what a job found through its workers on node holds
// or waits for, unless the pool already has it (then its worker there is
// stale, and the fence stops it). A hold is adopted only if it holds one of
// the workers found (none are given for a job asked again after recovery):
// a job whose worker of an ended attempt lingers must not be adopted for it.
//
// A holder is charged fair-share usage from the time the last recovery
// charged its adopted jobs from (see ChargesStrangers): it held its GPUs all
// along, and a recovery that missed it charged it nothing.
func (s *State) AdoptStranger(node string, h protocol.JobHold, workers []cluster.WorkerID) []Command {
	if _, ok := s.Pool.Running(h.Job); ok {
		return nil
	}
	if _, ok := s.Pool.Waiting(h.Job); ok {
		return nil
	}
	if s.WithdrawnFirst(h.Request) != nil {
		return nil
	}
	if workers != nil && h.Phase == protocol.HoldHolding && !holdsAnyOf(h, workers) {
		return nil
	}
	var cmds commands
	_, refused := s.rebuild(s.Pool, []protocol.JobHold{h})
	switch {
	case len(refused) > 0:
	case h.Phase == protocol.HoldHolding:
		if _, ok := s.Pool.Running(h.Job); ok {
			if s.ChargesStrangers {
				s.Pool.ChargeAdoptedJob(h.Job, s.ChargedFrom)
			}
			cmds.note("adopted %s attempt %d, found through its worker on %s", h.Job, h.Request.Attempt, node)
			cmds.warn("adopted a job recovery missed", "job", h.Job, "attempt", h.Request.Attempt, "node", node)
			s.tellAdoptedToLeave(&cmds)
		}
	case h.Phase == protocol.HoldWaiting:
		cmds.add(Schedule{})
	}
	return cmds
}

// holdsAnyOf says whether h holds one of workers (same attempt, not released).
func holdsAnyOf(h protocol.JobHold, workers []cluster.WorkerID) bool {
	for _, w := range workers {
		if w.Job != h.Job || w.Attempt != h.Request.Attempt || slices.Contains(h.Released, w.Worker) {
			continue
		}
		for _, p := range h.Placement {
			if p.Worker == w.Worker {
				return true
			}
		}
	}
	return false
}
