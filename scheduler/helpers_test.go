package scheduler

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)

func at(minute int) time.Time { return t0.Add(time.Duration(minute) * time.Minute) }

func nodesOf(prefix, fam string, n, gpus, cpu, ram int) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = Node{Name: fmt.Sprintf("%s-%d", prefix, i+1), Family: fam, GPUs: gpus, CPU: cpu, RAMGB: ram}
	}
	return out
}

func mustPool(t testing.TB, nodes []Node, pol Policy) *Pool {
	t.Helper()
	p, err := NewPool(nodes, pol)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// jobBuilder builds a test Request step by step, in the style of Kueue's
// MakeWorkload(...).Priority(...).Obj(): makeJob("r", "a").Class(High).GPUs(4).Obj().
type jobBuilder struct{ r Request }

// makeJob is a medium job of one worker with one GPU of family fam, submitted at t0.
func makeJob(name, fam string) jobBuilder {
	return jobBuilder{Request{Job: name, Kind: KindJob, Class: Medium, Demand: Demand{Family: fam, GPUs: 1}, Workers: 1, SubmittedAt: t0}}
}

func (b jobBuilder) Class(c Class) jobBuilder       { b.r.Class = c; return b }
func (b jobBuilder) GPUs(n int) jobBuilder          { b.r.Demand.GPUs = n; return b }
func (b jobBuilder) Workers(n int) jobBuilder       { b.r.Workers = n; return b }
func (b jobBuilder) Seq(n int64) jobBuilder         { b.r.Seq = n; return b }
func (b jobBuilder) Notebook() jobBuilder           { b.r.Kind = KindNotebook; return b }
func (b jobBuilder) Preemptions(n int) jobBuilder   { b.r.Preemptions = n; return b }
func (b jobBuilder) Attempt(n int) jobBuilder       { b.r.Attempt = n; return b }
func (b jobBuilder) HonorsNotice() jobBuilder       { b.r.HonorsNotice = true; return b }
func (b jobBuilder) Workspace(ws string) jobBuilder { b.r.Workspace = ws; return b }

// Elastic lets the gang start with as few as minWorkers of its workers (Request.MinWorkers).
func (b jobBuilder) Elastic(minWorkers int) jobBuilder { b.r.MinWorkers = minWorkers; return b }

// Nodes holds the request to these nodes (Request.Nodes: include_nodes minus exclude_nodes).
func (b jobBuilder) Nodes(names ...string) jobBuilder   { b.r.Nodes = names; return b }
func (b jobBuilder) Topology(g GangTopology) jobBuilder { b.r.Topology = g; return b }
func (b jobBuilder) Obj() Request                       { return b.r }

// SubmittedAt sets when the request was submitted, at a minute after t0.
func (b jobBuilder) SubmittedAt(minute int) jobBuilder { b.r.SubmittedAt = at(minute); return b }

// runSpec is a job running before a test's request arrives; build it with running(...).
type runSpec struct {
	name    string
	class   Class
	kind    Kind
	gpus    int
	started int // minute
	honors  bool
	preempt int      // earlier preemptions
	on      []string // its request's allowed nodes: where it runs
	workers int      // 0: 1
}

// startRunning starts each job on the nodes it names (its allowed nodes), in order, each at its
// StartedAt minute (setup).
func startRunning(t *testing.T, p *Pool, jobs []runSpec) {
	t.Helper()
	for i, rs := range jobs {
		r := makeJob(rs.name, "a").Class(rs.class).GPUs(rs.gpus).Seq(int64(-100 + i)).Nodes(rs.on...).Obj()
		mustEnqueue(t, p, r)
		if d := sched(t, p, at(rs.started)); len(d.Grants) != 1 {
			t.Fatalf("setup: %s not granted", rs.name)
		}
	}
}

// running is a medium job with all the GPUs it asks for, started at minute 0.
func running(name string) runSpec { return runSpec{name: name, class: Medium, gpus: 1} }

func (s runSpec) Class(c Class) runSpec        { s.class = c; return s }
func (s runSpec) GPUs(n int) runSpec           { s.gpus = n; return s }
func (s runSpec) Notebook() runSpec            { s.kind = KindNotebook; return s }
func (s runSpec) StartedAt(minute int) runSpec { s.started = minute; return s }
func (s runSpec) HonorsNotice() runSpec        { s.honors = true; return s }
func (s runSpec) Preemptions(n int) runSpec    { s.preempt = n; return s }

// On places the job on these nodes (its request is held to them).
func (s runSpec) On(nodes ...string) runSpec { s.on = nodes; return s }
func (s runSpec) Workers(n int) runSpec      { s.workers = n; return s }

func mustEnqueue(t testing.TB, p *Pool, rs ...Request) {
	t.Helper()
	for _, r := range rs {
		if err := p.Enqueue(r); err != nil {
			t.Fatalf("enqueue %s: %v", r.Job, err)
		}
	}
}

// sched runs Schedule and checks every decision and invariant.
func sched(t testing.TB, p *Pool, now time.Time) Decisions {
	t.Helper()
	return schedChecked(t, p, now, true)
}

// schedChecked is sched; without idempotent, a second pass at the same instant may decide more
// (it is not run).
func schedChecked(t testing.TB, p *Pool, now time.Time, idempotent bool) Decisions {
	t.Helper()
	type nodeState struct {
		used     uint64
		cpu, ram int
	}
	before := make([]nodeState, len(p.nodes))
	for i := range p.nodes {
		before[i] = nodeState{p.nodes[i].used, p.nodes[i].free.cpu, p.nodes[i].free.ram}
	}
	prior := map[string]RunningInfo{}
	for _, j := range p.RunningJobs() {
		prior[j], _ = p.Running(j)
	}
	waiting := map[string]Request{}
	for _, w := range p.waiting {
		waiting[w.r.Job] = w.r
	}
	if !p.dirty && (p.wake.IsZero() || now.Before(p.wake)) {
		// The pass is skipped: a full pass (a restored copy runs one) must decide nothing.
		q, err := Restore(p.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if d := q.Schedule(now); len(d.Grants)+len(d.Preemptions) > 0 {
			t.Fatalf("Schedule skipped a pass that decides %s (at %s, wake %s)", mustJSON(t, d), now.Format(time.RFC3339Nano), p.wake.Format(time.RFC3339Nano))
		}
	}
	checkSyncedCapacity(t, p)
	checkVictimOrder(t, p, now)
	heads := p.heads // (the pass reads the heads the last pass left)
	epoch := p.sc.failed.epoch
	d := p.Schedule(now)
	if p.sc.failed.epoch != epoch { // the pass ran in full
		checkFreeBuckets(t, p.sc, p)
	}
	// Idempotence: a second pass at the same instant, with no event in between, decides nothing.
	if idempotent {
		p.dirty = true
		if d2 := p.Schedule(now); len(d2.Grants)+len(d2.Preemptions) > 0 {
			t.Fatalf("a second pass at the same time decided %s after %s", mustJSON(t, d2), mustJSON(t, d))
		}
	}
	for _, g := range d.Grants {
		r, ok := waiting[g.Job]
		if !ok || r.Attempt != g.Attempt {
			t.Fatalf("grant for %s/%d which was not waiting", g.Job, g.Attempt)
		}
		if len(g.Placement) > r.Workers || len(g.Placement) < r.leastWorkers() {
			t.Fatalf("grant %s has %d workers, want %d (at least %d)", g.Job, len(g.Placement), r.Workers, r.leastWorkers())
		}
		seen := map[string]bool{}
		for w, pl := range g.Placement {
			if pl.Worker != w || seen[pl.Node] {
				t.Fatalf("grant %s: bad placement %+v", g.Job, g.Placement)
			}
			seen[pl.Node] = true
			n := p.nodeIdx[pl.Node]
			if p.nodes[n].lost {
				t.Fatalf("grant %s on lost node %s", g.Job, pl.Node)
			}
			if len(r.Nodes) > 0 && !slices.Contains(r.Nodes, pl.Node) {
				t.Fatalf("grant %s: worker %d on %s, outside its allowed nodes %v", g.Job, w, pl.Node, r.Nodes)
			}
			if p.nodes[n].Family != r.Demand.Family || len(pl.GPUs) != r.Demand.GPUs {
				t.Fatalf("grant %s: wrong node or GPU count %+v", g.Job, pl)
			}
			for _, gi := range pl.GPUs {
				if gi < 0 || gi >= p.nodes[n].GPUs || before[n].used&(1<<gi) != 0 {
					t.Fatalf("grant %s: GPU %d on %s was not free (held or releasing)", g.Job, gi, pl.Node)
				}
				before[n].used |= 1 << gi
			}
			before[n].cpu -= r.Demand.CPU
			before[n].ram -= r.Demand.RAMGB
			if before[n].cpu < 0 || before[n].ram < 0 {
				t.Fatalf("grant %s: CPU/RAM on %s was not free", g.Job, pl.Node)
			}
		}
	}
	checkCaps(t, p, d, waiting)
	for _, pe := range d.Preemptions {
		v, ok := prior[pe.Victim]
		if !ok || v.Releasing || v.Attempt != pe.VictimAttempt {
			t.Fatalf("preemption of %s which was not running", pe.Victim)
		}
		if rj := p.running[pe.Victim]; pe.Reclaim && !(pe.Loan && rj.borrowed && rj.r.Allocation != p.waitIdx[pe.Preemptor.Job].r.Allocation) {
			t.Fatalf("reclaim of %s (allocation %s, borrowed %v) for %s: not a borrowed job of another allocation", pe.Victim, rj.r.Allocation, rj.borrowed, pe.Preemptor.Job)
		}
		if v.Kind == KindNotebook || (pe.Loan && !pe.Reclaim && !(v.OnLoan && rjOverran(p, pe.Victim, now))) {
			t.Fatalf("preemption of %s (%s %s, on loan %v) by %s: loan %v is wrong", pe.Victim, v.Class, v.Kind, v.OnLoan, pe.Preemptor.Job, pe.Loan)
		}
		if pe.Loan {
			continue // (a loan past its RunLimit yields whatever its class and the limits: see Loans)
		}
		if pe.Move {
			// (a move is of a one-worker job of the gang's class or below that ran an hour: see
			// Defragmentation)
			if v.Class > pe.Preemptor.Class || len(v.Placement) != 1 || now.Sub(v.StartedAt) < p.policy.minRuntimeBeforeMove() {
				t.Fatalf("move of %s (%s, %d workers, started %s) for %s (%s): not allowed", pe.Victim, v.Class, len(v.Placement), v.StartedAt, pe.Preemptor.Job, pe.Preemptor.Class)
			}
			movesChecked++
			continue
		}
		if v.Class >= pe.Preemptor.Class {
			t.Fatalf("preemption of %s (%s %s) by %s (%s): not allowed", pe.Victim, v.Class, v.Kind, pe.Preemptor.Job, pe.Preemptor.Class)
		}
		// With Backfill, a job past its RunLimit may be preempted by the request whose reserved
		// node it holds whatever MinRuntimeBeforePreemption and MaxLossGPUHours say.
		overran := false
		if rj := p.running[pe.Victim]; p.policy.Backfill && rj != nil && rj.r.RunLimit > 0 && now.Sub(v.StartedAt) >= rj.r.RunLimit {
			overran = true
		}
		// With StarvationAfter, so may the first request of its class once it has been so for
		// that long.
		hd := heads[pe.Preemptor.Class]
		starved := p.policy.StarvationAfter > 0 && hd.job == pe.Preemptor.Job && now.Sub(hd.since) >= p.policy.StarvationAfter
		tooYoung := now.Sub(v.StartedAt) < p.policy.MinRuntimeBeforePreemption
		if m := p.policy.MaxPreemptionsInEffect(); m >= 0 && v.Preemptions >= m && !(starved && v.Preemptions == m) {
			t.Fatalf("preemption of %s, already preempted %d times (max_preemptions %d)", pe.Victim, v.Preemptions, m)
		}
		// The work at stake, recomputed from what the pool shows: none for a job that saves on
		// its notice, else its GPUs × the time since its start or last checkpoint.
		tooCostly := false
		if l := p.policy.MaxLossGPUHoursInEffect(); l >= 0 && !(v.HonorsNotice && p.policy.PreemptionNotice > 0) {
			from := v.StartedAt
			if v.CheckpointAt.After(from) {
				from = v.CheckpointAt
			}
			gpus := v.GPUs - len(v.Released)*(v.GPUs/len(v.Placement))
			tooCostly = time.Duration(gpus)*now.Sub(from) > time.Duration(l)*time.Hour+time.Duration(gpus)*time.Second
		}
		switch {
		case (tooYoung || tooCostly) && !overran && !starved:
			t.Fatalf("preemption of %s after %s, too young (min_runtime_before_preemption %s) or losing more than max_loss_gpu_hours %d (%t, %t)",
				pe.Victim, now.Sub(v.StartedAt), p.policy.MinRuntimeBeforePreemption, p.policy.MaxLossGPUHoursInEffect(), tooYoung, tooCostly)
		case (tooYoung || tooCostly) && starved:
			starvedPreemptions++
		}
		if pe.Reason == "" {
			t.Fatalf("preemption without reason")
		}
		onLive := false
		by := waiting[pe.Preemptor.Job]
		for _, w := range v.Placement {
			if !slices.Contains(v.Released, w.Worker) && !p.nodes[p.nodeIdx[w.Node]].lost &&
				(len(by.Nodes) == 0 || slices.Contains(by.Nodes, w.Node)) {
				onLive = true
			}
		}
		if !onLive {
			t.Fatalf("preemption of %s, which holds nothing on a node that answers and that %s may use (%v)", pe.Victim, by.Job, by.Nodes)
		}
	}
	checkInvariants(t, p)
	return d
}

// checkInvariants recomputes node usage from the jobs and checks the queue and explanations.
func checkInvariants(t testing.TB, p *Pool) {
	t.Helper()
	used := make([]uint64, len(p.nodes))
	held := make([][3]int, len(p.nodes))
	rel := make([][3]int, len(p.nodes))
	for _, j := range p.RunningJobs() {
		rj := p.running[j]
		if rj.nReleased >= len(rj.nodes) || (rj.nReleased > 0 && !rj.releasing) {
			t.Fatalf("job %s: bad release state", j)
		}
		if rj.saves != (rj.r.HonorsNotice && p.policy.PreemptionNotice > 0) {
			t.Fatalf("job %s: saves on its notice %v, but honours %v under notice %s", j, rj.saves, rj.r.HonorsNotice, p.policy.PreemptionNotice)
		}
		// A gang that requires a topology level runs in one domain of it (no test relabels the
		// nodes under such a gang).
		if level, required := p.gangLevel(&rj.r); required {
			for _, n := range rj.nodes {
				if dom := p.topo.domain[level]; dom[n] != dom[rj.nodes[0]] {
					t.Fatalf("job %s requires one %s, but runs on %s and %s", j, p.topo.levels[level], p.nodes[rj.nodes[0]].Name, p.nodes[n].Name)
				}
			}
		}
		d := rj.r.Demand
		for w, n := range rj.nodes {
			if rj.released[w] {
				continue
			}
			if used[n]&rj.gpus[w] != 0 {
				t.Fatalf("GPU held twice on %s", p.nodes[n].Name)
			}
			used[n] |= rj.gpus[w]
			held[n][0] += d.GPUs
			held[n][1] += d.CPU
			held[n][2] += d.RAMGB
			if rj.releasing {
				rel[n][0] += d.GPUs
				rel[n][1] += d.CPU
				rel[n][2] += d.RAMGB
			}
		}
	}
	checkFairShareHeld(t, p)
	for i := range p.nodes {
		nd := &p.nodes[i]
		if nd.used != used[i] || bits.OnesCount64(used[i]) != held[i][0] || used[i]>>uint(nd.GPUs) != 0 {
			t.Fatalf("node %s: GPU mask %b, want %b", nd.Name, nd.used, used[i])
		}
		if nd.free.gpu != nd.GPUs-held[i][0] || nd.free.cpu != nd.CPU-held[i][1] || nd.free.ram != nd.RAMGB-held[i][2] {
			t.Fatalf("node %s: free %d/%d/%d, held %v", nd.Name, nd.free.gpu, nd.free.cpu, nd.free.ram, held[i])
		}
		if nd.free.gpu < 0 || nd.free.cpu < 0 || nd.free.ram < 0 {
			t.Fatalf("node %s overcommitted", nd.Name)
		}
		if [3]int{nd.rel.gpu, nd.rel.cpu, nd.rel.ram} != rel[i] {
			t.Fatalf("node %s: releasing %d, want %v", nd.Name, nd.rel.gpu, rel[i])
		}
	}
	if len(p.waitIdx) != len(p.waiting) || len(p.waitKeys) != len(p.waiting) {
		t.Fatalf("waiting index has %d entries, queue %d", len(p.waitIdx), len(p.waiting))
	}
	waitingIn := make([]perClass, len(p.wsNames))
	for _, w := range p.waiting {
		if w.ws != noWorkspace {
			waitingIn[w.ws][w.r.Class]++
		}
	}
	if !slices.Equal(waitingIn, p.wsWaiting) {
		t.Fatalf("waiting per workspace %v, counted %v", p.wsWaiting, waitingIn)
	}
	for i, w := range p.waiting {
		if p.waitIdx[w.r.Job] != w || (i > 0 && !p.before(p.waiting[i-1], w)) {
			t.Fatalf("waiting queue out of order at %d", i)
		}
		if h := p.waitKeys[i]; h.prev != (p.running[w.r.Job] != nil) || h.shape != w.shape || h.class != w.r.Class {
			t.Fatalf("waiting %s: stale previous-attempt flag", w.r.Job)
		}
		if w.r.Kind == KindNotebook && w.r.Class != High {
			t.Fatalf("notebook %s is not high", w.r.Job)
		}
	}
	checkPreemptibleCounts(t, p)
	// Lost nodes: the families place only on the others, and no plan reserves anything on them.
	var lost []string
	for f := range p.fams {
		var live []int32
		for _, n := range p.fams[f].nodes {
			if !p.nodes[n].lost {
				live = append(live, n)
			}
		}
		if !slices.Equal(live, p.fams[f].live) {
			t.Fatalf("family %s: live nodes %v, want %v", p.fams[f].name, p.fams[f].live, live)
		}
	}
	for i := range p.nodes {
		if p.nodes[i].lost {
			lost = append(lost, p.nodes[i].Name)
		}
	}
	if !slices.Equal(p.LostNodes(), lost) {
		t.Fatalf("LostNodes %v, want %v", p.LostNodes(), lost)
	}
	pl := p.plan(p.lastNow, newScratch(), span{from: 0, to: len(p.waiting)}, -1)
	for i, o := range pl.outs {
		r := &p.waiting[i].r
		for _, n := range o.nodes {
			if p.nodes[n].lost {
				t.Fatalf("%s: the pass reserves capacity on lost node %s", r.Job, p.nodes[n].Name)
			}
			if len(r.Nodes) > 0 && !slices.Contains(r.Nodes, p.nodes[n].Name) {
				t.Fatalf("%s: the pass takes capacity on %s, outside its allowed nodes %v", r.Job, p.nodes[n].Name, r.Nodes)
			}
		}
	}
	for i, w := range p.waiting { // the shape's allowed nodes are the request's (outside a mover's domain)
		sh := &p.shapes[w.shape]
		if p.waitKeys[i].shape != w.shape {
			t.Fatalf("%s: its queue key has shape %d, the request %d", w.r.Job, p.waitKeys[i].shape, w.shape)
		}
		allowed, kept := w.r.Nodes, false
		if m, ok := p.keptOut(&w.r); ok {
			allowed, kept = p.outsideDomain(w.r.Nodes, m), true
		}
		var want []int32
		for _, n := range p.fams[sh.fam].live {
			if slices.Contains(allowed, p.nodes[n].Name) || len(allowed) == 0 && !kept {
				want = append(want, n)
			}
		}
		if got := p.placeable(sh); !slices.Equal(got, want) {
			t.Fatalf("%s: placeable nodes %v, want %v (allowed %v)", w.r.Job, got, want, allowed)
		}
	}
	v := p.View()
	for i, ni := range v.Nodes {
		if ni.Lost != p.nodes[i].lost {
			t.Fatalf("view of node %s: lost %v", ni.Name, ni.Lost)
		}
	}
	if len(v.Waiting) != len(p.waiting) {
		t.Fatalf("view has %d waiting, want %d", len(v.Waiting), len(p.waiting))
	}
	for i, wi := range v.Waiting {
		if wi.Position != i+1 || wi.Job != p.waiting[i].r.Job || strings.TrimSpace(wi.Reason) == "" {
			t.Fatalf("bad waiting info %+v", wi)
		}
	}
	checkPages(t, p, v)
}

// checkPages checks that every page of the queue, and every job's explanation, says what the
// whole view says.
func checkPages(t testing.TB, p *Pool, v View) {
	t.Helper()
	n := len(v.Waiting)
	for _, pg := range [][2]int{{0, 1}, {0, 2}, {1, 2}, {n / 2, 3}, {n - 1, 5}, {n, 1}, {n + 3, 2}, {0, 0}} {
		got := p.ViewPage(pg[0], pg[1])
		from := min(max(pg[0], 0), n)
		want := v.Waiting[from:min(from+pg[1], n)]
		if a, b := mustJSON(t, got.Waiting), mustJSON(t, want); a != b {
			t.Fatalf("page offset %d limit %d:\n%s\nwant\n%s", pg[0], pg[1], a, b)
		}
		if a, b := mustJSON(t, got.Nodes), mustJSON(t, v.Nodes); a != b {
			t.Fatalf("page offset %d limit %d: nodes\n%s\nwant\n%s", pg[0], pg[1], a, b)
		}
	}
	// Filtered pages list what the whole view lists for the requests they keep, explained alike.
	for _, f := range []struct {
		name string
		keep func(*Request) bool
	}{
		{"high", func(r *Request) bool { return r.Class == High }},
		{"every other", func(r *Request) bool { return r.Seq%2 == 0 }},
	} {
		want := []WaitingInfo{}
		for i, wi := range v.Waiting {
			if f.keep(&p.waiting[i].r) {
				want = append(want, wi)
			}
		}
		for _, pg := range [][2]int{{0, n}, {1, 2}, {len(want) - 1, 3}, {len(want) + 1, 1}} {
			got, matched := p.ViewPageWhere(pg[0], pg[1], f.keep)
			from := min(max(pg[0], 0), len(want))
			if a, b := mustJSON(t, got.Waiting), mustJSON(t, want[from:min(from+pg[1], len(want))]); matched != len(want) || a != b {
				t.Fatalf("%s page offset %d limit %d (%d matched, want %d):\n%s\nwant\n%s", f.name, pg[0], pg[1], matched, len(want), a, b)
			}
			if a, b := mustJSON(t, got.Nodes), mustJSON(t, v.Nodes); a != b {
				t.Fatalf("%s page offset %d limit %d: nodes\n%s\nwant\n%s", f.name, pg[0], pg[1], a, b)
			}
		}
	}
	for _, wi := range v.Waiting {
		if ex, ok := p.Explain(wi.Job); !ok || mustJSON(t, ex) != mustJSON(t, wi) {
			t.Fatalf("Explain(%s) = %+v, differs from the view's %+v", wi.Job, ex, wi)
		}
	}
}

// rjOverran reports whether running job name has run for its RunLimit or longer at now.
func rjOverran(p *Pool, name string, now time.Time) bool {
	rj := p.running[name]
	return rj != nil && rj.r.RunLimit > 0 && now.Sub(rj.startedAt) >= rj.r.RunLimit
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func roundTrip(t testing.TB, p *Pool) *Pool {
	t.Helper()
	b, err := json.Marshal(p.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	q, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(t, q.Snapshot()); got != string(b) {
		t.Fatalf("snapshot does not round-trip:\n%s\n%s", b, got)
	}
	return q
}

func grantNodes(g Grant) []string {
	var out []string
	for _, pl := range g.Placement {
		out = append(out, pl.Node)
	}
	return out
}

func grantedJobs(d Decisions) []string {
	var out []string
	for _, g := range d.Grants {
		out = append(out, g.Job)
	}
	return out
}

func victims(d Decisions) []string {
	var out []string
	for _, pe := range d.Preemptions {
		out = append(out, pe.Victim)
	}
	return out
}

// checkPreemptibleCounts recomputes Pool.nPreemptible.
func checkPreemptibleCounts(t testing.TB, p *Pool) {
	t.Helper()
	want := make([]perClass, len(p.fams))
	for _, rj := range p.running {
		if !rj.releasing && rj.r.Kind != KindNotebook {
			want[rj.fam][rj.r.Class]++
		}
	}
	if !slices.Equal(want, p.nPreemptible) {
		t.Fatalf("preemptible counts %v, want %v", p.nPreemptible, want)
	}
}

// checkFreeBuckets: after a pass, every live node is in the bucket of its family and free GPUs,
// once, with its free CPU and RAM of the pass; lost nodes are in none.
func checkFreeBuckets(t testing.TB, sc *scratch, p *Pool) {
	t.Helper()
	if len(sc.freeBuckets) == 0 {
		return // no pass ran yet
	}
	seen := make([]int, len(p.nodes))
	for f := range sc.freeBuckets {
		for g, b := range sc.freeBuckets[f] {
			for i, sl := range b {
				n := sl.n
				seen[n]++
				if p.nodes[n].fam != int32(f) || sc.free[n].gpu != g || int(sc.slotOf[n]) != i || sl.cpu != sc.free[n].cpu || sl.ram != sc.free[n].ram {
					t.Fatalf("node %s in bucket %d/%d at %d: %+v, pass state GPU %d CPU %d RAM %d slot %d",
						p.nodes[n].Name, f, g, i, sl, sc.free[n].gpu, sc.free[n].cpu, sc.free[n].ram, sc.slotOf[n])
				}
			}
		}
	}
	for n := range p.nodes {
		if want := map[bool]int{true: 0, false: 1}[p.nodes[n].lost]; seen[n] != want {
			t.Fatalf("node %s is in %d buckets, want %d", p.nodes[n].Name, seen[n], want)
		}
	}
}

// checkSyncedCapacity: the start of a pass on the copies kept from the last pass (restoring only
// the changed nodes) equals a full rebuild: capacity, summaries, bucket membership, releasing
// capacity in sight. It runs the extra reset on the pool's own scratch, as the pass will.
func checkSyncedCapacity(t testing.TB, p *Pool) {
	t.Helper()
	if !p.sc.synced {
		return
	}
	kept, full := p.sc, newScratch()
	kept.reset(p)
	full.reset(p)
	for n := range p.nodes {
		k := [3]resources{kept.free[n], kept.rel[n], kept.victim[n]}
		f := [3]resources{full.free[n], full.rel[n], full.victim[n]}
		if k != f || kept.hasRel[n] != full.hasRel[n] {
			t.Fatalf("node %s: kept copy %v (releasing in sight %v), full rebuild %v (%v)", p.nodes[n].Name, k, kept.hasRel[n], f, full.hasRel[n])
		}
	}
	for f := range p.fams {
		if !slices.Equal(kept.freeAtLeast[f], full.freeAtLeast[f]) || !slices.Equal(kept.freeOrRelAtLeast[f], full.freeOrRelAtLeast[f]) ||
			kept.relNodes[f] != full.relNodes[f] || kept.relVisible[f] != full.relVisible[f] {
			t.Fatalf("family %s: kept summaries %v %v %d, full rebuild %v %v %d", p.fams[f].name,
				kept.freeAtLeast[f], kept.freeOrRelAtLeast[f], kept.relNodes[f], full.freeAtLeast[f], full.freeOrRelAtLeast[f], full.relNodes[f])
		}
		for g := range full.freeBuckets[f] {
			a, b := bucketNodes(kept.freeBuckets[f][g]), bucketNodes(full.freeBuckets[f][g])
			if !slices.Equal(a, b) {
				t.Fatalf("family %s, %d free GPUs: kept bucket %v, full rebuild %v", p.fams[f].name, g, a, b)
			}
		}
	}
	checkFreeBuckets(t, kept, p)
}

// bucketNodes is a bucket's nodes, sorted (the order within a bucket decides nothing).
func bucketNodes(b []freeSlot) []int32 {
	out := make([]int32, len(b))
	for i, sl := range b {
		out[i] = sl.n
	}
	slices.Sort(out)
	return out
}

// sortedCandidates is node n's candidates as the victim search listed them before the order
// was kept (victimList): every preemptible job and takeable nomination, sorted by cmpVictimCand.
func sortedCandidates(p *Pool, sc *scratch, now time.Time, n int32, cl Class) []victimCand {
	var out []victimCand
	for _, k := range sc.byNode[n] {
		x := &sc.nominations[k]
		if x.class < cl && x.hidden.positive() {
			out = append(out, victimCand{ref: victimRef{nom: k}, key: victimKey{class: x.class}, take: true, seq: x.seq, amt: x.hidden})
		}
	}
	for _, nj := range p.nodes[n].jobs {
		if p.preemptible(nj.rj, cl, now, sc) {
			out = append(out, victimCandOf(nj.rj, keyOf(nj.rj, now)))
		}
	}
	slices.SortFunc(out, cmpVictimCand)
	return out
}

// checkVictimOrder: on every node, for requests of each class, the candidates merged from the
// kept victim lists are exactly the sorted candidates, and every list is in order.
func checkVictimOrder(t testing.TB, p *Pool, now time.Time) {
	t.Helper()
	sc := newScratch()
	sc.reset(p)
	for n := range p.nodes {
		l := p.nodes[n].victimList
		if !slices.IsSortedFunc(l, cmpListed) {
			t.Fatalf("node %s: victim list out of order", p.nodes[n].Name)
		}
		for _, lv := range l {
			if lv != listedOf(lv.rj) {
				t.Fatalf("node %s: %s is listed as %+v, but is %+v now", p.nodes[n].Name, lv.rj.r.Job, lv, listedOf(lv.rj))
			}
		}
		for _, cl := range []Class{Medium, High} {
			want := sortedCandidates(p, sc, now, int32(n), cl)
			got := slices.Clone(p.candidates(now, sc, int32(n), cl))
			if !slices.EqualFunc(got, want, func(a, b victimCand) bool { return a.ref == b.ref && a.key == b.key && a.amt == b.amt }) {
				t.Fatalf("node %s, class %s: kept order %s, sorted %s", p.nodes[n].Name, cl, candNames(sc, got), candNames(sc, want))
			}
		}
	}
}

func candNames(sc *scratch, cs []victimCand) string {
	var b strings.Builder
	for _, c := range cs {
		if c.ref.rj != nil {
			fmt.Fprintf(&b, "%s(%d GPUs, %s) ", c.ref.rj.r.Job, c.key.gpus, c.key.lost)
		} else {
			fmt.Fprintf(&b, "takeover-of-%s ", sc.nominations[c.ref.nom].by)
		}
	}
	return b.String()
}

// checkCaps checks that no grant of a pass takes a workspace over its cap in the class
// (Policy.Limits): after the pass, what it holds there is within the cap.
func checkCaps(t testing.TB, p *Pool, d Decisions, waiting map[string]Request) {
	t.Helper()
	if len(p.policy.Limits) == 0 {
		return
	}
	type wc struct {
		ws string
		c  Class
	}
	held := map[wc]int{}
	for _, rj := range p.running {
		for w := range rj.nodes {
			if !rj.released[w] {
				held[wc{rj.r.Workspace, rj.r.Class}] += rj.r.Demand.GPUs
			}
		}
	}
	for _, g := range d.Grants {
		r := waiting[g.Job]
		if r.Workspace == "" {
			continue
		}
		k := wc{r.Workspace, r.Class}
		if limit := p.capOf(p.wsIdx[r.Workspace], r.Class); limit >= 0 && held[k] > limit {
			t.Fatalf("grant %s takes %s to %d %s GPUs, over its cap of %d", g.Job, r.Workspace, held[k], r.Class, limit)
		}
	}
	// The pool's count of what each workspace holds is the one recomputed here.
	for name, i := range p.wsIdx {
		for c := Low; c <= High; c++ {
			if got, want := p.wsHeld[i][c], held[wc{name, c}]; got != want {
				t.Fatalf("the pool counts %d %s GPUs held by %s, the jobs hold %d", got, c, name, want)
			}
		}
	}
}

// checkFairShareHeld checks that each fair-share account holds what its running jobs hold.
func checkFairShareHeld(t testing.TB, p *Pool) {
	t.Helper()
	if !p.fs.on {
		return
	}
	ws, users := make([]int, len(p.fs.ws)), make([]int, len(p.fs.users))
	//workflowcheck:ignore
	for _, rj := range p.running {
		for w := range rj.nodes {
			if !rj.released[w] {
				ws[rj.ws+1] += rj.r.Demand.GPUs
				users[rj.user] += rj.r.Demand.GPUs
			}
		}
	}
	for i := range ws {
		if p.fs.ws[i].held != ws[i] {
			t.Fatalf("fair share: workspace account %d holds %d GPUs, its jobs %d", i, p.fs.ws[i].held, ws[i])
		}
	}
	for i := range users {
		if p.fs.users[i].held != users[i] {
			t.Fatalf("fair share: user account %v holds %d GPUs, its jobs %d", p.fs.userNames[i], p.fs.users[i].held, users[i])
		}
	}
}
