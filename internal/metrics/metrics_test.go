package metrics

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

const versionMethod = "/runtime.v1.RuntimeService/Version"

func TestObserve(t *testing.T) {
	m := New()
	m.Observe(versionMethod, 2*time.Millisecond, nil)
	m.Observe(versionMethod, 3*time.Millisecond, status.Error(codes.Unavailable, "down"))
	m.Observe("/runtime.v1.RuntimeService/Status", time.Millisecond, errors.New("plain"))
	want := `
# HELP cri_guard_cri_request_errors_total CRI calls that ended with an error, by full gRPC method ("other" for a method that is not a known CRI method) and status code.
# TYPE cri_guard_cri_request_errors_total counter
cri_guard_cri_request_errors_total{code="Unavailable",method="/runtime.v1.RuntimeService/Version"} 1
cri_guard_cri_request_errors_total{code="Unknown",method="/runtime.v1.RuntimeService/Status"} 1
`
	compareText(t, m.reg, want, "cri_guard_cri_request_errors_total")
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "cri_guard_cri_request_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			counts[mt.GetLabel()[0].GetValue()] = mt.GetHistogram().GetSampleCount()
		}
	}
	if counts[versionMethod] != 2 || counts["/runtime.v1.RuntimeService/Status"] != 1 {
		t.Errorf("histogram sample counts %v", counts)
	}
}

// TestObserveUnknownMethods: the method label comes from the client, so
// methods that are not known CRI methods share one "other" series, errors
// included, however many names are sent; known methods (unary and
// streaming, of both services) keep their own.
func TestObserveUnknownMethods(t *testing.T) {
	const unknown = 2000
	m := New()
	for i := range unknown {
		var err error
		if i%2 == 0 {
			err = status.Error(codes.Unimplemented, "unknown method")
		}
		m.Observe(fmt.Sprintf("/runtime.v1.RuntimeService/Made%05d", i), time.Millisecond, err)
	}
	known := []string{
		versionMethod,
		"/runtime.v1.RuntimeService/GetContainerEvents",
		"/runtime.v1.ImageService/PullImage",
	}
	for _, method := range known {
		m.Observe(method, time.Millisecond, status.Error(codes.NotFound, "gone"))
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	durations := map[string]uint64{}
	errs := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "cri_guard_cri_request_duration_seconds":
				durations[labels["method"]] = mt.GetHistogram().GetSampleCount()
			case "cri_guard_cri_request_errors_total":
				errs[labels["method"]+" "+labels["code"]] = mt.GetCounter().GetValue()
			}
		}
	}
	wantDurations := map[string]uint64{"other": unknown}
	wantErrs := map[string]float64{"other Unimplemented": unknown / 2}
	for _, method := range known {
		wantDurations[method] = 1
		wantErrs[method+" NotFound"] = 1
	}
	if !maps.Equal(durations, wantDurations) {
		t.Errorf("histogram sample counts by method %v, want %v", durations, wantDurations)
	}
	if !maps.Equal(errs, wantErrs) {
		t.Errorf("error counts by method and code %v, want %v", errs, wantErrs)
	}
}

