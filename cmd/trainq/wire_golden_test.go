package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"github.com/trainq/trainq/internal/golden"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/jobview"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// updateJSON rewrites cmd/trainq/testdata/json from the output of the code as
// it is: run it only when a change of the CLI's JSON is intended.
var updateJSON = flag.Bool("update-json", false, "rewrite cmd/trainq/testdata/json/*.json")

// wireTime is the fixtures' clock: minute m after it is at(m).
var wireTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(minute int) *time.Time { t := wireTime.Add(time.Duration(minute) * time.Minute); return &t }

func wirePlacement() []scheduler.WorkerPlacement {
	return []scheduler.WorkerPlacement{{Worker: 1, Node: "sr006-a100plus-1", GPUs: []int{2, 3}}}
}

func wireWaiting() scheduler.WaitingInfo {
	return scheduler.WaitingInfo{Job: "lm-mpi-job-w", Attempt: 2, Kind: scheduler.KindJob, Class: scheduler.Medium, Workers: 2, MinWorkers: 1,
		Demand: scheduler.Demand{Family: "a100plus", GPUs: 2, VRAMGB: 80, CPU: 24, RAMGB: 192}, GPUs: 4, Position: 3,
		Reason: "waiting for lm-mpi-job-r to release 2 GPUs", WaitingFor: []string{"lm-mpi-job-r"}, Nominated: []string{"lm-mpi-job-v"},
		Reserved: []string{"sr006-a100plus-2"}, Nodes: []string{"sr006-a100plus-1", "sr006-a100plus-2"}, SubmittedAt: *at(-30), Seq: 17,
		ExpectedStart: &scheduler.ExpectedStart{At: *at(60), Because: "if lm-mpi-job-r ends by its time limit at 13:00",
			Earliest: *at(40), Latest: *at(120), Projected: *at(50), Samples: 120}}
}

// wireQueue is a queue view with every field set.
func wireQueue() protocol.QueueView {
	return protocol.QueueView{Region: "SR006", Allocation: "default", View: scheduler.View{
		Waiting: []scheduler.WaitingInfo{wireWaiting()},
		Running: []scheduler.RunningInfo{{Job: "lm-mpi-job-r", Attempt: 1, Kind: scheduler.KindNotebook, Class: scheduler.Low, Seq: 4, GPUs: 2,
			StartedAt: *at(-90), Releasing: true, HonorsNotice: true, Placement: wirePlacement(), Released: []int{1},
			PreemptedBy: &scheduler.Preemptor{Job: "lm-mpi-job-w", Class: scheduler.High, Kind: scheduler.KindJob}, OnLoan: true, Preemptions: 2,
			CheckpointAt: *at(-5), Workspace: "team-a", Nominees: []string{"lm-mpi-job-w"}}},
		Nodes: []scheduler.NodeInfo{{Name: "sr006-a100plus-1", Family: "a100plus", GPUs: 8, FreeGPUs: 1, AllocatedGPUs: 5, ReleasingGPUs: 2,
			Lost: true, ReservedFor: "lm-mpi-job-w", HeldGPUs: 1, HeldFor: "lm-mpi-job-v", Topology: map[string]string{"rack": "r1"}}},
	}, Offset: 2, Limit: 5, WaitingTotal: 9, WaitingMatched: 7, WaitingByClass: map[string]int{"low": 2, "medium": 4, "high": 3},
		Counters:   protocol.AllocatorCounters{Grants: 11, Preemptions: 3, Reclaimed: 2, Recoveries: 1, NodesLost: 1},
		Recovering: true, Fenced: []protocol.FencedNode{{Node: "sr006-a100plus-1", Reason: "its agent has not answered for 2m", Cause: "lost"}},
		FairShare:         []scheduler.WorkspaceUsage{{Workspace: "team-a", GPUHours: 1.5, Share: 0.25, RankedGPUHours: 1.25, GPUs: 2, Waiting: 1}},
		FairShareHalfLife: 6 * time.Hour,
	}
}

