package scheduler

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Class is a priority class. Higher values are more important.
type Class int8

const (
	Low    Class = 0
	Medium Class = 1
	High   Class = 2
)

// String returns "low", "medium" or "high".
func (c Class) String() string {
	switch c {
	case Low:
		return "low"
	case Medium:
		return "medium"
	case High:
		return "high"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

func (c Class) valid() bool { return c >= Low && c <= High }

// ParseClass parses a priority_class value. "" means Medium (the default).
func ParseClass(s string) (Class, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return Medium, nil
	case "low":
		return Low, nil
	case "medium":
		return Medium, nil
	case "high":
		return High, nil
	}
	return Medium, fmt.Errorf("unknown priority class %q: allowed values are low, medium, high", s)
}

// MarshalText encodes the class as its string form.
func (c Class) MarshalText() ([]byte, error) {
	if !c.valid() {
		return nil, fmt.Errorf("invalid priority class %d", int(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText parses the string form (see ParseClass).
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// MarshalJSON encodes the class as a JSON string ("low", "medium", "high").
func (c Class) MarshalJSON() ([]byte, error) {
	b, err := c.MarshalText()
	if err != nil {
		return nil, err
	}
	return json.Marshal(string(b))
}

// UnmarshalJSON accepts the string form, or the numbers 0..2.
func (c *Class) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return c.UnmarshalText([]byte(s))
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || !Class(n).valid() {
		return fmt.Errorf("unknown priority class %s: allowed values are low, medium, high", b)
	}
	*c = Class(n)
	return nil
}

// Kind is the kind of workload: a training job or a Jupyter notebook server.
type Kind string

const (
	KindJob      Kind = "job"
	KindNotebook Kind = "notebook"
)

// Demand is what ONE worker needs on ONE node.
type Demand struct {
	Family string `json:"family"`
	GPUs   int    `json:"gpus"`
	VRAMGB int    `json:"vram_gb,omitempty"`
	CPU    int    `json:"cpu,omitempty"` // cores
	RAMGB  int    `json:"ram_gb,omitempty"`
}

const instanceTypeForms = "<family>.<N>gpu.<VRAM>vG.<C>C.<RAM>G (e.g. a100plus.8gpu.80vG.96C.768G), " +
	"the short forms <family>.<N>gpu or <family>.<N>gpu.<VRAM> (e.g. a100.8gpu, a100.1gpu.40), " +
	"or cpu.<C>C.<RAM>G (e.g. cpu.8C.32G)"

// ParseInstanceType parses "a100plus.8gpu.80vG.96C.768G", "a100.8gpu", "a100.1gpu.40", "cpu.8C.32G".
// Short forms leave CPU/RAM zero (meaning "no CPU/RAM constraint"). Error text quotes the name and
// shows the expected form: `<family>.<N>gpu.<VRAM>vG.<C>C.<RAM>G` or `cpu.<C>C.<RAM>G`.
func ParseInstanceType(s string) (Demand, error) {
	fail := func(why string) (Demand, error) {
		return Demand{}, fmt.Errorf("invalid instance type %q: %s; expected %s", s, why, instanceTypeForms)
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return fail("too few parts")
	}
	fam := parts[0]
	if fam == "" {
		return fail("the family is empty")
	}
	for _, r := range fam {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fail("the family may contain only letters, digits, '-' and '_'")
		}
	}
	d := Demand{Family: fam}
	var ok bool
	if strings.HasSuffix(parts[1], "gpu") {
		if d.GPUs, ok = num(parts[1], "gpu"); !ok || d.GPUs < 1 {
			return fail(fmt.Sprintf("%q is not a GPU count like 8gpu", parts[1]))
		}
		switch len(parts) {
		case 2:
		case 3:
			v := strings.TrimSuffix(parts[2], "vG")
			if d.VRAMGB, ok = num(v, ""); !ok {
				return fail(fmt.Sprintf("%q is not a VRAM size like 80vG or 40", parts[2]))
			}
		case 5:
			if d.VRAMGB, ok = num(parts[2], "vG"); !ok {
				return fail(fmt.Sprintf("%q is not a VRAM size like 80vG", parts[2]))
			}
			if d.CPU, ok = num(parts[3], "C"); !ok {
				return fail(fmt.Sprintf("%q is not a CPU core count like 96C", parts[3]))
			}
			if d.RAMGB, ok = num(parts[4], "G"); !ok {
				return fail(fmt.Sprintf("%q is not a RAM size like 768G", parts[4]))
			}
		default:
			return fail(fmt.Sprintf("it has %d dot-separated parts", len(parts)))
		}
		return d, nil
	}
	if len(parts) != 3 {
		return fail(fmt.Sprintf("%q is neither a GPU count like 8gpu nor a CPU core count like 8C", parts[1]))
	}
	if d.CPU, ok = num(parts[1], "C"); !ok || d.CPU < 1 {
		return fail(fmt.Sprintf("%q is not a CPU core count like 8C", parts[1]))
	}
	if d.RAMGB, ok = num(parts[2], "G"); !ok {
		return fail(fmt.Sprintf("%q is not a RAM size like 32G", parts[2]))
	}
	return d, nil
}

// num parses "<digits><suffix>" into a non-negative int.
func num(s, suffix string) (int, bool) {
	if !strings.HasSuffix(s, suffix) {
		return 0, false
	}
	s = s[:len(s)-len(suffix)]
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
		n = n*10 + int(r-'0')
	}
	return n, true
}

// Node is one machine of an allocation.
type Node struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	GPUs   int    `json:"gpus"`
	CPU    int    `json:"cpu"`
	RAMGB  int    `json:"ram_gb"`
	// Address is where other hosts reach the node (host name or IP): worker
	// 0's node address is the MASTER_ADDR of a multi-node job. The scheduler
	// does not use it; "" means the node is this machine (127.0.0.1).
	Address string `json:"address,omitempty"`
	// Topology places the node in the allocation's topology (Policy.Topology): its domain at
	// each level, by level name ({"block": "b1", "rack": "r3"}). A domain is named within the
	// domain one level up, so rack r3 of block b1 and rack r3 of block b2 are two racks. It
	// only steers where gangs go (see Topology in the package doc): a node relabelled while
	// jobs run on it keeps them.
	Topology map[string]string `json:"topology,omitempty"`
}

// Equal reports whether two configurations of a node are the same, topology included.
func (n Node) Equal(o Node) bool {
	// maps.Equal's answer does not depend on the maps' order.
	//workflowcheck:ignore
	return sameCapacity(n, o) && maps.Equal(n.Topology, o.Topology)
}

// sameCapacity reports whether two configurations of a node hold the same workers: everything
// but where it sits in the topology.
func sameCapacity(a, b Node) bool {
	return a.Name == b.Name && a.Family == b.Family && a.GPUs == b.GPUs && a.CPU == b.CPU && a.RAMGB == b.RAMGB &&
		a.Address == b.Address
}

// Queueing is the pool's queueing strategy.
type Queueing string

const (
	BestEffortFIFO Queueing = "best-effort-fifo" // default ("" means this)
	StrictFIFO     Queueing = "strict-fifo"
)

// Policy holds the pool settings.
type Policy struct {
	Queueing                   Queueing      `json:"queueing,omitempty"`
	MinRuntimeBeforePreemption time.Duration `json:"min_runtime_before_preemption,omitempty"`
	// ReserveAfter: a request that has been the first waiting request of its class for this long,
	// and can neither start, wait for releasing capacity nor preempt, reserves the nodes where it
	// will fit soonest, so that they drain for it. 0 turns reservations off.
	ReserveAfter time.Duration `json:"reserve_after,omitempty"`
	// Backfill gives a reservation (ReserveAfter) a start time from the RunLimits of the jobs on
	// its nodes, lets every other request start there only if it ends by then (Slurm's
	// backfill), and lets high requests reserve too (see Backfill in the package doc). Off:
	// reservations drain as before.
	Backfill bool `json:"backfill,omitempty"`
	// StarvationAfter bounds how long the preemption limits may keep a request waiting: a medium
	// or high request that has been the first waiting request of its class for this long may
	// preempt strictly lower-class jobs that MaxLossGPUHours and MinRuntimeBeforePreemption
	// protect, and those at MaxPreemptions once more, and lower classes' reservations hold
	// nothing from it (never notebooks; see Starvation in the package doc). 0: off.
	StarvationAfter time.Duration `json:"starvation_after,omitempty"`
	// LossWithinWait bounds the work the waivers of the loss limit may throw away: where
	// starvation (StarvationAfter) or an overrun on a reservation's nodes (Backfill) lets a
	// request preempt a job that MaxLossGPUHours protects, the job's work at stake must not
	// exceed the GPU-hours the request has waited (its GPUs × the time since it was submitted).
	// A request then never throws away more work than the wait it ends (see Starvation in the
	// package doc). Off: those waivers preempt whatever the loss.
	LossWithinWait bool `json:"loss_within_wait,omitempty"`
	// StrictMaxPreemptions: MaxPreemptions holds against a starving request too, which may
	// otherwise preempt a job at MaxPreemptions once more (see Starvation in the package doc).
	// The request then waits for such a job's end as for one of its own class.
	StrictMaxPreemptions bool `json:"strict_max_preemptions,omitempty"`
	// MaxPreemptions: a job already preempted this many times is not preempted again, so that no
	// job is restarted over and over. 0 means DefaultMaxPreemptions; negative means no limit.
	MaxPreemptions int `json:"max_preemptions,omitempty"`
	// MaxLossGPUHours: a job whose preemption would throw away more than this much work (its
	// GPUs × the time since its attempt started or last checkpointed) is not preempted. 0 means
	// DefaultMaxLossGPUHours; negative means no limit.
	MaxLossGPUHours int `json:"max_loss_gpu_hours,omitempty"`
	// PreemptionNotice is the allocation's preemption_notice: how long a preempted job's workers
	// are told, before they are stopped, to save their work and exit. While it is positive, a
	// running job whose request says HonorsNotice is counted as losing no work when preempted
	// (the work at stake is counted from the notice's deadline; see the package doc). 0: no
	// notice, and HonorsNotice counts for nothing.
	PreemptionNotice time.Duration `json:"preemption_notice,omitempty"`
	// Limits cap the GPUs a workspace may hold in a class (see Limit). A request over its cap
	// waits; nothing else about it changes.
	Limits []Limit `json:"limits,omitempty"`
	// Cohort makes the pool the shared pool of a cohort's allocations: each request counts in
	// the share of its Request.Allocation, which it may always hold, taking back what the others
	// borrowed of it, and beyond which it borrows what the others leave unused (see Cohorts in
	// the package doc). Empty: no cohort.
	Cohort []CohortShare `json:"cohort,omitempty"`
	// Ordering orders each class's waiting requests: SubmissionOrder (default) or FairShare.
	Ordering Ordering `json:"ordering,omitempty"`
	// FairShareHalfLife is how fast FairShare forgets usage: a GPU-hour used this long ago
	// counts half. 0 means DefaultFairShareHalfLife.
	FairShareHalfLife time.Duration `json:"fair_share_half_life,omitempty"`
	// FairShareInterval is how often FairShare ranks the accounts by their usage. 0 means
	// DefaultFairShareInterval.
	FairShareInterval time.Duration `json:"fair_share_interval,omitempty"`
	// Topology names the levels of the allocation's network, coarsest first (["block",
	// "rack"]); each node names its domain at every level (Node.Topology). A gang is then placed
	// in the fewest domains it can: within one domain of the finest level if one has room, else
	// of the next level up (see Topology in the package doc). Empty: no topology.
	Topology []string `json:"topology,omitempty"`
	// GangTopology is how a gang that names none of its own (Request.Topology) shares the
	// levels of Topology: zero, the finest level preferred.
	GangTopology GangTopology `json:"gang_topology,omitzero"`
	// DefragmentAfter: a gang whose topology level is required, that has waited this long and
	// can neither start, hold nor preempt, moves smaller jobs out of one domain to start there
	// (see Defragmentation in the package doc). 0 means DefaultDefragmentAfter; negative: never.
	DefragmentAfter time.Duration `json:"defragment_after,omitempty"`
	// MinRuntimeBeforeMove: a job is moved for a gang only once its attempt has run this long,
	// so that none is moved more often. 0 means DefaultMinRuntimeBeforeMove.
	MinRuntimeBeforeMove time.Duration `json:"min_runtime_before_move,omitempty"`
}

// CohortShare is one allocation's share of a cohort's pool (Policy.Cohort).
type CohortShare struct {
	Allocation string `json:"allocation"`
	// GPUs is its guaranteed share: its requests may hold that many GPUs whatever the others
	// hold, taking back by preemption what the others borrowed (its own nodes' GPUs).
	GPUs int `json:"gpus"`
	// BorrowingLimit caps the GPUs beyond its share that its requests may hold at once:
	// negative, no cap; 0, none.
	BorrowingLimit int `json:"borrowing_limit"`
}

// GangTopology asks that a gang's workers share one domain of a topology level (Policy.Topology):
// Required, they start only so; else the level is preferred, and the gang goes to one domain
// of it if one has room, else of the next level up, else anywhere (see Topology in the package
// doc). Level "" is the finest level, preferred.
type GangTopology struct {
	Level    string `json:"level,omitempty"`
	Required bool   `json:"required,omitempty"`
}

// Text is g as a request names it: "required_topology=rack", "preferred_topology=rack", or "".
func (g GangTopology) Text() string {
	switch {
	case g.Level == "":
		return ""
	case g.Required:
		return "required_topology=" + g.Level
	}
	return "preferred_topology=" + g.Level
}

// DefaultMaxLossGPUHours is Policy.MaxLossGPUHours when it is 0.
const DefaultMaxLossGPUHours = 24

// MaxLossGPUHoursInEffect is the loss limit the pool applies: MaxLossGPUHours, or
// DefaultMaxLossGPUHours when it is 0; -1 means no limit.
func (p Policy) MaxLossGPUHoursInEffect() int {
	switch {
	case p.MaxLossGPUHours == 0:
		return DefaultMaxLossGPUHours
	case p.MaxLossGPUHours < 0:
		return -1
	}
	return p.MaxLossGPUHours
}

// maxLossGPUSec is the loss limit in effect in GPU-seconds, or -1 for none.
func (p Policy) maxLossGPUSec() int64 {
	if h := p.MaxLossGPUHoursInEffect(); h >= 0 {
		return int64(h) * 3600
	}
	return -1
}

// DefaultMaxPreemptions is Policy.MaxPreemptions when it is 0.
const DefaultMaxPreemptions = 3

// MaxPreemptionsInEffect is the limit the pool applies: MaxPreemptions, or
// DefaultMaxPreemptions when it is 0; -1 means no limit.
func (p Policy) MaxPreemptionsInEffect() int {
	switch {
	case p.MaxPreemptions == 0:
		return DefaultMaxPreemptions
	case p.MaxPreemptions < 0:
		return -1
	}
	return p.MaxPreemptions
}

func (p Policy) maxPreemptions() int { return p.MaxPreemptionsInEffect() }

// Changes describes, setting by setting, how the policy next differs from p, with the config
// file's names (e.g. "reserve_after 30m0s -> 1h0m0s"); defaults are compared as the values they
// stand for, so an unset limit and its default are no change.
func (p Policy) Changes(next Policy) []string {
	var out []string
	if q, nq := p.queueingInEffect(), next.queueingInEffect(); q != nq {
		out = append(out, fmt.Sprintf("queueing %s -> %s", q, nq))
	}
	if p.MinRuntimeBeforePreemption != next.MinRuntimeBeforePreemption {
		out = append(out, fmt.Sprintf("min_runtime_before_preemption %s -> %s", p.MinRuntimeBeforePreemption, next.MinRuntimeBeforePreemption))
	}
	if p.ReserveAfter != next.ReserveAfter {
		out = append(out, fmt.Sprintf("reserve_after %s -> %s", p.ReserveAfter, next.ReserveAfter))
	}
	if p.Backfill != next.Backfill {
		out = append(out, fmt.Sprintf("backfill %t -> %t", p.Backfill, next.Backfill))
	}
	if p.StarvationAfter != next.StarvationAfter {
		out = append(out, fmt.Sprintf("starvation_after %s -> %s", p.StarvationAfter, next.StarvationAfter))
	}
	if p.LossWithinWait != next.LossWithinWait {
		out = append(out, fmt.Sprintf("loss_within_wait %t -> %t", p.LossWithinWait, next.LossWithinWait))
	}
	if p.StrictMaxPreemptions != next.StrictMaxPreemptions {
		out = append(out, fmt.Sprintf("strict_max_preemptions %t -> %t", p.StrictMaxPreemptions, next.StrictMaxPreemptions))
	}
	if a, b := p.MaxPreemptionsInEffect(), next.MaxPreemptionsInEffect(); a != b {
		out = append(out, fmt.Sprintf("max_preemptions %s -> %s", limitText(a), limitText(b)))
	}
	if a, b := p.MaxLossGPUHoursInEffect(), next.MaxLossGPUHoursInEffect(); a != b {
		out = append(out, fmt.Sprintf("max_loss_gpu_hours %s -> %s", limitText(a), limitText(b)))
	}
	if p.PreemptionNotice != next.PreemptionNotice {
		out = append(out, fmt.Sprintf("preemption_notice %s -> %s", p.PreemptionNotice, next.PreemptionNotice))
	}
	if o, no := p.orderingInEffect(), next.orderingInEffect(); o != no {
		out = append(out, fmt.Sprintf("ordering %s -> %s", o, no))
	}
	if h, nh := p.FairShareHalfLifeInEffect(), next.FairShareHalfLifeInEffect(); h != nh {
		out = append(out, fmt.Sprintf("fair_share_half_life %s -> %s", h, nh))
	}
	if i, ni := p.FairShareIntervalInEffect(), next.FairShareIntervalInEffect(); i != ni {
		out = append(out, fmt.Sprintf("fair_share_interval %s -> %s", i, ni))
	}
	if !slices.Equal(p.Cohort, next.Cohort) {
		out = append(out, fmt.Sprintf("cohort shares %v -> %v", p.Cohort, next.Cohort))
	}
	if !slices.Equal(p.Limits, next.Limits) {
		out = append(out, fmt.Sprintf("limits %s -> %s", limitsText(p.Limits), limitsText(next.Limits)))
	}
	if !slices.Equal(p.Topology, next.Topology) {
		out = append(out, fmt.Sprintf("topology [%s] -> [%s]", strings.Join(p.Topology, ", "), strings.Join(next.Topology, ", ")))
	}
	if a, b := p.minRuntimeBeforeMove(), next.minRuntimeBeforeMove(); a != b {
		out = append(out, fmt.Sprintf("min_runtime_before_move %s -> %s", a, b))
	}
	if a, b := p.defragmentAfter(), next.defragmentAfter(); a != b {
		out = append(out, fmt.Sprintf("defragment_after %s -> %s", a, b))
	}
	if p.GangTopology != next.GangTopology {
		out = append(out, fmt.Sprintf("gang topology %q -> %q", p.GangTopology.Text(), next.GangTopology.Text()))
	}
	return out
}

// limitsText lists limits as "high.max_gpus 16, team-b: high.max_gpus 0", or "none".
func limitsText(ls []Limit) string {
	if len(ls) == 0 {
		return "none"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s.max_gpus %d", l.Class, l.MaxGPUs)
		if l.Workspace != "" {
			parts[i] = l.Workspace + ": " + parts[i]
		}
	}
	return strings.Join(parts, ", ")
}

func (p Policy) queueingInEffect() Queueing {
	if p.Queueing == "" {
		return BestEffortFIFO
	}
	return p.Queueing
}

func limitText(n int) string {
	if n < 0 {
		return "no limit"
	}
	return strconv.Itoa(n)
}

// Request asks for capacity for one attempt of one job.
type Request struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"` // opaque to the policy, echoed in Grant/Preemption
	Kind    Kind   `json:"kind"`    // notebook => always High and never preemptible
	Class   Class  `json:"class"`
	// HonorsNotice says that the job honoured its preemption notices before: on its earlier
	// preemptions that came with a notice, its workers saved a checkpoint and exited before the
	// deadline (the job's attempt records show it: each such attempt ended on the notice, before
	// its NoticeDeadline, with a checkpoint taken after the notice went out). Under a
	// Policy.PreemptionNotice, preempting such a job is counted as losing no work: it will save
	// on the notice. The caller decides; the pool trusts it (see the package doc). (Beside
	// Class, it takes no room.)
	HonorsNotice bool   `json:"honors_notice,omitempty"`
	Demand       Demand `json:"demand"`
	Workers      int    `json:"workers"`
	// MinWorkers makes the gang elastic (torchrun's --nnodes=MinWorkers:Workers): 0, or
	// Workers, is a rigid gang of Workers; 1..Workers-1 lets it start with as many workers as
	// fit on free capacity, at least MinWorkers (see the package doc, rule (b')). A started
	// gang keeps its size: its grant's placement says how many workers it got.
	MinWorkers int `json:"min_workers,omitempty"`
	// Topology is how the gang's workers share the allocation's topology levels (ML Space has
	// no such field: trainq's required_topology and preferred_topology); zero: the allocation's
	// Policy.GangTopology. A single worker ignores it.
	Topology GangTopology `json:"topology,omitzero"`
	// NoMove: the job is never moved out of a topology domain to make room for a gang (see
	// Defragmentation in the package doc).
	NoMove      bool      `json:"no_move,omitempty"`
	Seq         int64     `json:"seq"` // queue sequence; caller assigns, keeps it on re-queue
	SubmittedAt time.Time `json:"submitted_at"`
	// Preemptions is how many times earlier attempts of the job were preempted. The pool counts
	// the preemptions it decides itself and keeps the larger of the two; a caller that knows
	// more (e.g. after the allocator's state was rebuilt) may say so. Victims with fewer
	// preemptions are chosen first (see the package doc).
	Preemptions int `json:"preemptions,omitempty"`
	// Nodes, when not empty, are the only nodes the request's workers may be placed on
	// (ML Space's include_nodes minus exclude_nodes, within its queue's nodes); empty: any
	// node of its family. Every name must be a node of the pool (see Admit); names of nodes of
	// another family are allowed and never used. The pool keeps them sorted, each once. They
	// bind a waiting request only: the pool does not check a running job's placement against them.
	Nodes []string `json:"nodes,omitempty"`
	// Workspace is whose request it is, for Policy.Limits ("": nobody's; no limit applies) and
	// the fair-share ordering.
	Workspace string `json:"workspace,omitempty"`
	// User is who in the workspace submitted it, for the fair-share ordering.
	User string `json:"user,omitempty"`
	// RunLimit is the most the attempt will run once started (the job's time limit, less what
	// its earlier attempts ran); 0: unknown. Pool.Project reads it, and with Policy.Backfill
	// the pass does (see Backfill in the package doc).
	RunLimit time.Duration `json:"run_limit,omitempty"`
	// RunEstimated says RunLimit is an estimate, not a limit anyone enforces: the attempt may
	// run longer. One that has run past it is expected to run for one more RunLimit from now
	// (see jobEnd), not to end at once; a backfill reservation it blocks may take its end as
	// unknown (see Overruns in the package doc).
	RunEstimated bool `json:"run_estimated,omitempty"`
	// Allocation is the cohort share the request counts in (Policy.Cohort): required there,
	// ignored without a cohort.
	Allocation string `json:"allocation,omitempty"`
}

