package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/simulate"
)

func TestSimulateOwnWorkload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.csv")
	require.NoError(t, os.WriteFile(path, []byte(
		"id,arrival,class,instance_type,n_workers,runtime\nlow,0,low,a100.8gpu,1,10m\nhigh,1m,high,a100.8gpu,1,5m\n"), 0o644))
	// The demo allocation has four 2-GPU nodes: the 8-GPU jobs could never fit.
	r := cli(t, "", "simulate", "--workload", path, "--allocation", "demo")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "| **all** | 2 (2 never fit)")
	assert.False(t, r.dialed)

	require.NoError(t, os.WriteFile(path, []byte(
		"id,arrival,class,instance_type,n_workers,runtime\nlow,0,low,a100.2gpu,4,10m\nhigh,1m,high,a100.2gpu,4,5m\n"), 0o644))
	r = cli(t, "", "simulate", "--workload", path, "--allocation", "demo", "--policy", "fifo", "--policy", "prio:min_runtime=30s", "--stop-delay", "10s")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{
		"2 jobs on 4 nodes (8 GPUs); arrivals as in the trace; a preempted job stops in 10s",
		"### fifo (best-effort-fifo, no priorities",
		"### prio (best-effort-fifo, min_runtime_before_preemption 30s, reserve_after 30m00s)",
		// high preempts low at 1m and waits 10s for it to stop; low reruns after high, 6m10s-16m10s.
		"| high | 1 | 10s | 10s |",
		"| makespan vs fifo | +0.0% | +7.8% |",
	} {
		assert.Contains(t, r.stdout, want)
	}

	// With a 2m notice: as honouring jobs, low saves and exits 10s after it is told; as
	// ignoring ones it runs to the deadline and stops 10s after it. One run compares the shares.
	r = cli(t, "", "simulate", "--workload", path, "--allocation", "demo", "--stop-delay", "10s", "--notice", "2m", "--honor", "1",
		"--policy", "h1", "--policy", "h0:honor=0")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{
		"### h1 (best-effort-fifo, reserve_after 30m00s, preemption_notice 2m00s)",
		"### h0 (best-effort-fifo, reserve_after 30m00s, preemption_notice 2m00s, 0% of jobs honour notices)",
		"| preemptor wait p50 / p95 | 10s / 10s | 2m10s / 2m10s |",
		"| victims that saved on the notice | 1 (100.0%) | 0 (0.0%) |",
	} {
		assert.Contains(t, r.stdout, want)
	}
	r = cli(t, "", "simulate", "--workload", path, "--allocation", "demo", "--notice", "5s", "--honor", "0.5")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--save-time 10s must be shorter than the notice 5s (policy best-effort)")

	r = cli(t, "", "simulate", "--workload", path, "--allocation", "demo", "--output", "json", "--policy", "best-effort")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Results []struct {
			Policy struct{ Name string }
			Rows   []struct {
				Name        string
				Preemptions int
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Results, 1)
	assert.Equal(t, "best-effort", out.Results[0].Policy.Name)
	assert.Equal(t, "all", out.Results[0].Rows[len(out.Results[0].Rows)-1].Name)
}

