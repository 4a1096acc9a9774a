package scheduler

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// uuid4 returns a random (seeded) UUID v4 string.
func uuid4(rng *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

var benchTypes = []string{"a100plus.1gpu.80vG.12C.96G", "a100plus.2gpu.80vG.24C.192G", "a100plus.4gpu.80vG.48C.384G", "a100plus.8gpu.80vG.96C.768G"}

// benchPool builds 1000 a100plus nodes (8 GPUs) fully used by 2000 running jobs of 4 GPUs each,
// and nWaiting waiting requests. lowRunning makes the jobs on every other node low priority
// (the others are high); otherwise all running jobs are high, so nothing can be preempted.
func benchPool(tb testing.TB, nWaiting int, lowRunning bool, waitClass func(i int) Class) *Pool {
	rng := rand.New(rand.NewPCG(1, 2))
	p := mustPool(tb, nodesOf("node", "a100plus", 1000, 8, 96, 768), Policy{})
	d4, _ := ParseInstanceType(benchTypes[2])
	for k := 0; k < 2000; k++ {
		c := High
		if lowRunning && (k/2)%2 == 0 {
			c = Low
		}
		mustEnqueue(tb, p, Request{Job: fmt.Sprintf("run-%04d", k), Kind: KindJob, Class: c, Demand: d4, Workers: 1, Seq: int64(k), SubmittedAt: t0})
		if k%2 == 1 {
			if d := p.Schedule(t0); len(d.Grants) != 2 {
				tb.Fatalf("setup: %d grants", len(d.Grants))
			}
		}
	}
	for i := 0; i < nWaiting; i++ {
		d, _ := ParseInstanceType(benchTypes[rng.IntN(len(benchTypes))])
		mustEnqueue(tb, p, Request{Job: "lm-mpi-job-" + uuid4(rng), Attempt: rng.IntN(2), Kind: KindJob, Class: waitClass(i),
			Demand: d, Workers: 1 + rng.IntN(4), Seq: int64(10000 + i), SubmittedAt: t0.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))})
	}
	return p
}

func mixedClass(i int) Class { return Class(i % 3) }
func lowClass(int) Class     { return Low }

func BenchmarkSchedule(b *testing.B) {
	p := benchPool(b, 10000, false, mixedClass)
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := p.Schedule(now); len(d.Grants)+len(d.Preemptions) != 0 {
			b.Fatal("unexpected decisions")
		}
	}
}

func BenchmarkSchedulePreemption(b *testing.B) {
	base := benchPool(b, 10000, true, lowClass)
	d8, _ := ParseInstanceType(benchTypes[3])
	mustEnqueue(b, base, Request{Job: "urgent", Kind: KindJob, Class: High, Demand: d8, Workers: 2, Seq: 1, SubmittedAt: t0})
	snap := base.Snapshot()
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p, err := Restore(snap)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if d := p.Schedule(now); len(d.Preemptions) != 4 || len(d.Grants) != 0 {
			b.Fatalf("want 4 preemptions, got %+v", victims(d))
		}
	}
}

func BenchmarkScheduleWaiting(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			p := benchPool(b, n, false, mixedClass)
			now := t0.Add(time.Hour)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkView renders the whole state, every waiting request explained, at 10,000 and 50,000
// waiting (1,000 nodes, 2,000 running).
func BenchmarkView(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			p := benchPool(b, n, false, mixedClass)
			p.Schedule(t0.Add(time.Hour))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.View()
			}
		})
	}
}

// BenchmarkViewPage renders what the queue query answers by default: the first page of 100
// waiting requests (and one deep in the queue), with every node and running job, at 10,000 and
// 50,000 waiting.
func BenchmarkViewPage(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		for _, offset := range []int{0, n - 100} {
			b.Run(fmt.Sprintf("%dk/offset=%d", n/1000, offset), func(b *testing.B) {
				p := benchPool(b, n, false, mixedClass)
				p.Schedule(t0.Add(time.Hour))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if v := p.ViewPage(offset, 100); len(v.Waiting) != 100 {
						b.Fatalf("%d waiting listed", len(v.Waiting))
					}
				}
			})
		}
	}
}

