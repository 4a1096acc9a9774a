package api

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster/local/logfile"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// fakeBackend stands in for Temporal where no server is needed: it keeps
// jobs (with a status each) and one queue view, and records the jobs that
// would have started.
type fakeBackend struct {
	cfg   *config.Config
	mu    sync.Mutex
	jobs  map[string]*fakeJob
	base  map[string]*fakeJob // restored by reset
	queue protocol.QueueView
	subs  int
	seq   int
	// describeDelay is added to Describe of an existing job (Temporal
	// takes longer to describe a job than to say it does not exist).
	describeDelay time.Duration
	// describedAt is when Describe was last entered.
	describedAt time.Time
	// ignoresFilters plays an allocator older than the queue filters.
	ignoresFilters bool
}

type fakeJob struct {
	info    client.JobInfo
	status  protocol.JobStatus
	created time.Time
}

func newFakeBackend(cfg *config.Config) *fakeBackend {
	return &fakeBackend{cfg: cfg, jobs: map[string]*fakeJob{}, base: map[string]*fakeJob{}}
}

// add records a job as it is now; seal makes the jobs the ones reset restores.
func (f *fakeBackend) add(info client.JobInfo, st protocol.JobStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	st.JobName = info.JobName
	if st.State == "" {
		st.State = protocol.JobState(info.Status)
	}
	info.Status = string(st.State)
	f.jobs[info.JobName] = &fakeJob{info: info, status: st, created: time.Unix(1_700_000_000+int64(f.seq), 0)}
}

func (f *fakeBackend) seal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.base = maps.Clone(f.jobs)
}

// reset forgets what was submitted since seal.
func (f *fakeBackend) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = maps.Clone(f.base)
	f.subs = 0
}

func (f *fakeBackend) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs
}

func (f *fakeBackend) SubmitChecked(ctx context.Context, spec protocol.CheckedSpec, opts client.SubmitOptions) (client.Submission, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := opts.Name
	if name == "" {
		name = client.NewJobName(spec.Kind)
	}
	if _, ok := f.jobs[name]; !ok {
		f.subs++
		f.seq++
		f.jobs[name] = &fakeJob{
			info: client.JobInfo{JobName: name, Status: string(protocol.StatePending), Kind: string(spec.Kind),
				Author: spec.Author, Workspace: spec.Workspace, Running: true, RequestHash: opts.RequestHash, SentHash: opts.SentHash},
			status: protocol.JobStatus{JobName: name, State: protocol.StatePending, Kind: spec.Kind, Spec: spec.JobSpec,
				Priority: spec.PriorityClass, Region: spec.Region, Allocation: spec.AllocationName, InstanceType: spec.InstanceType,
				NWorkers: spec.NWorkers, MaxRetry: spec.MaxRetry, Attempt: 1},
			created: time.Unix(1_700_000_000+int64(f.seq), 0),
		}
	}
	return client.Submission{JobName: name, Status: string(protocol.StatePending)}, nil
}

func (f *fakeBackend) Describe(ctx context.Context, name string) (client.JobInfo, error) {
	f.mu.Lock()
	f.describedAt = time.Now()
	j, ok := f.jobs[name]
	delay := f.describeDelay
	f.mu.Unlock()
	if !ok {
		return client.JobInfo{}, client.ErrJobNotFound
	}
	time.Sleep(delay)
	return j.info, nil
}

func (f *fakeBackend) Status(ctx context.Context, name string) (protocol.JobStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[name]
	if !ok {
		return protocol.JobStatus{}, client.ErrJobNotFound
	}
	st := j.status
	st.Attempts = slices.Clone(st.Attempts)
	st.Preemptors = slices.Clone(st.Preemptors)
	st.WaitingFor = slices.Clone(st.WaitingFor)
	return st, nil
}

func (f *fakeBackend) Cancel(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.jobs[name]; !ok {
		return client.ErrJobNotFound
	}
	return nil
}

