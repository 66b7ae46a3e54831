package guard

import (
	"context"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// FastPoll is the fast path of the sync loop against a fast-growing pod,
// which can reach the OOM killer between two housekeeping ticks: while the last evaluation met a threshold or saw a memory
// signal within Margin bytes of one, the loop evaluates every Interval.
// Far from every threshold it takes a cheap node sample (Observe: no
// resync, no pod stats), the watch, to notice the approach between two
// housekeeping ticks, spaced by how far memory is (so an idle node is not
// sampled at the fast rate): a runaway
// growing at MaxRate cannot cross the distance to the near band between
// two, so an idle node with room is sampled rarely or not at all beyond
// housekeeping, and a signal whose near level a kernel notification
// watches (the v1 memcg near notifier) is not sampled for it at all. A
// zero Interval disables the fast poll.
type FastPoll struct {
	// Interval is the poll period while near a threshold (e.g. 10ms).
	Interval time.Duration
	// Watch is the shortest watch period (e.g. 200ms); zero: no watch,
	// only housekeeping and the kernel's wake-ups notice the approach.
	Watch time.Duration
	// Margin is how close (bytes of a memory signal) counts as near.
	Margin int64
	// MaxRate (bytes per second) is the fastest growth the watch is spaced
	// for: the period is the distance to the near band over MaxRate,
	// between Watch and the housekeeping interval. Zero: every Watch.
	MaxRate int64
}

// fastPoller decides when the next fast pass is due (loop goroutine only).
type fastPoller struct {
	cfg     FastPoll
	ev      Evictor
	covered func(pressure.Signal) bool // a kernel notification watches the signal's near level
	ceiling time.Duration              // the housekeeping interval: no watch spaced wider
	timer   *time.Timer
	near    bool   // the last pass found memory near a threshold
	armedBy string // what found it near first (evictor.Wakeup.ArmedBy)
	period  time.Duration
}

// newFastPoller returns nil when the fast poll is off.
func newFastPoller(cfg FastPoll, ev Evictor, covered func(pressure.Signal) bool, ceiling time.Duration) *fastPoller {
	if cfg.Interval <= 0 {
		return nil
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &fastPoller{cfg: cfg, ev: ev, covered: covered, ceiling: ceiling, timer: t}
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

// isNear reports whether the last evaluation was near a threshold (at
// start, and after a watch sample, which is no pass).
func (f *fastPoller) isNear() bool {
	return f != nil && f.ev.Evaluation().NearThreshold(f.cfg.Margin)
}

// armedByNow is what started the fast poll under way, "" when it is not.
func (f *fastPoller) armedByNow() string {
	if f == nil || !f.near {
		return ""
	}
	return f.armedBy
}

// schedule arms the timer after a pass woken by why, whose sample found
// memory near a threshold or not: Interval when near, the watch period
// when far (or not at all).
func (f *fastPoller) schedule(why pass, near bool) {
	if f == nil {
		return
	}
	f.timer.Stop()
	if near && !f.near {
		f.armedBy = why.String()
	}
	f.near = near
	if near {
		f.timer.Reset(f.cfg.Interval)
		return
	}
	if f.period = f.watchPeriod(); f.period > 0 {
		f.timer.Reset(f.period)
	}
}

// watchPeriod is when the next watch sample is due far from every
// threshold; 0: none before the next housekeeping tick (which samples
// anyway), or the watch is off.
func (f *fastPoller) watchPeriod() time.Duration {
	if f.cfg.Watch <= 0 {
		return 0
	}
	e := f.ev.Evaluation()
	if len(e.Observations) == 0 || f.cfg.MaxRate <= 0 {
		// no sample yet, or stats unreadable: soon
		return f.cfg.Watch
	}
	headroom, ok := e.Headroom(f.cfg.Margin, f.covered)
	if !ok {
		return 0 // kernel notifications watch every memory threshold's near level
	}
	secs := float64(headroom) / float64(f.cfg.MaxRate)
	if f.ceiling > 0 && secs >= f.ceiling.Seconds() {
		return 0
	}
	return max(time.Duration(secs*float64(time.Second)), f.cfg.Watch)
}

// fastPass is one pass of the fast poll: a quick housekeeping pass (no
// resync more than once a second) when near a threshold, else a watch
// sample alone, which tells whether the next one must come sooner. near
// is what the last sample said (schedule).
func (l *Loop) fastPass(ctx context.Context, f *fastPoller) (near bool) {
	if f.isNear() {
		return l.housekeeping(ctx, passFastPoll)
	}
	l.wake.counts[passWatch].Add(1)
	l.ev.Observe()
	if !f.isNear() {
		return false
	}
	f.near, f.armedBy = true, passWatch.String()
	return l.housekeeping(ctx, passFastPoll)
}
