package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Ordering is how a pool orders the waiting requests of one class (Policy.Ordering).
type Ordering string

const (
	// SubmissionOrder orders a class by queue sequence alone (default; "" means this).
	SubmissionOrder Ordering = "fifo"
	// FairShare orders a class by the recent usage of the requests' workspaces, then of their
	// users, then by queue sequence (see the package doc, Fair share).
	FairShare Ordering = "fair-share"
)

// DefaultFairShareHalfLife is Policy.FairShareHalfLife when it is 0: Slurm's default
// PriorityDecayHalfLife.
const DefaultFairShareHalfLife = 7 * 24 * time.Hour

// DefaultFairShareInterval is Policy.FairShareInterval when it is 0: how often the fair-share
// ordering ranks the workspaces and users anew (Slurm's PriorityCalcPeriod has the same
// default). Between rankings the order of the queue changes only through events, so a pass over
// an unchanged pool still costs nothing.
const DefaultFairShareInterval = 5 * time.Minute

// FairShareIntervalInEffect is FairShareInterval, or DefaultFairShareInterval when it is 0.
func (p Policy) FairShareIntervalInEffect() time.Duration {
	if p.FairShareInterval == 0 {
		return DefaultFairShareInterval
	}
	return p.FairShareInterval
}

// negligibleUsage is the usage, in GPU-seconds, below which a ranking counts an account as
// unused: it becomes exactly 0, ties with accounts that never ran, and leaves the snapshot.
const negligibleUsage = 1.0

func (p Policy) orderingInEffect() Ordering {
	if p.Ordering == "" {
		return SubmissionOrder
	}
	return p.Ordering
}

// FairShareHalfLifeInEffect is FairShareHalfLife, or DefaultFairShareHalfLife when it is 0.
func (p Policy) FairShareHalfLifeInEffect() time.Duration {
	if p.FairShareHalfLife == 0 {
		return DefaultFairShareHalfLife
	}
	return p.FairShareHalfLife
}

func checkOrdering(p Policy) error {
	switch p.Ordering {
	case "", SubmissionOrder, FairShare:
	default:
		return fmt.Errorf("unknown ordering %q: allowed values are %s, %s", p.Ordering, SubmissionOrder, FairShare)
	}
	if p.FairShareHalfLife < 0 {
		return fmt.Errorf("fair_share_half_life must not be negative, got %s", p.FairShareHalfLife)
	}
	if p.FairShareHalfLife > 0 && p.FairShareHalfLife < time.Minute {
		return fmt.Errorf("fair_share_half_life must be at least 1m0s, got %s", p.FairShareHalfLife)
	}
	if p.FairShareInterval < 0 || (p.FairShareInterval > 0 && p.FairShareInterval < time.Second) {
		return fmt.Errorf("fair_share_interval must be at least 1s, got %s", p.FairShareInterval)
	}
	return nil
}

// account is the usage of one workspace, or of one user within a workspace.
type account struct {
	// usage is decayed GPU-seconds as of fairShare.at: a GPU held for a second at time s counts
	// 2^-((at-s)/half-life).
	usage float64
	held  int // GPUs its running and releasing jobs hold now (unreleased workers)
	// charged is what it is charged for from fairShare.at until the next accrual: the GPUs it
	// held at the end of the last pass.
	charged int
	// key is its usage when the accounts were last ranked: it orders the waiting requests.
	key float64
}

// fairShare is the pool's usage accounting for Policy.Ordering fair-share (off otherwise).
type fairShare struct {
	on       bool
	halfLife time.Duration
	interval time.Duration
	at       time.Time // usage is accrued up to here
	next     time.Time // the next ranking (zero: at the next pass)
	// ws is the workspaces' accounts by workspace index + 1 (0: requests without a workspace);
	// users the users' accounts, one per (workspace, user), by userIdx.
	ws        []account
	users     []account
	userIdx   map[userKey]int32
	userNames []userKey
}

type userKey struct{ workspace, user string }

func newFairShare(policy Policy) fairShare {
	return fairShare{on: policy.orderingInEffect() == FairShare, halfLife: policy.FairShareHalfLifeInEffect(),
		interval: policy.FairShareIntervalInEffect(),
		ws:       []account{{}}, userIdx: map[userKey]int32{}}
}

// userOf interns the (workspace, user) account of a request.
func (p *Pool) userOf(workspace, user string) int32 {
	k := userKey{workspace, user}
	if i, ok := p.fs.userIdx[k]; ok {
		return i
	}
	i := int32(len(p.fs.users))
	p.fs.userIdx[k] = i
	p.fs.userNames = append(p.fs.userNames, k)
	p.fs.users = append(p.fs.users, account{})
	return i
}

