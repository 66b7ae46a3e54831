package evictor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
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
			if e := m.Evaluation(); e.NearThreshold(1<<40) || e.memoryThresholdMet() {
				t.Fatal("the evaluation before any sample says yes")
			}
			s.available(tt.available)
			s.nodeErr = tt.nodeErr
			m.Observe()
			e := m.Evaluation()
			_, crit := e.memoryCritical()
			if got := [3]bool{e.NearThreshold(100 * mi), e.memoryThresholdMet(), crit}; got != [3]bool{tt.near, tt.memoryMet, tt.crit} {
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

// TestMemoryCriticalByRate: under a hard threshold (400Mi on a 1000Mi
// node) but above half of it, memory is critical when it falls so fast,
// over two intervals between samples, that it runs out before a stop
// through the runtime lands (250 ms); not when it falls slowly, rises,
// falls fast once only, or is measured over samples closer than
// minFallInterval (the rate keeps the older base then).
func TestMemoryCriticalByRate(t *testing.T) {
	tests := []struct {
		name      string
		avail     []int64 // available at each sample
		gap       time.Duration
		crit      bool
		wantWords string
	}{
		{"300Mi falling 2Gi/s: gone in ~150ms", []int64{400 * mi, 350 * mi, 300*mi - 2*mi}, 25 * time.Millisecond, true, "before a stop through the runtime lands"},
		{"300Mi falling 400Mi/s: gone in 750ms", []int64{320 * mi, 310 * mi, 300 * mi}, 25 * time.Millisecond, false, ""},
		{"a jump once, then steady", []int64{900 * mi, 300 * mi, 300 * mi}, 25 * time.Millisecond, false, ""},
		{"one interval only", []int64{350 * mi, 298 * mi}, 25 * time.Millisecond, false, ""},
		{"rising", []int64{200 * mi, 250 * mi, 300 * mi}, 25 * time.Millisecond, false, ""},
		{"above the threshold, falling fast", []int64{550 * mi, 500 * mi, 450 * mi}, 25 * time.Millisecond, false, ""},
		{"samples 1ms apart", []int64{400 * mi, 350 * mi, 300 * mi}, time.Millisecond, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeSampler{}
			c := newClock()
			m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "400Mi"}})}, s, nil, c)
			for i, a := range tt.avail {
				if i > 0 {
					c.step(tt.gap)
				}
				s.available(a)
				m.Observe()
			}
			why, crit := m.Evaluation().memoryCritical()
			if crit != tt.crit || !strings.Contains(why, tt.wantWords) {
				t.Fatalf("critical = %v (%q), want %v with %q", crit, why, tt.crit, tt.wantWords)
			}
		})
	}
}