func TestDecided(t *testing.T) {
	m := New()
	for _, d := range []evictor.Decision{
		{Kind: evictor.KindAdmit},
		{Kind: evictor.KindAdmit},
		{Kind: evictor.KindRefuse, Reason: evictor.ReasonEvicted},
		{Kind: evictor.KindEvict, Signal: "memory.available"},
		{Kind: evictor.KindDryRun, Signal: "memory.pressure.full.avg10"},
		{Kind: evictor.KindEvictFailed, Signal: "memory.available"},
		{Kind: evictor.KindUnable, Signal: "memory.available"},
		{Kind: evictor.KindStatsError},
	} {
		m.Decided(d)
	}
	tests := []struct {
		name string
		c    prometheus.Metric
		want float64
	}{
		{"admit", m.admissions.WithLabelValues("admit", ""), 2},
		{"refuse", m.admissions.WithLabelValues("refuse", "Evicted"), 1},
		{"evict", m.evictions.WithLabelValues("memory.available"), 1},
		{"dry run is not an eviction", m.evictions.WithLabelValues("memory.pressure.full.avg10"), 0},
		{"dry run", m.dryRun.WithLabelValues("memory.pressure.full.avg10"), 1},
		{"evict failed", m.evictFailures.WithLabelValues("memory.available"), 1},
		{"unable", m.unable.WithLabelValues("memory.available"), 1},
		{"stats error", m.statsErrors, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := value(t, tt.c); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

type fakeStore struct{ err error }

func (f fakeStore) Put(checkpoint.Record) error        { return f.err }
func (f fakeStore) List() ([]checkpoint.Record, error) { return nil, f.err }
func (f fakeStore) Delete(string) error                { return f.err }

func TestInstrumentStore(t *testing.T) {
	m := New()
	ok := m.InstrumentStore(fakeStore{})
	bad := m.InstrumentStore(fakeStore{err: checkpoint.ErrNotFound})
	_ = ok.Put(checkpoint.Record{})
	_ = ok.Put(checkpoint.Record{})
	_, _ = ok.List()
	if err := bad.Delete("k"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Delete error %v not passed through", err)
	}
	if err := bad.Put(checkpoint.Record{}); err == nil {
		t.Error("Put error swallowed")
	}
	want := `
# HELP cri_guard_checkpoint_operations_total Checkpoint store operations (put, list, delete) by result (ok, error).
# TYPE cri_guard_checkpoint_operations_total counter
cri_guard_checkpoint_operations_total{op="delete",result="error"} 1
cri_guard_checkpoint_operations_total{op="delete",result="ok"} 0
cri_guard_checkpoint_operations_total{op="list",result="error"} 0
cri_guard_checkpoint_operations_total{op="list",result="ok"} 1
cri_guard_checkpoint_operations_total{op="put",result="error"} 1
cri_guard_checkpoint_operations_total{op="put",result="ok"} 2
`
	compareText(t, m.reg, want, "cri_guard_checkpoint_operations_total")
}

func mustThresholds(t *testing.T, cfg pressure.ThresholdConfig) []pressure.Threshold {
	t.Helper()
	ts, err := pressure.ParseThresholds(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestCollector(t *testing.T) {
	const gi = 1 << 30
	ts := mustThresholds(t, pressure.ThresholdConfig{
		Hard:            map[string]string{"memory.available": "100Mi", "memory.pressure.full.avg10": "40%"},
		Soft:            map[string]string{"memory.available": "10%"},
		SoftGracePeriod: map[string]string{"memory.available": "30s"},
	})
	st := evictor.Status{
		SampledAt: time.Unix(1700000000, 0),
		Observed: map[pressure.Signal]pressure.Observation{
			pressure.SignalMemoryAvailable: {Signal: pressure.SignalMemoryAvailable, Available: 2 * gi, Capacity: 4 * gi},
			pressure.SignalPSIFullAvg10:    {Signal: pressure.SignalPSIFullAvg10, Percent: 12.5},
		},
		Conditions: []string{pressure.ConditionMemoryPressure},
	}
	// the thresholds as the eviction manager's evaluation of st saw them
	evaluated := func(ts []pressure.Threshold) []pressure.ThresholdState {
		return pressure.NewEvaluator(ts, 0).Evaluate(st.SampledAt, st.Observed).States
	}
	st.Thresholds = evaluated(ts)
	connected := false
	c := NewCollector(StateSource{Snapshot: func() evictor.Status { return st }, Connected: func() bool { return connected }})
	want := `
# HELP cri_guard_node_condition Node conditions cri-guard reports: 1 while set.
# TYPE cri_guard_node_condition gauge
cri_guard_node_condition{condition="MemoryPressure"} 1
# HELP cri_guard_runtime_connected 1 when the connection to the container runtime is ready.
# TYPE cri_guard_runtime_connected gauge
cri_guard_runtime_connected 0
# HELP cri_guard_signal_value Last observed value of each eviction signal: bytes for memory signals, percent for PSI signals.
# TYPE cri_guard_signal_value gauge
cri_guard_signal_value{signal="memory.available"} 2.147483648e+09
cri_guard_signal_value{signal="memory.pressure.full.avg10"} 12.5
# HELP cri_guard_stats_error 1 when the last pressure sample could not be read.
# TYPE cri_guard_stats_error gauge
cri_guard_stats_error 0
# HELP cri_guard_threshold_value Eviction thresholds, by signal and kind (hard, soft): bytes (percentages resolved against the last observed capacity) or percent for PSI.
# TYPE cri_guard_threshold_value gauge
cri_guard_threshold_value{kind="hard",signal="memory.available"} 1.048576e+08
cri_guard_threshold_value{kind="hard",signal="memory.pressure.full.avg10"} 40
cri_guard_threshold_value{kind="soft",signal="memory.available"} 4.29496736e+08
`
	collectorText(t, c, want,
		"cri_guard_node_condition", "cri_guard_runtime_connected", "cri_guard_signal_value", "cri_guard_stats_error", "cri_guard_threshold_value")

	// After a reload with no soft threshold, the pressure gone and the
	// runtime back.
	st.Thresholds = evaluated(mustThresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}}))
	st.Conditions = nil
	connected = true
	want = `
# HELP cri_guard_node_condition Node conditions cri-guard reports: 1 while set.
# TYPE cri_guard_node_condition gauge
cri_guard_node_condition{condition="MemoryPressure"} 0
# HELP cri_guard_runtime_connected 1 when the connection to the container runtime is ready.
# TYPE cri_guard_runtime_connected gauge
cri_guard_runtime_connected 1
# HELP cri_guard_threshold_value Eviction thresholds, by signal and kind (hard, soft): bytes (percentages resolved against the last observed capacity) or percent for PSI.
# TYPE cri_guard_threshold_value gauge
cri_guard_threshold_value{kind="hard",signal="memory.available"} 1.073741824e+09
`
	collectorText(t, c, want,
		"cri_guard_node_condition", "cri_guard_runtime_connected", "cri_guard_threshold_value")
}

func TestHandler(t *testing.T) {
	m := New()
	m.Decided(evictor.Decision{Kind: evictor.KindRefuse, Reason: evictor.ReasonEvicted})
	m.Registry().MustRegister(NewCollector(StateSource{Snapshot: func() evictor.Status { return evictor.Status{} }}))
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`cri_guard_admissions_total{reason="Evicted",result="refuse"} 1`,
		`cri_guard_node_condition{condition="MemoryPressure"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// BenchmarkObserve is the per-call cost the server pays for metrics: a
// known method, a known method that failed, and a method no CRI service has.
func BenchmarkObserve(b *testing.B) {
	failed := status.Error(codes.NotFound, "no such container")
	for _, c := range []struct {
		name   string
		method string
		err    error
	}{
		{"known", versionMethod, nil},
		{"known-error", versionMethod, failed},
		{"unknown", "/runtime.v1.RuntimeService/NoSuchMethod", nil},
		{"unknown-error", "/runtime.v1.RuntimeService/NoSuchMethod", failed},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := New()
			b.ReportAllocs()
			for b.Loop() {
				m.Observe(c.method, time.Millisecond, c.err)
			}
		})
	}
}

// TestCollectorWakeups: the sync loop's wake-ups as counters by source.
func TestCollectorWakeups(t *testing.T) {
	counts := map[string]uint64{"tick": 3, "watch": 0, "memory-events": 2}
	c := NewCollector(StateSource{Snapshot: func() evictor.Status { return evictor.Status{} }, Wakeups: func() map[string]uint64 { return counts }})
	want := `
# HELP cri_guard_wakeups_total Sync loop passes by what woke them (tick, trigger, notification, memory-events, follow-up, fast-poll, restored-refused) and the fast poll's watch samples (watch).
# TYPE cri_guard_wakeups_total counter
cri_guard_wakeups_total{source="memory-events"} 2
cri_guard_wakeups_total{source="tick"} 3
cri_guard_wakeups_total{source="watch"} 0
`
	collectorText(t, c, want, "cri_guard_wakeups_total")
}

// TestCollectorStateStore: whether the state directory is open and how
// many records are in memory only, read at scrape time.
func TestCollectorStateStore(t *testing.T) {
	available, unsaved := false, 7
	c := NewCollector(StateSource{StoreAvailable: func() bool { return available }, Unsaved: func() int { return unsaved }})
	want := `
# HELP cri_guard_checkpoint_unsaved_records Records kept in memory only: their last checkpoint write failed (written again with back-off).
# TYPE cri_guard_checkpoint_unsaved_records gauge
cri_guard_checkpoint_unsaved_records 7
# HELP cri_guard_state_store_available 1 when the state directory's checkpoint store is open; 0 while records are kept in memory only (opening retried).
# TYPE cri_guard_state_store_available gauge
cri_guard_state_store_available 0
`
	collectorText(t, c, want, "cri_guard_checkpoint_unsaved_records", "cri_guard_state_store_available")
	available, unsaved = true, 0
	want = strings.ReplaceAll(strings.ReplaceAll(want, "records 7", "records 0"), "available 0", "available 1")
	collectorText(t, c, want, "cri_guard_checkpoint_unsaved_records", "cri_guard_state_store_available")
}

// TestDecisionCountersFromStart: the counters the alerts take the increase
// of are scraped at 0 before any decision, so that the first one is an
// increase (a child born at 1 is not, to increase()).
func TestDecisionCountersFromStart(t *testing.T) {
	m := New()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			var ls []string
			for _, lp := range mm.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			got[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = mm.GetCounter().GetValue()
		}
	}
	want := []string{
		"cri_guard_admissions_total{reason=,result=admit}",
		"cri_guard_admissions_total{reason=Evicted,result=refuse}",
	}
	for _, s := range []pressure.Signal{pressure.SignalMemoryAvailable, pressure.SignalAllocatableMemoryAvailable,
		pressure.SignalPSISomeAvg10, pressure.SignalPSIFullAvg60} {
		for _, n := range []string{"evictions_total", "dry_run_evictions_total", "eviction_failures_total",
			"eviction_grace_cuts_total", "eviction_unable_total"} {
			want = append(want, fmt.Sprintf("cri_guard_%s{signal=%s}", n, s))
		}
	}
	for _, w := range want {
		if v, ok := got[w]; !ok || v != 0 {
			t.Errorf("%s: %v (present %v), want 0 from the start", w, v, ok)
		}
	}
}