// wireStatus is a job status with every field set, its spec's included.
func wireStatus() protocol.JobStatus {
	exit, shutdownIn, internet := 137, int64(3600), true
	spec := protocol.JobSpec{Script: "train.py", BaseImage: "img", InstanceType: "a100plus.2gpu.80vG.24C.192G", Region: "SR006",
		AllocationName: "default", NWorkers: 2, Type: "pytorch2", ProcessesPerWorker: 2, JobDesc: "a test job", PriorityClass: "medium",
		MaxRetry: 3, EnvVariables: map[string]string{"K": "v"}, Flags: map[string]string{"lr": "0.1"}, CheckpointDir: "/ckpt",
		Health:    &protocol.JobHealth{LogPeriod: time.Hour, Action: protocol.HealthActionRestart, Notify: true},
		QueueName: "q1", RequestedClass: "shared-medium", Internet: &internet, CondaEnv: "env", ShmSizeClass: "large", PytorchUseEnv: true,
		ElasticMinWorkers: 1, ElasticMaxWorkers: 2, ElasticMaxRestarts: 3, IncludeNodes: []string{"sr006-a100plus-1"},
		ExcludeNodes: []string{"sr006-a100plus-2"}, TmpStorage: "10G", TimeLimit: 2 * time.Hour,
		Autoshutdown: &protocol.NotebookShutdown{ShutdownIn: &shutdownIn, ShutdownAt: "0 20 * * *", IdleTimeout: time.Hour,
			IdleRule: "allocation default", Warning: 5 * time.Minute},
		Deprecated: map[string]bool{"stop_timer": true}, Warnings: []string{"internet is not enforced"}, Kind: scheduler.KindJob,
		Author: "alice", Workspace: "team-a", AllowedNodes: []string{"sr006-a100plus-1"},
		Topology: scheduler.GangTopology{Level: "rack", Required: true}, NoMove: true}
	return protocol.JobStatus{JobName: "lm-mpi-job-s", State: protocol.StatePending, Kind: scheduler.KindJob, Priority: "medium",
		Region: "SR006", Allocation: "default", InstanceType: spec.InstanceType, NWorkers: 2, GPUs: 4, MaxRetry: 3, Attempt: 2, Restarts: 1,
		NodeLosses: 1, Message: "attempt 1 was preempted", CreatedAt: *at(-120), PendingAt: at(-20), RunningAt: at(-100), CompletedAt: at(-21),
		Position: 3, Reason: "waiting for lm-mpi-job-r", WaitingFor: []string{"lm-mpi-job-r"},
		Preemptors: []scheduler.Preemptor{{Job: "lm-mpi-job-p", Class: scheduler.High, Kind: scheduler.KindNotebook}},
		Warning:    "idle for 50 minutes", Estimate: &protocol.RuntimeEstimate{Runtime: 90 * time.Minute, Runs: 4, Basis: "jobs of this shape", Workspace: "team-a"},
		Attempts: []protocol.AttemptRecord{{Number: 1, QueuedAt: *at(-120), StartedAt: at(-100), EndedAt: at(-21), EndReason: "preempted",
			ExitCode: &exit, Preemptor: &scheduler.Preemptor{Job: "lm-mpi-job-p", Class: scheduler.High, Kind: scheduler.KindNotebook},
			Placement: wirePlacement(), OnLoan: true, URL: "http://127.0.0.1:8888/", NoticeDeadline: at(-21), NoticeReason: protocol.NoticeReasonPreempted,
			NoticedAt: at(-23), CheckpointAt: at(-22), ExitedOnNoticeAt: at(-21), Warning: "idle for 50 minutes", WarnedAt: at(-40),
			Released: []protocol.WorkerRelease{{Worker: 1, At: *at(-21)}}}},
		Spec: spec}
}

func wireDryRun() client.DryRunAnswer {
	w := wireWaiting()
	return client.DryRunAnswer{DryRun: scheduler.DryRun{Start: true, Placement: wirePlacement(), Preempts: []string{"lm-mpi-job-r"},
		Waiting: &w, ExpectedStart: &scheduler.ExpectedStart{At: *at(60), Because: "if lm-mpi-job-r ends by its time limit at 13:00",
			Earliest: *at(40), Latest: *at(120), Projected: *at(50), Samples: 120}},
		Region: "SR006", Allocation: "default", Idle: true}
}

// requireAllSet fails for each exported field of v, at any depth, that has
// its zero value, so that every JSON tag shows in the golden files.
func requireAllSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			t.Errorf("the fixture leaves %s unset", path)
			return
		}
		requireAllSet(t, path, v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			if v.Interface().(time.Time).IsZero() {
				t.Errorf("the fixture leaves %s unset", path)
			}
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				requireAllSet(t, path+"."+f.Name, v.Field(i))
			}
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("the fixture leaves %s unset", path)
			return
		}
		if v.Kind() == reflect.Slice {
			requireAllSet(t, path+"[0]", v.Index(0))
		}
	default:
		if v.Type() == reflect.TypeOf(scheduler.Low) {
			return // low is the zero class, and as much a value as high
		}
		if v.IsZero() {
			t.Errorf("the fixture leaves %s unset", path)
		}
	}
}