// BenchmarkViewPageWhere is BenchmarkViewPage for the first page of 100 of one workspace's
// requests: one in 10 of the queue, so the page's requests span 1,000 of the whole queue.
func BenchmarkViewPageWhere(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			p := benchPool(b, n, false, mixedClass)
			p.Schedule(t0.Add(time.Hour))
			oneIn10 := func(r *Request) bool { return r.Seq%10 == 0 }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if v, matched := p.ViewPageWhere(0, 100, oneIn10); len(v.Waiting) != 100 || matched != n/10 {
					b.Fatalf("%d waiting listed, %d matched", len(v.Waiting), matched)
				}
			}
		})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	p := benchPool(b, 10000, false, mixedClass)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := json.Marshal(p.Snapshot()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRestore(b *testing.B) {
	p := benchPool(b, 10000, false, mixedClass)
	data, _ := json.Marshal(p.Snapshot())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var s Snapshot
		if err := json.Unmarshal(data, &s); err != nil {
			b.Fatal(err)
		}
		if _, err := Restore(s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSnapshotSize measures the serialised state with 10,000 waiting requests named
// lm-mpi-job-<uuid v4>, alone and with 1,000 nodes and 2,000 running jobs.
func TestSnapshotSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large pool")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	p := mustPool(t, nodesOf("node", "a100plus", 4, 8, 96, 768), Policy{})
	for i := 0; i < 10000; i++ {
		d, _ := ParseInstanceType(benchTypes[rng.IntN(len(benchTypes))])
		mustEnqueue(t, p, Request{Job: "lm-mpi-job-" + uuid4(rng), Attempt: rng.IntN(3), Kind: KindJob, Class: Class(rng.IntN(3)),
			Demand: d, Workers: 1 + rng.IntN(4), Seq: int64(1000000 + i), SubmittedAt: t0.Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))})
	}
	alone := len(mustJSON(t, p.Snapshot()))
	q := roundTrip(t, p)
	if mustJSON(t, q.View()) != mustJSON(t, p.View()) {
		t.Fatal("restored view differs")
	}
	full := len(mustJSON(t, benchPool(t, 10000, false, mixedClass).Snapshot()))
	t.Logf("snapshot JSON with 10,000 waiting: %d bytes; with 1,000 nodes and 2,000 running too: %d bytes", alone, full)
	if alone > 1500000 || full > 1500000 {
		t.Fatalf("snapshot too large: %d / %d bytes", alone, full)
	}
}

// BenchmarkScheduleBulkGrant: an empty 1000-node pool and 10,000 waiting 1-GPU requests; one pass
// grants 8,000 of them (worst case for placement scans).
func BenchmarkScheduleBulkGrant(b *testing.B) {
	p := mustPool(b, nodesOf("node", "a100plus", 1000, 8, 96, 768), Policy{})
	d1, _ := ParseInstanceType(benchTypes[0])
	for i := 0; i < 10000; i++ {
		mustEnqueue(b, p, Request{Job: fmt.Sprintf("j-%05d", i), Kind: KindJob, Class: Class(i % 3), Demand: d1, Workers: 1, Seq: int64(i)})
	}
	snap := p.Snapshot()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		q, _ := Restore(snap)
		b.StartTimer()
		if d := q.Schedule(t0); len(d.Grants) != 8000 {
			b.Fatalf("%d grants", len(d.Grants))
		}
	}
}

