package guard

import (
	"context"
	"time"

	"github.com/cri-guard/cri-guard/internal/evictor"
)

// psiFollowUps passes, psiFollowUpInterval apart, follow a PSI trigger: 5 s,
// two and a half of the kernel's 2 s trigger windows. The interval is twice
// the sampler's 50 ms minimum step for fresh averages, so each pass sees the
// stall since the last one.
const (
	psiFollowUps        = 50
	psiFollowUpInterval = 100 * time.Millisecond
	followUpResync      = time.Second
)

// syncOnce runs one housekeeping pass synchronously on the loop goroutine:
// the step tests drive.
func (l *Loop) syncOnce(ctx context.Context) error {
	return l.do(ctx, func() { l.housekeeping(ctx, passManual) })
}

// pass is what started a housekeeping pass.
type pass int

const (
	passTick         pass = iota // the housekeeping interval
	passManual                   // syncOnce
	passTrigger                  // a PSI trigger (Trigger)
	passNotify                   // a kernel memory notification (Wakeups.Notifiers)
	passFollowUp                 // one of the quick passes after a trigger
	passFastPoll                 // the fast poll near a threshold
	passRefused                  // the next restored pod refused at start-up is due
	passMemoryEvents             // the pods cgroup's memory.events changed (Wakeups.MemoryEvents)
	// passWatch is a watch sample of the fast poll far from every
	// threshold: a node sample alone, no pass; counted as a wake-up.
	passWatch
)

func (p pass) String() string {
	return [...]string{"tick", "manual", "trigger", "notification", "follow-up", "fast-poll", "restored-refused", "memory-events", "watch"}[p]
}

// quick passes come many times a second while memory is short: they list
// the runtime's sandboxes at most once per followUpResync.
func (p pass) quick() bool { return p == passFollowUp || p == passFastPoll }

// spaced passes start the next eviction no sooner than
// evictor.EvictionSpacing (MemoryEvictionSpacing on a memory signal) after
// the last settled (evictor.Pass.Spaced); the housekeeping tick keeps its
// own cadence, as the kubelet's one eviction per monitoring interval.
func (p pass) spaced() bool { return p != passTick && p != passManual }

// housekeeping is one pass, as the kubelet's synchronize: it starts a
// listing of the runtime's sandboxes (off the loop; applied when it comes
// back), hands the evictor what the loop knows (the pods, the evictions
// under way, the last one's outcome, what woke the pass), and carries out
// the one Action the evictor decides on its one sample: the grace cuts,
// then the eviction. near is the Action's when to look again: the sample
// found memory near a threshold, the fast poll's interval is next.
func (l *Loop) housekeeping(ctx context.Context, why pass) (near bool) {
	l.wake.counts[why].Add(1)
	if l.wdog != nil {
		defer l.wdog()
	}
	// Follow-ups come every 100 ms while memory is short (fast polls every
	// FastPoll.Interval near a threshold): they evaluate the
	// fresh pressure each time but start a listing of the sandboxes (the
	// runtime events keep the view true in between) at most once per
	// followUpResync.
	if !why.quick() || l.now().Sub(l.lastResync) >= followUpResync {
		l.lastResync = l.now()
		l.resync(ctx)
		l.retryUnsaved()
	}
	l.applyAPI()
	rateHeld := !l.evictions.bound.allow(l.now())
	a := l.ev.Synchronize(evictor.Pass{
		Active:       l.active(),
		InFlight:     l.inFlightNow(),
		Refused:      l.nextRefused(),
		SinceSettled: l.now().Sub(l.evictions.lastEvicted),
		LastFailed:   l.evictions.lastFailed,
		RateHeld:     rateHeld,
		Spaced:       why.spaced(),
		Wakeup:       l.wakeupOf(why),
		NearMargin:   l.cfg.FastPoll.Margin,
	})
	for _, e := range a.Cut {
		l.cutGraceOf(l.inFlightOf(e), a.CutWhy)
	}
	if a.Hold != evictor.HoldInFlight {
		l.noteRateBound(rateHeld)
	}
	if a.Hold == evictor.HoldNone && !l.notePassError(a.Err, why) {
		return a.Near
	}
	if a.Evict == nil {
		return a.Near
	}
	l.evict(a.Evict)
	if a.CutEvict {
		l.cutGraceOf(l.inFlightOf(a.Evict), a.CutWhy)
	}
	return a.Near
}

// noteRateBound logs when the rate bound starts holding evictions back
// (held) and when it stops, once each per episode: conditions and
// admission still follow the pressure meanwhile.
func (l *Loop) noteRateBound(held bool) {
	switch {
	case held && l.evictions.bound.limited.IsZero():
		l.evictions.bound.limited = l.now()
		l.log.WithField("burst", evictionBurst).WithField("refill", evictionRefill).
			Warn("eviction rate bound reached: the next eviction waits for it")
	case !held && !l.evictions.bound.limited.IsZero():
		l.log.WithField("held_back_for", l.now().Sub(l.evictions.bound.limited).Round(time.Millisecond)).Info("eviction rate bound no longer holds evictions back")
		l.evictions.bound.limited = time.Time{}
	}
}

// notePassError logs a pass that ranked the pods but could not choose
// (err), and the first that could after such failures; it reports
// whether the pass chose.
func (l *Loop) notePassError(err error, why pass) bool {
	if err != nil {
		// said once as a warning (the evictor's stats error is in status
		// and metrics meanwhile), then at debug while it lasts
		log := l.log.WithError(err).WithField("trigger", why.String())
		if l.evictions.passErr == "" {
			log.Warn("eviction pass failed; further failures are logged at debug level until a pass succeeds")
		} else {
			log.Debug("eviction pass failed")
		}
		l.evictions.passErr = err.Error()
		return false
	}
	if l.evictions.passErr != "" {
		l.log.WithField("last_error", l.evictions.passErr).Info("eviction passes succeed again")
		l.evictions.passErr = ""
	}
	return true
}
