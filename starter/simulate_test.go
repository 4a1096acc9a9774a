package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	} {
		r := cli(t, "", tc.args...)
		assert.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		assert.True(t, strings.Contains(r.stderr, tc.want), "%v: %s", tc.args, r.stderr)
	}
}

// TestSimulateTrace runs the real trace when it is there (../shared/traces, or $TRAINQ_TRACE_DIR).
func TestSimulateTrace(t *testing.T) {
	dir := os.Getenv("TRAINQ_TRACE_DIR")
	if dir == "" {
		dir = "../../shared/traces/alibaba-gpu-v2023"
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_pod_list_default.csv")); err != nil {
		t.Skip("no openb trace at", dir)
	}
	r := cli(t, "", "simulate", "--trace", dir, "--nodes", "10", "--policy", "best-effort")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Workload openb_pod_list_default.csv: 8152 jobs on 10 nodes")
	assert.Contains(t, r.stderr, "pods ask for a share of one GPU")
}
