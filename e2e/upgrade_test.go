package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// TestUpgradeKeepsJobsOnTheirBuild upgrades trainq as docs/upgrading.md says:
// a second build joins the Worker Deployment and becomes current while a job
// of the first build runs. The running job stays on its build and completes
// there, new jobs and the allocator move to the new build (the allocator's
// run hands over to a run of the new build), and the old workers can then
// stop. It runs its own dev server: the deployment's routing would otherwise
// outlive the test.
func TestUpgradeKeepsJobsOnTheirBuild(t *testing.T) {
	temporalBin := os.Getenv("TRAINQ_TEMPORAL_BIN_RESOLVED")
	srv, err := testenv.StartDevServer(temporalBin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	hostPort := srv.FrontendHostPort()

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "trainq.yaml")
	data := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(agentConfig, data)), 0o644))
	cfg, err := config.Load(cfgPath)
	require.NoError(t, err)
	t.Cleanup(func() { testenv.KillLeftoverWorkers(data) })
	start := func(args ...string) *testenv.WorkerProcess {
		w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"), append(args, "--config", cfgPath),
			[]string{"TEMPORAL_ADDRESS=" + hostPort})
		require.NoError(t, err)
		t.Cleanup(func() {
			w.Stop(30 * time.Second)
			if t.Failed() {
				t.Logf("trainq-worker %v log:\n%s", args, w.LogTail(30))
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.WaitLog(ctx, "running"))
		return w
	}
	submitHere := func(script string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sub, err := tqclient.New(c, cfg).Submit(ctx, fixture.Job{Allocation: "agents", Script: script}.Spec(), tqclient.SubmitOptions{})
		require.NoError(t, err)
		return sub.JobName
	}
	stateOf := func(job string) protocol.JobState {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := tqclient.New(c, nil).Status(ctx, job)
		require.NoError(t, err)
		return st.State
	}
	waitFor := func(job string, want protocol.JobState) {
		t.Helper()
		eventually(t, long, job+" to reach "+string(want), func() bool { return stateOf(job) == want })
	}
	// buildOf is the build a workflow's tasks run on, and its versioning behaviour.
	buildOf := func(id string) (string, enumspb.VersioningBehavior) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := c.DescribeWorkflow(ctx, id, "")
		require.NoError(t, err)
		v := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
		return v.GetDeploymentVersion().GetBuildId(), v.GetBehavior()
	}

	allocator := protocol.AllocatorWorkflowID("T", "agents")
	runOf := func() string { return currentRunOf(t, c, allocator) }
	runsOfAllocator := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", allocator)})
		require.NoError(t, err)
		return int(n.GetCount())
	}

	start("agent", "--node", "agent-1", "--node", "agent-2") // agents run unversioned
	oldBuild := start("--agents=false", "--build-id", "build-a")
	gateOld := gate(filepath.Join(dir, "old"))
	old := submitHere(gateOld.waitFor())
	waitFor(old, protocol.StateRunning)
	b, behavior := buildOf(old)
	assert.Equal(t, "build-a", b)
	assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, behavior)
	firstRun := runOf()

	start("--agents=false", "--build-id", "build-b")
	// The server refuses to make a version current until its pollers have
	// registered every task queue of the current one: as an operator would,
	// ask again until it takes.
	eventually(t, long, "build-b to become the current version", func() bool {
		_, _, code := runTemporal(t, hostPort, "worker", "deployment", "set-current-version",
			"--deployment-name", "trainq", "--build-id", "build-b", "--yes")
		return code == 0
	})

	fresh := submitHere("true")
	waitFor(fresh, protocol.StateCompleted)
	b, _ = buildOf(fresh)
	assert.Equal(t, "build-b", b, "new jobs start on the current build")
	eventually(t, long, "the allocator to move to the current build", func() bool {
		b, behavior := buildOf(allocator)
		return b == "build-b" && behavior == enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE
	})
	b, _ = buildOf(old)
	assert.Equal(t, "build-a", b, "the running job stays on its build")
	// The allocator run build-a started hands over to a run of build-b, so
	// that no allocator run outlives the upgrade window (workflows.ReplayWindow).
	eventually(t, long, "the allocator run started on build-a to hand over", func() bool { return runOf() != firstRun })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, allocator, firstRun)
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, d.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	// That run replays as it ran, on a worker of neither build: the decision
	// to hand over rests on what its history recorded (the build of each
	// task), not on which worker replays it.
	it := c.GetWorkflowHistory(ctx, allocator, firstRun, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events = append(events, e)
	}
	replayer := testenv.NewReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
	require.NoError(t, replayer.ReplayWorkflowHistory(nil, &historypb.History{Events: events}), "the run that handed over does not replay")

	gateOld.open(t)
	waitFor(old, protocol.StateCompleted)
	oldBuild.Stop(30 * time.Second)
	last := submitHere("true")
	waitFor(last, protocol.StateCompleted)
	// The old job's release reached the run of build-b, which carried its
	// hold: the last job ran. And the run handed over once, not again.
	eventually(t, long, "visibility to count the allocator's two runs", func() bool { return runsOfAllocator() >= 2 })
	assert.Equal(t, 2, runsOfAllocator(), "one hand-over for the new build")

	dep, err := c.WorkerDeploymentClient().GetHandle("trainq").Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(t, err)
	require.NotNil(t, dep.Info.RoutingConfig.CurrentVersion)
	assert.Equal(t, "build-b", dep.Info.RoutingConfig.CurrentVersion.BuildID)
}

// runTemporal runs the Temporal CLI against hostPort, as an operator would.
func runTemporal(t *testing.T, hostPort string, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, exec.Command(os.Getenv("TRAINQ_TEMPORAL_BIN_RESOLVED"), append(args, "--address", hostPort)...))
}