// WorkerPlacement is where one worker runs.
type WorkerPlacement struct {
	Worker int    `json:"worker"` // 0..Workers-1
	Node   string `json:"node"`
	GPUs   []int  `json:"gpus"` // GPU indices on that node, 0..node.GPUs-1, sorted
}

// Grant starts a job.
type Grant struct {
	Job       string            `json:"job"`
	Attempt   int               `json:"attempt"`
	Placement []WorkerPlacement `json:"placement"` // len == Workers, distinct nodes
	// OnLoan says the job starts on capacity reserved for a request that waits longer, because
	// its RunLimit ends it before that request's start (Policy.Backfill): if it runs past its
	// RunLimit there, it yields to the reservation whatever its class (see Loans in the package
	// doc), and its rerun spends no retry (Preemption.Loan).
	OnLoan bool `json:"on_loan,omitempty"`
	// Borrowed says the job starts beyond its allocation's cohort share (Policy.Cohort), on
	// capacity the others leave unused: it runs on loan, and yields to an allocation that takes
	// back its share (Preemption.Reclaim), rerunning without spending a retry.
	Borrowed bool `json:"borrowed,omitempty"`
}

// Preemptor identifies the request a job was preempted for.
type Preemptor struct {
	Job   string `json:"job"`
	Class Class  `json:"class"`
	Kind  Kind   `json:"kind"`
}

