package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local/logfile"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// errDialed marks a command that got past validation and tried to reach Temporal.
var errDialed = errors.New("test: would dial Temporal")

type result struct {
	code           int
	stdout, stderr string
	dialed         bool
}

// cli runs trainq with args and stdin, without a Temporal server.
func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	t.Setenv("TRAINQ_CONFIG", "")
	var out, errb bytes.Buffer
	g := newGlobals(strings.NewReader(stdin), &out, &errb)
	dialed := false
	g.Dial = func(context.Context) (sdkclient.Client, error) {
		dialed = true
		return nil, errDialed
	}
	code := runWith(context.Background(), g, args)
	return result{code: code, stdout: out.String(), stderr: errb.String(), dialed: dialed}
}

const seedPath = "testdata/seed-job.json"

func seedWith(t *testing.T, edit func(m map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(seedPath)
	require.NoError(t, err)
	m := map[string]any{}
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

func dryRunSpec(t *testing.T, r result) protocol.JobSpec {
	t.Helper()
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var spec protocol.JobSpec
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &spec), r.stdout)
	return spec
}

func TestSeedRequestAccepted(t *testing.T) {
	spec := dryRunSpec(t, cli(t, "", "submit", "--dry-run", "-f", seedPath, "--output", "json"))
	assert.Equal(t, "/home/jovyan/test_script.py", spec.Script)
	assert.Equal(t, "cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40", spec.BaseImage)
	assert.Equal(t, "SR006", spec.Region)
	assert.Equal(t, "default", spec.AllocationName)
	assert.Equal(t, "a100plus.8gpu.80vG.96C.768G", spec.InstanceType)
	assert.Equal(t, 2, spec.NWorkers)
	assert.Equal(t, "pytorch2", spec.Type)
	assert.Equal(t, 1, spec.ProcessesPerWorker)
	assert.Equal(t, "medium-priority training job", spec.JobDesc)
	assert.Equal(t, "medium", spec.PriorityClass)
	assert.Equal(t, 3, spec.MaxRetry)
	assert.Equal(t, scheduler.KindJob, spec.Kind)

	// Without --dry-run it gets as far as dialing Temporal: validation passed.
	r := cli(t, "", "submit", "-f", seedPath)
	assert.True(t, r.dialed)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, errDialed.Error())

	// From stdin too, with the global flag before the command.
	b, err := os.ReadFile(seedPath)
	require.NoError(t, err)
	spec = dryRunSpec(t, cli(t, string(b), "-o", "json", "submit", "-f", "-", "--dry-run"))
	assert.Equal(t, 2, spec.NWorkers)
}

func TestPythonishSeedRejected(t *testing.T) {
	r := cli(t, `{ base_image='x', script='/s.py' }`, "submit", "-f", "-", "--dry-run")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "invalid JSON")
	assert.False(t, r.dialed)
}

func TestUnknownFieldRejected(t *testing.T) {
	r := cli(t, seedWith(t, func(m map[string]any) { m["priority"] = "high" }), "submit", "-f", "-")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `unknown field "priority"`)
	assert.False(t, r.dialed)
}

func TestProcessesPerWorker(t *testing.T) {
	spec := dryRunSpec(t, cli(t, seedWith(t, func(m map[string]any) { m["processes_per_worker"] = "default" }),
		"submit", "-f", "-", "--dry-run", "--output=json"))
	assert.Equal(t, 8, spec.ProcessesPerWorker, "default = GPUs per worker")

	spec = dryRunSpec(t, cli(t, "", "submit", "-f", seedPath, "--processes-per-worker", "default", "--dry-run", "-o", "json"))
	assert.Equal(t, 8, spec.ProcessesPerWorker, "the flag overrides the file")

	spec = dryRunSpec(t, cli(t, "", "submit", "-f", seedPath, "--processes-per-worker", "4", "--dry-run", "-o", "json"))
	assert.Equal(t, 4, spec.ProcessesPerWorker)

	for _, v := range []any{"many", 0, -2, 1.5} {
		r := cli(t, seedWith(t, func(m map[string]any) { m["processes_per_worker"] = v }), "submit", "-f", "-")
		assert.Equal(t, 2, r.code, "%v", v)
		assert.Contains(t, r.stderr, "processes_per_worker", "%v", v)
		assert.False(t, r.dialed)
	}
	r := cli(t, "", "submit", "-f", seedPath, "--processes-per-worker", "lots")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "processes-per-worker")
}

