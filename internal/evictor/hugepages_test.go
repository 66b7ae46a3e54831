package evictor

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// TestHugePagesEvictionMessage: a 4Gi node with a 1Gi huge page pool and
// 1.5Gi available before the pool is taken off, as the kubelet from 1.37
// samples it (512Mi available). Its eviction message has the kubelet's
// quantities: the threshold (a percentage resolved against available +
// working set, i.e. MemTotal less the pool: 3Gi) and the available bytes
// after the pool is taken off.
func TestHugePagesEvictionMessage(t *testing.T) {
	const gi = 1 << 30
	sample := pressure.NodeSample{CapacityBytes: 4 * gi, WorkingSetBytes: 2*gi + 512*mi, AvailableBytes: 512 * mi,
		HugePagesBytes: gi, HugePagesSubtracted: true}
	tests := []struct {
		name, hard, wantMsg string
	}{
		{"quantity", "1Gi", "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "},
		// int64(3Gi × float32(0.2)): 20% of MemTotal less the pool, not of MemTotal (858993472)
		{"percentage", "20%", "The node was low on resource: memory. Threshold quantity: 644245104, available: 512Mi. "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, c := &fakeSampler{node: sample}, &recorder{}, newClock()
			cfg := Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": tt.hard}}), HardGracePeriod: time.Second}
			m := newManager(t, cfg, s, r, c)
			e, err := synchronize(m, []*pod.Pod{mkPod("a", pod.BestEffort, 0, false, false, true)})
			if err != nil {
				t.Fatal(err)
			}
			if e == nil || e.Message != tt.wantMsg {
				t.Fatalf("eviction %+v, want message %q", e, tt.wantMsg)
			}
		})
	}
}

// TestHugePagesStatus: the snapshot carries the pool of the sample it
// shows, whether memory.available had it taken off, and why the pool is
// stale when it could not be read.
func TestHugePagesStatus(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.node = pressure.NodeSample{CapacityBytes: 4 << 30, WorkingSetBytes: 1 << 30, AvailableBytes: 2 << 30,
		HugePagesBytes: 1 << 30, HugePagesSubtracted: true}
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	m.Observe()
	st := m.Snapshot()
	if st.HugePagesBytes != 1<<30 || !st.HugePagesSubtracted || len(st.SignalErrors) != 0 {
		t.Fatalf("snapshot pool %d subtracted %v errors %q, want 1Gi, true, none", st.HugePagesBytes, st.HugePagesSubtracted, st.SignalErrors)
	}
	s.node.HugePagesError = errors.New("read huge pages: broken")
	c.step(10 * time.Second)
	m.Observe()
	if st := m.Snapshot(); !slices.Contains(st.SignalErrors, "read huge pages: broken") || st.HugePagesBytes != 1<<30 {
		t.Fatalf("snapshot errors %q pool %d, want the pool error and the last pool", st.SignalErrors, st.HugePagesBytes)
	}
}
