package simulate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

// TestRackGroupsEachFamilyInOrder: racks hold one family's nodes in node order, blocks group
// consecutive racks.
func TestRackGroupsEachFamilyInOrder(t *testing.T) {
	w := &Workload{Nodes: append(nodes(5, 8), scheduler.Node{Name: "m1", Family: "b", GPUs: 8}, scheduler.Node{Name: "m2", Family: "b", GPUs: 8})}
	w.Nodes[1].Family, w.Nodes[1].Name = "b", "m0" // a b node among the a nodes joins the b racks
	if err := w.Rack(2, 2); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range w.Nodes {
		got = append(got, fmt.Sprintf("%s:%s/%s", n.Name, n.Topology[LevelBlock], n.Topology[LevelRack]))
	}
	want := "n1:b1/r1 m0:b1/r2 n3:b1/r1 n4:b2/r3 n5:b2/r3 m1:b1/r2 m2:b2/r4"
	if strings.Join(got, " ") != want {
		t.Fatalf("racks %s, want %s", strings.Join(got, " "), want)
	}
	if err := w.Rack(0, 1); err == nil {
		t.Fatal("racks of no node accepted")
	}
}

// TestGangsSpreadWholeNodeJobs: a whole-node job becomes a gang of 2 to 4 workers (at most the
// nodes that fit one) with the same GPU-hours; other jobs stay as they were.
func TestGangsSpreadWholeNodeJobs(t *testing.T) {
	w := &Workload{Nodes: nodes(3, 8)}
	for i := range 40 {
		w.Jobs = append(w.Jobs, jb(fmt.Sprintf("whole-%d", i), 0, scheduler.Medium, 8, 12*time.Hour))
	}
	w.Jobs = append(w.Jobs, jb("small", 0, scheduler.Medium, 4, time.Hour))
	if err := w.Gangs(1, 1); err != nil {
		t.Fatal(err)
	}
	sizes := map[int]int{}
	for _, j := range w.Jobs[:40] {
		sizes[j.Workers]++
		if j.Workers < 2 || j.Workers > 3 {
			t.Fatalf("%s has %d workers; three nodes fit one", j.ID, j.Workers)
		}
		if j.Runtime*time.Duration(j.Workers) != 12*time.Hour {
			t.Fatalf("%s: %d workers × %s", j.ID, j.Workers, j.Runtime)
		}
	}
	if sizes[2] == 0 || sizes[3] == 0 {
		t.Fatalf("gang sizes %v: want both 2 and 3", sizes)
	}
	if s := w.Jobs[40]; s.Workers != 1 || s.Runtime != time.Hour {
		t.Fatalf("the 4-GPU job changed: %+v", s)
	}
	if err := w.Gangs(1.5, 1); err == nil {
		t.Fatal("a share over 1 accepted")
	}
}