// Preemption tells the caller to stop a running job gracefully.
type Preemption struct {
	Victim        string    `json:"victim"`
	VictimAttempt int       `json:"victim_attempt"`
	Preemptor     Preemptor `json:"preemptor"`
	Reason        string    `json:"reason"` // plain sentence
	// Loan says the victim ran on loan (Grant.OnLoan) past its RunLimit and yields to the
	// reservation it borrowed from: it broke no rule of its own class, so its rerun spends no
	// retry.
	Loan bool `json:"loan,omitempty"`
	// Move says the victim is moved out of a topology domain so that a gang that requires one
	// can start there (see Defragmentation in the package doc): it reruns elsewhere on free
	// capacity, and its rerun spends no retry.
	Move bool `json:"move,omitempty"`
	// Reclaim says the victim borrowed beyond its allocation's cohort share (Grant.Borrowed) and
	// yields to an allocation taking back its own share, whatever its class; its rerun spends
	// no retry. Loan is set too.
	Reclaim bool `json:"reclaim,omitempty"`
}

// Decisions is the outcome of one Schedule pass.
type Decisions struct {
	Grants      []Grant      `json:"grants,omitempty"`
	Preemptions []Preemption `json:"preemptions,omitempty"`
	// More says a ScheduleAtMost pass stopped at its limit with waiting requests it did not
	// look at: a pass right after may decide more.
	More bool `json:"more,omitempty"`
}