func TestFlagsOverrideFile(t *testing.T) {
	spec := dryRunSpec(t, cli(t, "", "submit", "-f", seedPath, "--priority-class", "high", "--max-retry", "0",
		"--env", "A=1", "--env", "B=x=y", "--flag", "lr=0.1", "--n-workers", "1", "--author", "alice", "--dry-run", "-o", "json"))
	assert.Equal(t, "high", spec.PriorityClass)
	assert.Equal(t, 0, spec.MaxRetry)
	assert.Equal(t, 1, spec.NWorkers)
	assert.Equal(t, map[string]string{"A": "1", "B": "x=y"}, spec.EnvVariables)
	assert.Equal(t, map[string]string{"lr": "0.1"}, spec.Flags)
	assert.Equal(t, "alice", spec.Author)
	assert.Equal(t, "pytorch2", spec.Type, "fields without a flag come from the file")
}

func TestSubmitFromFlagsOnly(t *testing.T) {
	t.Setenv("USER", "bob")
	spec := dryRunSpec(t, cli(t, "", "submit", "--script", "echo hi", "--instance-type", "a100.2gpu", "--allocation", "demo",
		"--n-workers", "2", "--dry-run", "--output", "json"))
	assert.Equal(t, "binary", spec.Type)
	assert.Equal(t, "medium", spec.PriorityClass)
	assert.Equal(t, 2, spec.ProcessesPerWorker)
	assert.Equal(t, "bob", spec.Author, "author defaults to $USER")

	r := cli(t, "", "submit", "--script", "echo hi", "--instance-type", "a100.2gpu", "--allocation", "demo")
	assert.True(t, r.dialed, r.stderr)

	r = cli(t, "", "submit")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "-f job.json")
}

// Each bad input of the list fails before dialing, names the field
// and exits 2.
func TestBadInput(t *testing.T) {
	file := func(edit func(m map[string]any)) []string { return []string{"file", seedWith(t, edit)} }
	flags := func(args ...string) []string { return append([]string{"flags", ""}, args...) }
	cases := []struct {
		name  string
		input []string
		field string
	}{
		{"unknown priority_class (file)", file(func(m map[string]any) { m["priority_class"] = "urgent" }), "priority_class"},
		{"unknown priority_class (flag)", flags("--priority-class", "urgent"), "priority_class"},
		{"malformed instance_type", file(func(m map[string]any) { m["instance_type"] = "a100plus-8gpu" }), "instance_type"},
		{"malformed instance_type (flag)", flags("--instance-type", "8gpu.a100"), "instance_type"},
		{"unknown instance_type family", file(func(m map[string]any) { m["instance_type"] = "h100.8gpu.80vG.96C.768G" }), "instance_type"},
		{"instance_type bigger than any node", file(func(m map[string]any) { m["instance_type"] = "a100plus.16gpu" }), "instance_type"},
		{"n_workers 0 (file)", file(func(m map[string]any) { m["n_workers"] = 0 }), "n_workers"},
		{"n_workers -1 (file)", file(func(m map[string]any) { m["n_workers"] = -1 }), "n_workers"},
		{"n_workers 0 (flag)", flags("--n-workers", "0"), "n_workers"},
		{"n_workers not a number", file(func(m map[string]any) { m["n_workers"] = "two" }), "n_workers"},
		{"job never fits", file(func(m map[string]any) { m["n_workers"] = 5 }), "n_workers"},
		{"job never fits (flag)", flags("--n-workers", "100"), "n_workers"},
		{"unknown region", file(func(m map[string]any) { m["region"] = "SR999" }), "region"},
		{"unknown region (flag)", flags("--region", "SR999"), "region"},
		{"unknown allocation", file(func(m map[string]any) { m["allocation_name"] = "nope" }), "allocation_name"},
		{"unknown allocation (flag)", flags("--allocation", "nope"), "allocation_name"},
		{"max_retry -1", file(func(m map[string]any) { m["max_retry"] = -1 }), "max_retry"},
		{"max_retry 101", file(func(m map[string]any) { m["max_retry"] = 101 }), "max_retry"},
		{"max_retry 1000 (flag)", flags("--max-retry", "1000"), "max_retry"},
		{"empty script", file(func(m map[string]any) { m["script"] = "" }), "script"},
		{"blank script", file(func(m map[string]any) { m["script"] = "   " }), "script"},
		{"no script", file(func(m map[string]any) { delete(m, "script") }), "script"},
		{"empty script (flag)", flags("--script", ""), "script"},
		{"unknown type", file(func(m map[string]any) { m["type"] = "tensorflow" }), "type"},
		{"bad env", file(func(m map[string]any) { m["env_variables"] = map[string]any{"A": 1} }), "env_variables"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			switch tc.input[0] {
			case "file":
				r = cli(t, tc.input[1], "submit", "-f", "-")
			case "flags":
				r = cli(t, "", append([]string{"submit", "-f", seedPath}, tc.input[2:]...)...)
			}
			assert.Equal(t, 2, r.code, "stderr: %s", r.stderr)
			assert.False(t, r.dialed, "bad input must fail before dialing Temporal")
			assert.Contains(t, r.stderr, tc.field)
			assert.True(t, strings.HasPrefix(r.stderr, "trainq: "), r.stderr)
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one sentence: %q", r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestNotebook(t *testing.T) {
	r := cli(t, "", "notebook", "start", "--allocation", "demo", "--priority-class", "low", "--dry-run", "-o", "json")
	spec := dryRunSpec(t, r)
	assert.Equal(t, "high", spec.PriorityClass)
	assert.Equal(t, scheduler.KindNotebook, spec.Kind)
	assert.Equal(t, protocol.NotebookScript, spec.Script)
	assert.Equal(t, "a100.1gpu", spec.InstanceType, "one GPU of the demo allocation's family")
	assert.Contains(t, r.stderr, "changed to high")

	r = cli(t, "", "notebook", "start", "--priority-class", "urgent")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "priority_class")
	assert.False(t, r.dialed)

	r = cli(t, "", "notebook", "start", "--allocation", "nope")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "allocation_name")

	r = cli(t, "", "notebook", "start")
	assert.True(t, r.dialed, r.stderr)

	r = cli(t, "", "notebook", "stop")
	assert.Equal(t, 2, r.code)
	r = cli(t, "", "notebook")
	assert.Equal(t, 2, r.code)
	r = cli(t, "", "notebook", "pause")
	assert.Equal(t, 2, r.code)
}