// TestGangStatsByTopology: with the topology a gang goes to the rack that has room; with
// topology=off it takes the best fit, across racks; the report counts both.
func TestGangStatsByTopology(t *testing.T) {
	w := &Workload{Nodes: nodes(4, 8)}
	if err := w.Rack(2, 4); err != nil { // r1: n1, n2; r2: n3, n4
		t.Fatal(err)
	}
	pinned := jb("pinned", 0, scheduler.Medium, 8, 10*time.Hour)
	pinned.Nodes = []string{"n2"}
	gang := jb("gang", time.Minute, scheduler.Medium, 8, time.Hour)
	gang.Workers = 2
	w.Jobs = []Job{pinned, gang}
	on, err := ParsePolicy("best-effort", scheduler.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	off, err := ParsePolicy("flat:topology=off", scheduler.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pol     Policy
		oneRack int
	}{{on, 1}, {off, 0}} {
		r := run(t, w, tc.pol, Options{})
		g := r.Gangs
		if g == nil || g.Count != 1 || g.Started != 1 || g.OneRack != tc.oneRack || g.OneBlock != 1 {
			t.Fatalf("%s: gangs %+v, want one started, %d in one rack", tc.pol.Name, g, tc.oneRack)
		}
	}
}

// TestGangRequiresItsRack: given a 3-node gang and racks r1 (n1 half taken, n2, n3) and r2 (n4,
// n5 half taken, n6), when it requires a rack it waits until one holds it whole (r1, once the job
// on n1 ends after 10 h), where the preference alone starts it at once across the racks; nothing
// is moved (the jobs in its way are pinned).
func TestGangRequiresItsRack(t *testing.T) {
	w := &Workload{Nodes: nodes(6, 8)}
	if err := w.Rack(3, 6); err != nil {
		t.Fatal(err)
	}
	var jobs []Job
	for i, n := range []string{"n1", "n4", "n5"} {
		j := jb(fmt.Sprint("pinned", i), 0, scheduler.Medium, 4, 10*time.Hour)
		j.Nodes = []string{n}
		jobs = append(jobs, j)
	}
	gang := jb("gang", time.Minute, scheduler.Medium, 8, time.Hour)
	gang.Workers = 3
	w.Jobs = append(jobs, gang)
	for _, tc := range []struct {
		spec    string
		oneRack int
		atLeast time.Duration
		atMost  time.Duration
	}{{"pref:preferred_topology=rack", 0, 0, time.Minute}, {"req:required_topology=rack", 1, 9 * time.Hour, 11 * time.Hour}} {
		pol, err := ParsePolicy(tc.spec, scheduler.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		r := run(t, w, pol, Options{})
		g := r.Gangs
		if g == nil || g.Started != 1 || g.OneRack != tc.oneRack {
			t.Fatalf("%s: gangs %+v, want it started, %d in one rack", tc.spec, g, tc.oneRack)
		}
		if wait := g.Wait.Max.D(); wait < tc.atLeast || wait > tc.atMost {
			t.Fatalf("%s: the gang waited %s, want %s to %s", tc.spec, wait, tc.atLeast, tc.atMost)
		}
		if r.Moves != 0 {
			t.Fatalf("%s: %d moves, want none (the jobs in its way are pinned)", tc.spec, r.Moves)
		}
	}
}

// TestMovesOfOneJobAreCounted: given racks r1 (n1, n2), r2 (n3, n4) and r3 (n5), a one-GPU job
// on n1 and two gangs that each require a rack, when the first gang moves it out of r1 (to n4)
// and the second, once n3 frees, out of r2 (to n5), then the report counts two moves of one job,
// the closest two no less than min_runtime_before_move apart (its second attempt had to run
// that long before it could be moved again).
func TestMovesOfOneJobAreCounted(t *testing.T) {
	w := &Workload{Nodes: nodes(5, 8)}
	if err := w.Rack(2, 4); err != nil {
		t.Fatal(err)
	}
	small := jb("small", 0, scheduler.Medium, 1, 100*time.Hour)
	onN3 := jb("on-n3", 0, scheduler.Medium, 8, 3*time.Hour)
	onN3.Nodes = []string{"n3"}
	onN5 := jb("on-n5", 0, scheduler.Medium, 8, 2*time.Hour)
	onN5.Nodes = []string{"n5"}
	first := jb("first", time.Minute, scheduler.Medium, 8, 50*time.Hour)
	second := jb("second", 90*time.Minute, scheduler.Medium, 8, time.Hour)
	first.Workers, second.Workers = 2, 2
	w.Jobs = []Job{small, onN3, onN5, first, second}
	pol, err := ParsePolicy("req:required_topology=rack", scheduler.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, w, pol, Options{})
	if g := r.Gangs; g == nil || g.Started != 2 || g.OneRack != 2 {
		t.Fatalf("gangs %+v, want both started in one rack", g)
	}
	if r.Moves != 2 || r.MostMovesOfOneJob != 2 {
		t.Fatalf("%d moves, at most %d of one job; want 2 of the one-GPU job", r.Moves, r.MostMovesOfOneJob)
	}
	if least := scheduler.DefaultMinRuntimeBeforeMove; r.ClosestMovesOfOneJob.D() < least {
		t.Fatalf("its two moves %s apart, want at least %s", r.ClosestMovesOfOneJob.D(), least)
	}
	t.Logf("two moves of one job, %s apart", r.ClosestMovesOfOneJob.D())
}