// WaitingInfo explains one waiting request.
type WaitingInfo struct {
	Job         string    `json:"job"`
	Attempt     int       `json:"attempt"`
	Kind        Kind      `json:"kind"`
	Class       Class     `json:"class"`
	Workers     int       `json:"workers"`
	MinWorkers  int       `json:"min_workers,omitempty"` // an elastic gang's least size (Request.MinWorkers)
	Demand      Demand    `json:"demand"`
	GPUs        int       `json:"gpus"`                  // total = Workers*Demand.GPUs
	Position    int       `json:"position"`              // 1-based launch order in the allocation
	Reason      string    `json:"reason"`                // plain language, never empty
	WaitingFor  []string  `json:"waiting_for,omitempty"` // jobs it waits on (better requests ahead, jobs releasing nominated capacity, or running jobs it may not preempt in its way: on its reserved nodes, or where the fewest are)
	Nominated   []string  `json:"nominated,omitempty"`   // victims whose capacity is nominated to it
	Reserved    []string  `json:"reserved,omitempty"`    // nodes reserved for it (see Policy.ReserveAfter)
	Nodes       []string  `json:"nodes,omitempty"`       // the only nodes it may run on (Request.Nodes); none: any of its family
	SubmittedAt time.Time `json:"submitted_at"`
	Seq         int64     `json:"seq"`
	// ExpectedStart, when asked for (see Pool.Project), is when it is expected to start.
	ExpectedStart *ExpectedStart `json:"expected_start,omitempty"`
}

