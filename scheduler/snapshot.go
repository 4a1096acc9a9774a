package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// SnapshotVersion is the current Snapshot format. Restore also reads the older versions:
//
//   - 1: no lost nodes (Snapshot.Lost did not exist).
//   - 2: adds Snapshot.Lost. Later additions to version 2 are optional fields whose absence
//     means what the older writer meant: Heads (none: each class's first request starts its
//     ReserveAfter wait at the next pass), Memo, PreemptSeq, per-job preemption counts and
//     checkpoints (none), and per-victim preemption sequences (none: the releasing jobs that name
//     a preemptor are numbered in snapshot order, so their capacity stays nominated to it).
//   - 3: the same fields as version 2, written packed (PackSnapshot) for continue-as-new, with
//     times to the millisecond.
//
// Later optional additions, in every version: Node.Topology and Policy.Topology (absent: no
// topology; a build older than them drops them and places gangs as without one).
// Policy.PreemptionNotice and the requests'
// HonorsNotice (SnapshotWaiting.HonorsNotice, SnapshotRunning.HonorsNotice); absent, they are 0
// and false, as every snapshot written before them meant. The requests' allowed nodes
// (Request.Nodes: Snapshot.NodeSets, SnapshotWaiting.NodeSet, SnapshotRunning.NodeSet); absent,
// every request may run on any node of its family, as before them. The waiting requests'
// MinWorkers (SnapshotWaiting.MinWorkers); absent, every gang is rigid, as before them. The
// requests' workspaces and the policy's limits (Snapshot.Workspaces, Policy.Limits); absent,
// nobody has a workspace and nothing is capped, as before them. The requests' RunLimit
// (SnapshotWaiting.RunLimit, SnapshotRunning.RunLimit); absent, none has one. Whether it is an
// estimate (SnapshotWaiting.RunEstimated, SnapshotRunning.RunEstimated); absent, every RunLimit
// is a limit. The requests' users and the fair-share accounts (Snapshot.Users,
// Snapshot.FairShare); absent, nobody has a user and nobody has used anything. The record of the
// expected starts' errors (Snapshot.Forecast); absent, the pool has none yet. The waiting
// requests' own gang topology (Snapshot.GangTopologies, SnapshotWaiting.Topology,
// SnapshotRunning.Topology); absent, each follows the policy's, as before them. The nodes a
// starving head keeps (SnapshotHead.Pinned); absent, it keeps those it reserves at its next pass.
// The jobs moved for gangs that still wait (Snapshot.MovedOut); absent, none is kept out of a
// domain.
const SnapshotVersion = 3

// Snapshot is the whole pool state for continue-as-new: waiting requests are stored column-wise
// with per-worker demands interned. Its JSON takes about 86 bytes per waiting request with
// trainq's job ids; PackSnapshot packs it to about 19. Times are Unix nanoseconds (0 = zero time).
type Snapshot struct {
	Version int               `json:"v"`
	Nodes   []Node            `json:"nodes"`
	Policy  Policy            `json:"policy"`
	Now     int64             `json:"now,omitempty"` // time of the last Schedule call
	Demands []Demand          `json:"demands,omitempty"`
	Waiting SnapshotWaiting   `json:"waiting"`
	Running []SnapshotRunning `json:"running,omitempty"`
	Lost    []int32           `json:"lost,omitempty"` // indices into Nodes of the lost nodes, ascending (version 2)
	// Heads is the first waiting request of each class that has one, highest class first.
	Heads []SnapshotHead `json:"heads,omitempty"`
	// Memo is the preemption counts remembered for jobs between attempts, oldest first.
	Memo       []SnapshotMemo `json:"memo,omitempty"`
	PreemptSeq int64          `json:"pseq,omitempty"` // the last preemption's sequence
	// Holds is the free capacity stopped victims left to their waiting preemptors.
	Holds []SnapshotHold `json:"holds,omitempty"`
	// MovedOut are the jobs moved for gangs that still wait, by job: their next attempts are
	// placed outside the domains they left.
	MovedOut []SnapshotMovedOut `json:"moved_out,omitempty"`
	// NodeSets are the requests' allowed nodes (Request.Nodes), each set once, in order of first
	// use; SnapshotWaiting.NodeSet and SnapshotRunning.NodeSet refer to them. Names, not indices:
	// a set may name a node a reconfiguration removed (Restore then refuses a waiting request
	// that names it, as Admit does).
	NodeSets [][]string `json:"node_sets,omitempty"`
	// Workspaces are the requests' workspaces (Request.Workspace), each once, in order of first
	// use; SnapshotWaiting.Workspace and SnapshotRunning.Workspace refer to them.
	Workspaces []string `json:"workspaces,omitempty"`
	// Users are the requests' users (Request.User), each once, in order of first use;
	// SnapshotWaiting.User and SnapshotRunning.User refer to them.
	Users []string `json:"users,omitempty"`
	// GangTopologies are the waiting requests' own Request.Topology, each once, in order of first
	// use; SnapshotWaiting.Topology refers to them.
	GangTopologies []GangTopology `json:"gang_topologies,omitempty"`
	// Allocations are the requests' cohort allocations (Request.Allocation), each once, in order
	// of first use; SnapshotWaiting.Allocation and SnapshotRunning.Allocation refer to them.
	Allocations []string `json:"allocations,omitempty"`
	// FairShare is the usage the fair-share ordering keeps; absent when it is off.
	FairShare *SnapshotFairShare `json:"fs,omitempty"`
	// Forecast is the record of how wrong the expected starts have been; absent, there is none
	// yet.
	Forecast *SnapshotForecast `json:"fc,omitempty"`
}

