// Package allocation holds one allocation's carried state and the rules that
// change it: what a capacity request, a release, a withdrawal, a reconfigure,
// a fence's answer, a reclaim or a recovery's answers do to the state, and
// which commands (signals to jobs, fences, reclaims, passes) they call for.
//
// Nothing here talks to Temporal. The allocator workflow (package workflows)
// is the shell around it: it takes messages, calls one rule per message and
// executes the returned commands in order, in bounded batches. Because the
// rules are plain functions of the state and the message, they are tested
// like the scheduler, with tables (rules_test.go).
package allocation

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// State is everything an allocator carries through continue-as-new, and
// nothing else: runtime handles (signals and activities in flight, timers,
// the hand-over handshake) belong to the workflow.
type State struct {
	// Config is the allocation's config in effect (its State is nil).
	Config protocol.AllocatorInput
	Pool   *scheduler.Pool
	// NextSeq is the queue sequence the next new request gets.
	NextSeq int64
	// Orphans are jobs holding capacity whose workflow has gone; their
	// workers are stopped, then the capacity is freed.
	Orphans  []string
	Counters protocol.AllocatorCounters
	// Epoch names this state (see protocol.AllocatorState.Epoch).
	Epoch string
	// Withdrawn are withdrawals that came before their request, oldest first.
	Withdrawn []protocol.WithdrawSignal
	// Forgotten are the attempts given up because their job no longer knew
	// it held them, oldest first (see ForgottenAnswered).
	Forgotten []protocol.WithdrawSignal
	// AfterReclaim are requests queued once their job's abandoned newer
	// attempt is reclaimed (see serveReset).
	AfterReclaim []protocol.CapacityRequest
	// Unanswered are jobs that did not answer the last recovery's register
	// update; they are asked again every reclaim interval.
	Unanswered []string
	// RecoveredAt is when the state was last rebuilt from the jobs.
	RecoveredAt time.Time
	// Fences says why each fenced node is fenced.
	Fences map[string]Fence
	// Drains are the nodes an operator took out of service, with why (see
	// Drain); nil when there are none.
	Drains map[string]string
	// Builds are the worker builds this allocation's runs have run on, the
	// latest last, at most maxBuildsKept (see NoteBuild).
	Builds []string
	// RefusesOverCap says the rules refuse a request that its workspace's
	// cap could never let start (scheduler.Policy.AdmitCap), wherever it
	// comes from, and a reconfigure that lowers a cap refuses the waiting
	// requests it leaves over (RefuseOverCap). Not carried: the workflow sets
	// it for each run (a version gate).
	RefusesOverCap bool
	// ReclaimsForgotten says a request for the attempt the pool is releasing
	// asks the job whether it forgot that attempt, and if it did, has the
	// attempt reclaimed and the job told to rerun (see ForgottenAnswered). Not
	// carried: the workflow sets it for each run (a version gate).
	ReclaimsForgotten bool
	// TellsAdoptedToLeave says a recovery, and the adoption of a job a
	// recovery missed, tell the jobs they take in on a drained node to leave
	// (a drain's signal can be lost with the run that sent it, or never sent
	// to a job the recovery had missed). Not carried: the workflow sets it for
	// each run (a version gate).
	TellsAdoptedToLeave bool
	// ChargesAdopted says a recovery charges fair-share usage from the jobs
	// it adopts (scheduler.Pool.ChargeAdopted), not from what the old pool
	// was charging: after a reset the old pool is the reset point's. Not
	// carried: the workflow sets it for each run (a version gate).
	ChargesAdopted bool
	// ChargesStrangers says a job a recovery missed is charged fair-share
	// usage, once it is adopted, from ChargedFrom, as the recovery would have
	// charged it (scheduler.Pool.ChargeAdoptedJob); without it, it was
	// charged from its adoption. Not carried: the workflow sets it for each
	// run (a version gate).
	ChargesStrangers bool
	// ChargedFrom is the time the last recovery charged its adopted jobs
	// from (see scheduler.Pool.ChargeAdopted); zero if it charged none, or
	// under fair share off.
	ChargedFrom time.Time
}

// New is the state of a fresh allocation: nothing held, nothing waiting.
func New(in protocol.AllocatorInput) (*State, error) {
	pool, err := scheduler.NewPool(in.Nodes, in.Policy)
	if err != nil {
		return nil, err
	}
	in.State = nil
	return &State{Config: in, Pool: pool, NextSeq: 1, Fences: map[string]Fence{}}, nil
}