// chargeGPUs counts delta GPUs held by rj's workspace and user (see holdGPUs).
func (p *Pool) chargeGPUs(rj *runJob, delta int) {
	p.fs.ws[rj.ws+1].held += delta
	p.fs.users[rj.user].held += delta
}

// halfPow is 2^-x for x ≥ 0, from additions, multiplications and exact scalings only, each
// rounded on its own (the conversions forbid fused multiply-adds): usage must come out bit for
// bit the same on every machine that replays the allocator, which math.Exp2 does not promise.
func halfPow(x float64) float64 {
	if !(x > 0) {
		return 1
	}
	if x > 1100 {
		return 0
	}
	n := math.Floor(x)
	t := float64(-(x - n) * math.Ln2) // in (-ln 2, 0]
	sum, term := 1.0, 1.0
	for k := 1; k <= 24; k++ {
		term = float64(float64(term*t) / float64(k))
		sum = float64(sum + term)
	}
	return math.Ldexp(sum, -int(n))
}

// accrue brings every account's usage up to now: each is charged its charged GPUs for the time
// since fairShare.at, decayed continuously (∫ charged·2^-((now-s)/H) ds = charged·H/ln2·(1−f)).
func (fs *fairShare) accrue(now time.Time) {
	dt := now.Sub(fs.at)
	if fs.at.IsZero() || dt <= 0 {
		if fs.at.IsZero() {
			fs.at = now
		}
		return
	}
	hl := float64(fs.halfLife)
	f := halfPow(float64(dt) / hl)
	gain := float64(float64(fs.halfLife.Seconds()/math.Ln2) * float64(1-f))
	for _, accts := range [][]account{fs.ws, fs.users} {
		for i := range accts {
			a := &accts[i]
			a.usage = float64(float64(a.usage*f) + float64(float64(a.charged)*gain))
		}
	}
	fs.at = now
}

// settle starts charging every account what it holds after the pass.
func (fs *fairShare) settle() {
	for _, accts := range [][]account{fs.ws, fs.users} {
		for i := range accts {
			accts[i].charged = accts[i].held
		}
	}
}

// rank makes every account's current usage its ordering key (the caller puts the queue in its
// new order). Negligible usage counts as none.
func (fs *fairShare) rank() {
	for _, accts := range [][]account{fs.ws, fs.users} {
		for i := range accts {
			a := &accts[i]
			if a.usage < negligibleUsage {
				a.usage = 0
			}
			a.key = a.usage
		}
	}
}

// fairShareTick runs at the start of every pass with fair-share on, unless nothing happened
// since the last pass and no ranking is due (what every account holds is then what it is
// charged): it accrues usage, and ranks when it is due, putting the queue in its new order (the
// pool counts as changed if the order did). It reports whether the pass must settle the
// accounts when it ends.
func (p *Pool) fairShareTick(now time.Time) bool {
	fs := &p.fs
	due := fs.next.IsZero() || !now.Before(fs.next)
	if !fs.on || (!p.dirty && !due) {
		return false
	}
	fs.accrue(now)
	if due {
		fs.rank()
		fs.next = now.Add(fs.interval)
		if p.sortWaiting() {
			p.dirty = true
		}
	}
	return true
}

// CarryUsage gives p the fair-share usage of from (same workspaces and users, by name): an
// allocator that rebuilds its pool from the jobs keeps what it knew of their usage.
func (p *Pool) CarryUsage(from *Pool) {
	if !p.fs.on || !from.fs.on {
		return
	}
	p.fs.at, p.fs.next = from.fs.at, from.fs.next
	for i, a := range from.fs.ws {
		ws := noWorkspace
		if i > 0 {
			ws = p.workspaceOf(from.wsNames[i-1])
		}
		b := &p.fs.ws[ws+1]
		b.usage, b.charged, b.key = a.usage, a.charged, a.key
	}
	for i, a := range from.fs.users {
		k := from.fs.userNames[i]
		b := &p.fs.users[p.userOf(k.workspace, k.user)]
		b.usage, b.charged, b.key = a.usage, a.charged, a.key
	}
	p.sortWaiting()
}