// SnapshotFairShare is the state of the fair-share ordering (see Policy.Ordering).
type SnapshotFairShare struct {
	At   int64 `json:"at,omitempty"`   // usage is accrued up to here
	Next int64 `json:"next,omitempty"` // the next ranking
	// Workspaces and Users are the accounts with any usage, charge or ordering key, by
	// workspace (and user) name.
	Workspaces []SnapshotAccount `json:"ws,omitempty"`
	Users      []SnapshotAccount `json:"users,omitempty"`
}

// SnapshotAccount is one workspace's or user's usage (GPUs held come from the running jobs).
type SnapshotAccount struct {
	Workspace string  `json:"ws,omitempty"`
	User      string  `json:"u,omitempty"`
	Usage     float64 `json:"g,omitempty"` // decayed GPU-seconds at SnapshotFairShare.At
	Charged   int     `json:"c,omitempty"` // GPUs charged from At on
	Key       float64 `json:"k,omitempty"` // usage at the last ranking
}

// SnapshotHold is free capacity held for a waiting preemptor (see Pool.Schedule).
type SnapshotHold struct {
	Job   string `json:"job"` // the preemptor
	Class Class  `json:"class"`
	Node  int32  `json:"n"`
	GPUs  int    `json:"g,omitempty"`
	CPU   int    `json:"c,omitempty"`
	RAMGB int    `json:"r,omitempty"`
	Seq   int64  `json:"s"`
	Stale bool   `json:"x,omitempty"`  // its nominee was granted; it goes at the next event
	Taken bool   `json:"tk,omitempty"` // its nominee took it over from the preemptor
}

// SnapshotHead is the first waiting request of a class: since when, and what it reserved.
type SnapshotHead struct {
	Class Class   `json:"class"`
	Job   string  `json:"job"`
	Since int64   `json:"since"`
	Nodes []int32 `json:"nodes,omitempty"` // indices into Snapshot.Nodes, ascending
	// Pinned is what it reserved when it starved (indices, ascending): it keeps those nodes.
	Pinned []int32 `json:"pinned,omitempty"`
}

// SnapshotMovedOut is a job moved out of a topology domain for a gang (Preemption.Move) while that
// gang waits. Names, not indices: a reconfiguration may reorder the nodes or the levels (a level or
// node it removed drops the entry).
type SnapshotMovedOut struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"` // the attempt that was moved
	Gang    string `json:"gang"`
	Level   string `json:"level"`
	Node    string `json:"node"` // the node it left, whose domain at Level is kept clear
}

// SnapshotMemo is a preempted job's preemption count, kept for its next attempt.
type SnapshotMemo struct {
	Job   string `json:"job"`
	Count int    `json:"n"`
	At    int64  `json:"at"`
}

// SnapshotWaiting holds the waiting requests in launch order, one column per field.
type SnapshotWaiting struct {
	Job         []string `json:"job,omitempty"`
	Attempt     []int    `json:"attempt,omitempty"`
	KindClass   []int8   `json:"kc,omitempty"` // class, +3 for notebooks
	Demand      []int32  `json:"d,omitempty"`  // index into Snapshot.Demands
	Workers     []int32  `json:"w,omitempty"`
	Seq         []int64  `json:"seq,omitempty"`
	SubmittedAt []int64  `json:"t,omitempty"`
	Preemptions []int32  `json:"pn,omitempty"` // absent when every count is 0
	// HonorsNotice is each request's Request.HonorsNotice; absent when every one is false.
	HonorsNotice []bool `json:"hn,omitempty"`
	// NodeSet is each request's allowed nodes: 0 for none (any node of its family), k for
	// Snapshot.NodeSets[k-1]; absent when no request has any.
	NodeSet []int32 `json:"ns,omitempty"`
	// MinWorkers is each request's Request.MinWorkers; absent when no gang is elastic.
	MinWorkers []int32 `json:"mw,omitempty"`
	// Workspace is each request's workspace: 0 for none, k for Snapshot.Workspaces[k-1];
	// absent when no request has one.
	Workspace []int32 `json:"ws,omitempty"`
	// RunLimit is each request's Request.RunLimit in milliseconds; absent when none has one.
	RunLimit []int64 `json:"rl,omitempty"`
	// User is each request's user: 0 for none, k for Snapshot.Users[k-1]; absent when no
	// request has one.
	User []int32 `json:"u,omitempty"`
	// RunEstimated is each request's Request.RunEstimated; absent when every one is false.
	RunEstimated []bool `json:"re,omitempty"`
	// Topology is each request's Request.Topology: 0 for none, k for Snapshot.GangTopologies[k-1];
	// absent when no request names one.
	Topology []int32 `json:"tp,omitempty"`
	// NoMove is each request's Request.NoMove; absent when every one is false.
	NoMove []bool `json:"nm,omitempty"`
	// Allocation is each request's cohort allocation: 0 for none, k for
	// Snapshot.Allocations[k-1]; absent when no request has one.
	Allocation []int32 `json:"al,omitempty"`
}

