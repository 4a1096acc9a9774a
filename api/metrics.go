package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the API's HTTP request metrics, in a registry of its own.
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refused  prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trainq_api_requests_total",
			Help: "HTTP requests answered by trainq-api, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trainq_api_request_duration_seconds",
			Help:    "Time to answer HTTP requests (for log streams: until the stream ends), by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
	}
	m.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "trainq_api_connections_refused_total",
		Help: "Connections answered 429 because their client address had too many open (see --max-conns-per-client).",
	})
	m.registry.MustRegister(m.requests, m.duration, m.refused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *metrics) observe(route, method string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// recorder remembers the status code; it passes Flush on for log streams.
// An answer to a request whose body was not read to its end says
// Connection: close, so that the server does not wait for the rest.
type recorder struct {
	http.ResponseWriter
	code    int
	written bool
	body    *trackedBody // nil: the request declared no body
}

func (r *recorder) WriteHeader(code int) {
	if !r.written {
		r.code, r.written = code, true
		r.closeIfUnread()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.written {
		r.code, r.written = http.StatusOK, true
		r.closeIfUnread()
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) closeIfUnread() {
	if r.body != nil && !r.body.eof.Load() {
		r.Header().Set("Connection", "close")
	}
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// ConnectionRefused counts a connection refused by Listener's per-client limit.
func (s *Server) ConnectionRefused() { s.metrics.refused.Inc() }
