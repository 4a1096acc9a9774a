package metrics

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	sdkotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// Histogram buckets, in seconds.
var (
	// QueueWaitBuckets span a second to a day: jobs wait for minutes or hours.
	QueueWaitBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400}
	// SchedulingPassBuckets span 10µs to 2.5s: a pass is pure computation.
	SchedulingPassBuckets = []float64{1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	// SDKLatencyBuckets are for the Temporal SDK's task and request latencies.
	SDKLatencyBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// Registry is the Prometheus registry trainq-worker serves, with the
// Temporal metrics handler that feeds it.
type Registry struct {
	Prometheus *prometheus.Registry
	// Handler goes into client.Options.MetricsHandler: the SDK's metrics and
	// every metric a workflow emits through workflow.GetMetricsHandler.
	Handler  client.MetricsHandler
	provider *sdkmetric.MeterProvider
}

// NewRegistry makes a registry with the Go runtime and process collectors
// and the OpenTelemetry exporter that carries the Temporal SDK's metrics.
func NewRegistry() (*Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithoutTargetInfo(),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(histogramBuckets))
	handler := sdkotel.NewMetricsHandler(sdkotel.MetricsHandlerOptions{
		Meter:                provider.Meter("trainq"),
		UseMonotonicCounters: true,
		// A metrics error must never take a workflow task down.
		OnError: func(error) {},
	})
	return &Registry{Prometheus: reg, Handler: handler, provider: provider}, nil
}

// HTTPHandler serves the registry in the Prometheus exposition format.
func (r *Registry) HTTPHandler() http.Handler {
	return promhttp.HandlerFor(r.Prometheus, promhttp.HandlerOpts{Registry: r.Prometheus})
}

// Shutdown stops the OpenTelemetry meter provider.
func (r *Registry) Shutdown(ctx context.Context) error { return r.provider.Shutdown(ctx) }

// histogramBuckets sets the buckets of every histogram by its name. (One
// view function, not one view per name: every matching view would add a
// stream of its own.)
func histogramBuckets(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if i.Kind != sdkmetric.InstrumentKindHistogram {
		return sdkmetric.Stream{}, false
	}
	bounds := SDKLatencyBuckets
	switch i.Name {
	case QueueWaitInstrument:
		bounds = QueueWaitBuckets
	case SchedulingPassInstrument:
		bounds = SchedulingPassBuckets
	}
	return sdkmetric.Stream{Name: i.Name, Description: i.Description, Unit: i.Unit,
		Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: bounds}}, true
}
