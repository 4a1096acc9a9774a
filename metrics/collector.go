package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainq/trainq/protocol"
)

// Allocation names one allocator the collector asks.
type Allocation struct{ Region, Allocation string }

// QueueFunc asks one allocator for its queue view (client.Client.Queue).
type QueueFunc func(ctx context.Context, region, allocation string) (protocol.QueueView, error)

// Collector derives the gauges from the allocators' own state: on a scrape
// it asks every configured allocator's queue query, at most once per
// CacheFor. So the gauges are right the moment a worker (re)starts, and
// they cannot drift from what the allocator holds, as counters kept in the
// worker's memory could.
type Collector struct {
	allocations []Allocation
	query       QueueFunc
	// CacheFor is how long one round of queries serves scrapes (default 2s).
	CacheFor time.Duration
	// Timeout bounds one round of queries (default 5s).
	Timeout time.Duration

	mu      sync.Mutex
	at      time.Time
	metrics []prometheus.Metric

	gpus, waiting, running, up *prometheus.Desc
}

// NewCollector returns a collector for allocations.
func NewCollector(allocations []Allocation, query QueueFunc) *Collector {
	alloc := []string{LabelRegion, LabelAllocation}
	return &Collector{
		allocations: allocations, query: query, CacheFor: 2 * time.Second, Timeout: 5 * time.Second,
		gpus:    prometheus.NewDesc(GPUs, "GPUs of an allocation by state: allocated (held by running jobs), releasing (held by stopping workers), free.", append(alloc, LabelState), nil),
		waiting: prometheus.NewDesc(WaitingJobs, "Jobs waiting in an allocation's queue, by priority class.", append(alloc, LabelPriority), nil),
		running: prometheus.NewDesc(RunningJobs, "Jobs holding capacity in an allocation (running or releasing), by priority class.", append(alloc, LabelPriority), nil),
		up:      prometheus.NewDesc(AllocatorUp, "1 if the allocation's allocator answered its queue query at the last scrape, else 0.", alloc, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.gpus
	ch <- c.waiting
	ch <- c.running
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics == nil || time.Since(c.at) >= c.CacheFor {
		c.metrics = c.gather()
		c.at = time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// gather asks every allocator at once. An allocator that does not answer
// reports trainq_allocator_up 0 and no gauges, rather than stale ones.
func (c *Collector) gather() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	views := make([]*protocol.QueueView, len(c.allocations))
	var wg sync.WaitGroup
	for i, a := range c.allocations {
		wg.Go(func() {
			if v, err := c.query(ctx, a.Region, a.Allocation); err == nil {
				views[i] = &v
			}
		})
	}
	wg.Wait()
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...))
	}
	for i, a := range c.allocations {
		if views[i] == nil {
			gauge(c.up, 0, a.Region, a.Allocation)
			continue
		}
		gauge(c.up, 1, a.Region, a.Allocation)
		counts := CountsOf(*views[i])
		for _, s := range []string{StateAllocated, StateReleasing, StateFree} {
			gauge(c.gpus, counts.GPUs[s], a.Region, a.Allocation, s)
		}
		for class, n := range counts.Waiting {
			gauge(c.waiting, n, a.Region, a.Allocation, class)
		}
		for class, n := range counts.Running {
			gauge(c.running, n, a.Region, a.Allocation, class)
		}
	}
	return out
}
