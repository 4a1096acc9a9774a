package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
)

// obsConfig is the observability tests' own config: region O, with
// allocations and nodes no other test uses, and the worker's /metrics on
// the address the test picks.
const obsConfig = `
data_dir: %s
default_region: O
default_allocation: metrics
reclaim_interval: 1s
metrics_addr: %q
regions:
  - name: O
    allocations:
      - name: metrics
        stop_grace_period: 3s
        nodes:
          - {name: obs-metrics-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: visibility
        stop_grace_period: 3s
        nodes:
          - {name: obs-visibility-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`

// obsSetup writes the observability config with metrics on a free port and
// returns its path, the loaded config and the /metrics URL.
func obsSetup(t *testing.T) (string, *config.Config, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	path := filepath.Join(t.TempDir(), "trainq-obs.yaml")
	// The harness's data dir, so that its clean-up also ends what a failed
	// test here leaves running.
	body := fmt.Sprintf(obsConfig, filepath.Join(env.dir, "data"), addr)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	return path, cfg, "http://" + addr + "/metrics"
}

func submitWith(t *testing.T, cfg *config.Config, spec protocol.JobSpec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := tqclient.New(env.client, cfg).Submit(ctx, spec, tqclient.SubmitOptions{})
	require.NoError(t, err)
	return sub.JobName
}

// scrape is one parsed /metrics page.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, url string) (scrape, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	return scrape(families), err
}

// value sums the series of name whose labels include want. A histogram's
// name_count and name_sum are read from the histogram.
func (s scrape) value(name string, want map[string]string) float64 {
	base, part := name, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if f, ok := s[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
			base, part = strings.TrimSuffix(name, suffix), suffix
		}
	}
	f, ok := s[base]
	if !ok {
		return 0
	}
	total := 0.0