func TestJSONFileErrors(t *testing.T) {
	r := cli(t, seedWith(t, func(map[string]any) {})+"\n{}", "submit", "-f", "-")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "one job per file")

	r = cli(t, `["a"]`, "submit", "-f", "-")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "JSON object")

	r = cli(t, "", "submit", "-f", "testdata/missing.json")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "does not exist")

	// A documented but unused field is accepted, with a note; health_params
	// is used, so it gets none.
	r = cli(t, seedWith(t, func(m map[string]any) {
		m["logs_dir"] = "/tmp/logs"
		m["health_params"] = map[string]any{"log_period": 30, "action": "restart"}
	}), "submit", "-f", "-", "--dry-run")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "logs_dir is ignored")
	assert.NotContains(t, r.stderr, "health_params")
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{
		{},
		{"frobnicate"},
		{"status"},
		{"status", "a", "b"},
		{"cancel"},
		{"watch"},
		{"logs"},
		{"logs", "job", "--tail", "-1"},
		{"logs", "job", "--worker", "-5"},
		{"list", "--status", "Sleeping"},
		{"list", "--limit", "0"},
		{"queue", "nope"},
		{"queue", "--region", "SR999"},
		{"queue", "a", "b"},
		{"submit", "--bogus"},
		{"status", "job", "--output", "yaml"},
		{"--config", "testdata/missing.yaml", "queue"},
	}
	for _, args := range cases {
		r := cli(t, "", args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.False(t, r.dialed, "%v", args)
		assert.NotEmpty(t, r.stderr, "%v", args)
	}
	r := cli(t, "", "queue", "nope")
	assert.Contains(t, r.stderr, `allocation "nope" does not exist`)
}

func TestGlobalFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--output", "json", "status", "job-1"},
		{"status", "--output", "json", "job-1"},
		{"status", "job-1", "--output=json"},
		{"-o", "json", "status", "job-1"},
	} {
		r := cli(t, "", args...)
		assert.True(t, r.dialed, "%v: %s", args, r.stderr)
		assert.Equal(t, 1, r.code)
	}
	// "--" ends the flags.
	r := cli(t, "", "status", "--", "--output")
	assert.True(t, r.dialed, r.stderr)
}

