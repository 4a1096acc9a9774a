package scheduler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// snapshotV1File is a version-1 snapshot written by the version-1 code from v1Scenario (commit
// 1e6f972 has the test that wrote it). It is never regenerated: it stands for what allocators
// running the old code have stored.
var snapshotV1File = filepath.Join("testdata", "snapshot-v1.json")

// v1Scenario builds the state stored in testdata/snapshot-v1.json: three 4-GPU a100 nodes and a
// cpu node; a notebook and a cpu job running; low-2w preempted by high-wide and releasing with
// worker 0 released; low-2w's next attempt re-queued; and waiting requests of every class.
func v1Scenario(t testing.TB) *Pool {
	t.Helper()
	nodes := append(nodesOf("n", "a100", 3, 4, 32, 256), Node{Name: "c-1", Family: "cpu", CPU: 16, RAMGB: 64})
	p := mustPool(t, nodes, Policy{MinRuntimeBeforePreemption: 5 * time.Minute})
	d4, err := ParseInstanceType("a100.4gpu.40vG.16C.128G")
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := ParseInstanceType("a100.2gpu.40vG.8C.64G")
	d1, _ := ParseInstanceType("a100.1gpu")
	dc, _ := ParseInstanceType("cpu.8C.32G")
	req := func(name string, kind Kind, c Class, d Demand, workers int, seq int64, minute int) Request {
		return Request{Job: name, Kind: kind, Class: c, Demand: d, Workers: workers, Seq: seq, SubmittedAt: at(minute)}
	}
	mustEnqueue(t, p,
		req("low-2w", KindJob, Low, d4, 2, 1, 0),
		req("nb-run", KindNotebook, High, d2, 1, 2, 0),
		req("cpu-run", KindJob, Medium, dc, 1, 3, 0))
	if d := p.Schedule(at(1)); len(d.Grants) != 3 {
		t.Fatalf("setup: granted %v", grantedJobs(d))
	}
	mustEnqueue(t, p, req("high-wide", KindJob, High, d4, 2, 4, 9))
	if d := p.Schedule(at(10)); !slices.Equal(victims(d), []string{"low-2w"}) {
		t.Fatalf("setup: victims %v", victims(d))
	}
	if !p.Release("low-2w", 0, 0) {
		t.Fatal("setup: release low-2w worker 0")
	}
	again := req("low-2w", KindJob, Low, d4, 2, 1, 0)
	again.Attempt = 1
	mustEnqueue(t, p, again,
		req("med-wait", KindJob, Medium, d4, 1, 5, 11),
		req("nb-wait", KindNotebook, High, d4, 1, 6, 11),
		req("low-wait", KindJob, Low, d1, 1, 7, 12))
	return p
}

// snapshotV2File is a version-2 snapshot written by the version-2 code from v2Scenario (the
// commit that introduced version 3 wrote it). It is never regenerated.
var snapshotV2File = filepath.Join("testdata", "snapshot-v2.json")

// v2Scenario is v1Scenario with the cpu node lost: it has a lost node, a class head and free
// capacity held for a preemptor, which version 1 did not store.
func v2Scenario(t testing.TB) *Pool {
	t.Helper()
	p := v1Scenario(t)
	p.MarkNodeLost("c-1")
	return p
}

func readSnapshotV1(t testing.TB) Snapshot {
	t.Helper()
	return readSnapshotFile(t, snapshotV1File)
}

