package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Namespace prefixes every series.
const Namespace = "cri_guard"

// Metrics holds cri-guard's event-driven series and the registry they
// are registered on.
type Metrics struct {
	reg *prometheus.Registry

	criDuration   *prometheus.HistogramVec
	criErrors     *prometheus.CounterVec
	admissions    *prometheus.CounterVec
	evictions     *prometheus.CounterVec
	dryRun        *prometheus.CounterVec
	evictFailures *prometheus.CounterVec
	graceCuts     *prometheus.CounterVec
	unable        *prometheus.CounterVec
	statsErrors   prometheus.Counter
	checkpointOps *prometheus.CounterVec
	apiWrites     *prometheus.CounterVec

	// methods maps the full name of each known CRI method to its series,
	// made in New; other is the series of every other method (see
	// otherMethod). Read-only after New: the hot path does one map lookup.
	methods map[string]*methodSeries
	other   *methodSeries
}

// criBuckets spans a fast pass-through (100µs) to slow image pulls (~1m).
var criBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New builds the series and registers them, with the Go runtime and
// process collectors, on a new registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		criDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "cri_request_duration_seconds",
			Help:    "Duration of CRI calls served to the kubelet, by full gRPC method (\"other\" for a method that is not a known CRI method), as seen by cri-guard.",
			Buckets: criBuckets,
		}, []string{"method"}),
		criErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "cri_request_errors_total",
			Help: "CRI calls that ended with an error, by full gRPC method (\"other\" for a method that is not a known CRI method) and status code.",
		}, []string{"method", "code"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "admissions_total",
			Help: "Pod sandbox admission decisions, by result (admit, refuse) and reason.",
		}, []string{"result", "reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "evictions_total",
			Help: "Pods stopped by eviction, by the signal whose threshold was met.",
		}, []string{"signal"}),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "dry_run_evictions_total",
			Help: "Evictions that dry-run mode logged instead of stopping the pod, by signal.",
		}, []string{"signal"}),
		evictFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "eviction_failures_total",
			Help: "Evictions that failed to stop the pod, by signal.",
		}, []string{"signal"}),
		graceCuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "eviction_grace_cuts_total",
			Help: "Evictions whose grace period was cut short (pod killed at once) with a memory signal under half of a hard threshold, by the evicting signal.",
		}, []string{"signal"}),
		unable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "eviction_unable_total",
			Help: "Eviction passes with a threshold met but no evictable pod, by signal.",
		}, []string{"signal"}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "stats_errors_total",
			Help: "Pressure samples that could not be read.",
		}),
		checkpointOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "checkpoint_operations_total",
			Help: "Checkpoint store operations (put, list, delete) by result (ok, error).",
		}, []string{"op", "result"}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "api_writes_total",
			Help: "Writes to the API server (reject, evict: pod status; event; node-condition) by result (ok, error, gone: the pod was gone).",
		}, []string{"op", "result"}),
	}
	m.reg.MustRegister(m.criDuration, m.criErrors, m.admissions, m.evictions, m.dryRun,
		m.evictFailures, m.graceCuts, m.unable, m.statsErrors, m.checkpointOps, m.apiWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.newMethodTable()
	for _, op := range []string{opPut, opList, opDelete} {
		for _, r := range []string{resultOK, resultError} {
			m.checkpointOps.WithLabelValues(op, r)
		}
	}
	// The decision counters the alerts take the increase of exist from the
	// start, at 0: a child made by its first event is first scraped at 1,
	// and increase() over a series that starts at 1 and stays there is 0,
	// so an episode's single unable-to-evict pass, or its first evictions
	// and refusals, would fire nothing (as seen on a real pressure
	// episode's scrapes).
	for _, s := range knownSignals {
		for _, c := range []*prometheus.CounterVec{m.evictions, m.dryRun, m.evictFailures, m.graceCuts, m.unable} {
			c.WithLabelValues(string(s))
		}
	}
	m.admissions.WithLabelValues("admit", "")
	m.admissions.WithLabelValues("refuse", evictor.ReasonEvicted)
	return m
}

// knownSignals are the signals the decision counters are made for at
// start.
var knownSignals = []pressure.Signal{
	pressure.SignalMemoryAvailable, pressure.SignalAllocatableMemoryAvailable,
	pressure.SignalPSISomeAvg10, pressure.SignalPSISomeAvg60,
	pressure.SignalPSIFullAvg10, pressure.SignalPSIFullAvg60,
}

// Registry returns the registry the series are registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observe records one CRI call (server.Observer): its duration, and when
// err is not nil its status code, under the method's name when it is a
// known CRI method and under otherMethod otherwise.
func (m *Metrics) Observe(method string, d time.Duration, err error) {
	s := m.series(method)
	m.durationObserver(s).Observe(d.Seconds())
	if err != nil {
		m.errorCounter(s, status.Code(err)).Inc()
	}
}

// APIWrite counts one write to the API server (kube.Observer).
func (m *Metrics) APIWrite(op, result string) { m.apiWrites.WithLabelValues(op, result).Inc() }

// Decided records one evictor decision (evictor.Observer).
func (m *Metrics) Decided(d evictor.Decision) {
	switch d.Kind {
	case evictor.KindAdmit:
		m.admissions.WithLabelValues("admit", d.Reason).Inc()
	case evictor.KindRefuse:
		m.admissions.WithLabelValues("refuse", d.Reason).Inc()
	case evictor.KindEvict:
		m.evictions.WithLabelValues(d.Signal).Inc()
	case evictor.KindDryRun:
		m.dryRun.WithLabelValues(d.Signal).Inc()
	case evictor.KindEvictFailed:
		m.evictFailures.WithLabelValues(d.Signal).Inc()
	case evictor.KindGraceCut:
		m.graceCuts.WithLabelValues(d.Signal).Inc()
	case evictor.KindUnable:
		m.unable.WithLabelValues(d.Signal).Inc()
	case evictor.KindStatsError:
		m.statsErrors.Inc()
	}
}

var _ evictor.Observer = (*Metrics)(nil)
