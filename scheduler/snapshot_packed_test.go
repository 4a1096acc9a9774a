package scheduler

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// snapshotV3File is a packed snapshot written by PackSnapshot from v2Scenario when version 3 was
// introduced. It is never regenerated: it stands for what allocators running that code have stored.
var snapshotV3File = filepath.Join("testdata", "snapshot-v3.zst")

// scalePool is an allocation at the scale the continue-as-new state must carry: 1,000 nodes of
// 8 GPUs, nRunning jobs of 1 or 2 GPUs started in passes over two days, and nWaiting requests
// that arrived one every few seconds since, named as trainq names jobs (a tenth are notebooks).
func scalePool(tb testing.TB, nWaiting, nRunning int) *Pool {
	rng := rand.New(rand.NewPCG(5, 6))
	name := func() string {
		if rng.IntN(10) == 0 {
			return "jupyter-" + uuid4(rng)
		}
		return "lm-mpi-job-" + uuid4(rng)
	}
	p := mustPool(tb, nodesOf("node", "a100plus", 1000, 8, 96, 768), Policy{})
	types := make([]Demand, len(benchTypes))
	for i, it := range benchTypes {
		types[i], _ = ParseInstanceType(it)
	}
	now := t0
	seq := int64(0)
	for k := 0; k < nRunning; k++ {
		seq++
		now = now.Add(time.Duration(rng.Int64N(int64(30 * time.Second))))
		mustEnqueue(tb, p, Request{Job: name(), Kind: KindJob, Class: Class(rng.IntN(3)), Demand: types[k%5/3],
			Workers: 1, Seq: seq, SubmittedAt: now})
		if k%50 == 49 || k == nRunning-1 {
			if d := p.Schedule(now.Add(time.Second)); len(d.Grants) != k%50+1 {
				tb.Fatalf("setup: %d grants", len(d.Grants))
			}
		}
	}
	for i := 0; i < nWaiting; i++ {
		seq++
		now = now.Add(time.Duration(rng.Int64N(int64(6 * time.Second))))
		r := Request{Job: name(), Kind: KindJob, Class: Class(rng.IntN(3)), Demand: types[rng.IntN(len(types))],
			Workers: 1 + rng.IntN(4), Seq: seq, SubmittedAt: now}
		if rng.IntN(10) == 0 {
			r.Attempt = 1
		}
		mustEnqueue(tb, p, r)
	}
	return p
}

// zstdFrame compresses b as PackSnapshot does, for hand-made packed snapshots.
func zstdFrame(b []byte, _ []byte) []byte {
	return packEncoder.EncodeAll(b, nil)
}

func mustPack(t testing.TB, s Snapshot) []byte {
	t.Helper()
	b, err := PackSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPackedSnapshotSize measures the continue-as-new state at 10,000 and 50,000 waiting
// requests with 1,000 nodes and 5,000 running jobs, as JSON (version 2) and packed (version 3),
// and checks that 50,000 fit in 1 MB, under half of Temporal's 2 MiB payload limit. Most of it is
// the job ids' UUIDs: 122 random bits each, 15.25 bytes that no encoding can save.
func TestPackedSnapshotSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds large pools")
	}
	for _, n := range []int{10000, 50000} {
		p := scalePool(t, n, 5000)
		s := p.Snapshot()
		packed := mustPack(t, s)
		t.Logf("%d waiting, 5,000 running, 1,000 nodes: JSON %d bytes, packed %d bytes (%.1f bytes per job)",
			n, len(mustJSON(t, s)), len(packed), float64(len(packed))/float64(n+5000))
		if n == 50000 && len(packed) >= 1e6 {
			t.Fatalf("packed snapshot with 50,000 waiting is %d bytes, want under 1 MB", len(packed))
		}
	}
}