// RunningInfo describes a running or releasing job.
type RunningInfo struct {
	Job       string    `json:"job"`
	Attempt   int       `json:"attempt"`
	Kind      Kind      `json:"kind"`
	Class     Class     `json:"class"`
	Seq       int64     `json:"seq,omitempty"` // the request's place in its class's queue
	GPUs      int       `json:"gpus"`
	StartedAt time.Time `json:"started_at"`
	Releasing bool      `json:"releasing"`
	// HonorsNotice is its request's Request.HonorsNotice.
	HonorsNotice bool              `json:"honors_notice,omitempty"`
	Placement    []WorkerPlacement `json:"placement"`
	Released     []int             `json:"released,omitempty"` // workers already released
	PreemptedBy  *Preemptor        `json:"preempted_by,omitempty"`
	// OnLoan is Grant.OnLoan of this attempt.
	OnLoan bool `json:"on_loan,omitempty"`
	// Preemptions counts the preemptions of this job, this attempt's included.
	Preemptions int `json:"preemptions,omitempty"`
	// CheckpointAt is the last checkpoint this attempt reported (see Pool.Checkpointed).
	CheckpointAt time.Time `json:"checkpoint_at,omitzero"`
	// Workspace is its request's Request.Workspace.
	Workspace string `json:"workspace,omitempty"`
	// Nominees is, per worker, who that worker's capacity is nominated to once preempted (its
	// preemptor, or a better request that took it over); nil unless preempted.
	Nominees []string `json:"nominees,omitempty"`
}

