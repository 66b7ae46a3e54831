package guard

import "time"

// The eviction rate bound: whatever the configuration and whatever the
// signals say, cri-guard starts at most evictionBurst evictions at once
// and, past them, one per evictionRefill. Thresholds that a node meets for
// reasons evictions do not relieve (memory held outside the pods, a
// threshold above what the node can ever have available, a reading that
// is wrong) would otherwise stop every pod of the node within seconds,
// ten a second on a memory signal. A real runaway needs one eviction per
// runaway pod: the burst covers eight together, the most a pass a moment
// from OOM has ever needed in the race benchmark (four at once, each
// stopped once).
const (
	evictionBurst  = 8
	evictionRefill = 2 * time.Second
)

// rateBound is a token bucket over the evictions the loop starts; only
// the loop goroutine uses it.
type rateBound struct {
	tokens float64
	last   time.Time
	// limited is when the bound first held an eviction back in this
	// episode (zero: not holding one back); logged once per episode.
	limited time.Time
}

func newRateBound() rateBound { return rateBound{tokens: evictionBurst} }

// refill adds the tokens earned since the last look.
func (b *rateBound) refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(evictionBurst, b.tokens+float64(now.Sub(b.last))/float64(evictionRefill))
	}
	b.last = now
}

// allow reports whether an eviction may start now; it takes nothing.
func (b *rateBound) allow(now time.Time) bool {
	b.refill(now)
	return b.tokens >= 1
}

// take counts an eviction started now.
func (b *rateBound) take(now time.Time) {
	b.refill(now)
	b.tokens--
}
