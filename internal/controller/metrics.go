package controller

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every series of the controller.
const Namespace = "cri_guard_controller"

// Metrics are the controller's series, on a registry of its own (never the
// global one).
type Metrics struct {
	reg *prometheus.Registry
	// applied counts taints put on a Node (added, or its effect changed).
	applied prometheus.Counter
	// removed counts taints taken off, by the condition's state.
	removed *prometheus.CounterVec
	// latency is the condition→taint latency, by action.
	latency *prometheus.HistogramVec
	// patchErrors counts failed patches, by reason.
	patchErrors *prometheus.CounterVec
	leader      prometheus.Gauge
	depth       prometheus.GaugeFunc
}

// NewMetrics registers the controller's series; depth reads the work
// queue's length at scrape time.
func NewMetrics(depth func() int) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "taints_applied_total",
			Help: "Taints " + TaintKey + " put on a Node (added, or its effect changed)."}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "taints_removed_total",
			Help: "Taints " + TaintKey + " taken off a Node, by the state of its condition (false, unknown, stale, absent)."},
			[]string{"condition"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "condition_to_taint_seconds",
			Help: "From the condition's lastTransitionTime (or the moment it went stale) to the taint patch's success, by action (applied, removed).",
			// the node's own report takes up to a status interval; a
			// restarted controller catches up on older transitions
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}},
			[]string{"action"}),
		patchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "patch_errors_total",
			Help: "Taint patches that failed and were requeued with back-off, by reason (conflict, invalid, unauthorized, forbidden, throttled, server, other)."},
			[]string{"reason"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "leader",
			Help: "1 while this replica holds the leader Lease and reconciles, else 0."}),
		depth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "workqueue_depth",
			Help: "Nodes waiting in the work queue (0 while not the leader)."}, func() float64 { return float64(depth()) }),
	}
	m.reg.MustRegister(m.applied, m.removed, m.latency, m.patchErrors, m.leader, m.depth,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the series in the Prometheus format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry the series are on (for tests and for callers
// that add their own).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }
