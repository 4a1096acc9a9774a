package scheduler

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) next() int {
	if r.i >= len(r.b) {
		r.i++
		return 0
	}
	r.i++
	return int(r.b[r.i-1])
}

var layouts = [][]Node{
	nodesOf("a", "a", 4, 4, 32, 256),
	append(nodesOf("a", "a", 3, 8, 64, 512), nodesOf("b", "b", 2, 2, 16, 64)...),
	{{Name: "x1", Family: "a", GPUs: 2, CPU: 8, RAMGB: 64}, {Name: "x2", Family: "a", GPUs: 4, CPU: 16, RAMGB: 128},
		{Name: "x3", Family: "a", GPUs: 8, CPU: 32, RAMGB: 256}, {Name: "x4", Family: "a", GPUs: 8, CPU: 8, RAMGB: 64},
		{Name: "c1", Family: "cpu", CPU: 16, RAMGB: 64}, {Name: "c2", Family: "cpu", CPU: 32, RAMGB: 128}},
	// One-GPU nodes that differ in CPU and RAM: best fit and nominations disagree (the issue's
	// case of a second pass preempting again).
	{{Name: "A", Family: "a", GPUs: 1, CPU: 16, RAMGB: 8}, {Name: "B", Family: "a", GPUs: 1, CPU: 8, RAMGB: 64},
		{Name: "C", Family: "a", GPUs: 1, CPU: 8, RAMGB: 64}, {Name: "D", Family: "a", GPUs: 2, CPU: 8, RAMGB: 64}},
}