outer:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue outer
			}
		}
		switch {
		case part == "_count":
			total += float64(m.GetHistogram().GetSampleCount())
		case part == "_sum":
			total += m.GetHistogram().GetSampleSum()
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

// has says whether the scrape has a series for name (or, for a histogram's
// _bucket, _sum or _count, for its family).
func (s scrape) has(name string) bool {
	if _, ok := s[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if f, ok := s[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
			return true
		}
	}
	return false
}

// expectMetrics polls /metrics until every expectation holds.
func expectMetrics(t *testing.T, url, what string, want map[string]float64, labels map[string]map[string]string) scrape {
	t.Helper()
	var last scrape
	var diffs []string
	deadline := time.Now().Add(long)
	for {
		s, err := scrapeMetrics(t, url)
		diffs = diffs[:0]
		if err != nil {
			diffs = append(diffs, err.Error())
		} else {
			last = s
			for key, v := range want {
				name := strings.SplitN(key, "{", 2)[0]
				if got := s.value(name, labels[key]); got != v {
					diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", key, got, v))
				}
			}
		}
		if len(diffs) == 0 {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: metrics never matched:\n  %s", what, strings.Join(diffs, "\n  "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestMetricsAfterPreemptionAndWorkerRestart(t *testing.T) {
	cfgPath, cfg, url := obsSetup(t)
	w := startWorkerWith(t, cfgPath)
	dir := t.TempDir()
	alloc := map[string]string{metrics.LabelRegion: "O", metrics.LabelAllocation: "metrics"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{metrics.LabelRegion: "O", metrics.LabelAllocation: "metrics"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	labels := map[string]map[string]string{
		"up":                     alloc,
		"gpus free":              with(metrics.LabelState, "free"),
		"gpus allocated":         with(metrics.LabelState, "allocated"),
		"gpus releasing":         with(metrics.LabelState, "releasing"),
		"running low":            with(metrics.LabelPriority, "low"),
		"running high":           with(metrics.LabelPriority, "high"),
		"waiting low":            with(metrics.LabelPriority, "low"),
		"preemptions low<-high":  with(metrics.LabelVictimPriority, "low", metrics.LabelPreemptorPriority, "high"),
		"preemptions":            alloc,
		"restarts preempted low": with(metrics.LabelReason, "preempted", metrics.LabelPriority, "low"),
		"restarts":               alloc,
		"wait low":               with(metrics.LabelPriority, "low"),
		"wait high":              with(metrics.LabelPriority, "high"),
		"finished completed":     with(metrics.LabelState, "Completed"),
		"finished":               alloc,
	}
	// The expectation keys name a metric and, after a space, the labels
	// above; metric() turns them into expectMetrics' form.
	metric := func(m map[string]float64) (map[string]float64, map[string]map[string]string) {
		want, lbls := map[string]float64{}, map[string]map[string]string{}
		for k, v := range m {
			name, key, _ := strings.Cut(k, " ")
			full := name + "{" + key + "}"
			want[full], lbls[full] = v, labels[key]
		}
		return want, lbls
	}
	expect := func(what string, m map[string]float64) scrape {
		t.Helper()
		want, lbls := metric(m)
		return expectMetrics(t, url, what, want, lbls)
	}

	expect("an idle allocation", map[string]float64{
		metrics.AllocatorUp + " up": 1, metrics.GPUs + " gpus free": 2, metrics.GPUs + " gpus allocated": 0,
	})

	low := submitWith(t, cfg, fixture.Job{Region: "O", Allocation: "metrics", Class: "low", MaxRetry: 1, Script: victimScript(dir)}.Spec())
	waitState(t, low, protocol.StateRunning, long)
	expect("the low job running", map[string]float64{
		metrics.GPUs + " gpus allocated": 2, metrics.GPUs + " gpus free": 0,
		metrics.RunningJobs + " running low": 1, metrics.QueueWait + "_count wait low": 1,
	})

	gateHigh := gate(filepath.Join(dir, "high"))
	high := submitWith(t, cfg, fixture.Job{Region: "O", Allocation: "metrics", Class: "high", Script: gateHigh.waitFor()}.Spec())
	waitState(t, high, protocol.StateRunning, long)
	st := waitState(t, low, protocol.StatePending, long)
	require.Equal(t, 2, st.Attempt)
	s := expect("after the preemption", map[string]float64{
		metrics.GPUs + " gpus allocated": 2, metrics.GPUs + " gpus free": 0, metrics.GPUs + " gpus releasing": 0,
		metrics.RunningJobs + " running high": 1, metrics.RunningJobs + " running low": 0,
		metrics.WaitingJobs + " waiting low":           1,
		metrics.Preemptions + " preemptions low<-high": 1, metrics.Preemptions + " preemptions": 1,
		metrics.JobRestarts + " restarts preempted low": 1, metrics.JobRestarts + " restarts": 1,
		metrics.QueueWait + "_count wait low": 1, metrics.QueueWait + "_count wait high": 1,
	})
	assert.Greater(t, s.value(metrics.SchedulingPass+"_count", alloc), 0.0)
	before := s

	// A crash and a restart: the gauges are right at once, read from the
	// allocator; the counters start again from zero, and replaying the
	// histories on the new worker counts nothing again.
	w.Kill()
	startWorkerWith(t, cfgPath)
	expect("after the restart", map[string]float64{
		metrics.AllocatorUp + " up": 1, metrics.GPUs + " gpus allocated": 2, metrics.GPUs + " gpus free": 0,
		metrics.RunningJobs + " running high": 1, metrics.WaitingJobs + " waiting low": 1,
	})
	gateHigh.open(t)
	waitState(t, high, protocol.StateCompleted, long)
	waitState(t, low, protocol.StateCompleted, long)
	after := expect("after both jobs completed on the new worker", map[string]float64{
		metrics.GPUs + " gpus free": 2, metrics.GPUs + " gpus allocated": 0,
		metrics.RunningJobs + " running high": 0, metrics.WaitingJobs + " waiting low": 0,
		// Both allocator and job histories were replayed on this worker
		// (the high job's release, the low job's second grant): the
		// preemption, the restart and the first waits are not counted again.
		metrics.Preemptions + " preemptions": 0, metrics.JobRestarts + " restarts": 0,
		metrics.QueueWait + "_count wait high": 0, metrics.QueueWait + "_count wait low": 1,
		metrics.JobsFinished + " finished completed": 2, metrics.JobsFinished + " finished": 2,
	})
	assert.Greater(t, after.value(metrics.SchedulingPass+"_count", alloc), 0.0, "passes after the restart are counted")

	// Every metric the dashboard queries was on a real page, but for
	// counters of events this scenario does not cause.
	noEvent := map[string]bool{metrics.LeakedReclaimed: true, "temporal_workflow_task_execution_failed_total": true, "temporal_request_failure_total": true}
	names, err := metrics.DashboardMetrics(filepath.Join("..", "deploy", "grafana", "trainq.json"))
	require.NoError(t, err)
	for _, name := range names {
		if !noEvent[name] {
			assert.True(t, before.has(name) || after.has(name), "the dashboard queries %s, which /metrics lacks", name)
		}
	}
}
