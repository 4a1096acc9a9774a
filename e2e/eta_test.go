package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/trainq/trainq/activities"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// TestExpectedStarts, with real processes, on allocation eta (one 2-GPU
// node): while a job with a 10-minute time limit runs, `trainq queue --eta`
// says the next job is expected when that limit runs out, because of it,
// and the job behind that one, which has no limit of its own, is unknown,
// naming it.
func TestExpectedStarts(t *testing.T) {
	startWorker(t)
	hold := gate(filepath.Join(t.TempDir(), "hold"))
	spec := func(script string) protocol.JobSpec {
		// A workspace of its own: no job completed in it gives the unlimited jobs a learned estimate.
		return fixture.Job{Script: script, Allocation: "eta", Workspace: "eta-limits"}.Spec()
	}
	s := spec(hold.waitFor())
	s.TimeLimit = 10 * time.Minute
	limited := submit(t, s)
	st := waitState(t, limited, protocol.StateRunning, long)
	require.NotEmpty(t, st.Attempts)
	started := *st.Attempts[0].StartedAt
	next := submit(t, spec("true"))
	// The queue's order is the order the allocator hears the requests in: last goes in after next.
	eventually(t, long, "the next job to be queued", func() bool { return queue(t, "eta").WaitingTotal == 1 })
	last := submit(t, spec("true"))

	var v protocol.QueueView
	eventually(t, long, "both jobs to be listed with expected starts", func() bool {
		out, _, code := trainq(t, "queue", "eta", "--region", "T", "--eta", "-o", "json")
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			return false
		}
		return len(v.Waiting) == 2 && v.Waiting[0].ExpectedStart != nil && v.Waiting[1].ExpectedStart != nil
	})
	first, second := v.Waiting[0], v.Waiting[1]
	assert.Equal(t, next, first.Job)
	want := started.Add(10 * time.Minute)
	assert.WithinDuration(t, want, first.ExpectedStart.At, time.Second, "when the limit runs out: %+v", first.ExpectedStart)
	assert.True(t, strings.HasPrefix(first.ExpectedStart.Because, "if "+limited+" ends by its time limit at "), first.ExpectedStart.Because)
	assert.Equal(t, last, second.Job)
	assert.True(t, second.ExpectedStart.At.IsZero())
	assert.Contains(t, second.ExpectedStart.Because, "held by jobs without a time limit ("+next+")")

	out, _, code := trainq(t, "queue", "eta", "--region", "T", "--eta")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Expected starts")
	assert.Contains(t, out, "if "+limited+" ends by its time limit")
	out, _, _ = trainq(t, "queue", "eta", "--region", "T")
	assert.NotContains(t, out, "Expected starts", "only --eta asks for them")
	// The Web UI: the allocator's current details list the waiting jobs with their expected starts.
	var details string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the allocator's details:\n%s", details)
		}
	})
	eventually(t, long, "the allocator's details to show the expected start", func() bool {
		details = currentDetails(t, protocol.AllocatorWorkflowID("T", "eta"))
		return strings.Contains(details, next+" · medium · 2 GPUs") && strings.Contains(details, "**expected start ") &&
			strings.Contains(details, "(if "+limited+" ends by its time limit at ")
	})

	hold.open(t)
	for _, j := range []string{limited, next, last} {
		waitState(t, j, protocol.StateCompleted, long)
	}
}

// TestExpectedStartComesTrue, with real processes, on allocation eta: a job
// with a 15-second time limit that would run for ever is stopped by its
// limit, with a reason naming it; the job queued behind it was told, by
// `trainq status --eta`, when it would start, and starts within a few
// seconds of that (its stop takes its grace period at most).
func TestExpectedStartComesTrue(t *testing.T) {
	startWorker(t)
	forever := protocol.JobSpec{Script: "while true; do sleep 0.1; done", InstanceType: "a100.2gpu", Region: "T",
		AllocationName: "eta", PriorityClass: "medium", NWorkers: 1, Type: "binary", TimeLimit: 15 * time.Second}
	limited := submit(t, forever)
	waitState(t, limited, protocol.StateRunning, long)
	next := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "eta",
		PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	eventually(t, long, "the next job to be queued", func() bool { return queue(t, "eta").WaitingTotal == 1 })

	told := expectedStartOf(t, next)
	require.False(t, told.At.IsZero(), told.Because)
	assert.Contains(t, told.Because, "if "+limited+" ends by its time limit")
	text, _, _ := trainq(t, "status", next, "--eta")
	assert.Contains(t, text, "expected start")

	st := waitState(t, limited, protocol.StateStopped, long)
	require.Len(t, st.Attempts, 1)
	assert.Contains(t, st.Attempts[0].EndReason, "stop_timer", "the limit is named")
	started := waitState(t, next, protocol.StateCompleted, long).Attempts[0].StartedAt
	require.NotNil(t, started)
	// The projection counts the stop (notice + grace period, 3s here) as the longest it may take.
	assertStartedAsExpected(t, told.At, *started)
}