// simulateWith decodes data into a sequence of events, applies them to a pool, and returns the log of
// everything the pool decided. With check, it also checks invariants after every step and keeps a
// Snapshot/Restore copy in lockstep that must decide identically.
// With backfill, the policy backfills (Policy.Backfill, with
// ReserveAfter on) and most requests carry a RunLimit of a few minutes, read from no byte (so
// that the streams stay as they were).
func simulateWith(t testing.TB, data []byte, check, backfill bool) []string {
	r := &byteReader{b: data}
	cfg := r.next()
	pol := Policy{Backfill: backfill}
	if cfg&1 != 0 {
		pol.Queueing = StrictFIFO
	}
	if cfg&2 != 0 {
		pol.MinRuntimeBeforePreemption = 3 * time.Minute
	}
	if cfg&128 != 0 || backfill {
		pol.ReserveAfter = 4 * time.Minute
	}
	if cfg&16 != 0 {
		pol.PreemptionNotice = 2 * time.Minute
	}
	if cfg&32 != 0 {
		pol.Limits = []Limit{{Class: High, MaxGPUs: 6}, {Class: Medium, MaxGPUs: 8}, {Workspace: "w1", Class: Low, MaxGPUs: 3}, {Workspace: "w2", Class: High, MaxGPUs: 12}}
	}
	if cfg&64 != 0 {
		pol.Ordering, pol.FairShareHalfLife = FairShare, 10*time.Minute
	}
	// A third of the streams bound starvation (read from no byte, so that the streams stay as
	// they were), with limits that protect victims within a stream's hours: a loss limit of one
	// GPU-hour and 20 minutes of run time.
	if len(data)%3 == 0 {
		pol.StarvationAfter, pol.MaxLossGPUHours, pol.MinRuntimeBeforePreemption = 2*time.Minute, 1, 20*time.Minute
	}
	nodes := slices.Clone(layouts[(cfg>>2)%len(layouts)])
	// A fifth of the streams put the nodes in two racks, and their gangs require a rack (or, in
	// every other such stream, prefer one), read from no byte.
	racks := len(data)%5 == 1
	if racks {
		pol.Topology = []string{"rack"}
		pol.GangTopology = GangTopology{Level: "rack", Required: len(data)%10 == 1}
		for i := range nodes {
			nodes[i].Topology = map[string]string{"rack": fmt.Sprint("r", i%2)}
		}
	}
	p := mustPool(t, nodes, pol)
	var q *Pool
	if check {
		q = roundTrip(t, p)
	}
	fams := []string{}
	for _, n := range nodes {
		if !slices.Contains(fams, n.Family) {
			fams = append(fams, n.Family)
		}
	}
	var log []string
	now := t0
	seqs := map[string]int64{}
	attempts := map[string]int{}
	for step := 0; r.i < len(r.b) && step < 300; step++ {
		op := r.next() % 13
		var ev func(x *Pool) string
		reconfigured := false
		switch op {
		case 0, 1, 2:
			name := fmt.Sprintf("j%d", r.next()%12)
			if _, ok := seqs[name]; !ok {
				seqs[name] = int64(len(seqs))
			}
			if r.next()%3 == 0 {
				attempts[name]++
			}
			fam := fams[r.next()%len(fams)]
			req := Request{Job: name, Attempt: attempts[name], Kind: KindJob, Class: Class(r.next() % 3),
				Demand: Demand{Family: fam, GPUs: 1 + r.next()%4}, Workers: 1 + r.next()%3, Seq: seqs[name], SubmittedAt: now}
			// Some jobs honour their notices (read from no byte, so that the streams stay as they were).
			req.HonorsNotice = (seqs[name]+int64(attempts[name]))%3 == 1
			req.Workspace = fmt.Sprintf("w%d", seqs[name]%3) // (from no byte either)
			req.User = fmt.Sprintf("u%d", seqs[name]%5%2)
			// Some gangs are elastic (read from no byte either).
			if req.Workers > 1 && (seqs[name]+int64(attempts[name]))%4 == 2 {
				req.MinWorkers = 1 + int(seqs[name])%(req.Workers-1)
			}
			if fam == "cpu" {
				req.Demand.GPUs = 0
				req.Demand.CPU = 1 + r.next()%32
				req.Demand.RAMGB = 4 * (r.next() % 16)
			} else if k := r.next() % 8; k == 0 {
				req.Demand.CPU = r.next() % 33
			} else if k == 1 {
				req.Demand.GPUs *= 2
			} else if k == 2 {
				req.Demand.GPUs = 1
				req.Demand.CPU, req.Demand.RAMGB = r.next()%9, 8*(r.next()%9)
			}
			if r.next()%8 == 0 {
				req.Kind = KindNotebook
			}
			req.Nodes = allowedNodes(nodes, seqs[name], attempts[name], step)
			if racks && seqs[name]%3 == 2 { // its own preference beats the default (from no byte)
				req.Topology = GangTopology{Level: "rack"}
			}
			if backfill { // 0 (none) to 9 minutes, from no byte either
				req.RunLimit = time.Duration((seqs[name]*7+int64(attempts[name])*3+int64(step))%10) * time.Minute
				req.RunEstimated = seqs[name]%3 == 0 // some are estimates, which jobs overrun
			}
			ev = func(x *Pool) string { return fmt.Sprintf("enqueue %s/%d: %v", name, req.Attempt, x.Enqueue(req)) }
		case 3, 4, 5:
			now = now.Add(time.Duration(r.next()%4) * time.Minute)
			at := now
			ev = func(x *Pool) string {
				var d Decisions
				if check && x == p {
					checkScheduleAtMost(t, x, at)
					d = sched(t, x, at)
					if len(x.sc.resvs) > 0 {
						backfillPasses++
					}
				} else {
					d = x.Schedule(at)
				}
				return mustJSON(t, d)
			}
		case 6, 7:
			jobs := p.RunningJobs()
			if len(jobs) == 0 {
				continue
			}
			j := jobs[r.next()%len(jobs)]
			ri, _ := p.Running(j)
			w, begin := r.next()%len(ri.Placement), op == 7
			ev = func(x *Pool) string {
				if begin {
					return fmt.Sprintf("begin %s: %v", j, x.BeginRelease(j))
				}
				return fmt.Sprintf("release %s/%d/%d: %v", j, ri.Attempt, w, x.Release(j, ri.Attempt, w))
			}
		case 8:
			name := fmt.Sprintf("j%d", r.next()%12)
			ev = func(x *Pool) string { return fmt.Sprintf("cancel %s: %v", name, x.Cancel(name)) }
		case 9:
			now = now.Add(time.Duration(r.next()%10) * time.Minute)
			jobs := p.RunningJobs()
			if len(jobs) == 0 || r.next()%2 == 0 {
				continue
			}
			// A running job reports a checkpoint, up to 750ms ago (sub-second ties in the victim order).
			j, at := jobs[r.next()%len(jobs)], now.Add(-time.Duration(r.next()%4)*250*time.Millisecond)
			ri, _ := p.Running(j)
			done := float64(step%10+1) / 10 // and its progress, from no byte
			ev = func(x *Pool) string {
				return fmt.Sprintf("checkpoint %s/%d at %s: %v, progress %v", j, ri.Attempt, at.Format(time.StampMilli),
					x.Checkpointed(j, ri.Attempt, at), x.Progressed(j, ri.Attempt, at, done))
			}
		case 11:
			// A node's agent stops answering, or answers again.
			name := nodes[r.next()%len(nodes)].Name
			ev = func(x *Pool) string {
				if x.MarkNodeLost(name) {
					return "lost " + name
				}
				return fmt.Sprintf("up %s: %v", name, x.MarkNodeUp(name))
			}
		case 12:
			// The allocator loses its state and rebuilds it from the jobs: every job holding
			// capacity is adopted, every waiting request enqueued again.
			adoptFirst := r.next()%2 == 0
			ev = func(x *Pool) string {
				y := rebuilt(t, x, adoptFirst)
				if check && x == p {
					sameHoldings(t, x, y)
				}
				y.lastNow = x.lastNow
				*x = *y
				return fmt.Sprintf("rebuilt from %d jobs holding capacity", len(x.running))
			}
		case 10:
			// Reconfigure: add a node, remove one (refused while it is in use), or flip the queueing.
			next, npol := slices.Clone(nodes), pol
			switch k := r.next() % 4; {
			case k <= 1 && len(next) < 12:
				fam := fams[r.next()%len(fams)]
				n := Node{Name: fmt.Sprintf("r%d", step), Family: fam, GPUs: 2 << (r.next() % 3), CPU: 32, RAMGB: 256}
				if fam == "cpu" {
					n.GPUs = 0
				}
				if racks {
					n.Topology = map[string]string{"rack": fmt.Sprint("r", step%2)}
				}
				next = slices.Insert(next, r.next()%(len(next)+1), n)
			case k == 2 && len(next) > 1:
				i := r.next() % len(next)
				next = slices.Delete(next, i, i+1)
			default:
				if npol.Queueing == StrictFIFO {
					npol.Queueing = BestEffortFIFO
				} else {
					npol.Queueing = StrictFIFO
				}
				if step%2 == 1 { // and the notice comes or goes
					npol.PreemptionNotice = 2*time.Minute - npol.PreemptionNotice
				}
				if step%5 == 4 { // and the starvation bound comes or goes
					npol.StarvationAfter = 2*time.Minute - npol.StarvationAfter
				}
				if step%3 == 2 { // and fair share comes or goes
					if npol.Ordering == FairShare {
						npol.Ordering = ""
					} else {
						npol.Ordering, npol.FairShareHalfLife = FairShare, 10*time.Minute
					}
				}
			}
			reconfigured = true
			ev = func(x *Pool) string {
				unfit, err := x.Reconfigure(next, npol)
				if err == nil && x == p {
					nodes, pol = next, npol
				}
				return fmt.Sprintf("reconfigure %d nodes %s notice %s: %v %v", len(next), npol.Queueing, npol.PreemptionNotice, unfit, err)
			}
		}
		out := ev(p)
		log = append(log, out)
		if check {
			if out2 := ev(q); out2 != out {
				t.Fatalf("step %d: restored copy diverged:\n%s\n%s", step, out, out2)
			}
			checkInvariants(t, p)
			if reconfigured {
				for _, w := range p.waiting {
					if err := p.Admit(w.r); err != nil {
						t.Fatalf("step %d: %s waits but can never fit: %v", step, w.r.Job, err)
					}
				}
			}
			if step%5 == 0 || reconfigured {
				q = roundTrip(t, p)
				if a, b := mustJSON(t, p.View()), mustJSON(t, q.View()); a != b {
					t.Fatalf("step %d: restored view differs", step)
				}
			}
		}
	}
	return log
}

