package evictor

import (
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Evaluation is what the last sample said, as a pass needs it to time the
// next eviction and the sync loop its passes: how near a threshold the
// node is, whether a memory signal acts, whether the node is a moment from
// OOM. A plain value: the
// zero Evaluation (no sample yet, or stats unreadable) says no to all.
type Evaluation struct {
	// Observations are the last sample's signals (shared with the
	// manager: read, never change).
	Observations map[pressure.Signal]pressure.Observation
	// Thresholds are the thresholds evaluated.
	Thresholds []pressure.Threshold
	// Met are the thresholds that act (pressure.Result.Met).
	Met []pressure.Met
	// Sample is the last sample itself (the kernel notifiers' levels
	// follow it: pressure.MemcgNotifier.Relevel).
	Sample pressure.NodeSample
	// Falling is how fast each memory signal fell, in bytes per second,
	// over the last two intervals between samples, the lesser (fallRates);
	// absent or ≤ 0: not falling.
	Falling map[pressure.Signal]float64
}

// Evaluation returns the last evaluation; the zero value before the
// first sample or while stats cannot be read.
func (m *Manager) Evaluation() Evaluation {
	if m.statsErr != nil || m.lastSample.IsZero() {
		return Evaluation{}
	}
	return Evaluation{Observations: m.observed, Thresholds: m.eval.Thresholds(), Met: m.result.Met, Sample: m.sample,
		Falling: maps.Clone(m.fall.rate)}
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

// memoryThresholdMet reports whether a threshold on a memory signal
// (memory.available, allocatableMemory.available) acts: an observation of
// now, unlike a PSI average, which still holds a stall for seconds after
// its cause is gone. Synchronize lets a quick pass start the next
// eviction 100 ms after the last one settled, not 1 s, when this is true.
func (e Evaluation) memoryThresholdMet() bool {
	for _, met := range e.Met {
		if !met.Threshold.Signal.IsPSI() {
			return true
		}
	}
	return false
}

// runtimeStopLatency is how long a stop through the runtime takes to end
// a victim's processes: containerd took 167–230 ms from StopContainer to a
// dead process on the host the OOM race was measured on. A memory signal that at its
// measured rate runs out sooner is critical: only a kill past the runtime
// lands in time.
const runtimeStopLatency = 250 * time.Millisecond

// memoryCritical reports whether a memory signal is a moment from the
// kernel's OOM killer, and says why: below half of a hard threshold on it,
// or under a hard threshold and falling so fast that it runs out before a
// stop through the runtime would land (runtimeStopLatency; several
// runaways at once reach gigabytes a second). Synchronize then cuts
// short the grace period of the evictions under way: their victims are
// killed at once, past the runtime, rather than a process the OOM killer
// would pick.
func (e Evaluation) memoryCritical() (string, bool) {
	for _, t := range e.Thresholds {
		if !t.Hard || t.Signal.IsPSI() {
			continue
		}
		o, ok := e.Observations[t.Signal]
		if !ok {
			continue
		}
		lim, ok := t.Limit(o)
		if !ok || float64(o.Available) >= lim {
			continue
		}
		if float64(o.Available) < lim/2 {
			return fmt.Sprintf("%s %s, under half of %s", t.Signal, resource.NewQuantity(o.Available, resource.BinarySI), t), true
		}
		if r := e.Falling[t.Signal]; r > 0 {
			if left := time.Duration(float64(o.Available) / r * float64(time.Second)); left < runtimeStopLatency {
				return fmt.Sprintf("%s %s under %s, falling %s/s: gone in %s, before a stop through the runtime lands",
					t.Signal, resource.NewQuantity(o.Available, resource.BinarySI), t,
					resource.NewQuantity(int64(r), resource.BinarySI), left.Round(time.Millisecond)), true
			}
		}
	}
	return "", false
}

// minFallInterval is the least time between the two samples a falling rate
// is measured over: closer samples (a pass right after another) would
// divide the noise of a read by almost nothing.
const minFallInterval = 5 * time.Millisecond

// fallRates measures how fast each memory signal falls between samples
// (loop goroutine). A rate is the lesser of the last two measured: a fall
// seen once (a jump of the working set as the kernel moves pages between
// its lists, a first sample long after the last) does not count as one
// that lasts.
type fallRates struct {
	base map[pressure.Signal]fallBase
	last map[pressure.Signal]float64 // the last interval's
	rate map[pressure.Signal]float64 // the lesser of the last two intervals'
}

type fallBase struct {
	available int64
	at        time.Time
}

// observe takes a sample's memory observations at now: each signal's rate
// is measured from the last base at least minFallInterval old, which the
// sample then replaces.
func (f *fallRates) observe(now time.Time, obs map[pressure.Signal]pressure.Observation) {
	if f.base == nil {
		f.base, f.last, f.rate = map[pressure.Signal]fallBase{}, map[pressure.Signal]float64{}, map[pressure.Signal]float64{}
	}
	for sig, o := range obs {
		if sig.IsPSI() {
			continue
		}
		b, ok := f.base[sig]
		dt := now.Sub(b.at)
		if ok && dt < minFallInterval && dt >= 0 {
			continue
		}
		if ok && dt > 0 {
			r := float64(b.available-o.Available) / dt.Seconds()
			if prev, seen := f.last[sig]; seen {
				f.rate[sig] = min(prev, r)
			}
			f.last[sig] = r
		}
		f.base[sig] = fallBase{available: o.Available, at: now}
	}
	for sig := range f.base {
		if _, ok := obs[sig]; !ok { // missing from this sample: start again
			delete(f.base, sig)
			delete(f.last, sig)
			delete(f.rate, sig)
		}
	}
}