// traceDir is the Alibaba GPU v2023 openb trace ($TRAINQ_TRACE_DIR, else ../shared/traces beside
// the repository).
func traceDir() string {
	if d := os.Getenv("TRAINQ_TRACE_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "shared", "traces", "alibaba-gpu-v2023")
}

func readTraceCSV(tb testing.TB, name string) []map[string]string {
	f, err := os.Open(filepath.Join(traceDir(), name))
	if err != nil {
		tb.Skip("no openb trace:", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]map[string]string, 0, len(rows)-1)
	for _, r := range rows[1:] {
		m := map[string]string{}
		for i, h := range rows[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// tracePool is the whole openb trace at once: its 1,213 nodes, empty, and its 8,152 pods waiting
// as one-worker jobs (family gpu, CPU in milli-cores, RAM in MiB; a GPU share is one GPU), in
// the classes simulate gives them (LS high, Guaranteed and Burstable medium, BE low).
func tracePool(tb testing.TB) *Pool {
	var nodes []Node
	for _, r := range readTraceCSV(tb, "openb_node_list_gpu_node.csv") {
		g, _ := strconv.Atoi(r["gpu"])
		c, _ := strconv.Atoi(r["cpu_milli"])
		m, _ := strconv.Atoi(r["memory_mib"])
		nodes = append(nodes, Node{Name: r["sn"], Family: "gpu", GPUs: g, CPU: c, RAMGB: m})
	}
	p := mustPool(tb, nodes, Policy{ReserveAfter: 30 * time.Minute})
	classes := map[string]Class{"LS": High, "Guaranteed": Medium, "Burstable": Medium, "BE": Low}
	for i, r := range readTraceCSV(tb, "openb_pod_list_default.csv") {
		g, _ := strconv.Atoi(r["num_gpu"])
		c, _ := strconv.Atoi(r["cpu_milli"])
		m, _ := strconv.Atoi(r["memory_mib"])
		mustEnqueue(tb, p, Request{Job: r["name"], Kind: KindJob, Class: classes[r["qos"]], Demand: Demand{Family: "gpu", GPUs: g, CPU: c, RAMGB: m},
			Workers: 1, Seq: int64(i), SubmittedAt: t0})
	}
	return p
}

// BenchmarkScheduleTrace: one Schedule call with the whole trace waiting on its 1,213 empty
// nodes (the "one burst"); it grants what fits.
func BenchmarkScheduleTrace(b *testing.B) {
	snap := tracePool(b).Snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p, _ := Restore(snap)
		b.StartTimer()
		if d := p.Schedule(t0); len(d.Grants) == 0 {
			b.Fatal("no grants")
		}
	}
}

// BenchmarkScheduleTraceFull: the pass after the trace's burst, on the full pool, with the
// waiting pods that did not fit; it has an event to look at (a release), but nothing fits.
func BenchmarkScheduleTraceFull(b *testing.B) {
	p := tracePool(b)
	p.Schedule(t0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.dirty = true
		p.Schedule(t0.Add(time.Minute))
	}
}

// BenchmarkScheduleIdle: the trace's full pool with nothing new since the last pass.
func BenchmarkScheduleIdle(b *testing.B) {
	p := tracePool(b)
	p.Schedule(t0)
	p.Schedule(t0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Schedule(t0.Add(time.Minute))
	}
}

// BenchmarkScheduleWaitingFull is BenchmarkScheduleWaiting with an event before every pass, so
// that each pass runs in full (BenchmarkScheduleWaiting's passes have nothing new to look at).
func BenchmarkScheduleWaitingFull(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			p := benchPool(b, n, false, mixedClass)
			now := t0.Add(time.Hour)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.touch()
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkScheduleWaitingFullConstrained is BenchmarkScheduleWaitingFull/10k with a third of
// the waiting requests held to nodes (Request.Nodes): 32 nodes each, from 16 different sets, so
// that their shapes fail apart.
func BenchmarkScheduleWaitingFullConstrained(b *testing.B) {
	p := benchPool(b, 0, false, mixedClass)
	rng := rand.New(rand.NewPCG(5, 6))
	sets := make([][]string, 16)
	for k := range sets {
		for i := range 32 {
			sets[k] = append(sets[k], fmt.Sprintf("node-%d", 1+(k*61+i*31)%1000))
		}
	}
	for i := 0; i < 10000; i++ {
		d, _ := ParseInstanceType(benchTypes[rng.IntN(len(benchTypes))])
		r := Request{Job: "lm-mpi-job-" + uuid4(rng), Kind: KindJob, Class: mixedClass(i), Demand: d, Workers: 1 + rng.IntN(4), Seq: int64(10000 + i), SubmittedAt: t0}
		if i%3 == 0 {
			r.Nodes = sets[rng.IntN(len(sets))]
		}
		mustEnqueue(b, p, r)
	}
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.touch()
		p.Schedule(now)
	}
}

// BenchmarkDryRun answers a dry run (the allocator's dry-run query: a copy of the pool, the new
// request, a pass) at 10,000 and 50,000 waiting, next to the View it is an alternative to.
func BenchmarkDryRun(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			p := benchPool(b, n, false, mixedClass)
			now := t0.Add(time.Hour)
			p.Schedule(now)
			r := Request{Job: "dry-run", Attempt: 1, Kind: KindJob, Class: High, Demand: Demand{Family: p.nodes[0].Family, GPUs: 1}, Workers: 1, Seq: int64(n + 1), SubmittedAt: now}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := p.DryRun(r, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProject plays the pool forward for expected starts (trainq queue --eta) at 10,000
// waiting, every running and waiting job with a time limit, so that the projection runs to its
// event bound.
func BenchmarkProject(b *testing.B) {
	p := benchPool(b, 10000, false, mixedClass)
	now := t0.Add(time.Hour)
	for _, w := range p.waiting {
		w.r.RunLimit = time.Duration(30+len(w.r.Job)%90) * time.Minute
	}
	for _, rj := range p.running {
		rj.r.RunLimit = 2 * time.Hour
	}
	p.Schedule(now)
	first := make([]string, 100) // the first page, as trainq queue --eta asks
	for i := range first {
		first[i] = p.waiting[i].r.Job
	}
	for _, tc := range []struct {
		name string
		want []string
	}{{"first-page", first}, {"all", nil}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := p.Project(now, time.Minute, tc.want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScheduleWaitingLimits is a full pass over 10,000 waiting requests of four workspaces,
// without limits and with a limit in every class (high enough to cap nobody): what counting
// caps costs a pass.
func BenchmarkScheduleWaitingLimits(b *testing.B) {
	for _, limited := range []bool{false, true} {
		b.Run(fmt.Sprintf("limits=%v", limited), func(b *testing.B) {
			p := benchPool(b, 10000, false, mixedClass)
			if limited {
				p.policy.Limits = []Limit{{Class: High, MaxGPUs: 1 << 20}, {Class: Medium, MaxGPUs: 1 << 20}, {Class: Low, MaxGPUs: 1 << 20}}
			}
			for i, w := range p.waiting {
				w.r.Workspace = fmt.Sprintf("team-%d", i%4)
				w.ws = p.workspaceOf(w.r.Workspace)
			}
			now := t0.Add(time.Hour)
			p.Schedule(now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.dirty = true // a full pass each time
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkScheduleWaitingFairShare measures what the fair-share ordering costs a full pass over
// 10,000 waiting requests of 20 workspaces (200 users) on 1,000 busy nodes: "fifo" is the same
// pool in submission order; "fair-share" a pass between rankings (accrue and settle the
// accounts); "ranking" a pass 5 minutes later each time (rank, check the order, re-sort).
func BenchmarkScheduleWaitingFairShare(b *testing.B) {
	for _, mode := range []string{"fifo", "fair-share", "ranking"} {
		b.Run(mode, func(b *testing.B) {
			p := benchPool(b, 10000, false, mixedClass)
			for i, w := range p.waiting {
				w.r.Workspace, w.r.User = fmt.Sprintf("team-%d", i%20), fmt.Sprintf("user-%d", i%200)
			}
			k := 0
			for _, job := range p.RunningJobs() {
				p.running[job].r.Workspace = fmt.Sprintf("team-%d", k%7)
				k++
			}
			pol := Policy{}
			if mode != "fifo" {
				pol = Policy{Ordering: FairShare, FairShareHalfLife: 24 * time.Hour}
			}
			if _, err := p.Reconfigure(p.Nodes(), pol); err != nil {
				b.Fatal(err)
			}
			now := t0.Add(time.Hour)
			p.Schedule(now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if mode == "ranking" {
					now = now.Add(DefaultFairShareInterval)
				}
				p.dirty = true // a full pass each time
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkScheduleWaitingBackfill is a full pass over 10,000 waiting requests (1,000 full
// nodes) with reservations made (ReserveAfter 30m, the heads first since an hour), without and
// with Policy.Backfill: every running job and two waiting requests in three carry a RunLimit,
// so that the backfilled pass sees reservations with a start and requests that end by it. The
// last variant adds StarvationAfter 1h: the heads, first since an hour, starve.
func BenchmarkScheduleWaitingBackfill(b *testing.B) {
	for _, v := range []struct {
		name     string
		backfill bool
		starve   time.Duration
	}{{"backfill=false", false, 0}, {"backfill=true", true, 0}, {"backfill=true,starvation_after=1h", true, time.Hour}} {
		backfill := v.backfill
		b.Run(v.name, func(b *testing.B) {
			p := benchPool(b, 10000, false, mixedClass)
			p.policy.ReserveAfter, p.policy.Backfill, p.policy.StarvationAfter = 30*time.Minute, backfill, v.starve
			for _, job := range p.RunningJobs() {
				rj := p.running[job]
				rj.r.RunLimit = time.Duration(1+len(job)%7) * time.Hour
			}
			for i, w := range p.waiting {
				if i%3 != 0 {
					w.r.RunLimit = time.Duration(1+i%5) * 20 * time.Minute
				}
			}
			p.Schedule(t0.Add(time.Hour))
			now := t0.Add(2 * time.Hour)
			p.Schedule(now) // the heads reserve
			if backfill && len(p.sc.resvs) == 0 {
				b.Fatal("no reservation with a start")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.dirty = true // a full pass each time
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkScheduleGangs: one pass over 10,000 waiting requests (a third of them gangs of two
// to four 8-GPU workers) on 1,000 empty 8-GPU nodes, granting what fits; flat without a
// topology, topology with three levels (zones of 8 blocks of 4 racks of 8 nodes) beside it.
func BenchmarkScheduleGangs(b *testing.B) {
	for _, tc := range []struct {
		name   string
		levels []string
		gang   GangTopology
	}{{"flat", nil, GangTopology{}}, {"topology", []string{"zone", "block", "rack"}, GangTopology{}},
		{"required-rack", []string{"zone", "block", "rack"}, GangTopology{Level: "rack", Required: true}}} {
		levels := tc.levels
		b.Run(tc.name, func(b *testing.B) {
			nodes := nodesOf("node", "a100plus", 1000, 8, 96, 768)
			if levels != nil {
				for i := range nodes {
					rack := i / 8
					nodes[i].Topology = map[string]string{"zone": strconv.Itoa(rack / 32), "block": strconv.Itoa(rack / 4), "rack": strconv.Itoa(rack)}
				}
			}
			p := mustPool(b, nodes, Policy{Topology: levels, GangTopology: tc.gang})
			rng := rand.New(rand.NewPCG(7, 9))
			for i := range 10000 {
				d, _ := ParseInstanceType(benchTypes[rng.IntN(3)])
				workers := 1
				if i%3 == 0 {
					d, _ = ParseInstanceType(benchTypes[3])
					workers = 2 + rng.IntN(3)
				}
				mustEnqueue(b, p, Request{Job: fmt.Sprintf("j-%05d", i), Kind: KindJob, Class: Class(i % 3), Demand: d, Workers: workers, Seq: int64(i)})
			}
			snap := p.Snapshot()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				q, err := Restore(snap)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if d := q.Schedule(t0); len(d.Grants) == 0 {
					b.Fatal("no grants")
				}
			}
		})
	}
}

// BenchmarkScheduleWaitingFullRacked is BenchmarkScheduleWaitingFull/10k (a full pass over 10,000
// waiting on 1,000 full nodes) with the nodes in zones, blocks and racks of 8, beside the same
// pool without a topology: gangs preferring a rack (the default), and gangs requiring one.
func BenchmarkScheduleWaitingFullRacked(b *testing.B) {
	levels := []string{"zone", "block", "rack"}
	for _, tc := range []struct {
		name   string
		levels []string
		gang   GangTopology
	}{{"flat", nil, GangTopology{}}, {"preferred-rack", levels, GangTopology{}}, {"required-rack", levels, GangTopology{Level: "rack", Required: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			s := benchPool(b, 10000, false, mixedClass).Snapshot()
			if tc.levels != nil {
				for i := range s.Nodes {
					rack := i / 8
					s.Nodes[i].Topology = map[string]string{"zone": strconv.Itoa(rack / 32), "block": strconv.Itoa(rack / 4), "rack": strconv.Itoa(rack)}
				}
				s.Policy.Topology, s.Policy.GangTopology = tc.levels, tc.gang
			}
			p, err := Restore(s)
			if err != nil {
				b.Fatal(err)
			}
			now := t0.Add(time.Hour)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.touch()
				p.Schedule(now)
			}
		})
	}
}

// BenchmarkForecastFit is what the record's range costs one expected start, with a full record
// of finished samples only, and with as many still waiting beside them (which the percentiles
// count as censored).
func BenchmarkForecastFit(b *testing.B) {
	now := t0.Add(72 * time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	sample := func(i int, actual time.Duration) forecastSample {
		return forecastSample{job: fmt.Sprint(i), attempt: 1, asked: now.Add(-time.Duration(rng.IntN(48*60)) * time.Minute),
			age: time.Duration(rng.IntN(600)) * time.Minute, proj: time.Duration(rng.IntN(600)) * time.Minute,
			naive: time.Duration(rng.IntN(600)) * time.Minute, actual: actual}
	}
	var fc forecastRecord
	for i := range ForecastKept {
		fc.done = append(fc.done, sample(i, time.Duration(rng.IntN(600))*time.Minute))
	}
	full := fc
	for i := range forecastPending {
		full.pending = append(full.pending, sample(ForecastKept+i, -1))
	}
	for _, tc := range []struct {
		name string
		fc   *forecastRecord
	}{{"finished-only", &fc}, {"with-waiting", &full}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := tc.fc.rangeFit(now, time.Hour, 2*time.Hour, 3*time.Hour); !ok {
					b.Fatal("no fit")
				}
			}
		})
	}
}