// allowedNodes holds about one request in three to some nodes (read from no byte, so that the
// streams stay as they were): a subset of the pool's nodes drawn from the job's sequence, attempt
// and step, at times with a node of another family, rarely with a node the pool does not have
// (Admit refuses it) or a list too short for the request.
func allowedNodes(nodes []Node, seq int64, attempt, step int) []string {
	h := uint64(seq)*0x9e3779b97f4a7c15 + uint64(attempt)*0xbf58476d1ce4e5b9 + uint64(step)*0x94d049bb133111eb
	h ^= h >> 29
	if h%3 != 0 {
		return nil
	}
	var out []string
	for i, n := range nodes {
		if h>>(8+i%48)&1 == 1 {
			out = append(out, n.Name)
		}
	}
	if h>>60 == 0 {
		out = append(out, "gone")
	}
	return out
}

func checkReplay(t *testing.T, data []byte) { checkReplayWith(t, data, false) }

func checkReplayWith(t *testing.T, data []byte, backfill bool) {
	a := simulateWith(t, data, true, backfill)
	b := simulateWith(t, data, false, backfill)
	if !slices.Equal(a, b) {
		t.Fatalf("replay of the same events decided differently")
	}
}

// TestPropertyRandomEventsBackfill is TestPropertyRandomEvents with Policy.Backfill on and run
// limits on the requests: no node over-allocated, every invariant after every step, and a
// snapshot/restore copy that decides identically.
func TestPropertyRandomEventsBackfill(t *testing.T) {
	rng := rand.New(rand.NewPCG(20250922, 7))
	n := 400
	if testing.Short() {
		n = 50
	}
	if s := os.Getenv("TRAINQ_PROPERTY_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	backfillPasses = 0
	for i := 0; i < n; i++ {
		data := make([]byte, 20+rng.IntN(400))
		for k := range data {
			data[k] = byte(rng.UintN(256))
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkReplayWith(t, data, true) })
	}
	// The streams must exercise it: passes bound by a reservation with a known start.
	if backfillPasses < n/10 {
		t.Fatalf("only %d passes of %d streams had a reservation with a start", backfillPasses, n)
	}
	t.Logf("%d passes had a reservation with a start", backfillPasses)
}