// Checkpoint books a checkpoint on a running job at the fake's clock.
func (f *fakeBackend) Checkpoint(ctx context.Context, job string, attempt int, progress float64) (protocol.CheckpointReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[job]
	if !ok {
		return protocol.CheckpointReply{}, client.ErrJobNotFound
	}
	if j.status.State != protocol.StateRunning {
		return protocol.CheckpointReply{}, fmt.Errorf("%w: job %s is %s", client.ErrJobNotRunning, job, j.status.State)
	}
	if attempt == 0 {
		attempt = j.status.Attempt
	}
	return protocol.CheckpointReply{Job: job, Attempt: attempt, At: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, nil
}

// list filters as visibility does, newest first.
func (f *fakeBackend) list(lf client.ListFilter) []client.JobSummary {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeJob
	for _, j := range f.jobs {
		switch {
		case lf.Workspace != "" && j.info.Workspace != lf.Workspace,
			lf.Author != "" && j.info.Author != lf.Author,
			len(lf.Names) > 0 && !slices.Contains(lf.Names, j.info.JobName),
			len(lf.States) > 0 && !slices.Contains(lf.States, j.info.Status),
			lf.Allocation != "" && j.status.Allocation != lf.Allocation,
			lf.HasRun && j.info.Status == string(protocol.StatePending) && j.status.Attempt <= 1,
			lf.Region != "" && j.status.Region != lf.Region:
			continue
		}
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].created.After(out[b].created) })
	var rows []client.JobSummary
	for _, j := range out {
		rows = append(rows, client.JobSummary{JobName: j.info.JobName, Status: j.info.Status, Kind: j.info.Kind,
			Priority: j.status.Priority, Region: j.status.Region, Allocation: j.status.Allocation, Author: j.info.Author,
			Workspace: j.info.Workspace, GPUs: int64(j.status.GPUs), Attempt: int64(j.status.Attempt), CreatedAt: j.created,
			JobDesc: j.status.Spec.JobDesc, InstanceType: j.status.InstanceType, RunID: "run-" + j.info.JobName})
	}
	return rows
}

func (f *fakeBackend) List(ctx context.Context, lf client.ListFilter) ([]client.JobSummary, error) {
	rows := f.list(lf)
	rows = rows[min(lf.Offset, len(rows)):]
	if lf.Limit > 0 && len(rows) > lf.Limit {
		rows = rows[:lf.Limit]
	}
	return rows, nil
}

func (f *fakeBackend) Count(ctx context.Context, lf client.ListFilter) (int64, error) {
	return int64(len(f.list(lf))), nil
}

func (f *fakeBackend) QueuePage(ctx context.Context, region, allocation string, page protocol.QueuePage) (protocol.QueueView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := page.Validate(); err != nil {
		return protocol.QueueView{}, err
	}
	page = page.WithDefaults()
	v := f.queue
	v.Region, v.Allocation, v.Offset, v.Limit = region, allocation, page.Offset, page.Limit
	v.WaitingTotal = len(v.Waiting)
	if page.Filtered() && !f.ignoresFilters { // as the allocator does, with each waiting job's workspace from its record
		var kept []scheduler.WaitingInfo
		for _, w := range v.Waiting {
			r := scheduler.Request{Class: w.Class, Kind: w.Kind}
			if j := f.jobs[w.Job]; j != nil {
				r.Workspace = j.info.Workspace
			}
			if page.Keeps(&r) {
				kept = append(kept, w)
			}
		}
		v.Waiting, v.WaitingMatched = kept, len(kept)
	}
	v.Waiting = v.Waiting[min(page.Offset, len(v.Waiting)):]
	v.Waiting = v.Waiting[:min(page.Limit, len(v.Waiting))]
	return v, nil
}

func (f *fakeBackend) Health(ctx context.Context) error { return nil }

// DryRun answers that the job would start on the first node of its allocation (the fake has no allocator).
func (f *fakeBackend) DryRun(ctx context.Context, spec protocol.CheckedSpec) (client.DryRunAnswer, error) {
	return client.DryRunAnswer{Region: spec.Region, Allocation: spec.AllocationName, DryRun: scheduler.DryRun{Start: true}}, nil
}

// ExpectedStart answers, for a waiting job, that it starts when alice's job
// ends (a name bob must not see), an hour from the fake's clock.
func (f *fakeBackend) ExpectedStart(ctx context.Context, region, allocation, job string) (*scheduler.ExpectedStart, error) {
	return &scheduler.ExpectedStart{At: time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC), Because: "if " + jobA + " ends by its time limit at 13:00"}, nil
}

