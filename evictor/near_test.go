package evictor

import (
	"errors"
	"testing"

	"github.com/cri-guard/cri-guard/pressure"
)

// TestEvaluation: what the last sample says to the sync loop's timing,
// against a hard memory.available threshold of 400Mi on a 1000Mi node.
func TestEvaluation(t *testing.T) {
	tests := []struct {
		name                  string
		available             int64
		nodeErr               error
		near, memoryMet, crit bool
	}{
		{"far", 900 * mi, nil, false, false, false},
		{"within the 100Mi margin", 450 * mi, nil, true, false, false},
		{"met", 300 * mi, nil, true, true, false},
		{"under half the threshold", 150 * mi, nil, true, true, true},
		{"stats unreadable", 150 * mi, errors.New("no stats"), false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeSampler{}
			m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "400Mi"}})}, s, nil, newClock())
			if e := m.Evaluation(); e.NearThreshold(1<<40) || e.MemoryThresholdMet() {
				t.Fatal("the evaluation before any sample says yes")
			}
			s.available(tt.available)
			s.nodeErr = tt.nodeErr
			m.Observe()
			e := m.Evaluation()
			_, crit := e.MemoryCritical()
			if got := [3]bool{e.NearThreshold(100 * mi), e.MemoryThresholdMet(), crit}; got != [3]bool{tt.near, tt.memoryMet, tt.crit} {
				t.Fatalf("near, memory met, critical = %v, want %v", got, [3]bool{tt.near, tt.memoryMet, tt.crit})
			}
		})
	}
}

// TestEvaluationHeadroom: the distance to the near band that spaces the
// sync loop's watch samples, without the signals a kernel notification
// covers.
func TestEvaluationHeadroom(t *testing.T) {
	s := &fakeSampler{}
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "400Mi"}})}, s, nil, newClock())
	if _, ok := m.Evaluation().Headroom(100*mi, nil); ok {
		t.Fatal("headroom before any sample")
	}
	for _, c := range []struct{ available, want int64 }{{900 * mi, 400 * mi}, {450 * mi, 0}, {300 * mi, 0}} {
		s.available(c.available)
		m.Observe()
		if got, ok := m.Evaluation().Headroom(100*mi, nil); !ok || got != c.want {
			t.Errorf("available %d Mi: headroom %d Mi (%v), want %d Mi", c.available/mi, got/mi, ok, c.want/mi)
		}
	}
	covered := func(s pressure.Signal) bool { return s == pressure.SignalMemoryAvailable }
	if h, ok := m.Evaluation().Headroom(100*mi, covered); ok {
		t.Errorf("every threshold covered: headroom %d, want none", h)
	}
}