// TestProgressReportsRefineTheExpectedStart, with real processes, on
// allocation eta: a job without a time limit runs for about 6 seconds and,
// halfway, says so with `trainq checkpoint --progress 0.5`. Until then the
// job queued behind it has no expected start (nothing says when the first
// ends); after, it is expected when the rate says, because of the report, and
// starts within a few seconds of that.
func TestProgressReportsRefineTheExpectedStart(t *testing.T) {
	startWorker(t)
	trainqBin := filepath.Join(env.binDir, "trainq")
	hold := gate(filepath.Join(t.TempDir(), "half"))
	reporting := submit(t, protocol.JobSpec{Script: hold.waitFor() + "; sleep 3; " + trainqBin + " checkpoint --progress 0.5 > /dev/null; sleep 3",
		InstanceType: "a100.2gpu", Region: "T", AllocationName: "eta", PriorityClass: "medium", NWorkers: 1, Type: "binary",
		Workspace: "eta-progress"}) // its own: no completed job gives it a learned estimate
	waitState(t, reporting, protocol.StateRunning, long)
	next := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "eta",
		PriorityClass: "medium", NWorkers: 1, Type: "binary"})
	eventually(t, long, "the next job to be queued", func() bool { return queue(t, "eta").WaitingTotal == 1 })
	before := expectedStartOf(t, next)
	assert.True(t, before.At.IsZero(), "before any report nothing says when %s ends: %+v", reporting, before)

	hold.open(t)
	var after scheduler.ExpectedStart
	eventually(t, long, "the expected start to follow the progress report", func() bool {
		after = expectedStartOf(t, next)
		return !after.At.IsZero()
	})
	assert.Contains(t, after.Because, "if "+reporting+" ends when its progress reports say (50% done at ")
	started := waitState(t, next, protocol.StateCompleted, long).Attempts[0].StartedAt
	require.NotNil(t, started)
	assertStartedAsExpected(t, after.At, *started)
	waitState(t, reporting, protocol.StateCompleted, long)
}

