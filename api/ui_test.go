package api

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestGPUGridStates: every state a GPU can show, and what a user of another
// workspace sees of it.
func TestGPUGridStates(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := protocol.QueueView{Region: "R", Allocation: "a", WaitingByClass: map[string]int{"high": 1, "medium": 2}}
	v.Nodes = []scheduler.NodeInfo{
		{Name: "n1", GPUs: 2}, {Name: "n2", GPUs: 2}, {Name: "n3", GPUs: 2, HeldGPUs: 1, HeldFor: "lm-mpi-job-pre"},
		{Name: "n4", GPUs: 2, ReservedFor: "lm-mpi-job-big"}, {Name: "n5", GPUs: 2, Lost: true},
	}
	v.Running = []scheduler.RunningInfo{
		{Job: "lm-mpi-job-mine", Attempt: 2, Kind: scheduler.KindJob, Class: scheduler.High, GPUs: 2, StartedAt: at, Workspace: "team-a", OnLoan: true,
			Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "n1", GPUs: []int{0, 1}}}},
		{Job: "lm-mpi-job-theirs", Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Low, GPUs: 4, StartedAt: at, Workspace: "team-b",
			Releasing: true, Released: []int{1}, PreemptedBy: &scheduler.Preemptor{Job: "lm-mpi-job-pre", Class: scheduler.Medium},
			Nominees:  []string{"lm-mpi-job-pre", "lm-mpi-job-pre"},
			Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "n2", GPUs: []int{0, 1}}, {Worker: 1, Node: "n3", GPUs: []int{0, 1}}}},
	}
	s := &Server{}
	alice := Principal{User: "alice", Workspace: "team-a", Role: RoleUser}
	rd := s.redactor(alice)
	rd.know("lm-mpi-job-mine")
	rd.hide("lm-mpi-job-theirs", "lm-mpi-job-pre", "lm-mpi-job-big")
	g := gpuGrid(v, alice, rd)

	states := func(n int) []string {
		var out []string
		for _, c := range g.Nodes[n].Cells {
			out = append(out, c.State)
		}
		return out
	}
	assert.Equal(t, []string{"held", "held"}, states(0))
	assert.Equal(t, []string{"nominated", "nominated"}, states(1), "a preempted job's stopping worker: nominated to its preemptor")
	assert.Equal(t, []string{"nominated", "free"}, states(2), "its released worker's GPUs: one held for the preemptor, the other free")
	assert.Equal(t, []string{"reserved", "reserved"}, states(3))
	assert.Equal(t, []string{"lost", "lost"}, states(4))

	mine := g.Nodes[0].Cells[1]
	assert.Equal(t, "lm-mpi-job-mine", mine.Job)
	assert.Equal(t, 2, mine.Attempt)
	require.NotNil(t, mine.Worker)
	require.NotNil(t, mine.Since)
	assert.True(t, mine.OnLoan, "a job started on a reservation: its GPUs say it is on loan")
	assert.False(t, g.Nodes[1].Cells[0].OnLoan)
	theirs := g.Nodes[1].Cells[0]
	assert.Equal(t, hiddenName, theirs.Job)
	assert.Equal(t, "low", theirs.Class)
	assert.Equal(t, 4, theirs.JobGPUs)
	assert.Equal(t, hiddenName, theirs.NominatedTo)
	assert.Zero(t, theirs.Attempt, "nothing but class and size of another workspace's job")
	assert.Nil(t, theirs.Since)
	assert.Equal(t, hiddenName, g.Nodes[3].ReservedFor)

	assert.Equal(t, map[string]int{"total": 10, "held": 2, "nominated": 3, "free": 1, "reserved": 2, "lost": 2}, g.Totals)
	assert.Equal(t, []uiClassTotal{{Class: "high", GPUs: 2, Running: 1, Waiting: 1}, {Class: "medium", Waiting: 2}, {Class: "low", GPUs: 2, Running: 1}}, g.ByClass)
	assert.Equal(t, []uiWorkspaceTotal{{Workspace: otherWorkspaces, GPUs: 2, Running: 1}, {Workspace: "team-a", GPUs: 2, Running: 1}}, g.ByWorkspace)

	// An admin sees every name.
	root := Principal{User: "root", Workspace: "ops", Role: RoleAdmin}
	ga := gpuGrid(v, root, s.redactor(root))
	assert.Equal(t, "lm-mpi-job-theirs", ga.Nodes[1].Cells[0].Job)
	assert.Equal(t, "lm-mpi-job-pre", ga.Nodes[1].Cells[0].NominatedTo)
	assert.Equal(t, []string{"team-a", "team-b"}, []string{ga.ByWorkspace[0].Workspace, ga.ByWorkspace[1].Workspace})
}

