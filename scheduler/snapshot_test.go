package scheduler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// snapshotV1File is a version-1 snapshot written by the version-1 code from v1Scenario. It is
// committed, not regenerated: it is what allocators running the old code have stored.
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
	req := func(name string, kind Kind, c Class, d Demand, workers int, seq int64, min int) Request {
		return Request{Job: name, Kind: kind, Class: c, Demand: d, Workers: workers, Seq: seq, SubmittedAt: at(min)}
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

func readSnapshotV1(t testing.TB) Snapshot {
	t.Helper()
	b, err := os.ReadFile(snapshotV1File)
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWriteSnapshotV1 wrote testdata/snapshot-v1.json once, with the version-1 code.
func TestWriteSnapshotV1(t *testing.T) {
	if os.Getenv("TRAINQ_WRITE_SNAPSHOT_V1") == "" {
		t.Skip("set TRAINQ_WRITE_SNAPSHOT_V1=1 to write testdata/snapshot-v1.json")
	}
	s := v1Scenario(t).Snapshot()
	if s.Version != 1 {
		t.Fatalf("this code writes version %d snapshots", s.Version)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snapshotV1File, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	v, _ := json.MarshalIndent(v1Scenario(t).View(), "", "  ")
	t.Logf("view:\n%s", v)
}

func TestSnapshotV1Restores(t *testing.T) {
	s := readSnapshotV1(t)
	q, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, q.View()), mustJSON(t, v1Scenario(t).View()); a != b {
		t.Fatalf("restored view differs from the scenario's:\n%s\n%s", a, b)
	}
}