// NodeInfo describes one node's GPU usage.
type NodeInfo struct {
	Name          string `json:"name"`
	Family        string `json:"family"`
	GPUs          int    `json:"gpus"`
	FreeGPUs      int    `json:"free_gpus"`
	AllocatedGPUs int    `json:"allocated_gpus"` // held by running jobs, not releasing
	ReleasingGPUs int    `json:"releasing_gpus"`
	Lost          bool   `json:"lost,omitempty"` // its agent is not answering: nothing is granted on it
	// ReservedFor names the waiting job this node drains for (see Policy.ReserveAfter).
	ReservedFor string `json:"reserved_for,omitempty"`
	// HeldGPUs is free capacity here that stopped victims left, still nominated to their waiting
	// preemptors (part of FreeGPUs; which GPU indices is not tracked), and HeldFor the first
	// of those preemptors.
	HeldGPUs int    `json:"held_gpus,omitempty"`
	HeldFor  string `json:"held_for,omitempty"`
	// Topology is the node's domain at each topology level (Node.Topology).
	Topology map[string]string `json:"topology,omitempty"`
}

// View is the whole state of the allocation, for the UI/API.
type View struct {
	Waiting []WaitingInfo `json:"waiting"` // in launch order
	Running []RunningInfo `json:"running"` // sorted by StartedAt then Job
	Nodes   []NodeInfo    `json:"nodes"`   // in config order
}

// elastic reports whether the gang may start with fewer than Workers workers.
func (r *Request) elastic() bool { return r.MinWorkers > 0 && r.MinWorkers < r.Workers }

// leastWorkers is the fewest workers the gang can start with.
func (r *Request) leastWorkers() int {
	if r.elastic() {
		return r.MinWorkers
	}
	return r.Workers
}
