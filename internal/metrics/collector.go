package metrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// StateSource is what the Collector reads at scrape time.
type StateSource struct {
	// Snapshot is the eviction manager's status (evictor.Manager.Snapshot).
	Snapshot func() evictor.Status
	// Connected reports whether the runtime connection is up
	// (runtimeproxy.Client.State() == connectivity.Ready); nil omits
	// cri_guard_runtime_connected.
	Connected func() bool
	// Degraded reports whether cri-guard serves without a finished restore
	// (guard.Loop.Degraded() != nil); nil omits cri_guard_restore_degraded.
	Degraded func() bool
	// Parts are the parts cri-guard serves without, as "part: reason"
	// (the config file, the metrics or admin listener, the API
	// connection); nil omits cri_guard_degraded.
	Parts func() []string
	// Wakeups are the sync loop's passes by what woke them, and its watch
	// samples (guard.Loop.Wakeups); nil omits cri_guard_wakeups_total.
	Wakeups func() map[string]uint64
	// StoreAvailable reports whether the state directory is open
	// (checkpoint.Deferred.Available); nil omits
	// cri_guard_state_store_available.
	StoreAvailable func() bool
	// Unsaved counts the records in memory only (guard.Loop.Unsaved);
	// nil omits cri_guard_checkpoint_unsaved_records.
	Unsaved func() int
}

// Collector turns the latest eviction-manager snapshot (its observations
// and its own evaluation of the thresholds) into gauges when Prometheus
// scrapes; it owns no goroutine.
type Collector struct {
	src StateSource

	signal     *prometheus.Desc
	threshold  *prometheus.Desc
	condition  *prometheus.Desc
	connected  *prometheus.Desc
	sampledAt  *prometheus.Desc
	statsError *prometheus.Desc
	degraded   *prometheus.Desc
	parts      *prometheus.Desc
	wakeups    *prometheus.Desc
	storeUp    *prometheus.Desc
	unsaved    *prometheus.Desc
}

// conditions are always exported, 0 when absent.
var conditions = []string{pressure.ConditionMemoryPressure}

// NewCollector returns a collector over src.
func NewCollector(src StateSource) *Collector {
	return &Collector{
		src: src,
		signal: prometheus.NewDesc(Namespace+"_signal_value",
			"Last observed value of each eviction signal: bytes for memory signals, percent for PSI signals.",
			[]string{"signal"}, nil),
		threshold: prometheus.NewDesc(Namespace+"_threshold_value",
			"Eviction thresholds, by signal and kind (hard, soft): bytes (percentages resolved against the last observed capacity) or percent for PSI.",
			[]string{"signal", "kind"}, nil),
		condition: prometheus.NewDesc(Namespace+"_node_condition",
			"Node conditions cri-guard reports: 1 while set.",
			[]string{"condition"}, nil),
		connected: prometheus.NewDesc(Namespace+"_runtime_connected",
			"1 when the connection to the container runtime is ready.", nil, nil),
		sampledAt: prometheus.NewDesc(Namespace+"_last_sample_timestamp_seconds",
			"Unix time of the last pressure sample.", nil, nil),
		statsError: prometheus.NewDesc(Namespace+"_stats_error",
			"1 when the last pressure sample could not be read.", nil, nil),
		degraded: prometheus.NewDesc(Namespace+"_restore_degraded",
			"1 while cri-guard serves without a finished restore of its checkpoints (retried).", nil, nil),
		parts: prometheus.NewDesc(Namespace+"_degraded",
			"1 for each part cri-guard serves CRI without, retried in the background (config, metrics, admin socket, api).",
			[]string{"part"}, nil),
		wakeups: prometheus.NewDesc(Namespace+"_wakeups_total",
			"Sync loop passes by what woke them (tick, trigger, notification, memory-events, follow-up, fast-poll, restored-refused) and the fast poll's watch samples (watch).",
			[]string{"source"}, nil),
		storeUp: prometheus.NewDesc(Namespace+"_state_store_available",
			"1 when the state directory's checkpoint store is open; 0 while records are kept in memory only (opening retried).", nil, nil),
		unsaved: prometheus.NewDesc(Namespace+"_checkpoint_unsaved_records",
			"Records kept in memory only: their last checkpoint write failed (written again with back-off).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.signal, c.threshold, c.condition, c.connected, c.sampledAt, c.statsError, c.degraded, c.parts, c.wakeups, c.storeUp, c.unsaved} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var st evictor.Status
	if c.src.Snapshot != nil {
		st = c.src.Snapshot()
	}
	// the last sample failed: its values are stale, so none is exported
	// (absent series, as Prometheus expects of an unknown value); the time
	// of the last good sample and stats_error say why
	if st.StatsError == "" {
		for sig, obs := range st.Observed {
			ch <- prometheus.MustNewConstMetric(c.signal, prometheus.GaugeValue, obs.Value(), string(sig))
		}
	}
	for _, t := range st.Thresholds {
		if !t.LimitKnown {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.threshold, prometheus.GaugeValue, t.Limit, string(t.Threshold.Signal), thresholdKind(t.Threshold))
	}
	for _, cond := range conditions {
		v := 0.0
		if slices.Contains(st.Conditions, cond) {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.condition, prometheus.GaugeValue, v, cond)
	}
	if c.src.Connected != nil {
		ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, boolValue(c.src.Connected()))
	}
	if !st.SampledAt.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.sampledAt, prometheus.GaugeValue, float64(st.SampledAt.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(c.statsError, prometheus.GaugeValue, boolValue(st.StatsError != ""))
	if c.src.Degraded != nil {
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, boolValue(c.src.Degraded()))
	}
	if c.src.Parts != nil {
		for _, p := range c.src.Parts() {
			part, _, _ := strings.Cut(p, ": ")
			ch <- prometheus.MustNewConstMetric(c.parts, prometheus.GaugeValue, 1, part)
		}
	}
	if c.src.StoreAvailable != nil {
		ch <- prometheus.MustNewConstMetric(c.storeUp, prometheus.GaugeValue, boolValue(c.src.StoreAvailable()))
	}
	if c.src.Unsaved != nil {
		ch <- prometheus.MustNewConstMetric(c.unsaved, prometheus.GaugeValue, float64(c.src.Unsaved()))
	}
	if c.src.Wakeups != nil {
		for source, n := range c.src.Wakeups() {
			ch <- prometheus.MustNewConstMetric(c.wakeups, prometheus.CounterValue, float64(n), source)
		}
	}
}

func thresholdKind(t pressure.Threshold) string {
	if t.Hard {
		return "hard"
	}
	return "soft"
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ prometheus.Collector = (*Collector)(nil)