// TestPackedSnapshotRoundTrips packs a pool with every kind of state, restores it and checks that
// the restored pool has the same state and decides alike; and that packing is deterministic.
func TestPackedSnapshotRoundTrips(t *testing.T) {
	p := v2Scenario(t)
	mustEnqueue(t, p, Request{Job: "lm-mpi-job-5b1e7f0a-3c2d-4e5f-8a9b-0c1d2e3f4a5b", Kind: KindJob, Class: Low,
		Demand: Demand{Family: "a100", GPUs: 1}, Workers: 1, Seq: 8, SubmittedAt: at(13)})
	s := p.Snapshot()
	b := mustPack(t, s)
	if again := mustPack(t, p.Snapshot()); !bytes.Equal(b, again) {
		t.Fatal("packing the same state twice gave different bytes")
	}
	u, err := UnpackSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(u)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, q.Snapshot()), mustJSON(t, s); a != b {
		t.Fatalf("restored state differs:\n%s\n%s", a, b)
	}
	if a, b := mustJSON(t, q.View()), mustJSON(t, p.View()); a != b {
		t.Fatalf("restored view differs:\n%s\n%s", a, b)
	}
	checkInvariants(t, q)
	p.MarkNodeUp("c-1")
	q.MarkNodeUp("c-1")
	if a, b := mustJSON(t, sched(t, p, at(14))), mustJSON(t, sched(t, q, at(14))); a != b {
		t.Fatalf("decisions differ after the round trip:\n%s\n%s", a, b)
	}
}

// TestPackedSnapshotPrecision: submission times are packed to the second, start times to the
// millisecond; ids that are not a prefix and a canonical version-4 UUID are kept as they are.
func TestPackedSnapshotPrecision(t *testing.T) {
	p := mustPool(t, nodesOf("n", "a", 2, 4, 0, 0), Policy{})
	odd := []string{"job-A", "lm-mpi-job-5B1E7F0A-3C2D-4E5F-8A9B-0C1D2E3F4A5B", "{5b1e7f0a-3c2d-4e5f-8a9b-0c1d2e3f4a5b}",
		"5b1e7f0a-3c2d-4e5f-8a9b-0c1d2e3f4a5b", "x-5b1e7f0a-3c2d-1e5f-8a9b-0c1d2e3f4a5b", "x-5b1e7f0a-3c2d-4e5f-ca9b-0c1d2e3f4a5b"}
	for i, job := range odd {
		mustEnqueue(t, p, Request{Job: job, Kind: KindJob, Class: Medium, Demand: Demand{Family: "a", GPUs: 4}, Workers: 1,
			Seq: int64(i + 1), SubmittedAt: t0.Add(time.Duration(i)*time.Hour + 123456789)})
	}
	sched(t, p, t0.Add(time.Minute+123456789))
	u, err := UnpackSnapshot(mustPack(t, p.Snapshot()))
	if err != nil {
		t.Fatal(err)
	}
	want := p.Snapshot()
	want.Version = 3
	for i := range want.Waiting.SubmittedAt {
		want.Waiting.SubmittedAt[i] = want.Waiting.SubmittedAt[i] / 1e9 * 1e9
	}
	for i := range want.Running {
		want.Running[i].SubmittedAt = want.Running[i].SubmittedAt / 1e9 * 1e9
		want.Running[i].StartedAt = want.Running[i].StartedAt / 1e6 * 1e6
	}
	if len(want.Running) != 2 || len(want.Waiting.Job) != len(odd)-2 || want.Now%1e6 == 0 {
		t.Fatalf("setup: %d running, %d waiting, now %d", len(want.Running), len(want.Waiting.Job), want.Now)
	}
	if a, b := mustJSON(t, u), mustJSON(t, want); a != b {
		t.Fatalf("unpacked\n%s\nwant\n%s", a, b)
	}
}