// backfillPasses counts the checked passes of simulateWith that had a reservation with a start.
var backfillPasses int

func TestPropertyRandomEvents(t *testing.T) {
	seed := uint64(20250101)
	if s := os.Getenv("TRAINQ_PROPERTY_SEED"); s != "" { // another stream of random events
		v, _ := strconv.Atoi(s)
		seed += uint64(v)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	starvedPreemptions, movesChecked = 0, 0
	n := 400
	if testing.Short() {
		n = 50
	}
	if s := os.Getenv("TRAINQ_PROPERTY_N"); s != "" { // e.g. 20000 for a long run (a few minutes)
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < n; i++ {
		data := make([]byte, 20+rng.IntN(400))
		for k := range data {
			data[k] = byte(rng.UintN(256))
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkReplay(t, data) })
	}
	// The streams must exercise it: preemptions that only the starvation bound allowed.
	if n >= 400 && starvedPreemptions == 0 {
		t.Fatalf("no preemption of %d streams was one that only StarvationAfter allowed", n)
	}
	t.Logf("%d jobs were moved for gangs that require a rack", movesChecked)
	t.Logf("%d preemptions were allowed only by StarvationAfter", starvedPreemptions)
}

// movesChecked counts the moves (Preemption.Move) the checked passes decided.
var movesChecked int

// starvedPreemptions counts the checked preemptions that MinRuntimeBeforePreemption or
// MaxLossGPUHours would have forbidden but for StarvationAfter.
var starvedPreemptions int

func FuzzEvents(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 2, 0, 0, 9, 1, 2, 2, 2, 1, 4, 0, 0, 3, 3})
	f.Add([]byte{1, 0, 3, 1, 0, 0, 2, 0, 0, 7, 0, 2, 1, 2, 1, 2, 5, 0, 2, 2, 4, 0, 0, 2, 1})
	f.Add([]byte{6, 1, 2, 1, 2, 8, 3, 0, 1, 1, 5, 0, 1, 2, 4, 1, 2, 0, 0, 0, 3, 1, 6, 2, 2, 7, 9, 3, 3})
	f.Add([]byte{8, 0, 1, 2, 2, 4, 0, 9, 0, 4, 2, 2, 1, 1, 5, 3, 2, 2, 3, 0, 0, 6, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2000 {
			data = data[:2000]
		}
		checkReplay(t, data)
	})
}
