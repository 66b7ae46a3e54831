package guard

import (
	"context"
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/pod"
)

// psiFollowUps passes, psiFollowUpInterval apart, follow a PSI trigger: 5 s,
// two and a half of the kernel's 2 s trigger windows. The interval is twice
// the sampler's 50 ms minimum step for fresh averages, so each pass sees the
// stall since the last one.
const (
	psiFollowUps        = 50
	psiFollowUpInterval = 100 * time.Millisecond
	followUpResync      = time.Second
	// evictionSpacing: the least time between an eviction and the next one
	// started by a quick pass on a PSI threshold alone (housekeeping ticks
	// keep their own cadence, as the kubelet's one eviction per monitoring
	// interval; a memory signal waits memoryEvictionSpacing)
	evictionSpacing = time.Second
	// memoryEvictionSpacing: the same on a memory signal. Short, as the
	// race measured a second runaway lost to the OOM killer waiting out
	// the second; not zero, so that pressure that evictions do not relieve
	// (memory held outside the pods, a dead victim's page cache not yet
	// reclaimed) evicts at most ten pods a second, each after a fresh
	// sample, not one per stop; none a moment from OOM (four runaways at
	// 2.5 GB/s together lost one to the OOM killer in the 100 ms).
	memoryEvictionSpacing = 100 * time.Millisecond
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

// spaced passes start the next eviction no sooner than evictionSpacing
// (memoryEvictionSpacing on a memory signal) after the last settled; the
// housekeeping tick keeps its own cadence, as the kubelet's one eviction
// per monitoring interval.
func (p pass) spaced() bool { return p != passTick && p != passManual }

// housekeeping starts a listing of the runtime's sandboxes (off the loop;
// applied when it comes back), then lets the evictor act.
func (l *Loop) housekeeping(ctx context.Context, why pass) {
	l.wakeCounts[why].Add(1)
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
	overlap := false
	if len(l.inflight) > 0 {
		// one eviction at a time: the next waits until this one is done;
		// meanwhile admission gets current conditions, and the grace
		// period is cut short if the node is a moment from OOM; once the
		// victim's containers are gone a memory threshold still met chooses
		// the next (mayOverlap)
		l.ev.Observe()
		l.cutGrace()
		if !l.mayOverlap() {
			return
		}
		overlap = true
	}
	if !l.bound.allow(l.now()) {
		// the rate bound holds further evictions back: conditions and
		// admission still follow the pressure
		l.ev.Observe()
		if l.bound.limited.IsZero() {
			l.bound.limited = l.now()
			l.log.WithField("burst", evictionBurst).WithField("refill", evictionRefill).
				Warn("eviction rate bound reached: the next eviction waits for it")
		}
		return
	}
	if !l.bound.limited.IsZero() {
		l.log.WithField("held_back_for", l.now().Sub(l.bound.limited).Round(time.Millisecond)).Info("eviction rate bound no longer holds evictions back")
		l.bound.limited = time.Time{}
	}
	if e := l.nextRefused(); e != nil && !overlap {
		// restored pods that admission refused at start-up come first (the
		// kubelet rejects them when it starts), evictionSpacing apart
		l.ev.Observe()
		if l.now().Sub(l.lastEvicted) >= evictionSpacing {
			l.applyAPI()
			l.evict(e)
		}
		return
	}
	if since := l.now().Sub(l.lastEvicted); why.spaced() && since < evictionSpacing && !overlap {
		// The quick passes (triggers, follow-ups, fast polls) start the
		// next eviction no sooner than evictionSpacing after the last
		// settled, as a PSI average still holds the stall the victim
		// caused; a memory signal met in a sample taken after the victim's
		// stop returned (its processes are gone, their memory uncharged)
		// is now, and waits only memoryEvictionSpacing: a second runaway
		// must not get a second to reach the OOM killer.
		// A moment from OOM (MemoryCritical: under half of a hard
		// threshold, or falling faster than a stop through the runtime
		// lands) waits no spacing at all: the last victim's stop returned
		// (its memory is free), and the kernel's OOM killer, which would
		// otherwise choose next, picks no better than the ranking.
		l.ev.Observe()
		e := l.ev.Evaluation()
		_, critical := e.MemoryCritical()
		if l.lastFailed || (since < memoryEvictionSpacing && !critical) || !e.MemoryThresholdMet() {
			return
		}
	}
	l.applyAPI()
	active := l.active()
	if overlap {
		active = slices.DeleteFunc(active, func(p *pod.Pod) bool {
			return slices.ContainsFunc(l.inflight, func(f *inFlight) bool { return f.sandboxID == p.SandboxID })
		})
	}
	e, err := l.ev.Synchronize(active, l.wakeupOf(why))
	if err != nil {
		// said once as a warning (the evictor's stats error is in status
		// and metrics meanwhile), then at debug while it lasts
		log := l.log.WithError(err).WithField("trigger", why.String())
		if l.passErr == "" {
			log.Warn("eviction pass failed; further failures are logged at debug level until a pass succeeds")
		} else {
			log.Debug("eviction pass failed")
		}
		l.passErr = err.Error()
		return
	}
	if l.passErr != "" {
		l.log.WithField("last_error", l.passErr).Info("eviction passes succeed again")
		l.passErr = ""
	}
	if e != nil {
		l.evict(e)
		l.cutGrace() // a moment from OOM already: no grace, not even a pass's wait
	}
}
