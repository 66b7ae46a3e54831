package evictor

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// NearThreshold reports whether the last evaluation met a threshold or saw
// a memory signal within margin bytes of its threshold: the sync loop
// polls fast while it is (the fast poll). PSI thresholds are not
// considered: their averages move slowly and have their own trigger. False
// before the first sample or while stats cannot be read.
func (m *Manager) NearThreshold(margin int64) bool {
	if m.statsErr != nil || m.lastSample.IsZero() {
		return false
	}
	if len(m.result.Met) > 0 {
		return true
	}
	obs := m.sample.Observations()
	for _, t := range m.eval.Thresholds() {
		if t.Signal.IsPSI() {
			continue
		}
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		if lim, ok := t.Limit(o); ok && float64(o.Available) < lim+float64(margin) {
			return true
		}
	}
	return false
}

// MemoryThresholdMet reports whether the last evaluation acts on a memory
// signal (memory.available, allocatableMemory.available): an observation
// of now, unlike a PSI average, which still holds a stall for seconds
// after its cause is gone. The sync loop lets a quick pass start the next
// eviction 100 ms after the last one settled, not 1 s, when this is true.
func (m *Manager) MemoryThresholdMet() bool {
	if m.statsErr != nil {
		return false
	}
	for _, met := range m.result.Met {
		if !met.Threshold.Signal.IsPSI() {
			return true
		}
	}
	return false
}

// MemoryCritical reports whether the last sample has a memory signal below
// half of a hard threshold on it, and says which: the node is then a
// moment from the kernel's OOM killer, and the sync loop cuts short the
// grace period of the eviction under way (its victim is killed at once
// rather than a process the OOM killer would pick).
func (m *Manager) MemoryCritical() (string, bool) {
	if m.statsErr != nil || m.lastSample.IsZero() {
		return "", false
	}
	obs := m.sample.Observations()
	for _, t := range m.eval.Thresholds() {
		if !t.Hard || t.Signal.IsPSI() {
			continue
		}
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		if lim, ok := t.Limit(o); ok && float64(o.Available) < lim/2 {
			return fmt.Sprintf("%s %s, under half of %s", t.Signal, resource.NewQuantity(o.Available, resource.BinarySI), t), true
		}
	}
	return "", false
}