// TestUIAssets: the pages are served, embedded, with a policy that lets
// them load nothing from elsewhere.
func TestUIAssets(t *testing.T) {
	s, _, _ := fuzzServer(t)
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		require.Equal(t, 200, rec.Code, p)
		assert.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'self'", p)
		body := strings.ReplaceAll(rec.Body.String(), "http://www.w3.org/2000/svg", "") // a name, not a load
		assert.NotContains(t, body, "http://", p)
		assert.NotContains(t, body, "https://", p)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/api/allocations/default/gpus", nil))
	assert.Equal(t, 401, rec.Code, "the data needs a token")
	for _, p := range []string{"/ui/nothing.js", "/ui/index.html", "/ui/api/"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		assert.Equal(t, 404, rec.Code, p)
		assert.Contains(t, rec.Body.String(), `"error"`, "%s: the API's error body", p)
	}
}

// TestTimelineBars: a bar per worker, ending when that worker released its
// capacity; a preempted attempt points at its preemptor's next attempt; a
// user sees another workspace's bars without name or reason.
func TestTimelineBars(t *testing.T) {
	at := func(s int) *time.Time { v := time.Date(2026, 12, 2, 12, 0, s, 0, time.UTC); return &v }
	victim, pre := "lm-mpi-job-victim", "lm-mpi-job-pre"
	jobs := []client.JobSummary{{JobName: pre, Workspace: "team-b"}, {JobName: victim, Workspace: "team-a"}}
	statuses := []*protocol.JobStatus{
		{JobName: pre, Priority: "high", Kind: scheduler.KindJob, GPUs: 2, Attempts: []protocol.AttemptRecord{
			{Number: 1, StartedAt: at(30), Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "n1", GPUs: []int{0, 1}}}}}},
		{JobName: victim, Priority: "low", Kind: scheduler.KindJob, GPUs: 4, Attempts: []protocol.AttemptRecord{
			{Number: 1, StartedAt: at(0), EndedAt: at(29), EndReason: "preempted by " + pre + " (high job)",
				Preemptor: &scheduler.Preemptor{Job: pre, Class: scheduler.High},
				Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "n1", GPUs: []int{0, 1}}, {Worker: 1, Node: "n2", GPUs: []int{0, 1}}},
				Released:  []protocol.WorkerRelease{{Worker: 1, At: *at(20)}, {Worker: 0, At: *at(28)}}},
			{Number: 2, StartedAt: nil}}},
	}
	s := &Server{}
	alice := Principal{User: "alice", Workspace: "team-a", Role: RoleUser}
	rd := s.redactor(alice)
	rd.know(victim)
	rd.hide(pre)
	bars := timelineBars(jobs, statuses, *at(-3600), rd)
	require.Len(t, bars, 3)
	byID := map[int]uiBar{}
	for _, b := range bars {
		byID[b.ID] = b
	}
	v0, v1, p := bars[0], bars[1], bars[2]
	if v0.Worker != 0 {
		v0, v1 = v1, v0
	}
	assert.Equal(t, victim, v0.Job)
	assert.Equal(t, *at(28), *v0.End, "worker 0 released at 28s")
	assert.Equal(t, *at(20), *v1.End, "worker 1 released at 20s")
	assert.Equal(t, "preempted by "+hiddenName+" (high job)", v0.EndReason)
	assert.Equal(t, hiddenName, v0.PreemptedBy)
	require.Len(t, v0.PreemptorBars, 1)
	assert.Equal(t, hiddenName, byID[v0.PreemptorBars[0]].Job)
	assert.Equal(t, hiddenName, p.Job)
	assert.Equal(t, "high", p.Class)
	assert.Nil(t, p.End, "it still runs")
}
