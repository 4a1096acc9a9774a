package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func topView(now time.Time, waiting int) protocol.QueueView {
	v := protocol.QueueView{Region: "SR006", Allocation: "demo", View: scheduler.View{
		Nodes: []scheduler.NodeInfo{
			{Name: "demo-node-1", Family: "a100", GPUs: 2, AllocatedGPUs: 2},
			{Name: "demo-node-2", Family: "a100", GPUs: 2, ReleasingGPUs: 2},
			{Name: "demo-node-3", Family: "a100", GPUs: 2, FreeGPUs: 2},
			{Name: "big", Family: "a100plus", GPUs: 64, AllocatedGPUs: 32, FreeGPUs: 32},
			{Name: "cpu-1", Family: "cpu"},
		},
		Running: []scheduler.RunningInfo{
			{Job: "lm-mpi-job-a", Class: scheduler.High, GPUs: 2, StartedAt: now.Add(-90 * time.Second),
				Placement: []scheduler.WorkerPlacement{{Node: "demo-node-1", GPUs: []int{0, 1}}}},
			{Job: "lm-mpi-job-b", Class: scheduler.Low, GPUs: 2, StartedAt: now.Add(-time.Hour), Releasing: true,
				Placement:   []scheduler.WorkerPlacement{{Node: "demo-node-2", GPUs: []int{0, 1}}},
				PreemptedBy: &scheduler.Preemptor{Job: "lm-mpi-job-c", Class: scheduler.High}},
		},
	}}
	for i := 0; i < waiting; i++ {
		v.Waiting = append(v.Waiting, scheduler.WaitingInfo{Job: "lm-mpi-job-w" + string(rune('a'+i)), Class: scheduler.Medium,
			GPUs: 4, Position: i + 1, Reason: "needs 4 GPUs on a100 nodes; 2 free", SubmittedAt: now.Add(-time.Minute)})
	}
	return v
}

func TestTopRendersNodesRunningAndWaiting(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	renderTop(&b, topView(now, 2), now, 0, 0)
	out := b.String()
	assert.Contains(t, out, "trainq top · SR006/demo · 12:00:00")
	assert.Contains(t, out, "GPUs 70: 34 allocated █, 2 releasing ▒, 34 free ░")
	assert.Regexp(t, `demo-node-1\s+a100\s+2\s+██ 2/2`, out)
	assert.Regexp(t, `demo-node-2\s+a100\s+2\s+▒▒ 2/2 \(2 releasing\)`, out)
	assert.Regexp(t, `demo-node-3\s+a100\s+2\s+░░ 0/2`, out)
	assert.Contains(t, out, strings.Repeat("█", 8)+strings.Repeat("░", 8)+" 32/64")
	assert.Regexp(t, `cpu-1\s+cpu\s+0\s+cpu only`, out)
	assert.Regexp(t, `lm-mpi-job-a\s+high\s+2\s+1m30s\s+running\s+demo-node-1`, out)
	assert.Contains(t, out, "releasing 0/1, preempted by lm-mpi-job-c")
	assert.Regexp(t, `1\s+lm-mpi-job-wa\s+medium\s+4\s+1m00s\s+needs 4 GPUs on a100 nodes; 2 free`, out)
	assert.Regexp(t, `2\s+lm-mpi-job-wb`, out)
}

func TestTopFitsTheScreen(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	renderTop(&b, topView(now, 50), now, 60, 24)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 24)
	for _, l := range lines {
		assert.LessOrEqual(t, len([]rune(l)), 60, l)
	}
	assert.Contains(t, b.String(), "more")
	assert.Contains(t, b.String(), "Running (2)")
	assert.Contains(t, b.String(), "Waiting, in launch order (50)")
}

func TestTopLiveRedrawsAndRetries(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	g := newGlobals(strings.NewReader(""), &out, &out)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	tp := &top{g: g, interval: time.Millisecond, live: true, size: func() (int, int) { return 0, 0 },
		fetch: func(context.Context) (protocol.QueueView, error) {
			calls++
			switch calls {
			case 2:
				return protocol.QueueView{}, errors.New("the allocator did not answer")
			case 3:
				cancel()
			}
			return topView(now, 1), nil
		}}
	require.NoError(t, tp.run(ctx))
	frames := strings.Split(out.String(), ansiClear)
	require.Len(t, frames, 3, "two frames, then Ctrl-C")
	assert.Contains(t, frames[1], "lm-mpi-job-wa")
	assert.Contains(t, frames[2], "the allocator did not answer")
	assert.True(t, strings.HasSuffix(out.String(), ansiShowCursor))
}

func TestTopSnapshotOnNonTTY(t *testing.T) {
	var out bytes.Buffer
	g := newGlobals(strings.NewReader(""), &out, &out)
	tp := &top{g: g, interval: time.Second, live: false, size: func() (int, int) { return 0, 0 },
		fetch: func(context.Context) (protocol.QueueView, error) { return topView(time.Now(), 1), nil }}
	require.NoError(t, tp.run(context.Background()))
	assert.NotContains(t, out.String(), "\x1b[")
	assert.Contains(t, out.String(), "Waiting, in launch order (1)")
}

func TestTopUsage(t *testing.T) {
	r := cli(t, "", "top", "nosuch")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.False(t, r.dialed)
	r = cli(t, "", "top", "demo")
	assert.True(t, r.dialed)
}
