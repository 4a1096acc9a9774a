package simulate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

func manyJobs(n int) *Workload {
	w := &Workload{Name: "t", Nodes: nodes(1, 8)}
	for i := range n {
		w.Jobs = append(w.Jobs, jb(fmt.Sprintf("pod-%d", i), 0, scheduler.Class(i%3), 1, time.Minute))
	}
	return w
}

func teamsOf(w *Workload) []string {
	out := make([]string, len(w.Jobs))
	for i, j := range w.Jobs {
		out[i] = j.Workspace
	}
	return out
}

func TestAssignTeams(t *testing.T) {
	a, b, c := manyJobs(400), manyJobs(400), manyJobs(400)
	if err := a.AssignTeams(4, 1); err != nil {
		t.Fatal(err)
	}
	_ = b.AssignTeams(4, 1)
	_ = c.AssignTeams(4, 2)
	if !slices.Equal(teamsOf(a), teamsOf(b)) {
		t.Fatal("the same seed put jobs in different teams")
	}
	moved := 0
	for i := range a.Jobs {
		if a.Jobs[i].Workspace != c.Jobs[i].Workspace {
			moved++
		}
	}
	if moved < 200 { // about 3/4 of the jobs change team under another seed
		t.Errorf("seed 2 moved only %d of 400 jobs", moved)
	}
	count := map[string]int{}
	for _, ws := range teamsOf(a) {
		count[ws]++
	}
	if len(count) != 4 {
		t.Fatalf("teams %v", count)
	}
	for ws, n := range count {
		if !slices.Contains([]string{"team-1", "team-2", "team-3", "team-4"}, ws) || n < 70 || n > 130 {
			t.Errorf("%s has %d of 400 jobs", ws, n)
		}
	}
	if got := a.Workspaces(); !slices.Equal(got, []string{"team-1", "team-2", "team-3", "team-4"}) {
		t.Errorf("workspaces %v", got)
	}
	if !strings.Contains(a.Notes[0], "4 synthetic teams by a hash of seed 1") {
		t.Errorf("note %q", a.Notes[0])
	}
	// A job's team depends on its id alone, not on the other jobs or their order.
	if TeamOf(1, a.Jobs[7].ID, 4) != int(a.Jobs[7].Workspace[5]-'0') {
		t.Errorf("TeamOf disagrees with AssignTeams for %s", a.Jobs[7].ID)
	}
	// Jobs that have a workspace keep it.
	d := manyJobs(10)
	d.Jobs[3].Workspace = "research"
	_ = d.AssignTeams(2, 1)
	if d.Jobs[3].Workspace != "research" || !strings.HasPrefix(d.Jobs[4].Workspace, "team-") || !strings.Contains(d.Notes[0], "1 jobs kept the workspace") {
		t.Errorf("%+v %v", d.Jobs[3:5], d.Notes)
	}
	if err := d.AssignTeams(0, 1); err == nil {
		t.Error("0 teams accepted")
	}
}

func TestWorkspacesNaturalOrder(t *testing.T) {
	w := &Workload{}
	for _, ws := range []string{"team-10", "team-2", "", "team-1", "b", "team-01"} {
		w.Jobs = append(w.Jobs, Job{ID: ws, Workspace: ws})
	}
	if got := w.Workspaces(); !slices.Equal(got, []string{"b", "team-01", "team-1", "team-2", "team-10"}) {
		t.Errorf("%v", got)
	}
}

func TestFlood(t *testing.T) {
	w := manyJobs(60)
	_ = w.AssignTeams(3, 1)
	before := slices.Clone(w.Jobs)
	if err := w.Flood("team-2"); err != nil {
		t.Fatal(err)
	}
	raised, other := 0, 0
	for i, j := range w.Jobs {
		switch {
		case j.Workspace == "team-2":
			if j.Class != scheduler.High {
				t.Fatalf("%s of team-2 is %s", j.ID, j.Class)
			}
			if before[i].Class != scheduler.High {
				raised++
			}
		case j.Class != before[i].Class:
			t.Fatalf("%s of %s changed class", j.ID, j.Workspace)
		default:
			other++
		}
	}
	if raised == 0 || other == 0 {
		t.Fatalf("raised %d, others %d", raised, other)
	}
	if note := w.Notes[len(w.Notes)-1]; !strings.Contains(note, "team-2 submits all its jobs high: ") {
		t.Errorf("note %q", note)
	}
	if err := w.Flood("team-9"); err == nil || !strings.Contains(err.Error(), "the workspaces are team-1, team-2, team-3") {
		t.Errorf("flood of an unknown team: %v", err)
	}
	if err := manyJobs(3).Flood("team-1"); err == nil || !strings.Contains(err.Error(), "give --teams N") {
		t.Errorf("flood without workspaces: %v", err)
	}
}

