package evictor

import (
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// TestEvictRestored: a restored pod refused at start-up is evicted with
// its own grace period (no override) and the refusal's message; in dry run
// it is only recorded.
func TestEvictRestored(t *testing.T) {
	for _, dry := range []bool{false, true} {
		s := &fakeSampler{}
		s.available(300 * mi)
		m := newManager(t, Config{DryRun: dry, Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "400Mi"}})}, s, nil, newClock())
		m.Observe()
		p := mkPod("be", pod.BestEffort, 0, false, false, true)
		r := m.Admit(&Attributes{Pod: p, Restored: true})
		if r.Admit {
			t.Fatal("a BestEffort pod admitted under pressure")
		}
		e := m.EvictRestored(p, r)
		if dry {
			if d := m.Snapshot().Decisions; e != nil || d[len(d)-1].Kind != KindDryRun || !d[len(d)-1].Restored {
				t.Fatalf("dry run: eviction %+v, last decision %+v; want none, a restored dry-run decision", e, d[len(d)-1])
			}
			continue
		}
		if e == nil || !e.Restored || e.Message != r.Message || e.Signal != pressure.SignalMemoryAvailable {
			t.Fatalf("eviction %+v, want restored, with the refusal's message and the acting signal", e)
		}
		if g := e.PodGrace(45*time.Second, true); g != 45*time.Second {
			t.Fatalf("grace with TGPS 45s known = %v, want 45s", g)
		}
		if g := e.PodGrace(0, false); g != DefaultTerminationGracePeriod {
			t.Fatalf("grace with TGPS unknown = %v, want %v", g, DefaultTerminationGracePeriod)
		}
	}
}
