package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The workflows emit through the SDK's handler; the exporter must turn their
// instrument names into exactly the documented metric names.
func TestHandlerNames(t *testing.T) {
	r, err := NewRegistry()
	require.NoError(t, err)
	h := r.Handler.WithTags(Tags("R", "a"))
	h.WithTags(map[string]string{LabelVictimPriority: "low", LabelPreemptorPriority: "high"}).Counter(PreemptionsInstrument).Inc(1)
	h.WithTags(map[string]string{LabelPriority: "low", LabelReason: ReasonPreempted}).Counter(JobRestartsInstrument).Inc(1)
	h.WithTags(map[string]string{LabelPriority: "low", LabelState: "Completed"}).Counter(JobsFinishedInstrument).Inc(1)
	h.Counter(LeakedReclaimedInstrument).Inc(1)
	h.WithTags(map[string]string{LabelPriority: "low"}).Timer(QueueWaitInstrument).Record(90 * time.Second)
	h.Timer(SchedulingPassInstrument).Record(300 * time.Microsecond)
	r.Handler.Timer("temporal_workflow_task_execution_latency").Record(20 * time.Millisecond)
	r.Handler.Counter("temporal_request_failure").Inc(1)

	families, err := r.Prometheus.Gather()
	require.NoError(t, err)
	names := map[string]string{}
	for _, f := range families {
		names[f.GetName()] = f.GetType().String()
	}
	t.Log(names)
	for _, n := range []string{Preemptions, JobRestarts, JobsFinished, LeakedReclaimed} {
		assert.Equal(t, "COUNTER", names[n], n)
	}
	for _, n := range []string{QueueWait, SchedulingPass, sdkTaskLatency} {
		assert.Equal(t, "HISTOGRAM", names[n], n)
	}
	assert.Equal(t, "COUNTER", names[sdkRequestFailed])

	// The label set is the documented one, and the buckets fit the metric.
	n, err := testutil.GatherAndCount(r.Prometheus, Preemptions)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	err = testutil.GatherAndCompare(r.Prometheus, strings.NewReader(`
# HELP trainq_preemptions_total
# TYPE trainq_preemptions_total counter
trainq_preemptions_total{allocation="a",preemptor_priority="high",region="R",victim_priority="low"} 1
`), Preemptions)
	assert.NoError(t, err)
}

// Every metric the Grafana dashboard queries is one trainq-worker exports
// (the end-to-end test also finds each on a real scrape).
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	names, err := DashboardMetrics("../deploy/grafana/trainq.json")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, n := range names {
		assert.True(t, Known(n), "the dashboard queries %s, which trainq-worker does not export", n)
	}
	// Each panel the issue asks for is there.
	for _, want := range []string{GPUs, WaitingJobs, QueueWait + "_bucket", Preemptions, JobRestarts, SchedulingPass + "_bucket", sdkTaskLatency + "_bucket"} {
		assert.Contains(t, names, want)
	}
}

func TestPromQLMetrics(t *testing.T) {
	got := PromQLMetrics(`histogram_quantile(0.9, sum by (le, priority) (rate(trainq_queue_wait_seconds_bucket{allocation=~"$allocation", x="trainq_fake"}[5m]))) / on (trainq_label) trainq_gpus`)
	assert.Equal(t, []string{"trainq_queue_wait_seconds_bucket", "trainq_gpus"}, got)
}
