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