func readSnapshotFile(t testing.TB, file string) Snapshot {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSnapshotV1Restores restores the committed version-1 snapshot with this code and checks the
// state field by field, then against the same scenario built by this code.
func TestSnapshotV1Restores(t *testing.T) {
	s := readSnapshotV1(t)
	if s.Version != 1 || s.Lost != nil {
		t.Fatalf("testdata is not a version-1 snapshot: version %d, lost %v", s.Version, s.Lost)
	}
	p, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	if pol := p.Policy(); !reflect.DeepEqual(pol, Policy{MinRuntimeBeforePreemption: 5 * time.Minute}) {
		t.Errorf("policy %+v", pol)
	}
	if lost := p.LostNodes(); lost != nil {
		t.Errorf("lost nodes %v: version 1 has none", lost)
	}
	v := p.View()

	wantNodes := []NodeInfo{
		{Name: "n-1", Family: "a100", GPUs: 4, FreeGPUs: 2, AllocatedGPUs: 2}, // nb-run
		{Name: "n-2", Family: "a100", GPUs: 4, FreeGPUs: 4},                   // low-2w's released worker 0
		{Name: "n-3", Family: "a100", GPUs: 4, ReleasingGPUs: 4},              // low-2w's worker 1
		{Name: "c-1", Family: "cpu"},                                          // cpu-run holds CPU only
	}
	if !reflect.DeepEqual(v.Nodes, wantNodes) {
		t.Errorf("nodes\n%+v\nwant\n%+v", v.Nodes, wantNodes)
	}

	d4 := Demand{Family: "a100", GPUs: 4, VRAMGB: 40, CPU: 16, RAMGB: 128}
	wantRunning := []RunningInfo{
		{Job: "cpu-run", Kind: KindJob, Class: Medium, Seq: 3, StartedAt: at(1),
			Placement: []WorkerPlacement{{Worker: 0, Node: "c-1", GPUs: []int{}}}},
		{Job: "low-2w", Kind: KindJob, Class: Low, Seq: 1, GPUs: 8, StartedAt: at(1), Releasing: true,
			Placement: []WorkerPlacement{{Worker: 0, Node: "n-2", GPUs: []int{0, 1, 2, 3}}, {Worker: 1, Node: "n-3", GPUs: []int{0, 1, 2, 3}}},
			Released:  []int{0}, PreemptedBy: &Preemptor{Job: "high-wide", Class: High, Kind: KindJob}, Nominees: []string{"high-wide", "high-wide"}},
		{Job: "nb-run", Kind: KindNotebook, Class: High, Seq: 2, GPUs: 2, StartedAt: at(1),
			Placement: []WorkerPlacement{{Worker: 0, Node: "n-1", GPUs: []int{0, 1}}}},
	}
	if a, b := mustJSON(t, v.Running), mustJSON(t, wantRunning); a != b {
		t.Errorf("running\n%s\nwant\n%s", a, b)
	}
	for _, ri := range wantRunning {
		if got, ok := p.Running(ri.Job); !ok || mustJSON(t, got) != mustJSON(t, ri) {
			t.Errorf("Running(%s) = %+v, %v", ri.Job, got, ok)
		}
	}

	for i, want := range []struct {
		job       string
		attempt   int
		kind      Kind
		class     Class
		demand    Demand
		workers   int
		seq       int64
		submitted time.Time
		reason    []string
		waitFor   []string
		nominated []string
	}{
		{"high-wide", 0, KindJob, High, d4, 2, 4, at(9),
			[]string{"waiting for 2 nodes with 4 free a100 GPUs, 16 free CPU cores and 128 GB free RAM each", "1 node is already free and held for it",
				"4 GPUs on n-3 are being released by low-2w (nominated to you)"},
			[]string{"low-2w"}, []string{"low-2w"}},
		{"nb-wait", 0, KindNotebook, High, d4, 1, 6, at(11),
			[]string{"behind 1 earlier job of the same class", "held for earlier requests (high-wide)", "or running for less than 5m0s"},
			[]string{"high-wide"}, nil},
		{"med-wait", 0, KindJob, Medium, d4, 1, 5, at(11),
			[]string{"behind 2 higher-priority jobs", "held for earlier requests (high-wide)"},
			[]string{"high-wide"}, nil},
		{"low-2w", 1, KindJob, Low, d4, 2, 1, at(0),
			[]string{"waiting for its previous attempt (0) to release its capacity"},
			[]string{"low-2w"}, nil},
		{"low-wait", 0, KindJob, Low, Demand{Family: "a100", GPUs: 1}, 1, 7, at(12),
			[]string{"can start now: 1 node with 1 free a100 GPU is free"},
			nil, nil},
	} {
		if i >= len(v.Waiting) {
			t.Fatalf("only %d waiting", len(v.Waiting))
		}
		wi := v.Waiting[i]
		if wi.Job != want.job || wi.Attempt != want.attempt || wi.Kind != want.kind || wi.Class != want.class || wi.Demand != want.demand ||
			wi.Workers != want.workers || wi.GPUs != want.workers*want.demand.GPUs || wi.Position != i+1 || wi.Seq != want.seq || !wi.SubmittedAt.Equal(want.submitted) {
			t.Errorf("waiting %d: %+v\nwant %+v", i+1, wi, want)
			continue
		}
		for _, r := range want.reason {
			if !strings.Contains(wi.Reason, r) {
				t.Errorf("%s: reason %q lacks %q", wi.Job, wi.Reason, r)
			}
		}
		if !slices.Equal(wi.WaitingFor, want.waitFor) || !slices.Equal(wi.Nominated, want.nominated) {
			t.Errorf("%s: waiting for %v, nominated %v; want %v, %v", wi.Job, wi.WaitingFor, wi.Nominated, want.waitFor, want.nominated)
		}
		if ex, ok := p.Explain(want.job); !ok || mustJSON(t, ex) != mustJSON(t, wi) {
			t.Errorf("Explain(%s) = %+v, differs from the view", want.job, ex)
		}
	}
	if len(v.Waiting) != 5 {
		t.Errorf("%d waiting, want 5", len(v.Waiting))
	}
	checkInvariants(t, p)

	// The same scenario built by this code: the same state, now written as the current version.
	// Version 1 did not count preemptions nor remember the first request of each class, nor
	// hold the free capacity a stopped victim left.
	q := v1Scenario(t)
	qv := q.View()
	for i := range qv.Running {
		qv.Running[i].Preemptions = 0
	}
	for i := range qv.Nodes {
		qv.Nodes[i].HeldGPUs, qv.Nodes[i].HeldFor = 0, ""
	}
	if a, b := mustJSON(t, v), mustJSON(t, qv); a != b {
		t.Fatalf("restored view differs from the scenario's:\n%s\n%s", a, b)
	}
	migrated, qs := p.Snapshot(), q.Snapshot()
	qs.Heads, qs.Waiting.Preemptions, qs.Holds, qs.Forecast = nil, nil, nil, nil
	for i := range qs.Running {
		qs.Running[i].Preemptions = 0
	}
	if migrated.Version != SnapshotVersion || mustJSON(t, migrated) != mustJSON(t, qs) {
		t.Fatalf("migrated snapshot differs from the scenario's:\n%s\n%s", mustJSON(t, migrated), mustJSON(t, qs))
	}
	roundTrip(t, p)

	// And it schedules on: low-wait fits beside the notebook; n-2 stays held for high-wide.
	d := sched(t, p, at(13))
	if len(d.Grants) != 1 || d.Grants[0].Job != "low-wait" || mustJSON(t, d.Grants[0].Placement) != mustJSON(t, []WorkerPlacement{{Worker: 0, Node: "n-1", GPUs: []int{2}}}) {
		t.Fatalf("decisions %+v", d)
	}
	p.Release("low-2w", 0, 1)
	if d := sched(t, p, at(14)); !slices.Equal(grantedJobs(d), []string{"high-wide"}) || !slices.Equal(grantNodes(d.Grants[0]), []string{"n-2", "n-3"}) {
		t.Fatalf("want high-wide on n-2, n-3; got %+v", d.Grants)
	}
}

// TestSnapshotV2Restores restores the committed version-2 snapshot with this code: it is the
// state the same scenario builds now, and writes back as the current version.
func TestSnapshotV2Restores(t *testing.T) {
	s := readSnapshotFile(t, snapshotV2File)
	if s.Version != 2 || len(s.Lost) == 0 || len(s.Heads) == 0 || len(s.Holds) == 0 {
		t.Fatalf("testdata is not the version-2 scenario: version %d, lost %v, heads %v, holds %v", s.Version, s.Lost, s.Heads, s.Holds)
	}
	p, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	want := v2Scenario(t)
	if a, b := mustJSON(t, p.Snapshot()), mustJSON(t, withoutForecast(want.Snapshot())); a != b {
		t.Fatalf("restored version-2 snapshot differs from the scenario:\n%s\n%s", a, b)
	}
	if a, b := mustJSON(t, p.View()), mustJSON(t, want.View()); a != b {
		t.Fatalf("views differ:\n%s\n%s", a, b)
	}
	checkInvariants(t, p)
	if p.Snapshot().Version != SnapshotVersion {
		t.Fatalf("restored pool writes version %d", p.Snapshot().Version)
	}
}

func TestSnapshotV2LostNodes(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 4, 4, 16, 64), Policy{})
	mustEnqueue(t, p, makeJob("on-lost", "a").GPUs(4).Seq(1).Obj(), makeJob("gang", "a").Class(High).GPUs(2).Workers(2).Seq(2).Obj())
	sched(t, p, at(0))
	if ri, _ := p.Running("on-lost"); ri.Placement[0].Node != "n-3" { // gang, high, took n-1 and n-2
		t.Fatalf("setup: on-lost on %+v", ri.Placement)
	}
	p.MarkNodeLost("n-4")
	p.MarkNodeLost("n-3")
	mustEnqueue(t, p, makeJob("w", "a").Class(High).GPUs(4).Seq(3).Obj())
	if d := sched(t, p, at(1)); len(d.Grants)+len(d.Preemptions) != 0 {
		t.Fatalf("setup: %+v", d)
	}

	s := p.Snapshot()
	if s.Version != SnapshotVersion || !slices.Equal(s.Lost, []int32{2, 3}) {
		t.Fatalf("snapshot version %d, lost %v", s.Version, s.Lost)
	}
	if !strings.Contains(mustJSON(t, s), `"lost":[2,3]`) {
		t.Fatalf("lost nodes missing from the JSON: %s", mustJSON(t, s))
	}
	q := roundTrip(t, p)
	if !slices.Equal(q.LostNodes(), []string{"n-3", "n-4"}) {
		t.Fatalf("restored lost nodes %v", q.LostNodes())
	}
	if a, b := mustJSON(t, p.View()), mustJSON(t, q.View()); a != b {
		t.Fatalf("views differ:\n%s\n%s", a, b)
	}
	checkInvariants(t, q)
	// Both decide alike from here: nothing while n-3 and n-4 are lost, even once on-lost has
	// released n-3; then w starts as soon as n-4 is back.
	for i, step := range []struct {
		do   func(*Pool)
		want string // node w is granted; "": none
	}{
		{func(x *Pool) { x.Release("on-lost", 0, 0) }, ""},
		{func(x *Pool) { x.MarkNodeUp("n-4") }, "n-4"},
	} {
		step.do(p)
		step.do(q)
		dp, dq := sched(t, p, at(2+i)), sched(t, q, at(2+i))
		if a, b := mustJSON(t, dp), mustJSON(t, dq); a != b {
			t.Fatalf("step %d: decisions differ after restore:\n%s\n%s", i, a, b)
		}
		var got string
		if len(dp.Grants) == 1 && dp.Grants[0].Job == "w" {
			got = grantNodes(dp.Grants[0])[0]
		}
		if got != step.want || len(dp.Grants) > 1 {
			t.Fatalf("step %d: granted %+v, want w on %q", i, dp.Grants, step.want)
		}
	}
	// A pool with no lost node writes no "lost" field.
	if strings.Contains(mustJSON(t, mustPool(t, nodesOf("n", "a", 1, 4, 0, 0), Policy{}).Snapshot()), `"lost"`) {
		t.Fatal("empty lost list written")
	}
}