// TestCLIJSON pins what each command prints with --output json where the
// value printed is made from what the scheduler, the allocator or a job
// reports, from fixtures that set every field: a change to those structs
// must not change the JSON that scripts read.
func TestCLIJSON(t *testing.T) {
	var topOut, notice, specDryRun string
	{
		var out bytes.Buffer
		g := newGlobals(strings.NewReader(""), &out, &out)
		g.Output = outputJSON
		tp := &top{g: g, size: func() (int, int) { return 0, 0 },
			fetch: func(context.Context) (protocol.QueueView, error) { return wireQueue(), nil }}
		require.NoError(t, tp.run(context.Background()))
		topOut = out.String()
	}
	{
		n := protocol.WorkerNotice{Reason: protocol.NoticeReasonPreempted, By: &protocol.NoticeBy{Class: "high", Kind: scheduler.KindNotebook},
			Deadline: *at(5), Job: "lm-mpi-job-r", Attempt: 2}
		requireAllSet(t, "notice", reflect.ValueOf(n))
		data, err := json.Marshal(n)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "notice.json")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		t.Setenv(cluster.NoticeFileEnv, path)
		r := cli(t, "", "notice", "--output", "json")
		require.Equal(t, 0, r.code, r.stderr)
		notice = r.stdout
	}
	{
		r := cli(t, "", "submit", "--dry-run", "-f", seedPath, "--output", "json")
		require.Equal(t, 0, r.code, r.stderr)
		specDryRun = r.stdout
	}
	for _, tc := range []struct {
		name    string
		fixture any        // what the client answers, checked to set every field
		printed func() any // what the command prints
		out     string     // or what it printed, run for real
	}{
		{name: "queue", fixture: wireQueue(), printed: func() any { return queueOutput(wireQueue()) }},
		// Zero values pin what is left out (omitempty) and what is null.
		{name: "queue-empty", printed: func() any { return queueOutput(protocol.QueueView{Region: "SR006", Allocation: "default"}) }},
		{name: "queue-zero-values", printed: func() any {
			return queueOutput(protocol.QueueView{View: scheduler.View{Waiting: []scheduler.WaitingInfo{{}}, Running: []scheduler.RunningInfo{{}},
				Nodes: []scheduler.NodeInfo{{}}}, FairShare: []scheduler.WorkspaceUsage{{}}, Fenced: []protocol.FencedNode{{}}})
		}},
		{name: "top", fixture: wireQueue(), out: topOut},
		{name: "status", fixture: wireStatus(), printed: func() any {
			return statusOutput(wireStatus(), &scheduler.ExpectedStart{At: *at(60), Because: "if lm-mpi-job-r ends by its time limit at 13:00"})
		}},
		{name: "status-zero-values", printed: func() any {
			return statusOutput(protocol.JobStatus{Attempts: []protocol.AttemptRecord{{}}}, &scheduler.ExpectedStart{})
		}},
		{name: "status-no-eta", printed: func() any { return statusOutput(wireStatus(), nil) }},
		{name: "submit-test-only", fixture: wireDryRun(), printed: func() any { return dryRunOutput(wireDryRun()) }},
		{name: "submit-test-only-waits", printed: func() any {
			w := wireWaiting()
			return dryRunOutput(client.DryRunAnswer{DryRun: scheduler.DryRun{Waiting: &w}, Region: "SR006", Allocation: "default"})
		}},
		{name: "submit-dry-run", out: specDryRun},
		{name: "checkpoint", fixture: protocol.CheckpointReply{Job: "lm-mpi-job-r", Attempt: 2, At: *at(1)},
			printed: func() any {
				return jobview.CheckpointOf(protocol.CheckpointReply{Job: "lm-mpi-job-r", Attempt: 2, At: *at(1)})
			}},
		{name: "allocator-recover", fixture: wireRecover(), printed: func() any { return recoverOutput(wireRecover()) }},
		{name: "allocator-drain", fixture: wireDrain(), printed: func() any { return drainOutput(wireDrain()) }},
		{name: "notice", out: notice},
		{name: "list", fixture: wireList(), printed: func() any { return listOutput(wireList()) }},
		{name: "list-empty", printed: func() any { return listOutput(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fixture != nil {
				requireAllSet(t, tc.name, reflect.ValueOf(tc.fixture))
			}
			got := tc.out
			if tc.printed != nil {
				var out bytes.Buffer
				g := newGlobals(strings.NewReader(""), &out, &out)
				require.NoError(t, g.printJSON(tc.printed()))
				got = out.String()
			}
			path := filepath.Join("testdata", "json", tc.name+".json")
			diff, err := golden.Compare(path, []byte(got), *updateJSON)
			require.NoError(t, err, "run go test ./cmd/trainq/ -run TestCLIJSON -update-json to write it")
			if diff != "" {
				t.Errorf("trainq %s --output json prints other JSON than %s:\n%s", tc.name, path, diff)
			}
		})
	}
}

func wireRecover() protocol.RecoverReply {
	return protocol.RecoverReply{Epoch: "e7", Listed: 3, Running: 2, Waiting: 1, Conflicts: []string{"lm-mpi-job-c: GPU 2 of sr006-a100plus-1 is held"},
		Fenced: []string{"sr006-a100plus-1"}, Unanswered: []string{"lm-mpi-job-u"}}
}

func wireDrain() protocol.DrainReply {
	return protocol.DrainReply{Node: "sr006-a100plus-1", Drained: true, Changed: true, Jobs: []string{"lm-mpi-job-r"}}
}

func wireList() []client.JobSummary {
	return []client.JobSummary{{JobName: "lm-mpi-job-s", Status: "Pending", Kind: "job", Priority: "medium", Region: "SR006",
		Allocation: "default", Author: "alice", Workspace: "team-a", Queue: "q1", GPUs: 4, Attempt: 2, CreatedAt: *at(-120),
		ClosedAt: at(-1), InstanceType: "a100plus.2gpu", JobDesc: "a test job", RunID: "run-1"}}
}
