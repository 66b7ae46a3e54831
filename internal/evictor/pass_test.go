package evictor

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// TestSynchronizeDecides: one pass, one node sample, one Action, on a
// 1000Mi node with the hard threshold memory.available<100Mi (50Mi: a
// moment from OOM). a and b are evictable, b ranked first (older, same
// priority, no stats).
func TestSynchronizeDecides(t *testing.T) {
	a := mkPod("a", pod.BestEffort, 0, false, false, true)
	b := mkPod("b", pod.BestEffort, 0, false, false, true)
	inflightB := func(released, cut bool) []InFlight {
		return []InFlight{{Eviction: &Eviction{Pod: b}, SandboxID: b.SandboxID, Released: released, GraceCut: cut}}
	}
	refused := &Eviction{Pod: a, Restored: true}
	var full []InFlight // maxInFlight released victims of other pods
	for i := range maxInFlight {
		full = append(full, InFlight{Eviction: &Eviction{Pod: b}, SandboxID: "other-" + string(rune('a'+i)), Released: true})
	}
	long := time.Hour
	tests := []struct {
		name      string
		available int64
		statsErr  bool
		pass      Pass
		evict     string // the pod chosen, "" none
		cutEvict  bool
		cut       []string // the evictions under way cut
		hold      Hold
		near      bool
	}{
		{name: "far from the threshold", available: 500 * mi, pass: Pass{NearMargin: 300 * mi}},
		{name: "near the threshold", available: 300 * mi, pass: Pass{NearMargin: 300 * mi}, near: true},
		{name: "a threshold acts", available: 80 * mi, evict: "b", near: true},
		{name: "a moment from OOM: its grace is cut too", available: 40 * mi, evict: "b", cutEvict: true, near: true},
		{name: "stats unreadable", statsErr: true},
		{name: "victim under way holds its memory", available: 80 * mi,
			pass: Pass{InFlight: inflightB(false, false)}, hold: HoldInFlight, near: true},
		{name: "victim under way, a moment from OOM: its grace is cut", available: 40 * mi,
			pass: Pass{InFlight: inflightB(false, false)}, cut: []string{"b"}, hold: HoldInFlight, near: true},
		{name: "victim under way cut already", available: 40 * mi,
			pass: Pass{InFlight: inflightB(false, true)}, hold: HoldInFlight, near: true},
		{name: "victim released, a memory threshold acts: the next overlaps", available: 80 * mi,
			pass: Pass{InFlight: inflightB(true, false)}, evict: "a", near: true},
		{name: "victim released, nothing acts", available: 500 * mi,
			pass: Pass{InFlight: inflightB(true, false)}, hold: HoldInFlight},
		{name: "MaxInFlight under way", available: 80 * mi,
			pass: Pass{InFlight: full}, hold: HoldInFlight, near: true},
		{name: "rate bound", available: 80 * mi, pass: Pass{RateHeld: true, SinceSettled: long}, hold: HoldRate, near: true},
		{name: "refused restored pod due", available: 500 * mi, pass: Pass{Refused: refused, SinceSettled: 2 * time.Second},
			evict: "a", hold: HoldRefused},
		{name: "refused restored pod too soon", available: 500 * mi, pass: Pass{Refused: refused, SinceSettled: 500 * time.Millisecond},
			hold: HoldRefused},
		{name: "quick pass within memory spacing", available: 80 * mi, pass: Pass{Spaced: true, SinceSettled: 50 * time.Millisecond},
			hold: HoldSpacing, near: true},
		{name: "quick pass past memory spacing", available: 80 * mi, pass: Pass{Spaced: true, SinceSettled: 200 * time.Millisecond},
			evict: "b", near: true},
		{name: "quick pass within memory spacing, a moment from OOM", available: 40 * mi,
			pass: Pass{Spaced: true, SinceSettled: 10 * time.Millisecond}, evict: "b", cutEvict: true, near: true},
		{name: "quick pass after a failed stop", available: 80 * mi,
			pass: Pass{Spaced: true, SinceSettled: 200 * time.Millisecond, LastFailed: true}, hold: HoldSpacing, near: true},
		{name: "tick within spacing", available: 80 * mi, pass: Pass{SinceSettled: 10 * time.Millisecond}, evict: "b", near: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeSampler{}
			s.available(tt.available)
			if tt.statsErr {
				s.nodeErr = errors.New("no meminfo")
			}
			m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}}),
				HardGracePeriod: time.Second}, s, &recorder{}, newClock())
			p := tt.pass
			p.Active = []*pod.Pod{b, a}
			act := m.Synchronize(p)
			if s.nodes != 1 {
				t.Errorf("node samples = %d, want 1", s.nodes)
			}
			got := ""
			if act.Evict != nil {
				got = act.Evict.Pod.Name
			}
			var cut []string
			for _, e := range act.Cut {
				cut = append(cut, e.Pod.Name)
			}
			if got != tt.evict || act.CutEvict != tt.cutEvict || !slices.Equal(cut, tt.cut) || act.Hold != tt.hold || act.Near != tt.near {
				t.Fatalf("action: evict %q (cut %v), cut %v, hold %d, near %v; want evict %q (cut %v), cut %v, hold %d, near %v",
					got, act.CutEvict, cut, act.Hold, act.Near, tt.evict, tt.cutEvict, tt.cut, tt.hold, tt.near)
			}
			if (act.Err != nil) != tt.statsErr {
				t.Fatalf("err = %v, want one: %v", act.Err, tt.statsErr)
			}
			cuts := 0
			for _, d := range m.Snapshot().Decisions {
				if d.Kind == KindGraceCut {
					cuts++
				}
			}
			if want := len(tt.cut) + map[bool]int{true: 1}[tt.cutEvict]; cuts != want {
				t.Fatalf("grace cuts recorded = %d, want %d", cuts, want)
			}
		})
	}
}
