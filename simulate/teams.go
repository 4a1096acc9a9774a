package simulate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trainq/trainq/scheduler"
)

// TeamName is the workspace of the i-th synthetic team (1-based): team-1, team-2, ...
func TeamName(i int) string { return fmt.Sprintf("team-%d", i) }

// TeamOf is the synthetic team (1 to n) of a job: a hash of the seed and its id (see idHash), so
// the same job always lands in the same team for one seed and n, and another seed draws anew.
func TeamOf(seed uint64, id string, n int) int {
	return 1 + int(idHash(seed, id)%uint64(n))
}

// AssignTeams puts every job that has no workspace in one of n synthetic teams, team-1 to team-n
// (TeamOf), and says so in a note. Jobs that have a workspace keep it.
func (w *Workload) AssignTeams(n int, seed uint64) error {
	if n < 1 {
		return fmt.Errorf("the number of teams must be at least 1, got %d", n)
	}
	counts := make([]int, n)
	kept := 0
	for i := range w.Jobs {
		j := &w.Jobs[i]
		if j.Workspace != "" {
			kept++
			continue
		}
		t := TeamOf(seed, j.ID, n)
		j.Workspace = TeamName(t)
		counts[t-1]++
	}
	parts := make([]string, n)
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%s %d", TeamName(i+1), c)
	}
	note := fmt.Sprintf("jobs put in %d synthetic teams by a hash of seed %d and the job id: %s", n, seed, strings.Join(parts, ", "))
	if kept > 0 {
		note += fmt.Sprintf("; %d jobs kept the workspace they had", kept)
	}
	w.Notes = append(w.Notes, note)
	return nil
}

// Workspaces are the workspaces of the jobs, sorted (team-2 before team-10).
func (w *Workload) Workspaces() []string {
	seen := map[string]bool{}
	var out []string
	for i := range w.Jobs {
		if ws := w.Jobs[i].Workspace; ws != "" && !seen[ws] {
			seen[ws] = true
			out = append(out, ws)
		}
	}
	slices.SortFunc(out, compareNatural)
	return out
}

// compareNatural orders strings with their runs of digits compared as numbers (team-2 before
// team-10); strings equal so (team-01, team-1) are in byte order.
func compareNatural(a, b string) int {
	if c := compareDigitRuns(a, b); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func compareDigitRuns(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// Flood makes the workspace team submit all its jobs high (a team that floods the high class),
// and says so in a note. No job in that workspace is an error.
func (w *Workload) Flood(team string) error {
	n, raised := 0, 0
	for i := range w.Jobs {
		j := &w.Jobs[i]
		if j.Workspace != team {
			continue
		}
		n++
		if j.Class != scheduler.High {
			j.Class = scheduler.High
			raised++
		}
	}
	if n == 0 {
		ws := w.Workspaces()
		if len(ws) == 0 {
			return fmt.Errorf("no job is in workspace %q: the jobs have no workspaces (give --teams N, or a workspace per job)", team)
		}
		return fmt.Errorf("no job is in workspace %q: the workspaces are %s", team, strings.Join(ws, ", "))
	}
	w.Notes = append(w.Notes, fmt.Sprintf("%s submits all its jobs high: %d of its %d jobs were medium or low", team, raised, n))
	return nil
}