func TestRestoreRefusesBadVersionsAndLostNodes(t *testing.T) {
	good := func() Snapshot {
		p := mustPool(t, nodesOf("n", "a", 3, 4, 0, 0), Policy{})
		p.MarkNodeLost("n-2")
		return p.Snapshot()
	}
	for _, tc := range []struct {
		name   string
		change func(s *Snapshot)
		want   string
	}{
		{"a future version", func(s *Snapshot) { s.Version = 4 }, "unsupported version 4 (this code reads versions 1 to 3)"},
		{"no version", func(s *Snapshot) { s.Version = 0 }, "unsupported version 0"},
		{"version 1 with lost nodes", func(s *Snapshot) { s.Version = 1 }, "version 1 has no lost nodes"},
		{"lost node out of range", func(s *Snapshot) { s.Lost = []int32{3} }, "lost node index 3 is out of range or out of order"},
		{"negative lost node", func(s *Snapshot) { s.Lost = []int32{-1} }, "lost node index -1"},
		{"lost node twice", func(s *Snapshot) { s.Lost = []int32{1, 1} }, "lost node index 1 is out of range or out of order"},
		{"lost nodes out of order", func(s *Snapshot) { s.Lost = []int32{2, 0} }, "lost node index 0"},
		{"kept (pinned) node out of range", func(s *Snapshot) {
			s.Heads = []SnapshotHead{{Class: Medium, Job: "m", Since: 1, Nodes: []int32{0}, Pinned: []int32{3}}}
		}, `head "m": reserved node index 3 is out of range or out of order`},
		{"kept (pinned) nodes out of order", func(s *Snapshot) {
			s.Heads = []SnapshotHead{{Class: Medium, Job: "m", Since: 1, Pinned: []int32{2, 0}}}
		}, `head "m": reserved node index 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.change(&s)
			if _, err := Restore(s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Restore(good()); err != nil {
		t.Fatalf("the unchanged snapshot: %v", err)
	}
}

// TestSnapshotCarriesHonorsNotice: the notice and the requests' HonorsNotice go through JSON and
// packed snapshots and a reconfiguration that drops an unfit waiting request, and the restored
// pool still counts the honouring job as losing nothing; snapshots without them (every one written
// before) have neither key and restore as before (TestSnapshotV1Restores and the others).
func TestSnapshotCarriesHonorsNotice(t *testing.T) {
	for _, s := range []string{mustJSON(t, v2Scenario(t).Snapshot())} {
		if strings.Contains(s, `"hn"`) || strings.Contains(s, "preemption_notice") {
			t.Fatalf("a snapshot without notices writes them: %s", s)
		}
	}
	nodes := append(nodesOf("n", "a", 2, 4, 0, 0), Node{Name: "w-1", Family: "w", GPUs: 8})
	p := mustPool(t, nodes, Policy{PreemptionNotice: 2 * time.Minute})
	mustEnqueue(t, p, makeJob("old", "a").Class(Low).GPUs(4).Seq(1).HonorsNotice().Obj())
	sched(t, p, at(0))
	mustEnqueue(t, p, makeJob("new", "a").Class(Low).GPUs(4).Seq(2).Obj())
	sched(t, p, at(5))
	mustEnqueue(t, p, makeJob("wide", "w").Class(Low).GPUs(8).Seq(3).HonorsNotice().Obj(), makeJob("q1", "a").Class(Low).GPUs(4).Seq(4).Obj(),
		makeJob("q2", "a").Class(Low).GPUs(4).Seq(5).HonorsNotice().Obj())
	honours := func(x *Pool) []string {
		var out []string
		for _, j := range x.RunningJobs() {
			if ri, _ := x.Running(j); ri.HonorsNotice {
				out = append(out, j)
			}
		}
		for _, w := range x.waiting {
			if w.r.HonorsNotice {
				out = append(out, w.r.Job)
			}
		}
		return out
	}
	u, err := UnpackSnapshot(mustPack(t, p.Snapshot()))
	if err != nil {
		t.Fatal(err)
	}
	packed, err := Restore(u)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*Pool{roundTrip(t, p), packed} {
		if got := honours(q); !slices.Equal(got, []string{"old", "wide", "q2"}) || q.Policy().PreemptionNotice != 2*time.Minute {
			t.Fatalf("restored: honouring %v, notice %s", got, q.Policy().PreemptionNotice)
		}
	}
	// Dropping node w-1 drops wide; q2 keeps its flag, q1 has none.
	unfit, err := p.Reconfigure(nodes[:2], p.Policy())
	if err != nil || len(unfit) != 1 || unfit[0].Job != "wide" {
		t.Fatalf("reconfigure: %v %v", unfit, err)
	}
	if got := honours(p); !slices.Equal(got, []string{"old", "q2"}) {
		t.Fatalf("after the reconfiguration: honouring %v", got)
	}
	q := roundTrip(t, p)
	mustEnqueue(t, q, makeJob("h", "a").Class(High).GPUs(4).Seq(9).Obj())
	if d := sched(t, q, at(10)); !slices.Equal(victims(d), []string{"old"}) {
		t.Fatalf("victims %v, want old (it honours its notice: it loses nothing)", victims(d))
	}
}

// withoutForecast is s without the record of the expected starts' errors, which snapshots written
// before it lack.
func withoutForecast(s Snapshot) Snapshot {
	s.Forecast = nil
	return s
}