func TestHelpAndVersion(t *testing.T) {
	r := cli(t, "", "help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "submit")
	r = cli(t, "", "--help")
	assert.Equal(t, 0, r.code)
	for _, c := range commands {
		if c.name == "demo" || c.name == "help" {
			continue
		}
		r = cli(t, "", "help", c.name)
		assert.Equal(t, 0, r.code, "%s: %s", c.name, r.stderr)
		assert.Contains(t, r.stdout, "Usage: trainq "+c.name, c.name)
		assert.False(t, r.dialed)
	}
	r = cli(t, "", "submit", "--help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "--priority-class")

	r = cli(t, "", "version", "-o", "json")
	assert.Equal(t, 0, r.code)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	assert.NotEmpty(t, v.Version)

	r = cli(t, "", "help", "-o", "json")
	assert.Equal(t, 0, r.code)
	assert.True(t, json.Valid([]byte(r.stdout)))
}

func TestFormatting(t *testing.T) {
	assert.Equal(t, "42s", human(42*time.Second))
	assert.Equal(t, "3m05s", human(185*time.Second))
	assert.Equal(t, "2h03m", human(123*time.Minute))
	assert.Equal(t, "3d04h", human(76*time.Hour))

	now := time.Now()
	var buf bytes.Buffer
	printStatus(&buf, protocol.JobStatus{
		JobName: "lm-mpi-job-1", State: protocol.StateRunning, Kind: scheduler.KindJob, Priority: "low",
		Region: "SR006", Allocation: "demo", InstanceType: "a100.2gpu", NWorkers: 2, GPUs: 4, MaxRetry: 1,
		Attempt: 2, Restarts: 1, CreatedAt: now.Add(-time.Minute), PendingAt: &now, RunningAt: &now,
		Preemptors: []scheduler.Preemptor{{Job: "lm-mpi-job-9", Class: scheduler.High, Kind: scheduler.KindJob}},
		Attempts: []protocol.AttemptRecord{
			{Number: 1, QueuedAt: now, StartedAt: &now, EndedAt: &now, EndReason: "preempted",
				Preemptor: &scheduler.Preemptor{Job: "lm-mpi-job-9", Class: scheduler.High}},
			{Number: 2, QueuedAt: now, StartedAt: &now, Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "demo-node-1", GPUs: []int{0, 1}}}},
		},
	})
	out := buf.String()
	for _, want := range []string{"lm-mpi-job-1  Running", "SR006/demo", "2 × a100.2gpu = 4 GPUs", "2 (1 restart, max_retry 1)",
		"preempted by  lm-mpi-job-9 (high)", "ATTEMPT", "demo-node-1[0,1]", "running", "attempt 1: preempted"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "warning")
	assert.NotContains(t, out, "on loan")

	buf.Reset()
	printStatus(&buf, protocol.JobStatus{JobName: "lm-mpi-job-2", State: protocol.StateRunning, Kind: scheduler.KindJob,
		Attempts: []protocol.AttemptRecord{{Number: 1, QueuedAt: now, StartedAt: &now, OnLoan: true}}})
	assert.Contains(t, buf.String(), "on loan", "a running attempt on loan says so")
	assert.Contains(t, buf.String(), "without spending max_retry")

	buf.Reset()
	printStatus(&buf, protocol.JobStatus{JobName: "jupyter-1", State: protocol.StateRunning, Kind: scheduler.KindNotebook,
		Warning: "idle since 10:00:00 UTC: this Jupyter server will be stopped in 5m0s"})
	assert.Regexp(t, `warning +idle since 10:00:00 UTC: this Jupyter server will be stopped in 5m0s`, buf.String())
}

// logs --follow prints the tail, then new lines from every worker, moves on
// to a new attempt, and stops when the job ends.
func TestLogsFollow(t *testing.T) {
	dir := t.TempDir()
	b := logfile.Source{DataDir: dir}
	var out, errb bytes.Buffer
	g := newGlobals(strings.NewReader(""), &out, &errb)
	g.PollInterval = 10 * time.Millisecond

	job := "lm-mpi-job-follow"
	write := func(attempt, worker int, s string) {
		path, err := logfile.Path(dir, cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker})
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = f.WriteString(s)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	now := time.Now()
	two := []scheduler.WorkerPlacement{{Worker: 0, Node: "n1"}, {Worker: 1, Node: "n2"}}
	running1 := protocol.JobStatus{State: protocol.StateRunning, Attempt: 1,
		Attempts: []protocol.AttemptRecord{{Number: 1, StartedAt: &now, Placement: two}}}
	restarted := protocol.JobStatus{State: protocol.StateRunning, Attempt: 2,
		Attempts: []protocol.AttemptRecord{{Number: 1, StartedAt: &now, EndedAt: &now, Placement: two}, {Number: 2, StartedAt: &now, Placement: two}}}
	done := restarted
	done.State = protocol.StateCompleted

	write(1, 0, "old-0\nlast-0\n")
	write(1, 1, "last-1\n")
	step := 0
	status := func(context.Context) (protocol.JobStatus, error) {
		step++
		switch step {
		case 1:
			write(1, 0, "new-0\n")
			write(1, 1, "partial")
			return running1, nil
		case 2:
			write(1, 1, "-end\n")
			write(2, 0, "second-0\n")
			return restarted, nil
		case 3:
			return restarted, errNoAnswer
		case 4:
			write(2, 1, "second-1\n")
			return done, nil
		}
		t.Fatal("polled after the job ended")
		return done, nil
	}
	l := &logsRun{g: g, source: b, job: job, tail: 1, worker: -1}
	require.NoError(t, l.follow(context.Background(), running1, status))
	want := strings.Join([]string{
		"[worker 0] last-0",
		"[worker 1] last-1",
		"[worker 0] new-0",
		"[worker 1] partial-end",
		"--- attempt 2 ---",
		"[worker 0] second-0",
		"[worker 1] second-1",
	}, "\n") + "\n"
	assert.Equal(t, want, out.String())
	assert.Contains(t, errb.String(), "ended Completed")

	// Without --follow, one worker: no prefix.
	out.Reset()
	l = &logsRun{g: g, source: b, job: job, worker: 1}
	require.NoError(t, l.printOnce(context.Background(), done))
	assert.Equal(t, "second-1\n", out.String())

	// JSON lines.
	out.Reset()
	g.Output = outputJSON
	l = &logsRun{g: g, source: b, job: job, worker: -1, pinned: 1}
	require.NoError(t, l.printOnce(context.Background(), done))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 5)
	var first logLine
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Equal(t, logLine{JobName: job, Attempt: 1, Worker: 0, Line: "old-0"}, first)
}