// SnapshotRunning is one running or releasing job.
type SnapshotRunning struct {
	Job         string   `json:"j"`
	Attempt     int      `json:"a,omitempty"`
	KindClass   int8     `json:"kc"`
	Demand      int32    `json:"d"`
	Seq         int64    `json:"s,omitempty"`
	SubmittedAt int64    `json:"t,omitempty"`
	StartedAt   int64    `json:"st,omitempty"`
	Nodes       []int32  `json:"n"` // node index per worker
	GPUs        []uint64 `json:"g"` // GPU index mask per worker
	Released    []int32  `json:"r,omitempty"`
	Releasing   bool     `json:"rel,omitempty"`
	// HonorsNotice is the request's Request.HonorsNotice (beside Releasing: it takes no room).
	HonorsNotice bool       `json:"hn,omitempty"`
	PreemptedBy  *Preemptor `json:"pb,omitempty"`
	OnLoan       bool       `json:"ol,omitempty"` // Grant.OnLoan of this attempt
	Preemptions  int        `json:"pn,omitempty"`
	PreemptSeq   int64      `json:"ps,omitempty"` // > 0: this attempt was preempted, as the PreemptSeq-th preemption
	// Nominees is, per worker, who its capacity is nominated to, when a better request took some
	// of it over from the preemptor (absent: the preemptor).
	Nominees   []Preemptor `json:"nb,omitempty"`
	Checkpoint int64       `json:"ck,omitempty"`
	// NodeSet is the request's allowed nodes, as SnapshotWaiting.NodeSet.
	NodeSet int32 `json:"ns,omitempty"`
	// Workspace is the request's workspace, as SnapshotWaiting.Workspace.
	Workspace int32 `json:"ws,omitempty"`
	// RunLimit is the request's Request.RunLimit in milliseconds.
	RunLimit int64 `json:"rl,omitempty"`
	// User is the request's user, as SnapshotWaiting.User.
	User int32 `json:"u,omitempty"`
	// RunEstimated is the request's Request.RunEstimated.
	RunEstimated bool `json:"re,omitempty"`
	// Topology is the request's own gang topology, as SnapshotWaiting.Topology.
	Topology int32 `json:"tp,omitempty"`
	NoMove   bool  `json:"nm,omitempty"` // Request.NoMove
	Moved    bool  `json:"mv,omitempty"` // it is releasing as a move for a gang (Preemption.Move)
	// Allocation is the request's cohort allocation, as SnapshotWaiting.Allocation; Borrowed,
	// it started beyond that allocation's share (Grant.Borrowed).
	Allocation int32 `json:"al,omitempty"`
	Borrowed   bool  `json:"bw,omitempty"`
	// Progress is the attempt's first and last progress reports (Pool.Progressed); absent:
	// none.
	Progress *SnapshotProgress `json:"pr,omitempty"`
}

// SnapshotProgress is a running attempt's first and last progress reports.
type SnapshotProgress struct {
	FirstAt   int64   `json:"fa"`
	FirstDone float64 `json:"fd"`
	LastAt    int64   `json:"la"`
	LastDone  float64 `json:"ld"`
}