// ChargeAdopted is for a pool that CarryUsage gave another pool's usage and that then adopted
// its running jobs from what the jobs said (a recovery): instead of charging, until now, what the
// other pool was charging when it last accrued, it charges each adopted job what it held from
// its start, or from that last accrual if later, to now. The other pool may be the one of a
// reset point: what held GPUs then may have ended long before now, and what runs now started
// since. Jobs that started and ended between the two are not known, and not charged.
//
// It returns that last accrual (zero if there was none, or fair share is off): a job the
// recovery missed and that is adopted later is charged from there too (ChargeAdoptedJob).
func (p *Pool) ChargeAdopted(now time.Time) (since time.Time) {
	fs := &p.fs
	if !fs.on {
		return time.Time{}
	}
	since = fs.at
	for _, accts := range [][]account{fs.ws, fs.users} {
		for i := range accts {
			accts[i].charged = 0
		}
	}
	fs.accrue(now) // decays what was carried to now, charging nothing
	if !since.IsZero() {
		for _, job := range p.RunningJobs() { // sorted: the sums come out the same on every replay
			p.chargeHeld(p.running[job], since, now)
		}
	}
	fs.settle()
	return since
}

// ChargeAdoptedJob charges job, which the pool adopted after a recovery had missed it, as that
// recovery would have (see ChargeAdopted): what it holds from its start, or from since if later,
// to the pool's last accrual, and from then on what it holds, as every job is charged (a zero
// since charges it from the last accrual only). Nobody else's usage moves: the pool may be a
// reset run's that has not yet noticed the reset, whose next recovery charges from its last
// accrual.
func (p *Pool) ChargeAdoptedJob(job string, since time.Time) {
	fs := &p.fs
	rj := p.running[job]
	if !fs.on || rj == nil {
		return
	}
	if !since.IsZero() {
		p.chargeHeld(rj, since, fs.at)
	}
	gpus := rj.heldGPUs()
	fs.ws[rj.ws+1].charged += gpus
	fs.users[rj.user].charged += gpus
}

// heldGPUs counts the GPUs of rj's workers that are not released.
func (rj *runJob) heldGPUs() int {
	gpus := 0
	for w, m := range rj.gpus {
		if !rj.released[w] {
			gpus += bits.OnesCount64(m)
		}
	}
	return gpus
}

// chargeHeld adds to rj's workspace and user the usage of the GPUs it holds now, held from its
// start, or from since if later, to now: ∫ gpus·2^-((now-s)/H) ds, as accrue charges it.
func (p *Pool) chargeHeld(rj *runJob, since, now time.Time) {
	fs := &p.fs
	start := rj.startedAt
	if start.Before(since) {
		start = since
	}
	if !start.Before(now) {
		return
	}
	gpus := rj.heldGPUs()
	hl := float64(fs.halfLife)
	gain := float64(float64(fs.halfLife.Seconds()/math.Ln2) * float64(1-halfPow(float64(now.Sub(start))/hl)))
	charge := float64(float64(gpus) * gain)
	ws, user := &fs.ws[rj.ws+1], &fs.users[rj.user]
	ws.usage = float64(ws.usage + charge)
	user.usage = float64(user.usage + charge)
}

// sortWaiting puts the queue in launch order again after the ordering keys changed, and reports
// whether anything moved.
func (p *Pool) sortWaiting() bool {
	if slices.IsSortedFunc(p.waiting, p.cmpWaiting) {
		return false
	}
	slices.SortStableFunc(p.waiting, p.cmpWaiting)
	for i, w := range p.waiting {
		p.waitKeys[i] = waitKey{shape: w.shape, class: w.r.Class, prev: p.running[w.r.Job] != nil}
	}
	return true
}

func (p *Pool) cmpWaiting(a, b *waitReq) int {
	switch {
	case p.before(a, b):
		return -1
	case p.before(b, a):
		return 1
	}
	return 0
}

// before is the launch order: class (high first); with fair-share, then the workspace's ranked
// usage, then the user's (least first); then Seq, then Job.
func (p *Pool) before(a, b *waitReq) bool {
	if a.r.Class != b.r.Class {
		return a.r.Class > b.r.Class
	}
	if p.fs.on {
		if ka, kb := p.fs.ws[a.ws+1].key, p.fs.ws[b.ws+1].key; ka != kb {
			return ka < kb
		}
		if ka, kb := p.fs.users[a.user].key, p.fs.users[b.user].key; ka != kb {
			return ka < kb
		}
	}
	if a.r.Seq != b.r.Seq {
		return a.r.Seq < b.r.Seq
	}
	return a.r.Job < b.r.Job
}