// Restore reads the state a previous run carried over: in.State, and the
// pool packed beside it (scheduler.PackSnapshot). Runs continued by older code
// carry the pool in in.State.Pool and nothing packed.
func Restore(in protocol.AllocatorInput, packedPool []byte) (*State, error) {
	carried := in.State
	if carried == nil {
		return nil, fmt.Errorf("restore allocator state: nothing carried")
	}
	snap := carried.Pool
	if len(packedPool) > 0 {
		var err error
		if snap, err = scheduler.UnpackSnapshot(packedPool); err != nil {
			return nil, fmt.Errorf("restore allocator state: %w", err)
		}
	}
	pool, err := scheduler.Restore(snap)
	if err != nil {
		return nil, fmt.Errorf("restore allocator state: %w", err)
	}
	in.State = nil
	s := &State{
		Config: in, Pool: pool, NextSeq: carried.NextSeq, Orphans: carried.Orphans, Counters: carried.Counters,
		Epoch: carried.Epoch, Withdrawn: carried.Withdrawn, Forgotten: carried.Forgotten, AfterReclaim: carried.AfterReclaim,
		Unanswered: carried.Unanswered, RecoveredAt: carried.RecoveredAt, ChargedFrom: carried.ChargedFrom,
		Fences: map[string]Fence{}, Builds: carried.Builds,
	}
	for _, f := range carried.Fenced {
		s.Fences[f.Node] = carriedFence(f)
	}
	for _, d := range carried.Drained {
		if s.Drains == nil {
			s.Drains = map[string]string{}
		}
		s.Drains[d.Node] = d.Reason
	}
	s.noteDrains()
	return s, nil
}

// Carry is what the next run starts from: the input with the carried state,
// and the pool packed to travel beside it as raw bytes.
func (s *State) Carry() (protocol.AllocatorInput, []byte, error) {
	next := s.Config
	next.State = &protocol.AllocatorState{
		NextSeq:      s.NextSeq,
		Orphans:      s.Orphans,
		Counters:     s.Counters,
		Epoch:        s.Epoch,
		Withdrawn:    s.Withdrawn,
		Forgotten:    s.Forgotten,
		Fenced:       s.Fenced(),
		Drained:      s.carriedDrains(),
		AfterReclaim: s.AfterReclaim,
		Unanswered:   s.Unanswered,
		RecoveredAt:  s.RecoveredAt,
		ChargedFrom:  s.ChargedFrom,
		Builds:       s.Builds,
	}
	packed, err := scheduler.PackSnapshot(s.Pool.Snapshot())
	return next, packed, err
}

// maxBuildsKept bounds the builds a state remembers: more than a rolling
// upgrade has at once.
const maxBuildsKept = 8

// RanOn says whether this allocation's runs have run on build; an unnamed
// build counts as known.
func (s *State) RanOn(build string) bool {
	return build == "" || slices.Contains(s.Builds, build)
}

// NoteBuild remembers that a run ran on build. A run hands over the first
// time a build it does not know takes its workflow task, so that no run
// outlives the upgrade window; remembering the builds, not just the latest,
// keeps two builds that take turns during a rolling upgrade of unversioned
// workers from handing the run back and forth.
func (s *State) NoteBuild(build string) {
	if s.RanOn(build) {
		return
	}
	s.Builds = append(s.Builds, build)
	if n := len(s.Builds); n > maxBuildsKept {
		s.Builds = slices.Clone(s.Builds[n-maxBuildsKept:])
	}
}

// Name is the allocation's region/name, for messages.
func (s *State) Name() string { return s.Config.Region + "/" + s.Config.Allocation }

// ReclaimInterval is how often leaks are looked for and fences retried.
func (s *State) ReclaimInterval() time.Duration {
	if s.Config.ReclaimInterval <= 0 {
		return 30 * time.Second
	}
	return s.Config.ReclaimInterval
}

// NodeTimeout is how long a node's agent may take to pick up an activity.
func (s *State) NodeTimeout() time.Duration {
	if s.Config.NodeTimeout <= 0 {
		return protocol.DefaultNodeTimeout
	}
	return s.Config.NodeTimeout
}

// carriedDrains are the drains in config order, as the next run reads them.
func (s *State) carriedDrains() []protocol.DrainedNode {
	var out []protocol.DrainedNode
	for _, n := range s.Pool.Nodes() {
		if why, ok := s.Drains[n.Name]; ok {
			out = append(out, protocol.DrainedNode{Node: n.Name, Reason: why})
		}
	}
	return out
}