func tn(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func nt(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func kindClass(r *Request) int8 {
	kc := int8(r.Class)
	if r.Kind == KindNotebook {
		kc += 3
	}
	return kc
}

func fromKindClass(kc int8) (Kind, Class, error) {
	switch {
	case kc >= 0 && kc <= 2:
		return KindJob, Class(kc), nil
	case kc >= 3 && kc <= 5:
		return KindNotebook, Class(kc - 3), nil
	}
	return "", 0, fmt.Errorf("snapshot: bad kind/class code %d", kc)
}

// Snapshot captures the state (see Restore).
func (p *Pool) Snapshot() Snapshot {
	s := p.snapshotScheduling()
	s.Forecast = p.forecast.snapshot()
	return s
}

// snapshotScheduling is Snapshot without the record of the expected starts' errors, which
// decides nothing: what a projection copies.
func (p *Pool) snapshotScheduling() Snapshot {
	s := Snapshot{Version: SnapshotVersion, Nodes: p.Nodes(), Policy: p.policy, Now: tn(p.lastNow), PreemptSeq: p.preemptSeq}
	for c := High; c >= Low; c-- {
		if h := &p.heads[c]; h.job != "" {
			s.Heads = append(s.Heads, SnapshotHead{Class: c, Job: h.job, Since: tn(h.since), Nodes: slices.Clone(h.nodes), Pinned: slices.Clone(h.pinned)})
		}
	}
	for _, h := range p.holds {
		s.Holds = append(s.Holds, SnapshotHold{Job: h.by, Class: h.class, Node: h.node, GPUs: h.amount.gpu, CPU: h.amount.cpu, RAMGB: h.amount.ram, Seq: h.seq, Stale: h.stale, Taken: h.taken})
	}
	for _, job := range sortedKeys(p.movedOut) {
		m := p.movedOut[job]
		s.MovedOut = append(s.MovedOut, SnapshotMovedOut{Job: job, Attempt: m.attempt, Gang: m.gang, Level: p.topo.levels[m.level], Node: p.nodes[m.node].Name})
	}
	for _, job := range p.memoOrder {
		if m, ok := p.memo[job]; ok {
			s.Memo = append(s.Memo, SnapshotMemo{Job: job, Count: m.count, At: tn(m.at)})
		}
	}
	for i := range p.nodes {
		if p.nodes[i].lost {
			s.Lost = append(s.Lost, int32(i))
		}
	}
	s.FairShare = p.snapshotFairShare()
	demands := &demandTable{s: &s, index: map[Demand]int32{}, sets: map[string]int32{}, workspaces: map[string]int32{}, allocations: map[string]int32{}, users: map[string]int32{}, topologies: map[GangTopology]int32{}}
	s.Waiting = p.snapshotWaiting(demands)
	if len(p.running) > 0 {
		s.Running = make([]SnapshotRunning, 0, len(p.running))
	}
	for _, rj := range p.sortedRunning() {
		s.Running = append(s.Running, snapshotRunning(rj, demands))
	}
	return s
}

// demandTable interns demands into Snapshot.Demands, and allowed nodes into Snapshot.NodeSets,
// in order of first use.
type demandTable struct {
	s          *Snapshot
	index      map[Demand]int32
	sets       map[string]int32
	workspaces map[string]int32
	// allocations interns the requests' cohort allocations (Snapshot.Allocations).
	allocations map[string]int32
	users       map[string]int32
	topologies  map[GangTopology]int32
}

// topology interns a request's own gang topology: 0 for none, else 1 + the index in
// s.GangTopologies.
func (t *demandTable) topology(g GangTopology) int32 {
	if g == (GangTopology{}) {
		return 0
	}
	if i, ok := t.topologies[g]; ok {
		return i
	}
	t.s.GangTopologies = append(t.s.GangTopologies, g)
	i := int32(len(t.s.GangTopologies))
	t.topologies[g] = i
	return i
}

// user interns a request's user: 0 for none, else 1 + the index in s.Users.
func (t *demandTable) user(name string) int32 { return internName(&t.s.Users, t.users, name) }

// workspace interns a request's workspace: 0 for none, else 1 + the index in s.Workspaces.
func (t *demandTable) workspace(name string) int32 {
	return internName(&t.s.Workspaces, t.workspaces, name)
}

// allocation interns a request's cohort allocation: 0 for none, else 1 + the index in
// s.Allocations.
func (t *demandTable) allocation(name string) int32 {
	return internName(&t.s.Allocations, t.allocations, name)
}

// internName is 0 for "", else 1 + name's index in names, where it is added at its first use.
func internName(names *[]string, index map[string]int32, name string) int32 {
	if name == "" {
		return 0
	}
	if i, ok := index[name]; ok {
		return i
	}
	*names = append(*names, name)
	i := int32(len(*names))
	index[name] = i
	return i
}

// nodeSet interns a request's allowed nodes: 0 for none, else 1 + the index in s.NodeSets.
func (t *demandTable) nodeSet(names []string) int32 {
	if len(names) == 0 {
		return 0
	}
	key := strings.Join(names, "\x00")
	if i, ok := t.sets[key]; ok {
		return i
	}
	t.s.NodeSets = append(t.s.NodeSets, slices.Clone(names))
	i := int32(len(t.s.NodeSets))
	t.sets[key] = i
	return i
}

func (t *demandTable) intern(d Demand) int32 {
	if i, ok := t.index[d]; ok {
		return i
	}
	i := int32(len(t.s.Demands))
	t.s.Demands = append(t.s.Demands, d)
	t.index[d] = i
	return i
}

func (p *Pool) snapshotWaiting(demands *demandTable) SnapshotWaiting {
	n := len(p.waiting)
	sw := SnapshotWaiting{Job: make([]string, n), Attempt: make([]int, n), KindClass: make([]int8, n),
		Demand: make([]int32, n), Workers: make([]int32, n), Seq: make([]int64, n), SubmittedAt: make([]int64, n)}
	for i, w := range p.waiting {
		r := &w.r
		sw.Job[i], sw.Attempt[i], sw.KindClass[i] = r.Job, r.Attempt, kindClass(r)
		sw.Demand[i], sw.Workers[i], sw.Seq[i], sw.SubmittedAt[i] = demands.intern(r.Demand), int32(r.Workers), r.Seq, tn(r.SubmittedAt)
		if r.Preemptions > 0 {
			if sw.Preemptions == nil {
				sw.Preemptions = make([]int32, n)
			}
			sw.Preemptions[i] = int32(r.Preemptions)
		}
		if r.HonorsNotice {
			if sw.HonorsNotice == nil {
				sw.HonorsNotice = make([]bool, n)
			}
			sw.HonorsNotice[i] = true
		}
		if len(r.Nodes) > 0 {
			if sw.NodeSet == nil {
				sw.NodeSet = make([]int32, n)
			}
			sw.NodeSet[i] = demands.nodeSet(r.Nodes)
		}
		if r.MinWorkers > 0 {
			if sw.MinWorkers == nil {
				sw.MinWorkers = make([]int32, n)
			}
			sw.MinWorkers[i] = int32(r.MinWorkers)
		}
		if r.Workspace != "" {
			if sw.Workspace == nil {
				sw.Workspace = make([]int32, n)
			}
			sw.Workspace[i] = demands.workspace(r.Workspace)
		}
		if r.RunEstimated {
			if sw.RunEstimated == nil {
				sw.RunEstimated = make([]bool, n)
			}
			sw.RunEstimated[i] = true
		}
		if r.Allocation != "" {
			if sw.Allocation == nil {
				sw.Allocation = make([]int32, n)
			}
			sw.Allocation[i] = demands.allocation(r.Allocation)
		}
		if r.User != "" {
			if sw.User == nil {
				sw.User = make([]int32, n)
			}
			sw.User[i] = demands.user(r.User)
		}
		if r.RunLimit > 0 {
			if sw.RunLimit == nil {
				sw.RunLimit = make([]int64, n)
			}
			sw.RunLimit[i] = r.RunLimit.Milliseconds()
		}
		if r.NoMove {
			if sw.NoMove == nil {
				sw.NoMove = make([]bool, n)
			}
			sw.NoMove[i] = true
		}
		if r.Topology != (GangTopology{}) {
			if sw.Topology == nil {
				sw.Topology = make([]int32, n)
			}
			sw.Topology[i] = demands.topology(r.Topology)
		}
	}
	return sw
}

func snapshotRunning(rj *runJob, demands *demandTable) SnapshotRunning {
	sr := SnapshotRunning{Job: rj.r.Job, Attempt: rj.r.Attempt, KindClass: kindClass(&rj.r), Demand: demands.intern(rj.r.Demand),
		Seq: rj.r.Seq, SubmittedAt: tn(rj.r.SubmittedAt), StartedAt: tn(rj.startedAt),
		Nodes: append([]int32(nil), rj.nodes...), GPUs: append([]uint64(nil), rj.gpus...), Releasing: rj.releasing,
		Preemptions: rj.preemptions, PreemptSeq: rj.preemptSeq, Checkpoint: tn(rj.ckpt), HonorsNotice: rj.r.HonorsNotice,
		NodeSet: demands.nodeSet(rj.r.Nodes), Topology: demands.topology(rj.r.Topology), NoMove: rj.r.NoMove, Moved: rj.moved && rj.releasing, Workspace: demands.workspace(rj.r.Workspace), RunLimit: rj.r.RunLimit.Milliseconds(),
		User: demands.user(rj.r.User), RunEstimated: rj.r.RunEstimated, OnLoan: rj.onLoan,
		Allocation: demands.allocation(rj.r.Allocation), Borrowed: rj.borrowed}
	if !rj.progLast.at.IsZero() {
		sr.Progress = &SnapshotProgress{FirstAt: tn(rj.progFirst.at), FirstDone: rj.progFirst.done, LastAt: tn(rj.progLast.at), LastDone: rj.progLast.done}
	}
	if rj.preemptedBy != nil && slices.ContainsFunc(rj.nominee, func(nb *Preemptor) bool { return *nb != *rj.preemptedBy }) {
		for _, nb := range rj.nominee {
			sr.Nominees = append(sr.Nominees, *nb)
		}
	}
	for w, rel := range rj.released {
		if rel {
			sr.Released = append(sr.Released, int32(w))
		}
	}
	if rj.preemptedBy != nil {
		pb := *rj.preemptedBy
		sr.PreemptedBy = &pb
	}
	return sr
}

// Restore rebuilds a pool from a Snapshot of any version up to SnapshotVersion, validating it.
func Restore(s Snapshot) (*Pool, error) {
	if err := checkVersion(s); err != nil {
		return nil, err
	}
	p, err := NewPool(s.Nodes, s.Policy)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	p.lastNow = nt(s.Now)
	p.forecast.restore(s.Forecast)
	rs := &restorer{p: p, s: &s, admitted: map[admitKey]bool{}, sets: map[int32][]string{}}
	for _, step := range []func() error{rs.fairShare, rs.lostNodes, rs.runningJobs, rs.victimOrder, rs.waitingRequests, rs.movers, rs.classHeads, rs.holds, rs.memo} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func checkVersion(s Snapshot) error {
	switch s.Version {
	case 1:
		if len(s.Lost) > 0 {
			return fmt.Errorf("snapshot: version 1 has no lost nodes, but this one lists %d", len(s.Lost))
		}
	case 2, 3:
	default:
		return fmt.Errorf("snapshot: unsupported version %d (this code reads versions 1 to %d)", s.Version, SnapshotVersion)
	}
	return nil
}

// restorer rebuilds a pool from a snapshot, one part at a time (see Restore).
type restorer struct {
	p *Pool
	s *Snapshot
	// admitted are the request shapes Admit already accepted: checking each shape once keeps
	// restoring a long queue cheap.
	admitted map[admitKey]bool
	// sets are the node sets read so far (see nodeSet), shared by their requests.
	sets map[int32][]string
}

// admitKey is what Admit looks at: demand, workers, kind and class, and allowed nodes (ns, as
// SnapshotWaiting.NodeSet; -1 for a running job, whose allowed nodes are not checked).
type admitKey struct {
	d, w, mw, ns, tp, al int32
	kc                   int8
}

// admitOnce checks r against the pool, unless a request of the same shape was admitted already.
// A running job's allowed nodes (key.ns < 0) are not checked: it holds its placement already.
func (rs *restorer) admitOnce(r Request, key admitKey) error {
	if rs.admitted[key] && r.Job != "" {
		return nil
	}
	check := rs.p.Admit
	if key.ns < 0 {
		check = rs.p.admitAnywhere
	}
	if err := check(r); err != nil {
		return err
	}
	rs.admitted[key] = true
	return nil
}

// gangTopology is the gang topology k of a snapshot's Topology column or field.
func (rs *restorer) gangTopology(k int32) (GangTopology, error) {
	switch {
	case k == 0:
		return GangTopology{}, nil
	case k < 0 || int(k) > len(rs.s.GangTopologies):
		return GangTopology{}, fmt.Errorf("snapshot: gang topology %d out of range", k)
	}
	return rs.s.GangTopologies[k-1], nil
}

// workspace is the workspace k of a snapshot's Workspace column or field.
func (rs *restorer) workspace(k int32) (string, error) {
	return nameAt(rs.s.Workspaces, k, "workspace")
}

// allocation is the cohort allocation k of a snapshot's Allocation column or field.
func (rs *restorer) allocation(k int32) (string, error) {
	return nameAt(rs.s.Allocations, k, "allocation")
}

// user is the user k of a snapshot's User column or field.
func (rs *restorer) user(k int32) (string, error) { return nameAt(rs.s.Users, k, "user") }

// nameAt is "" for k 0, else names[k-1], which must exist and not be empty.
func nameAt(names []string, k int32, what string) (string, error) {
	switch {
	case k == 0:
		return "", nil
	case k < 0 || int(k) > len(names) || names[k-1] == "":
		return "", fmt.Errorf("snapshot: %s %d out of range", what, k)
	}
	return names[k-1], nil
}

// nodeSet is the allowed nodes coded as k (see SnapshotWaiting.NodeSet), sorted, each once; the
// requests of one set share its slice (the pool never changes a request's nodes).
func (rs *restorer) nodeSet(k int32) ([]string, error) {
	switch {
	case k == 0:
		return nil, nil
	case k < 0 || int(k) > len(rs.s.NodeSets):
		return nil, fmt.Errorf("snapshot: node set %d out of range", k)
	case len(rs.s.NodeSets[k-1]) == 0:
		return nil, fmt.Errorf("snapshot: node set %d is empty", k)
	}
	names, ok := rs.sets[k]
	if !ok {
		names = canonNodes(rs.s.NodeSets[k-1])
		rs.sets[k] = names
	}
	return names, nil
}

func (rs *restorer) demand(i int32) (Demand, error) {
	if i < 0 || int(i) >= len(rs.s.Demands) {
		return Demand{}, fmt.Errorf("snapshot: demand index %d out of range", i)
	}
	return rs.s.Demands[i], nil
}

// request rebuilds the request of a running or waiting job from its coded fields.
func (rs *restorer) request(job string, kc int8, demand int32) (Request, error) {
	kind, class, err := fromKindClass(kc)
	if err != nil {
		return Request{}, err
	}
	d, err := rs.demand(demand)
	if err != nil {
		return Request{}, err
	}
	return Request{Job: job, Kind: kind, Class: class, Demand: d}, nil
}

func (rs *restorer) lostNodes() error {
	p, lost := rs.p, rs.s.Lost
	for i, n := range lost {
		if n < 0 || int(n) >= len(p.nodes) || (i > 0 && n <= lost[i-1]) {
			return fmt.Errorf("snapshot: lost node index %d is out of range or out of order", n)
		}
		p.nodes[n].lost = true
	}
	if len(lost) > 0 {
		for f := range p.fams {
			p.refreshLive(int32(f))
		}
	}
	return nil
}

func (rs *restorer) runningJobs() error {
	for i := range rs.s.Running {
		if err := rs.runningJob(&rs.s.Running[i]); err != nil {
			return err
		}
	}
	return nil
}

// runningJob restores one running or releasing job: its request, its record, and the capacity
// it holds on its nodes.
func (rs *restorer) runningJob(sr *SnapshotRunning) error {
	p := rs.p
	r, err := rs.request(sr.Job, sr.KindClass, sr.Demand)
	if err != nil {
		return err
	}
	r.Attempt, r.Workers, r.Seq, r.SubmittedAt, r.Preemptions = sr.Attempt, len(sr.Nodes), sr.Seq, nt(sr.SubmittedAt), sr.Preemptions
	r.HonorsNotice = sr.HonorsNotice
	if r.Nodes, err = rs.nodeSet(sr.NodeSet); err != nil {
		return err
	}
	if r.Topology, err = rs.gangTopology(sr.Topology); err != nil {
		return err
	}
	r.NoMove = sr.NoMove
	if r.Workspace, err = rs.workspace(sr.Workspace); err != nil {
		return err
	}
	r.RunLimit = time.Duration(max(sr.RunLimit, 0)) * time.Millisecond
	r.RunEstimated = sr.RunEstimated
	if r.Allocation, err = rs.allocation(sr.Allocation); err != nil {
		return fmt.Errorf("snapshot: running job %q: %w", sr.Job, err)
	}
	if err = p.admitAllocation(&r); err != nil {
		return fmt.Errorf("snapshot: running job %q: %w", sr.Job, err)
	}
	if sr.PreemptedBy != nil && r.Preemptions > 0 { // as requested: before this attempt's own preemption
		r.Preemptions--
	}
	if err := rs.admitOnce(r, admitKey{d: sr.Demand, w: int32(len(sr.Nodes)), ns: -1, kc: sr.KindClass}); err != nil {
		return fmt.Errorf("snapshot: running job %q: %w", sr.Job, err)
	}
	if p.running[r.Job] != nil || len(sr.GPUs) != len(sr.Nodes) {
		return fmt.Errorf("snapshot: running job %q is duplicated or malformed", sr.Job)
	}
	if sr.Preemptions < 0 || sr.PreemptSeq < 0 || (sr.PreemptSeq > 0 && (!sr.Releasing || sr.PreemptedBy == nil)) {
		return fmt.Errorf("snapshot: running job %q: inconsistent preemption record", sr.Job)
	}
	if r.User, err = rs.user(sr.User); err != nil {
		return fmt.Errorf("snapshot: running job %q: %w", sr.Job, err)
	}
	rj := &runJob{r: r, ws: p.workspaceOf(r.Workspace), user: p.userOf(r.Workspace, r.User), fam: p.famIdx[r.Demand.Family], startedAt: nt(sr.StartedAt), nodes: slices.Clone(sr.Nodes), gpus: slices.Clone(sr.GPUs),
		released: make([]bool, len(sr.Nodes)), preemptions: sr.Preemptions, preemptSeq: sr.PreemptSeq, ckpt: nt(sr.Checkpoint), onLoan: sr.OnLoan, moved: sr.Moved, borrowed: sr.Borrowed}
	if pg := sr.Progress; pg != nil {
		if !(pg.FirstDone > 0 && pg.FirstDone <= 1 && pg.LastDone > 0 && pg.LastDone <= 1) || pg.FirstAt == 0 || pg.LastAt < pg.FirstAt {
			return fmt.Errorf("snapshot: running job %q: bad progress reports", sr.Job)
		}
		rj.progFirst, rj.progLast = progressMark{at: nt(pg.FirstAt), done: pg.FirstDone}, progressMark{at: nt(pg.LastAt), done: pg.LastDone}
	}
	if err := restorePreemptor(rj, sr); err != nil {
		return err
	}
	if err := restoreReleased(rj, sr); err != nil {
		return err
	}
	if err := rs.occupy(rj, sr); err != nil {
		return err
	}
	p.running[r.Job] = rj
	p.place(rj)
	if sr.Releasing {
		p.beginRelease(rj)
	}
	if rj.preemptedBy != nil && rj.releasing {
		p.victims = append(p.victims, rj)
	}
	return nil
}

// restorePreemptor restores who a preempted job's capacity is nominated to, worker by worker.
func restorePreemptor(rj *runJob, sr *SnapshotRunning) error {
	if sr.PreemptedBy == nil {
		return nil
	}
	pb := *sr.PreemptedBy
	rj.preemptedBy = &pb
	if sr.Nominees != nil && len(sr.Nominees) != len(sr.Nodes) {
		return fmt.Errorf("snapshot: running job %q: %d nominees for %d workers", sr.Job, len(sr.Nominees), len(sr.Nodes))
	}
	rj.nominee = make([]*Preemptor, len(sr.Nodes))
	for i := range rj.nominee {
		rj.nominee[i] = rj.preemptedBy
		if sr.Nominees != nil {
			nb := sr.Nominees[i]
			rj.nominee[i] = &nb
		}
	}
	return nil
}

// restoreReleased marks the workers that released their capacity already.
func restoreReleased(rj *runJob, sr *SnapshotRunning) error {
	for _, w := range sr.Released {
		if w < 0 || int(w) >= len(sr.Nodes) || rj.released[w] {
			return fmt.Errorf("snapshot: running job %q: bad released worker %d", sr.Job, w)
		}
		rj.released[w] = true
		rj.nReleased++
	}
	if rj.nReleased == len(rj.nodes) || (rj.nReleased > 0 && !sr.Releasing) {
		return fmt.Errorf("snapshot: running job %q: inconsistent release state", sr.Job)
	}
	return nil
}

// occupy takes the capacity the job's unreleased workers hold, checking it is free and fits.
func (rs *restorer) occupy(rj *runJob, sr *SnapshotRunning) error {
	p, d := rs.p, rj.r.Demand
	seen := map[int32]bool{}
	for w, n := range sr.Nodes {
		if n < 0 || int(n) >= len(p.nodes) || seen[n] || p.nodes[n].fam != rj.fam {
			return fmt.Errorf("snapshot: running job %q: bad node for worker %d", sr.Job, w)
		}
		seen[n] = true
		if rj.released[w] {
			continue
		}
		nd := &p.nodes[n]
		m := sr.GPUs[w]
		if bits.OnesCount64(m) != d.GPUs || m&nd.used != 0 || (nd.GPUs < 64 && m>>uint(nd.GPUs) != 0) ||
			nd.free.cpu < d.CPU || nd.free.ram < d.RAMGB {
			return fmt.Errorf("snapshot: running job %q: worker %d does not fit on node %s", sr.Job, w, nd.Name)
		}
		nd.used |= m
		nd.free = nd.free.sub(demandOf(&d))
	}
	return nil
}

// victimOrder puts the stopping victims in preemption order; those of snapshots that did not
// number them come after, in snapshot order, and are numbered now.
func (rs *restorer) victimOrder() error {
	p := rs.p
	p.preemptSeq = rs.s.PreemptSeq
	slices.SortStableFunc(p.victims, func(a, b *runJob) int {
		switch {
		case a.preemptSeq == b.preemptSeq:
			return 0
		case a.preemptSeq == 0:
			return 1
		case b.preemptSeq == 0:
			return -1
		case a.preemptSeq < b.preemptSeq:
			return -1
		}
		return 1
	})
	for i, v := range p.victims {
		if i > 0 && v.preemptSeq != 0 && v.preemptSeq == p.victims[i-1].preemptSeq {
			return fmt.Errorf("snapshot: running jobs %q and %q have the same preemption sequence", p.victims[i-1].r.Job, v.r.Job)
		}
		p.preemptSeq = max(p.preemptSeq, v.preemptSeq)
	}
	for _, v := range p.victims {
		if v.preemptSeq == 0 {
			p.preemptSeq++
			v.preemptSeq = p.preemptSeq
		}
	}
	return nil
}

func (rs *restorer) waitingRequests() error {
	sw := &rs.s.Waiting
	n := len(sw.Job)
	if len(sw.Attempt) != n || len(sw.KindClass) != n || len(sw.Demand) != n || len(sw.Workers) != n ||
		len(sw.Seq) != n || len(sw.SubmittedAt) != n || (sw.Preemptions != nil && len(sw.Preemptions) != n) ||
		(sw.HonorsNotice != nil && len(sw.HonorsNotice) != n) || (sw.NodeSet != nil && len(sw.NodeSet) != n) ||
		(sw.MinWorkers != nil && len(sw.MinWorkers) != n) || (sw.Workspace != nil && len(sw.Workspace) != n) ||
		(sw.RunLimit != nil && len(sw.RunLimit) != n) || (sw.User != nil && len(sw.User) != n) ||
		(sw.RunEstimated != nil && len(sw.RunEstimated) != n) || (sw.Topology != nil && len(sw.Topology) != n) ||
		(sw.NoMove != nil && len(sw.NoMove) != n) || (sw.Allocation != nil && len(sw.Allocation) != n) {
		return fmt.Errorf("snapshot: waiting columns have different lengths")
	}
	for i := 0; i < n; i++ {
		if err := rs.waitingRequest(i); err != nil {
			return err
		}
	}
	// In launch order: a snapshot written under another ordering (Reconfigure) need not be.
	rs.p.sortWaiting()
	return nil
}

// waitingRequest restores the i-th waiting request, which must come after the one before it.
func (rs *restorer) waitingRequest(i int) error {
	p, sw := rs.p, &rs.s.Waiting
	r, err := rs.request(sw.Job[i], sw.KindClass[i], sw.Demand[i])
	if err != nil {
		return err
	}
	r.Attempt, r.Workers, r.Seq, r.SubmittedAt = sw.Attempt[i], int(sw.Workers[i]), sw.Seq[i], nt(sw.SubmittedAt[i])
	if sw.Preemptions != nil {
		if r.Preemptions = int(sw.Preemptions[i]); r.Preemptions < 0 {
			return fmt.Errorf("snapshot: waiting job %q has a negative preemption count", r.Job)
		}
	}
	if sw.HonorsNotice != nil {
		r.HonorsNotice = sw.HonorsNotice[i]
	}
	if sw.MinWorkers != nil {
		r.MinWorkers = int(sw.MinWorkers[i])
	}
	if sw.Workspace != nil {
		if r.Workspace, err = rs.workspace(sw.Workspace[i]); err != nil {
			return err
		}
	}
	if sw.RunLimit != nil {
		r.RunLimit = time.Duration(max(sw.RunLimit[i], 0)) * time.Millisecond
	}
	if sw.User != nil {
		if r.User, err = rs.user(sw.User[i]); err != nil {
			return err
		}
	}
	if sw.RunEstimated != nil {
		r.RunEstimated = sw.RunEstimated[i]
	}
	if sw.Allocation != nil {
		if r.Allocation, err = rs.allocation(sw.Allocation[i]); err != nil {
			return err
		}
	}
	if err := p.admitAllocation(&r); err != nil { // (not in admitOnce's key)
		return fmt.Errorf("snapshot: waiting job %q: %w", r.Job, err)
	}
	if sw.NoMove != nil {
		r.NoMove = sw.NoMove[i]
	}
	var tp int32
	if sw.Topology != nil {
		tp = sw.Topology[i]
		if r.Topology, err = rs.gangTopology(tp); err != nil {
			return err
		}
	}
	var ns int32
	if sw.NodeSet != nil {
		ns = sw.NodeSet[i]
		if r.Nodes, err = rs.nodeSet(ns); err != nil {
			return err
		}
	}
	if r.Job == "" {
		return fmt.Errorf("snapshot: waiting request %d has no job id", i)
	}
	if err := rs.admitOnce(r, admitKey{d: sw.Demand[i], w: sw.Workers[i], mw: int32(r.MinWorkers), ns: ns, tp: tp, kc: sw.KindClass[i]}); err != nil {
		return fmt.Errorf("snapshot: waiting job %q: %w", r.Job, err)
	}
	if p.waitIdx[r.Job] != nil {
		return fmt.Errorf("snapshot: waiting job %q is duplicated", r.Job)
	}
	w := p.newWaitReq(r)
	p.waiting = append(p.waiting, w)
	p.countWaiting(w, +1)
	p.waitKeys = append(p.waitKeys, waitKey{shape: w.shape, class: r.Class, prev: p.running[r.Job] != nil})
	p.waitIdx[r.Job] = w
	return nil
}

// classHeads restores the first waiting request of each class, and the nodes reserved for it.
func (rs *restorer) classHeads() error {
	p := rs.p
	for _, h := range rs.s.Heads {
		if !h.Class.valid() || h.Job == "" || p.heads[h.Class].job != "" {
			return fmt.Errorf("snapshot: bad or repeated head of class %d", int(h.Class))
		}
		for _, ns := range [][]int32{h.Nodes, h.Pinned} {
			for i, n := range ns {
				if n < 0 || int(n) >= len(p.nodes) || (i > 0 && n <= ns[i-1]) {
					return fmt.Errorf("snapshot: head %q: reserved node index %d is out of range or out of order", h.Job, n)
				}
			}
		}
		p.heads[h.Class] = head{job: h.Job, since: nt(h.Since), nodes: slices.Clone(h.Nodes), pinned: slices.Clone(h.Pinned)}
	}
	return nil
}

// holds restores the free capacity held for waiting preemptors.
func (rs *restorer) holds() error {
	p := rs.p
	for _, h := range rs.s.Holds {
		if h.Node < 0 || int(h.Node) >= len(p.nodes) || h.GPUs < 0 || h.CPU < 0 || h.RAMGB < 0 || !h.Class.valid() {
			return fmt.Errorf("snapshot: bad hold for %q", h.Job)
		}
		if !h.Stale && p.waitIdx[h.Job] == nil { // its request is gone (a reconfiguration found it unfit)
			continue
		}
		p.addHold(hold{by: h.Job, class: h.Class, node: h.Node, amount: resources{gpu: h.GPUs, cpu: h.CPU, ram: h.RAMGB}, seq: h.Seq, stale: h.Stale, taken: h.Taken})
	}
	return nil
}

// movers restores the jobs moved for gangs that still wait, and keeps their waiting next attempts
// out of the domains they left. One whose gang, level or node is gone is dropped.
func (rs *restorer) movers() error {
	p := rs.p
	for _, m := range rs.s.MovedOut {
		if m.Job == "" || m.Gang == "" {
			return fmt.Errorf("snapshot: bad moved job %+v", m)
		}
		level := p.topo.level(m.Level)
		n, ok := p.nodeIdx[m.Node]
		if level < 0 || !ok || p.waitIdx[m.Gang] == nil {
			continue
		}
		p.movedOut[m.Job] = movedOut{gang: m.Gang, attempt: m.Attempt, level: int8(level), node: n}
		p.reshape(m.Job)
	}
	return nil
}

// memo restores the preemption counts remembered for jobs between attempts.
func (rs *restorer) memo() error {
	p := rs.p
	for _, m := range rs.s.Memo {
		if m.Job == "" || m.Count < 0 {
			return fmt.Errorf("snapshot: bad preemption memo %+v", m)
		}
		p.remember(m.Job, m.Count)
		p.memo[m.Job] = memoEntry{count: m.Count, at: nt(m.At)}
	}
	return nil
}