func TestUnpackSnapshotRefusesMalformedInput(t *testing.T) {
	good := mustPack(t, v2Scenario(t).Snapshot())
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"not zstd", []byte(`{"v":3}`), "not a packed snapshot"},
		{"truncated", good[:len(good)/2], "not a packed snapshot"},
		{"not JSON", zstdFrame([]byte("v3"), nil), "packed snapshot"},
		{"version 2 inside", zstdFrame([]byte(`{"s":{"v":2}}`), nil), "a packed snapshot has version 3, this one 2"},
		{"short columns", zstdFrame([]byte(`{"s":{"v":3,"waiting":{"attempt":[0]}},"ids":{"p":[]}}`), nil), "different lengths"},
		{"bad prefix", zstdFrame([]byte(`{"s":{"v":3},"ids":{"p":[0]}}`), nil), "packed job id 0 is malformed"},
		{"UUID bytes left over", zstdFrame([]byte(`{"s":{"v":3},"ids":{"p":[],"u":"AAAAAAAAAAAAAAAAAAA=","ur":"AAA="}}`), nil), "left over"},
		{"UUID bits missing", zstdFrame([]byte(`{"s":{"v":3},"ids":{"p":[0],"prefixes":["x-"],"u":"AAAAAAAAAAAAAAAAAAA="}}`), nil), "0 bytes of UUID bits for 1 UUIDs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := UnpackSnapshot(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnpackSnapshot: %v, want %q", err, tc.want)
			}
		})
	}
}

// snapshotV3UUIDsFile is a packed snapshot of scalePool(300, 100), whose job ids are trainq's:
// the UUID packing is read as it was written. It is never regenerated.
var snapshotV3UUIDsFile = filepath.Join("testdata", "snapshot-v3-uuids.zst")

// TestSnapshotV3WithUUIDsRestores restores the committed packed snapshot with trainq's job ids and
// checks it against the same pool built by this code, its times packed alike.
func TestSnapshotV3WithUUIDsRestores(t *testing.T) {
	b, err := os.ReadFile(snapshotV3UUIDsFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := UnpackSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Waiting.Job) != 300 || len(s.Running) != 100 || !strings.HasPrefix(s.Waiting.Job[0], "lm-mpi-job-") && !strings.HasPrefix(s.Waiting.Job[0], "jupyter-") {
		t.Fatalf("testdata is not scalePool(300, 100): %d waiting, %d running", len(s.Waiting.Job), len(s.Running))
	}
	p, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := UnpackSnapshot(mustPack(t, scalePool(t, 300, 100).Snapshot()))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, withoutForecast(p.Snapshot())), mustJSON(t, withoutForecast(want)); a != b {
		t.Fatalf("restored snapshot differs from the pool's:\n%s\n%s", a, b)
	}
}

// TestSnapshotV3Restores restores the committed packed snapshot and checks it against the same
// scenario built by this code.
func TestSnapshotV3Restores(t *testing.T) {
	b, err := os.ReadFile(snapshotV3File)
	if err != nil {
		t.Fatal(err)
	}
	s, err := UnpackSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Restore(s)
	if err != nil {
		t.Fatal(err)
	}
	want := withoutForecast(v2Scenario(t).Snapshot())
	if a, b := mustJSON(t, p.Snapshot()), mustJSON(t, want); a != b {
		t.Fatalf("restored version-3 snapshot differs from the scenario:\n%s\n%s", a, b)
	}
	checkInvariants(t, p)
}

// BenchmarkPackSnapshot packs the 50,000-waiting state, as an allocator does when it continues
// as new; BenchmarkUnpackSnapshot unpacks and restores it, as the next run does.
func BenchmarkPackSnapshot(b *testing.B) {
	s := scalePool(b, 50000, 5000).Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		mustPack(b, s)
	}
}

func BenchmarkUnpackSnapshot(b *testing.B) {
	packed := mustPack(b, scalePool(b, 50000, 5000).Snapshot())
	b.ReportAllocs()
	for b.Loop() {
		s, err := UnpackSnapshot(packed)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Restore(s); err != nil {
			b.Fatal(err)
		}
	}
}