func inWS(j Job, ws string) Job { j.Workspace = ws; return j }

func teamRow(t *testing.T, r *Result, ws string) TeamRow {
	t.Helper()
	for _, x := range r.Teams {
		if x.Workspace == ws {
			return x
		}
	}
	t.Fatalf("no row for %s in %+v", ws, r.Teams)
	return TeamRow{}
}

// One node of 8 GPUs. Team a runs a1 (4 GPUs, high) from 0 for 10m and submits a2 (4 GPUs,
// high) at 1m; team b submits b1 (4 GPUs, high) at 2m for 5m; a CPU job of nobody's runs at 0.
// Without caps a2 takes the other half at 1m and b1 waits for a1, 8m. With each workspace capped
// at 4 high GPUs, a2 waits on its cap and b1 starts at once; a2 starts when a1 ends, at 10m.
func TestTeamCaps(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(1, 8), Jobs: []Job{
		jb("cpu", 0, scheduler.Medium, 0, time.Minute),
		inWS(jb("a1", 0, scheduler.High, 4, 10*time.Minute), "a"),
		inWS(jb("a2", time.Minute, scheduler.High, 4, 10*time.Minute), "a"),
		inWS(jb("b1", 2*time.Minute, scheduler.High, 4, 5*time.Minute), "b"),
	}}
	opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1}
	free := run(t, w, prio, opt)
	if a, b := teamRow(t, free, "a"), teamRow(t, free, "b"); a.PeakGPUs["high"] != 8 || a.High.P95.D() != 0 || b.High.P95.D() != 8*time.Minute || a.CapHits != 0 {
		t.Fatalf("without caps: a %+v, b %+v", a, b)
	}
	for _, q := range []string{"best-effort-fifo", "strict-fifo"} {
		pol, err := ParsePolicy("capped:cap.high=4,queueing="+q, scheduler.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		r := run(t, w, pol, opt)
		a, b, none := teamRow(t, r, "a"), teamRow(t, r, "b"), teamRow(t, r, NoWorkspace)
		if a.Jobs != 2 || a.CapHits != 1 || a.PeakGPUs["high"] != 4 || a.High.N != 2 || a.High.P50.D() != 0 || a.High.P95.D() != 9*time.Minute {
			t.Errorf("%s: team a %+v", q, a)
		}
		if b.Jobs != 1 || b.CapHits != 0 || b.PeakGPUs["high"] != 4 || b.High.P95.D() != 0 {
			t.Errorf("%s: team b %+v", q, b)
		}
		if none.Jobs != 1 || none.Medium.N != 1 || none.UsefulGPUHours != 0 {
			t.Errorf("%s: no workspace %+v", q, none)
		}
		// a: 2 × 4 GPUs × 10m = 80 GPU-minutes, b: 4 × 5m = 20; a has 80% of the useful work.
		if !near(a.UsefulGPUHours, 80.0/60) || !near(a.HighGPUHours, 80.0/60) || !near(a.Share, 0.8) || !near(b.Share, 0.2) {
			t.Errorf("%s: GPU-hours a %+v b %+v", q, a, b)
		}
		if r.CapExplains == 0 {
			t.Errorf("%s: no Explain call counted", q)
		}
	}
	capped, _ := ParsePolicy("capped:cap.high=4", scheduler.Policy{})
	var b strings.Builder
	WriteMarkdown(&b, []*Result{free, run(t, w, capped, opt)})
	out := b.String()
	for _, want := range []string{
		"| workspace | jobs | useful GPU-h | share | high GPU-h | most high GPUs held | high jobs | high wait p50 / p95 | medium jobs | medium wait p50 / p95 | cap hits |",
		"| a | 2 | 1.3 | 80.0% | 1.3 | 8 | 2 | 0s / 0s | 0 | 0s / 0s | - |",
		"| b | 1 | 0.3 | 20.0% | 0.3 | 4 | 1 | 8m00s / 8m00s | 0 | 0s / 0s | - |",
		"| a | 2 | 1.3 | 80.0% | 1.3 | 4 (cap 4) | 2 | 0s / 9m00s | 0 | 0s / 0s | 1 |",
		"| b | 1 | 0.3 | 20.0% | 0.3 | 4 (cap 4) | 1 | 0s / 0s | 0 | 0s / 0s | 0 |",
		"| (none) | 1 | 0.0 | 0.0% | 0.0 | 0 | 0 | 0s / 0s | 1 | 0s / 0s | 0 |",
		"### capped (best-effort-fifo, high.max_gpus 4 per workspace)",
		"| a: high wait p95 / most high GPUs held / cap hits | 0s / 8 / - | 9m00s / 4 / 1 |",
		"| b: high wait p95 / most high GPUs held / cap hits | 8m00s / 4 / - | 0s / 4 / 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// A cap of a alone: a waits on it as before, b has none.
	only, _ := ParsePolicy("a:cap.high@a=4", scheduler.Policy{})
	ra := run(t, w, only, opt)
	if a, b := teamRow(t, ra, "a"), teamRow(t, ra, "b"); a.CapHits != 1 || a.High.P95.D() != 9*time.Minute || b.High.P95.D() != 0 {
		t.Errorf("cap of a alone: a %+v, b %+v", a, b)
	}
	b.Reset()
	WriteMarkdown(&b, []*Result{ra})
	if out := b.String(); !strings.Contains(out, "| a | 2 | 1.3 | 80.0% | 1.3 | 4 (cap 4) |") || !strings.Contains(out, "| b | 1 | 0.3 | 20.0% | 0.3 | 4 | 1 |") {
		t.Errorf("cap of a alone:\n%s", out)
	}
	// A cap for the medium class does not hold back high jobs.
	pol, _ := ParsePolicy("medium:cap.medium=4", scheduler.Policy{})
	if a := teamRow(t, run(t, w, pol, opt), "a"); a.CapHits != 0 || a.PeakGPUs["high"] != 8 {
		t.Errorf("medium cap: %+v", a)
	}
	// Without workspaces there are no team rows.
	if r := run(t, &Workload{Name: "t", Nodes: nodes(1, 8), Jobs: []Job{jb("x", 0, scheduler.High, 1, time.Minute)}}, prio, opt); r.Teams != nil {
		t.Errorf("teams %+v", r.Teams)
	}
}

// checkCaps asks only about jobs the cap could hold back; over a busy random workload with
// preemptions (and so nominations), it counts the same cap hits as asking about every job.
func TestCapHitsFilterLosesNothing(t *testing.T) {
	w := &Workload{Name: "t", Nodes: nodes(4, 8)}
	for i := 0; i < 400; i++ {
		j := jb(fmt.Sprintf("j%03d", i), time.Duration(i*41%3000)*time.Second, scheduler.Class(i*7%3), 1+i%4*i%5, time.Duration(120+i*53%1500)*time.Second)
		j.Workers = 1 + i%7/5
		w.Jobs = append(w.Jobs, j)
	}
	sortByArrival(w.Jobs)
	_ = w.AssignTeams(3, 7)
	_ = w.Flood("team-2")
	for _, spec := range []string{"be:cap.high=10,cap.medium=8", "strict:queueing=strict-fifo,cap.high=12,cap.low=6"} {
		pol, err := ParsePolicy(spec, scheduler.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		opt := Options{StopDelay: 30 * time.Second, MaxRetry: -1}
		got := run(t, w, pol, opt)
		askEveryCappedJob = true
		want := run(t, w, pol, opt)
		askEveryCappedJob = false
		hits := 0
		for k := range want.Teams {
			hits += want.Teams[k].CapHits
			if got.Teams[k].CapHits != want.Teams[k].CapHits {
				t.Errorf("%s %s: %d cap hits, asking about every job %d", spec, got.Teams[k].Workspace, got.Teams[k].CapHits, want.Teams[k].CapHits)
			}
		}
		if hits == 0 || got.Row(RowAll).Preemptions == 0 || got.CapExplains >= want.CapExplains {
			t.Errorf("%s: %d cap hits, %d preemptions, %d against %d dry passes: the workload does not exercise the filter", spec, hits, got.Row(RowAll).Preemptions, got.CapExplains, want.CapExplains)
		}
		t.Logf("%s: %d cap hits, %d preemptions, %d dry passes (every job: %d)", spec, hits, got.Row(RowAll).Preemptions, got.CapExplains, want.CapExplains)
	}
}