func TestWatchEventLine(t *testing.T) {
	ev := watchEvent{Time: time.Now(), Status: protocol.StatePending, Attempt: 1, Position: 2, Reason: "waiting for 4 GPUs"}
	line := eventLine(ev, protocol.JobStatus{})
	assert.Contains(t, line, "Pending")
	assert.Contains(t, line, "#2 in queue: waiting for 4 GPUs")
}

// TestSubmitPlacementFlags: --queue, --include-nodes and --exclude-nodes
// are ML Space's queue_name, include_nodes and exclude_nodes; a bad node is
// refused naming the field, before anything is dialled.
func TestSubmitPlacementFlags(t *testing.T) {
	spec := dryRunSpec(t, cli(t, "", "submit", "--script", "true", "--instance-type", "a100.1gpu", "--allocation", "demo",
		"--exclude-nodes", "demo-node-1, demo-node-2", "--dry-run", "-o", "json"))
	assert.Equal(t, []string{"demo-node-1", "demo-node-2"}, spec.ExcludeNodes)
	assert.Equal(t, []string{"demo-node-3", "demo-node-4"}, spec.AllowedNodes)
	assert.Equal(t, "default", spec.QueueName)

	r := cli(t, "", "submit", "--script", "true", "--instance-type", "a100.1gpu", "--allocation", "demo", "--include-nodes", "demo-node-9")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "include_nodes[0]: allocation demo has no node demo-node-9")
	assert.False(t, r.dialed)

	r = cli(t, "", "submit", "--script", "true", "--instance-type", "a100.1gpu", "--allocation", "demo", "--queue", "night")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `allocation demo has no queue "night"; its queues are default`)
}

// TestWatchEventLineWithExpectedStart: watch --eta adds the expected start, to the minute, and
// its assumption to a pending job's line; a start that moves within its minute is no new line.
func TestWatchEventLineWithExpectedStart(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 5, 30, 0, time.Local)
	base := watchEvent{Time: time.Now(), Status: protocol.StatePending, Attempt: 1, Position: 1, Reason: "waiting for 2 GPUs"}
	ev := base.withExpectedStart(&scheduler.ExpectedStart{At: at, Because: "if j ends by its time limit at 14:05"})
	line := eventLine(ev, protocol.JobStatus{})
	assert.Contains(t, line, "expected start 14:05 (if j ends by its time limit at 14:05)")
	later := base.withExpectedStart(&scheduler.ExpectedStart{At: at.Add(20 * time.Second), Because: "if j ends by its time limit at 14:05"})
	assert.True(t, ev.same(later), "the same minute")
	next := base.withExpectedStart(&scheduler.ExpectedStart{At: at.Add(time.Minute), Because: "if j ends by its time limit at 14:06"})
	assert.False(t, ev.same(next))
	unknown := base.withExpectedStart(&scheduler.ExpectedStart{Because: "unknown: j has no estimate"})
	assert.Contains(t, eventLine(unknown, protocol.JobStatus{}), "expected start unknown (j has no estimate)")
	assert.False(t, ev.same(unknown))
	assert.NotContains(t, eventLine(base, protocol.JobStatus{}), "expected start", "without --eta, nothing")
}