// LogSource reads the log files the tests write under the data dir.
func (f *fakeBackend) LogSource() (client.LogSource, error) {
	return logfile.Source{DataDir: f.cfg.DataDir}, nil
}

var _ client.Jobs = (*fakeBackend)(nil)

// The two workspaces of the fake: bob (team-b) asks, alice (team-a) owns
// the jobs whose names must never reach bob.
const (
	jobA      = "lm-mpi-job-aaaaaaaa-0000-4000-8000-00000000000a" // alice's, preempted bob's job
	jobA2     = "lm-mpi-job-aaaaaaaa-0000-4000-8000-0000000000a2" // alice's, waiting
	nbA       = "jupyter-aaaaaaaa-0000-4000-8000-00000000000b"    // alice's notebook
	cliA      = "alice-secret-run"                                // alice's, named by hand with the CLI
	jobB      = "lm-mpi-job-bbbbbbbb-0000-4000-8000-00000000000b" // bob's, preempted by jobA
	nbB       = "jupyter-bbbbbbbb-0000-4000-8000-00000000000b"    // bob's notebook
	teamA     = "team-a"
	teamB     = "team-b"
	bobToken  = "tq_bob-token"
	aliceTok  = "tq_alice-token"
	adminTok  = "tq_admin-token"
	fakeAlloc = "default"
)

// foreignToBob are the names bob must never see.
var foreignToBob = []string{jobA, jobA2, nbA, cliA}