// WorkspaceUsage is one workspace's recent usage under fair-share ordering.
type WorkspaceUsage struct {
	Workspace string `json:"workspace"` // "" for requests without one
	// GPUHours is its decayed usage now: a GPU-hour used one half-life ago counts 0.5.
	GPUHours float64 `json:"gpu_hours"`
	// Share is its part of all the workspaces' usage, 0 to 1.
	Share float64 `json:"share"`
	// RankedGPUHours is the usage its requests are ordered by, from the last ranking.
	RankedGPUHours float64 `json:"ranked_gpu_hours"`
	GPUs           int     `json:"gpus"` // GPUs it holds now
	Waiting        int     `json:"waiting"`
}

// Usage is each workspace's usage under fair-share ordering, least ranked usage first (the
// order its requests are taken in), as of the last pass; nil unless Policy.Ordering is
// fair-share.
func (p *Pool) Usage() []WorkspaceUsage {
	if !p.fs.on {
		return nil
	}
	fs := p.fs
	fs.ws = slices.Clone(fs.ws)
	fs.users = nil
	fs.accrue(p.lastNow)
	waiting := make([]int, len(fs.ws))
	for _, w := range p.waiting {
		waiting[w.ws+1]++
	}
	var out []WorkspaceUsage
	total := 0.0
	for i, a := range fs.ws {
		if a.usage == 0 && a.held == 0 && waiting[i] == 0 {
			continue
		}
		name := ""
		if i > 0 {
			name = p.wsNames[i-1]
		}
		out = append(out, WorkspaceUsage{Workspace: name, GPUHours: a.usage / 3600, RankedGPUHours: a.key / 3600, GPUs: a.held, Waiting: waiting[i]})
		total += a.usage
	}
	for i := range out {
		if total > 0 {
			out[i].Share = out[i].GPUHours * 3600 / total
		}
	}
	slices.SortStableFunc(out, func(a, b WorkspaceUsage) int {
		switch {
		case a.RankedGPUHours < b.RankedGPUHours:
			return -1
		case a.RankedGPUHours > b.RankedGPUHours:
			return 1
		}
		return 0
	})
	return out
}

// snapshotFairShare is the fair-share state for a snapshot: the accounts that carry anything,
// by name, so that a restored pool writes the same snapshot.
func (p *Pool) snapshotFairShare() *SnapshotFairShare {
	fs := &p.fs
	if !fs.on {
		return nil
	}
	s := &SnapshotFairShare{At: tn(fs.at), Next: tn(fs.next)}
	keep := func(a *account) bool { return a.usage != 0 || a.charged != 0 || a.key != 0 }
	for i := range fs.ws {
		if a := &fs.ws[i]; keep(a) {
			name := ""
			if i > 0 {
				name = p.wsNames[i-1]
			}
			s.Workspaces = append(s.Workspaces, SnapshotAccount{Workspace: name, Usage: a.usage, Charged: a.charged, Key: a.key})
		}
	}
	for i := range fs.users {
		if a := &fs.users[i]; keep(a) {
			k := fs.userNames[i]
			s.Users = append(s.Users, SnapshotAccount{Workspace: k.workspace, User: k.user, Usage: a.usage, Charged: a.charged, Key: a.key})
		}
	}
	byName := func(a, b SnapshotAccount) int {
		if a.Workspace != b.Workspace {
			return cmp.Compare(a.Workspace, b.Workspace)
		}
		return cmp.Compare(a.User, b.User)
	}
	slices.SortFunc(s.Workspaces, byName)
	slices.SortFunc(s.Users, byName)
	return s
}

// fairShare restores the fair-share accounts (before the running jobs, which add what they hold).
func (rs *restorer) fairShare() error {
	s, p := rs.s.FairShare, rs.p
	if s == nil || !p.fs.on {
		return nil
	}
	p.fs.at, p.fs.next = nt(s.At), nt(s.Next)
	check := func(a SnapshotAccount) error {
		if !(a.Usage >= 0) || !(a.Key >= 0) || a.Charged < 0 || math.IsInf(a.Usage, 0) || math.IsInf(a.Key, 0) {
			return fmt.Errorf("snapshot: fair-share account %q/%q: usage, key and charge must be finite and not negative", a.Workspace, a.User)
		}
		return nil
	}
	for _, a := range s.Workspaces {
		if err := check(a); err != nil {
			return err
		}
		acct := &p.fs.ws[p.workspaceOf(a.Workspace)+1]
		acct.usage, acct.charged, acct.key = a.Usage, a.Charged, a.Key
	}
	for _, a := range s.Users {
		if err := check(a); err != nil {
			return err
		}
		acct := &p.fs.users[p.userOf(a.Workspace, a.User)]
		acct.usage, acct.charged, acct.key = a.Usage, a.Charged, a.Key
	}
	return nil
}
