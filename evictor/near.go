package evictor

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cri-guard/cri-guard/pressure"
)

// Evaluation is what the last sample said, as the sync loop needs it to
// time its passes: how near a threshold the node is, whether a memory
// signal acts, whether the node is a moment from OOM. A plain value: the
// zero Evaluation (no sample yet, or stats unreadable) says no to all.
type Evaluation struct {
	// Observations are the last sample's signals.
	Observations map[pressure.Signal]pressure.Observation
	// Thresholds are the thresholds evaluated.
	Thresholds []pressure.Threshold
	// Met are the thresholds that act (pressure.Result.Met).
	Met []pressure.Met
	// Sample is the last sample itself (the kernel notifiers' levels
	// follow it: pressure.MemcgNotifier.Relevel).
	Sample pressure.NodeSample
}

// Evaluation returns the last evaluation; the zero value before the
// first sample or while stats cannot be read.
func (m *Manager) Evaluation() Evaluation {
	if m.statsErr != nil || m.lastSample.IsZero() {
		return Evaluation{}
	}
	return Evaluation{Observations: m.sample.Observations(), Thresholds: m.eval.Thresholds(), Met: m.result.Met, Sample: m.sample}
}

// NearThreshold reports whether a threshold acts or a memory signal is
// within margin bytes of its threshold: the sync loop polls fast while it
// is (the fast poll). PSI thresholds are not considered: their averages
// move slowly and have their own trigger.
func (e Evaluation) NearThreshold(margin int64) bool {
	if len(e.Met) > 0 {
		return true
	}
	for _, t := range e.Thresholds {
		if t.Signal.IsPSI() {
			continue
		}
		o, ok := e.Observations[t.Signal]
		if !ok {
			continue
		}
		if lim, ok := t.Limit(o); ok && float64(o.Available) < lim+float64(margin) {
			return true
		}
	}
	return false
}

// Headroom is how far, in bytes, the memory signals are from the fast
// poll's near band: the least of available − threshold − margin over the
// thresholds on memory signals that covered does not exclude (a kernel
// notification already wakes the loop at their near level), floored at 0.
// ok is false when no such threshold has an observation. The sync loop
// spaces its watch samples by it: a runaway growing at the fastest rate it
// assumes cannot cross the band between two of them.
func (e Evaluation) Headroom(margin int64, covered func(pressure.Signal) bool) (headroom int64, ok bool) {
	for _, t := range e.Thresholds {
		if t.Signal.IsPSI() || (covered != nil && covered(t.Signal)) {
			continue
		}
		o, found := e.Observations[t.Signal]
		if !found {
			continue
		}
		lim, found := t.Limit(o)
		if !found {
			continue
		}
		h := max(o.Available-int64(lim)-margin, 0)
		if !ok || h < headroom {
			headroom = h
		}
		ok = true
	}
	return headroom, ok
}

// MemoryThresholdMet reports whether a threshold on a memory signal
// (memory.available, allocatableMemory.available) acts: an observation of
// now, unlike a PSI average, which still holds a stall for seconds after
// its cause is gone. The sync loop lets a quick pass start the next
// eviction 100 ms after the last one settled, not 1 s, when this is true.
func (e Evaluation) MemoryThresholdMet() bool {
	for _, met := range e.Met {
		if !met.Threshold.Signal.IsPSI() {
			return true
		}
	}
	return false
}

// MemoryCritical reports whether a memory signal is below half of a hard
// threshold on it, and says which: the node is then a moment from the
// kernel's OOM killer, and the sync loop cuts short the grace period of
// the eviction under way (its victim is killed at once rather than a
// process the OOM killer would pick).
func (e Evaluation) MemoryCritical() (string, bool) {
	for _, t := range e.Thresholds {
		if !t.Hard || t.Signal.IsPSI() {
			continue
		}
		o, ok := e.Observations[t.Signal]
		if !ok {
			continue
		}
		if lim, ok := t.Limit(o); ok && float64(o.Available) < lim/2 {
			return fmt.Sprintf("%s %s, under half of %s", t.Signal, resource.NewQuantity(o.Available, resource.BinarySI), t), true
		}
	}
	return "", false
}