// seedTwoWorkspaces fills fb with jobs of two workspaces whose statuses and
// queue mention each other everywhere a job name can go, and writes bob's
// job's log under dataDir.
func seedTwoWorkspaces(t testing.TB, fb *fakeBackend, dataDir string) {
	t.Helper()
	now := time.Unix(1_700_000_500, 0).UTC()
	ended := now.Add(time.Minute)
	preA := &scheduler.Preemptor{Job: jobA, Class: scheduler.High, Kind: scheduler.KindJob}
	place := []scheduler.WorkerPlacement{{Worker: 0, Node: "sr006-a100plus-1", GPUs: []int{0, 1}}}
	spec := protocol.JobSpec{Script: "train.py", BaseImage: "img", InstanceType: "a100plus.2gpu", Region: "SR006", AllocationName: fakeAlloc,
		NWorkers: 1, Type: "binary", PriorityClass: "low", MaxRetry: 3, Author: "bob", Workspace: teamB, Kind: scheduler.KindJob,
		JobDesc: "bob's run"}
	fb.add(client.JobInfo{JobName: jobB, Kind: "job", Author: "bob", Workspace: teamB, Running: true},
		protocol.JobStatus{State: protocol.StatePending, Kind: scheduler.KindJob, Priority: "low", Region: "SR006", Allocation: fakeAlloc,
			InstanceType: spec.InstanceType, NWorkers: 1, GPUs: 2, MaxRetry: 3, Attempt: 2, Restarts: 1, Spec: spec,
			Message:    "attempt 1 preempted by " + jobA + " (high job): preempted to make room for high-priority job " + jobA + ", which needs 2 GPUs",
			Reason:     "waiting for 2 GPUs that " + jobA + " and " + cliA + " hold; " + jobA2 + " is ahead.",
			WaitingFor: []string{jobA, cliA}, Position: 2, CreatedAt: now,
			Preemptors: []scheduler.Preemptor{*preA, {Job: nbA, Class: scheduler.High, Kind: scheduler.KindNotebook}},
			Attempts: []protocol.AttemptRecord{
				{Number: 1, QueuedAt: now, StartedAt: &now, EndedAt: &ended, Placement: place, Preemptor: preA,
					EndReason: "preempted by " + jobA + " (high job): preempted to make room for high-priority job " + jobA + "."},
				{Number: 2, QueuedAt: ended},
			}})
	fb.add(client.JobInfo{JobName: nbB, Kind: "notebook", Author: "bob", Workspace: teamB, Running: true},
		protocol.JobStatus{State: protocol.StateRunning, Kind: scheduler.KindNotebook, Priority: "high", Region: "SR006", Allocation: fakeAlloc,
			Attempt: 1, CreatedAt: now, Attempts: []protocol.AttemptRecord{{Number: 1, QueuedAt: now, StartedAt: &now, Placement: place}}})
	for _, a := range []struct {
		name, kind string
		state      protocol.JobState
	}{{jobA, "job", protocol.StateRunning}, {jobA2, "job", protocol.StatePending}, {nbA, "notebook", protocol.StateRunning}, {cliA, "job", protocol.StateRunning}} {
		fb.add(client.JobInfo{JobName: a.name, Kind: a.kind, Author: "alice", Workspace: teamA, Running: true},
			protocol.JobStatus{State: a.state, Kind: scheduler.Kind(a.kind), Priority: "high", Region: "SR006", Allocation: fakeAlloc, Attempt: 1,
				CreatedAt: now, Message: "running; it preempted " + jobB,
				Attempts: []protocol.AttemptRecord{{Number: 1, QueuedAt: now, StartedAt: &now, Placement: place,
					EndReason: "took the GPUs of " + jobB}},
				Spec: protocol.JobSpec{Author: "alice", Workspace: teamA, JobDesc: "alice's secret, not " + jobB}})
	}
	fb.queue = protocol.QueueView{View: scheduler.View{
		Waiting: []scheduler.WaitingInfo{
			{Job: jobA2, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.High, Workers: 1, GPUs: 2, Position: 1,
				Reason: "can start now: 2 GPUs that " + jobB + " released are free", SubmittedAt: now},
			{Job: jobB, Attempt: 2, Kind: scheduler.KindJob, Class: scheduler.Low, Workers: 1, GPUs: 2, Position: 2,
				Reason:     "waiting for 2 GPUs; " + jobA2 + " (position 1) is ahead, and " + jobA + " and " + cliA + " hold them",
				WaitingFor: []string{jobA2, jobA, cliA}, Nominated: []string{cliA}, SubmittedAt: now},
		},
		Running: []scheduler.RunningInfo{
			{Job: jobA, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.High, GPUs: 2, StartedAt: now, Placement: place},
			{Job: cliA, Attempt: 1, Kind: scheduler.KindJob, Class: scheduler.Medium, GPUs: 2, StartedAt: now, Placement: place,
				Releasing: true, PreemptedBy: &scheduler.Preemptor{Job: jobA, Class: scheduler.High, Kind: scheduler.KindJob}},
			{Job: nbB, Attempt: 1, Kind: scheduler.KindNotebook, Class: scheduler.High, GPUs: 1, StartedAt: now, Placement: place},
		},
		Nodes: []scheduler.NodeInfo{{Name: "sr006-a100plus-1", Family: "a100plus", GPUs: 8, AllocatedGPUs: 8}},
	}}
	fb.seal()
	dir := filepath.Join(dataDir, "jobs", jobB, "attempt-1", "worker-0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := "[trainq-supervisor] " + jobB + "/attempt-1/worker-0: starting 1 process(es)\nepoch 1\nepoch 2\n"
	if err := os.WriteFile(filepath.Join(dir, "worker.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
}

// twoWorkspaceServer is a server over a seeded fake with tokens for bob,
// alice and an admin.
func twoWorkspaceServer(tb testing.TB) (*Server, *fakeBackend) {
	tb.Helper()
	cfg := config.Default()
	cfg.DataDir = tb.TempDir()
	fb := newFakeBackend(cfg)
	seedTwoWorkspaces(tb, fb, cfg.DataDir)
	tokens := &Tokens{}
	var err error
	tokens.entries, err = parseEntries(TokenFile{Tokens: []TokenEntry{
		{SHA256: HashToken(bobToken), User: "bob", Workspace: teamB, Role: RoleUser},
		{SHA256: HashToken(aliceTok), User: "alice", Workspace: teamA, Role: RoleUser},
		{SHA256: HashToken(adminTok), User: "root", Workspace: "ops", Role: RoleAdmin},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Options{Config: cfg, Backend: fb, Tokens: tokens, PollInterval: 5 * time.Millisecond, NotFoundFloor: time.Microsecond})
	if err != nil {
		tb.Fatal(err)
	}
	return s, fb
}

// leaked returns the names of foreign that appear in text.
func leaked(text string, foreign []string) []string {
	var out []string
	for _, n := range foreign {
		if strings.Contains(text, n) {
			out = append(out, n)
		}
	}
	return out
}
