package allocation

// Gate names a change to the rules that alters the commands a recorded
// history holds. The workflow answers it with workflow.GetVersion, which
// records a marker the first time it is asked, so each rule asks its gate
// only where its new behaviour begins: histories that never get there record
// nothing and replay unchanged.
type Gate string

// Gates answers whether this run follows a gated rule.
type Gates interface{ On(Gate) bool }

// AllOn is the Gates of code with no older history to replay (tests, the
// simulator).
type AllOn struct{}

// On is always true.
func (AllOn) On(Gate) bool { return true }

// The gated rules. A gate can retire once no allocator run that started
// before it is left, together with the recorded histories older than it.
const (
	// GateAllPolicyKnobs: a reconfiguration that changes only
	// reserve_after, max_preemptions or max_loss_gpu_hours takes effect
	// (before, only queueing and min_runtime_before_preemption counted).
	GateAllPolicyKnobs Gate = "allocator-reconfigure-all-policy-knobs"
	// GateRefenceStaleKeep: a fence whose answer kept a worker the pool no
	// longer holds does not bring its node back; the node is fenced again
	// with what is held now (before, a second watch lost while the fence
	// waited left that worker running on GPUs the pool then granted).
	GateRefenceStaleKeep Gate = "allocator-refence-stale-keep"
	// GateResetRequest: a request for an attempt older than the pool's (the
	// job was reset) reclaims the newer attempt and is then queued (before,
	// it was dropped without an answer).
	GateResetRequest Gate = "allocator-reset-request"
	// GateFenceAddedNodes: a node a reconfigure adds is fenced until its
	// agent confirms that no stray worker runs there (before, it was granted
	// at once, though it could come back from a fence or from another
	// allocation).
	GateFenceAddedNodes Gate = "allocator-fence-added-nodes"
	// GateGhostSweepScales: the ghost check's slice grows with the queue
	// (see GhostBatch); before, it was always 64 requests.
	GateGhostSweepScales Gate = "allocator-ghost-sweep-scales"
	// GateReclaimGeneration: a reclaim that outlived a recovery changes
	// nothing in the rebuilt pool (before, it could cancel a new attempt
	// with the number of the one it was for).
	GateReclaimGeneration Gate = "allocator-reclaim-generation"
	// GateResendGrant: a repeated request for a granted attempt gets its
	// grant again (see resendGrant); before, it got nothing.
	GateResendGrant Gate = "allocator-resend-grant"
	// GateResumeEveryOrphan: a run reclaims every orphan it carried over
	// (see OrphansToResume); before, an orphan that held nothing any more
	// made the run skip the one after it.
	GateResumeEveryOrphan Gate = "allocator-resume-every-orphan"
	// GateDrainReleases: a job a drain tells to leave is releasing (see
	// Drain); before, it counted as running until its first release, and a
	// pass could preempt another job for capacity the leaving one was about
	// to free.
	GateDrainReleases Gate = "allocator-drain-releases"
)
