package guard

import (
	"context"
	"time"
)

// FastPoll is the fast path of the sync loop against a fast-growing pod
// (issue 16): while the last evaluation met a threshold or saw a memory
// signal within Margin bytes of one, the loop evaluates every Interval;
// otherwise it takes a cheap node sample (Observe: no resync, no pod
// stats) every Watch, so that it notices the approach between two
// housekeeping ticks. A zero Interval disables it.
type FastPoll struct {
	// Interval is the poll period while near a threshold (e.g. 10ms).
	Interval time.Duration
	// Watch is the sample period while far from every threshold (e.g.
	// 200ms); zero: only housekeeping and triggers notice the approach.
	Watch time.Duration
	// Margin is how close (bytes of a memory signal) counts as near.
	Margin int64
}

// fastPoller decides when the next fast pass is due (loop goroutine only).
type fastPoller struct {
	cfg   FastPoll
	ev    Evictor
	timer *time.Timer
}

// newFastPoller returns nil when the fast poll is off.
func newFastPoller(cfg FastPoll, ev Evictor) *fastPoller {
	if cfg.Interval <= 0 {
		return nil
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &fastPoller{cfg: cfg, ev: ev, timer: t}
}

// c is the timer's channel; nil (never ready) when the poller is off.
func (f *fastPoller) c() <-chan time.Time {
	if f == nil {
		return nil
	}
	return f.timer.C
}

func (f *fastPoller) stop() {
	if f != nil {
		f.timer.Stop()
	}
}

// isNear reports whether the last evaluation was near a threshold.
func (f *fastPoller) isNear() bool {
	return f != nil && f.ev.Evaluation().NearThreshold(f.cfg.Margin)
}

// schedule arms the timer after a pass: Interval when near, Watch when
// far (or not at all without Watch).
func (f *fastPoller) schedule() {
	if f == nil {
		return
	}
	f.timer.Stop()
	switch {
	case f.isNear():
		f.timer.Reset(f.cfg.Interval)
	case f.cfg.Watch > 0:
		f.timer.Reset(f.cfg.Watch)
	}
}

// fastPass is one pass of the fast poll: a quick housekeeping pass (no
// resync more than once a second) when near a threshold, else a node
// sample alone, which tells whether the next one must come sooner.
func (l *Loop) fastPass(ctx context.Context, f *fastPoller) {
	if f.isNear() {
		l.housekeeping(ctx, passFastPoll)
		return
	}
	l.ev.Observe()
	if f.isNear() {
		l.housekeeping(ctx, passFastPoll)
	}
}