// Teams: --teams puts the jobs without a workspace in synthetic teams, --flood-team makes one
// submit all its jobs high, and cap.high caps each workspace's high GPUs.
func TestSimulateTeams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.csv")
	// The demo allocation has four 2-GPU nodes. Team a runs a1 (4 GPUs) from 0 for 10m and submits
	// a2 at 1m; b1 of team b comes at 2m for 5m. Capped at 4 high GPUs, a2 waits on its cap and b1
	// starts at once.
	require.NoError(t, os.WriteFile(path, []byte("id,arrival,class,instance_type,n_workers,runtime,workspace\n"+
		"a1,0,high,a100.2gpu,2,10m,a\na2,1m,high,a100.2gpu,2,10m,a\nb1,2m,high,a100.2gpu,2,5m,b\n"), 0o644))
	r := cli(t, "", "simulate", "--workload", path, "--allocation", "demo", "--policy", "free", "--policy", "capped:cap.high=4")
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{
		"### capped (best-effort-fifo, reserve_after 30m00s, high.max_gpus 4 per workspace)",
		"| workspace | jobs | useful GPU-h | share | high GPU-h | most high GPUs held | high jobs | high wait p50 / p95 | medium jobs | medium wait p50 / p95 | cap hits |",
		"| a | 2 | 1.3 | 80.0% | 1.3 | 4 (cap 4) | 2 | 0s / 9m00s | 0 | 0s / 0s | 1 |",
		"| b | 1 | 0.3 | 20.0% | 0.3 | 4 (cap 4) | 1 | 0s / 0s | 0 | 0s / 0s | 0 |",
		"| b: high wait p95 / most high GPUs held / cap hits | 8m00s / 4 / - | 0s / 4 / 0 |",
	} {
		assert.Contains(t, r.stdout, want)
	}

	// Without workspaces, --teams 2 draws them; a flooding team submits its low jobs high.
	var rows []string
	for i := range 40 {
		rows = append(rows, fmt.Sprintf("j%02d,%dm,low,a100.2gpu,1,%dm", i, i, i+1))
	}
	require.NoError(t, os.WriteFile(path, []byte("id,arrival,class,instance_type,n_workers,runtime\n"+strings.Join(rows, "\n")+"\n"), 0o644))
	teams := func(args ...string) simOut {
		r := cli(t, "", append([]string{"simulate", "--workload", path, "--allocation", "demo", "--policy", "best-effort", "--output", "json"}, args...)...)
		require.Equal(t, 0, r.code, r.stderr)
		var out simOut
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
		require.Len(t, out.Results, 1)
		return out
	}
	one, again, other := teams("--teams", "2"), teams("--teams", "2", "--team-seed", "1"), teams("--teams", "2", "--team-seed", "9")
	require.Len(t, one.Results[0].Teams, 2)
	assert.Equal(t, one.Results[0].Teams, again.Results[0].Teams, "--team-seed 1 is the default")
	assert.NotEqual(t, one.Results[0].Teams[0].UsefulGPUHours, other.Results[0].Teams[0].UsefulGPUHours, "another seed draws other teams")
	assert.Equal(t, 40, one.Results[0].Teams[0].Jobs+one.Results[0].Teams[1].Jobs)
	assert.Equal(t, "team-1", one.Results[0].Teams[0].Workspace)
	assert.Contains(t, one.Notes[0], "2 synthetic teams by a hash of seed 1")
	assert.Zero(t, one.Results[0].Teams[0].High.N)

	flood := teams("--teams", "2", "--flood-team", "team-2")
	t1, t2 := flood.Results[0].Teams[0], flood.Results[0].Teams[1]
	assert.Equal(t, one.Results[0].Teams[1].Jobs, t2.Jobs)
	assert.Equal(t, t2.Jobs, t2.High.N, "every job of team-2 is high")
	assert.Zero(t, t1.High.N, "team-1's jobs stay low")
	assert.Equal(t, t1.Jobs, t1.Low.N)
	assert.Equal(t, 40-t2.Jobs, flood.Results[0].Rows[len(flood.Results[0].Rows)-1].Jobs-t2.Jobs)
	assert.Contains(t, flood.Notes[1], fmt.Sprintf("team-2 submits all its jobs high: %d of its %d jobs were medium or low", t2.Jobs, t2.Jobs))

	// Without teams the JSON has no rows per workspace.
	assert.Nil(t, teams().Results[0].Teams)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "x:cap.high=lots"}, `simulate: policy x: cap.high: "lots" is not a number of GPUs (a whole number, 0 or more) nor none`},
		{[]string{"--policy", "x:cap.urgent=4"}, `policy x: cap.urgent: "urgent" is not a class: write cap.high, cap.medium or cap.low`},
		{[]string{"--flood-team", "team-1"}, "--flood-team team-1: no job is in workspace \"team-1\": the jobs have no workspaces (give --teams N"},
		{[]string{"--teams", "3", "--flood-team", "team-4"}, "the workspaces are team-1, team-2, team-3"},
	} {
		r := cli(t, "", append([]string{"simulate", "--workload", path, "--allocation", "demo"}, tc.args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, tc.args)
	}
}

// simOut is what the tests read of trainq simulate --output json.
type simOut struct {
	Notes   []string
	Results []struct {
		Teams []struct {
			Workspace      string
			Jobs           int
			UsefulGPUHours float64         `json:"useful_gpu_hours"`
			CapHits        int             `json:"cap_hits"`
			High           struct{ N int } `json:"high_wait"`
			Low            struct{ N int } `json:"low_wait"`
		}
		Rows []struct{ Jobs int }
	}
}

func TestSimulateUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate"}, "give --trace DIR"},
		{[]string{"simulate", "--workload", "x.json", "--nodes", "2", "--nodes-frac", "0.5"}, "--nodes or --nodes-frac, not both"},
		{[]string{"simulate", "--workload", "testdata/none.json"}, "no such file"},
		{[]string{"simulate", "--trace", "/nonexistent", "--policy", "x:turbo=1"}, "no such file"},
		{[]string{"simulate", "extra"}, `unexpected argument "extra"`},
		{[]string{"simulate", "--workload", "x.json", "--only", "urgent"}, `--only: "urgent" is not low, medium or high`},
		{[]string{"simulate", "--workload", "x.json", "--honor", "1.2"}, "--honor must be a share between 0 and 1 (e.g. 0.8), got 1.2"},
		{[]string{"simulate", "--workload", "x.json", "--honor", "-0.1"}, "--honor must be a share between 0 and 1"},
		{[]string{"simulate", "--workload", "x.json", "--notice", "2h"}, "--notice must be between 0 and 1h0m0s, got 2h0m0s"},
		{[]string{"simulate", "--workload", "x.json", "--notice", "-1s"}, "--notice must be between 0 and 1h0m0s"},
		{[]string{"simulate", "--workload", "x.json", "--save-time", "0s"}, "--save-time must be positive"},
		{[]string{"simulate", "--workload", "x.json", "--teams", "0"}, "--teams must be at least 1, got 0"},
		{[]string{"simulate", "--workload", "x.json", "--team-seed", "3"}, "--team-seed needs --teams"},
		{[]string{"simulate", "--workload", "x.json", "--estimates", "limit:0.5x"}, "--estimates: \"limit:0.5x\": the limit is K times the true runtime"},
		{[]string{"simulate", "--workload", "x.json", "--estimates", "exact,none"}, "none measures nothing"},
		{[]string{"simulate", "--workload", "x.json", "--estimates", "exact", "--eta-sample", "0"}, "--eta-sample must be a share above 0"},
		{[]string{"simulate", "--workload", "x.json", "--cohort", "1"}, "--cohort must be at least 2 allocations, got 1"},
		{[]string{"simulate", "--workload", "x.json", "--lending-limit", "8"}, "--cohort-seed, --lending-limit and --borrowing-limit need --cohort"},
		{[]string{"simulate", "--workload", "x.json", "--cohort", "3", "--borrowing-limit", "-2"}, "are GPUs (0 or more), or -1 for no limit; got -1 and -2"},
		{[]string{"simulate", "--workload", "x.json", "--cohort", "3", "--teams", "2"}, "--cohort puts the jobs in its allocations; give it without --teams"},
	} {
		r := cli(t, "", tc.args...)
		assert.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		assert.True(t, strings.Contains(r.stderr, tc.want), "%v: %s", tc.args, r.stderr)
	}
}

// TestSimulateCohortTrace compares islands, a cohort and one allocation on the real trace when it
// is there: lending leaves less idle than islands, and one allocation no more than the cohort.
func TestSimulateCohortTrace(t *testing.T) {
	dir := os.Getenv("TRAINQ_TRACE_DIR")
	if dir == "" {
		dir = "../../../shared/traces/alibaba-gpu-v2023"
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_pod_list_default.csv")); err != nil {
		t.Skip("no openb trace at", dir)
	}
	r := cli(t, "", "simulate", "--trace", dir, "--nodes", "10", "--cohort", "3", "--policy", "best-effort", "--output", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Cohorts []simulate.CohortResult `json:"cohorts"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Cohorts, 1)
	c := out.Cohorts[0]
	require.Len(t, c.Islands.Members, 3)
	assert.Positive(t, c.Cohort.Lends)
	assert.Positive(t, c.Shared.BorrowedStarts)
	assert.Less(t, c.Cohort.IdleWhileWaitingGPUHours, c.Islands.IdleWhileWaitingGPUHours)
	assert.Less(t, c.OneAllocation.IdleWhileWaitingGPUHours, c.Cohort.IdleWhileWaitingGPUHours)
	text := cli(t, "", "simulate", "--trace", dir, "--nodes", "10", "--cohort", "3", "--policy", "best-effort")
	require.Equal(t, 0, text.code, text.stderr)
	assert.Contains(t, text.stdout, "| alloc-3 | 3 (18) |")
	assert.Contains(t, text.stdout, "| GPU-hours idle while a job that fits waits |")
}

// TestSimulateTrace runs the real trace when it is there (../shared/traces, or $TRAINQ_TRACE_DIR).
func TestSimulateTrace(t *testing.T) {
	dir := os.Getenv("TRAINQ_TRACE_DIR")
	if dir == "" {
		dir = "../../../shared/traces/alibaba-gpu-v2023"
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_pod_list_default.csv")); err != nil {
		t.Skip("no openb trace at", dir)
	}
	r := cli(t, "", "simulate", "--trace", dir, "--nodes", "10", "--policy", "best-effort")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Workload openb_pod_list_default.csv: 8152 jobs on 10 nodes")
	assert.Contains(t, r.stderr, "pods ask for a share of one GPU")
}