// TestLearnedEstimateGivesAnExpectedStart, with real processes, on allocation
// eta: three jobs of one shape (workspace, kind, script, instance type,
// workers) complete and record their runtimes; the next job of that shape,
// without a time limit, learns its estimate from them (the longest of three
// is their p90), shows it in `trainq status`, and the job queued behind it,
// which without the estimate would have no expected start, is expected when
// the estimate runs out and starts within a few seconds of that.
func TestLearnedEstimateGivesAnExpectedStart(t *testing.T) {
	startWorker(t)
	const ws = "eta-learned"
	// Every job of the shape runs 6 s, and then on while the hold file exists: the learners
	// run without it; the estimated job, once the test has asked when the next job starts,
	// until its estimate ends, however slow the machine is until then.
	hold := filepath.Join(t.TempDir(), "hold")
	shaped := protocol.JobSpec{Script: "sleep 6; while [ -e " + hold + " ]; do sleep 0.1; done", InstanceType: "a100.1gpu",
		Region: "T", AllocationName: "eta", PriorityClass: "medium", NWorkers: 1, Type: "binary", Workspace: ws}
	var learners []string
	for range 3 {
		learners = append(learners, submit(t, shaped))
	}
	var most time.Duration
	var normalized protocol.JobSpec
	for _, j := range learners {
		st := waitState(t, j, protocol.StateCompleted, long)
		a := st.Attempts[0]
		most = max(most, a.EndedAt.Sub(*a.StartedAt))
		normalized = st.Spec
	}
	// Visibility lags its histories: wait until it lists the three runtimes.
	query := activities.RuntimeQueries(protocol.EstimateRuntimeInput{Workspace: ws, Shape: normalized.Shape()})[0]
	eventually(t, long, "visibility to list the three completed runtimes", func() bool {
		resp, err := env.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 10})
		return err == nil && len(resp.GetExecutions()) == 3
	})

	require.NoError(t, os.WriteFile(hold, nil, 0o644))
	estimated := submit(t, shaped)
	st := waitState(t, estimated, protocol.StateRunning, long)
	require.NotNil(t, st.Estimate, "a job of a shape that completed three times has an estimate")
	assert.Equal(t, 3, st.Estimate.Runs)
	assert.Equal(t, "jobs of this shape", st.Estimate.Basis)
	// Each run records its whole seconds, rounded up.
	assert.Equal(t, (most + time.Second - 1).Truncate(time.Second), st.Estimate.Runtime, "the longest of three runs (%s)", most)
	text, _, _ := trainq(t, "status", estimated)
	assert.Contains(t, text, "90% of the last 3 completed jobs of this shape in workspace "+ws+" ran no longer")

	next := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.2gpu", Region: "T", AllocationName: "eta",
		PriorityClass: "medium", NWorkers: 1, Type: "binary", Workspace: ws})
	eventually(t, long, "the next job to be queued", func() bool { return queue(t, "eta").WaitingTotal == 1 })
	// trainq watch --eta follows the job to its end, saying while it waits when it is expected.
	watched := make(chan []byte, 1)
	go func() {
		cmd := exec.Command(filepath.Join(env.binDir, "trainq"), "watch", next, "--eta", "-o", "json")
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort, "TRAINQ_CONFIG="+env.configPath)
		out, _ := cmd.Output()
		watched <- out
	}()
	told := expectedStartOf(t, next)
	require.False(t, told.At.IsZero(), "the estimate says when %s ends: %s", estimated, told.Because)
	// By its estimate, or (on a machine slow enough that the job has run past it by now) within
	// it again.
	assert.Regexp(t, "if "+estimated+" ends (by|within) its estimated run time", told.Because)
	// The estimated job ends when it was expected to (at once if that has passed).
	time.Sleep(time.Until(told.At))
	require.NoError(t, os.Remove(hold))
	started := waitState(t, next, protocol.StateCompleted, long).Attempts[0].StartedAt
	require.NotNil(t, started)
	assertStartedAsExpected(t, told.At, *started)
	waitState(t, estimated, protocol.StateCompleted, long)

	var lines []byte
	select {
	case lines = <-watched:
	case <-time.After(long):
		t.Fatal("trainq watch did not end with the job")
	}
	var pendingWithStart bool
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var ev struct {
			Status          protocol.JobState `json:"status"`
			ExpectedStartAt *time.Time        `json:"expected_start_at"`
			ExpectedStart   string            `json:"expected_start"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		if ev.Status == protocol.StatePending && ev.ExpectedStartAt != nil {
			pendingWithStart = true
			assert.Regexp(t, "if "+estimated+" ends (by|within) its estimated run time", ev.ExpectedStart)
			assert.WithinDuration(t, told.At.Truncate(time.Minute), *ev.ExpectedStartAt, time.Minute)
		}
		assert.False(t, ev.Status != protocol.StatePending && ev.ExpectedStart != "", "only a pending job has an expected start: %s", line)
	}
	assert.True(t, pendingWithStart, "watch --eta said when the job was expected:\n%s", lines)
}

// expectedStartOf is what `trainq status JOB --eta -o json` says of when the pending job starts.
func expectedStartOf(t *testing.T, job string) scheduler.ExpectedStart {
	t.Helper()
	var v struct {
		ExpectedStart *scheduler.ExpectedStart `json:"expected_start"`
	}
	out, errOut, code := trainq(t, "status", job, "--eta", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.NotNil(t, v.ExpectedStart, out)
	return *v.ExpectedStart
}

// assertStartedAsExpected checks a start against the expected start the job
// was told: at most 5s early (the estimate is of when capacity frees), and
// at most 15s late, since what follows a worker's exit (its release, the next
// pass, the next worker's start) is slower on a busy machine.
func assertStartedAsExpected(t *testing.T, expected, started time.Time) {
	t.Helper()
	assert.False(t, started.Before(expected.Add(-5*time.Second)), "expected %s, started %s: too early", expected, started)
	assert.False(t, started.After(expected.Add(15*time.Second)), "expected %s, started %s: too late", expected, started)
}
