package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func TestCollectorDerivesGaugesFromAllocatorState(t *testing.T) {
	calls := 0
	view := protocol.QueueView{Region: "R", Allocation: "a", View: scheduler.View{
		Nodes: []scheduler.NodeInfo{
			{Name: "n1", GPUs: 8, FreeGPUs: 2, AllocatedGPUs: 4, ReleasingGPUs: 2},
			{Name: "n2", GPUs: 8, FreeGPUs: 8},
		},
		Running: []scheduler.RunningInfo{{Job: "j1", Class: scheduler.Low, GPUs: 4}, {Job: "j2", Class: scheduler.High, GPUs: 2, Releasing: true}},
		Waiting: []scheduler.WaitingInfo{{Job: "j3", Class: scheduler.Medium}, {Job: "j4", Class: scheduler.Medium}},
	}}
	c := NewCollector([]Allocation{{"R", "a"}, {"R", "gone"}}, func(_ context.Context, region, allocation string) (protocol.QueueView, error) {
		if allocation == "gone" {
			return protocol.QueueView{}, errors.New("no allocator")
		}
		calls++
		return view, nil
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP trainq_allocator_up 1 if the allocation's allocator answered its queue query at the last scrape, else 0.
# TYPE trainq_allocator_up gauge
trainq_allocator_up{allocation="a",region="R"} 1
trainq_allocator_up{allocation="gone",region="R"} 0
# HELP trainq_gpus GPUs of an allocation by state: allocated (held by running jobs), releasing (held by stopping workers), free.
# TYPE trainq_gpus gauge
trainq_gpus{allocation="a",region="R",state="allocated"} 4
trainq_gpus{allocation="a",region="R",state="free"} 10
trainq_gpus{allocation="a",region="R",state="releasing"} 2
# HELP trainq_running_jobs Jobs holding capacity in an allocation (running or releasing), by priority class.
# TYPE trainq_running_jobs gauge
trainq_running_jobs{allocation="a",priority="high",region="R"} 1
trainq_running_jobs{allocation="a",priority="low",region="R"} 1
trainq_running_jobs{allocation="a",priority="medium",region="R"} 0
# HELP trainq_waiting_jobs Jobs waiting in an allocation's queue, by priority class.
# TYPE trainq_waiting_jobs gauge
trainq_waiting_jobs{allocation="a",priority="high",region="R"} 0
trainq_waiting_jobs{allocation="a",priority="low",region="R"} 0
trainq_waiting_jobs{allocation="a",priority="medium",region="R"} 2
`))
	require.NoError(t, err)
	// A second scrape within CacheFor asks no allocator again.
	_, err = reg.Gather()
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	c.CacheFor = 0 // every scrape asks again
	_, err = reg.Gather()
	require.NoError(t, err)
	assert.Equal(t, 2, calls)
}
