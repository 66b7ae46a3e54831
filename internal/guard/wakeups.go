package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Wakeups are the kernel's ways of waking the loop before the next
// housekeeping tick. The loop owns them all, with the follow-ups and the
// fast poll (fastpath.go): it arms them when it starts, re-arms the kernel
// memory notifications when a reload changes the thresholds (their levels
// derive from the thresholds), and stops them when it ends. Which exist
// depends on the host: v1 has the memcg notifications (at each threshold
// and at its near level), v2 the memory.events watch; both the PSI
// trigger, with a sub-second window where the kernel takes one.
type Wakeups struct {
	// PSITrigger is the PSI trigger ("some 100000 1000000"); empty: none.
	PSITrigger string
	// TriggerFile names the pressure file to arm the trigger on now
	// (pressure.Sampler.TriggerFile: the pods cgroup's memory.pressure
	// once it exists, else the node's); looked at again at every
	// housekeeping tick.
	TriggerFile func() string
	// Notifiers returns the kernel memory notifications for thresholds
	// (pressure.Sampler.MemcgNotifiers, v1 memcg usage thresholds, at
	// each threshold and at its near level); nil: none. It is called when
	// the loop starts and after every reload that changes the thresholds;
	// pressure.ErrNoMemcgNotification says the host has none.
	Notifiers func(ts []pressure.Threshold) ([]Notifier, error)
	// MemoryEvents watches the pods cgroup's memory.events (cgroup v2:
	// pressure.MemoryEventsWatcher); nil: none.
	MemoryEvents Watcher
	// Thresholds are the eviction thresholds at start-up.
	Thresholds []pressure.Threshold
}

// Watcher is a kernel wake-up: Run calls fire each time the kernel says so
// until ctx ends (nil) or it fails.
type Watcher interface {
	Run(ctx context.Context, fire func()) error
	String() string
}

// Notifier is one kernel memory notification (pressure.MemcgNotifier).
type Notifier interface {
	Watcher
	// Signal is the signal whose threshold it watches.
	Signal() pressure.Signal
	// Near reports whether it fires at the near level (the fast poll's
	// margin before the threshold) rather than at the threshold: then the
	// fast poll's watch need not sample for that signal.
	Near() bool
	// Relevel hands it the loop's housekeeping sample, from which its
	// level follows (inactive_file moves it); it must not block.
	Relevel(s pressure.NodeSample)
}

// wakeups is the loop's running state of its Wakeups, and their one way
// into the loop: a kernel wake-up that fires marks its pass pending and
// signals fired, the loop takes every pass pending at once (take) and runs
// them in turn. A wake-up that fires again before its pass ran adds no
// pass, as a trigger that fires twice while the loop is busy. Unless said
// otherwise, its fields belong to the loop goroutine.
type wakeups struct {
	fired   chan struct{} // signalled after pending is set (any goroutine)
	pending atomic.Uint32 // a bit per pass the kernel asked for (any goroutine)
	// counts count the passes by what woke them, and the watch samples
	// (Wakeups: cri_guard_wakeups_total); any goroutine reads them.
	counts [passWatch + 1]atomic.Uint64
	wg     sync.WaitGroup // the wake-ups' goroutines
	fp     *fastPoller    // the fast poll while Run runs; nil when off

	ctx            context.Context    // ends when the loop's Run returns
	stopNotifiers  context.CancelFunc // ends the notifiers armed last
	noNotification bool               // the host has none: said once
	// covered are the signals whose near level a running notifier of the
	// last arming (gen) watches.
	covered map[pressure.Signal]bool
	gen     uint64
	// notifiers are those of the last arming, relevelled by each
	// housekeeping sample (relevel).
	notifiers []Notifier
	// recheck asks the PSI trigger to look whether its file changed: each
	// housekeeping tick, so that an idle trigger takes no timer of its own.
	recheck chan struct{}
}

// kernelPasses are the passes the kernel's wake-ups ask for, in the order
// a take runs them: the PSI trigger first (it starts the follow-ups).
var kernelPasses = [...]pass{passTrigger, passNotify, passMemoryEvents}

// fire asks for a pass of why (one of kernelPasses); it never blocks.
func (w *wakeups) fire(why pass) {
	w.pending.Or(1 << why)
	select {
	case w.fired <- struct{}{}:
	default:
	}
}

// take returns the passes asked for since the last take, in kernelPasses'
// order (loop goroutine).
func (w *wakeups) take() []pass {
	bits := w.pending.Swap(0)
	out := make([]pass, 0, len(kernelPasses))
	for _, p := range kernelPasses {
		if bits&(1<<p) != 0 {
			out = append(out, p)
		}
	}
	return out
}

// nearCovered reports whether a kernel notification watches the near
// level of the signal's thresholds (loop goroutine).
func (l *Loop) nearCovered(s pressure.Signal) bool { return l.wake.covered[s] }

// wakeupOf is what woke a pass that way, for its eviction (loop goroutine).
func (l *Loop) wakeupOf(why pass) evictor.Wakeup {
	w := evictor.Wakeup{Source: why.String()}
	if why == passFastPoll {
		w.ArmedBy = l.wake.fp.armedByNow()
	}
	return w
}

// Wakeups returns how many passes each wake-up started, and how many watch
// samples the fast poll took (cri_guard_wakeups_total), by source: tick,
// trigger, notification, memory-events, follow-up, fast-poll, watch,
// restored-refused. Safe from any goroutine.
func (l *Loop) Wakeups() map[string]uint64 {
	out := map[string]uint64{}
	for p := range l.wake.counts {
		if pass(p) != passManual {
			out[pass(p).String()] = l.wake.counts[p].Load()
		}
	}
	return out
}

// startWakeups arms the PSI trigger and the notifiers for the start-up
// thresholds, under ctx (Run's).
func (l *Loop) startWakeups(ctx context.Context) {
	l.wake.ctx = ctx
	w := l.cfg.Wakeups
	if w.PSITrigger != "" && w.TriggerFile != nil {
		log := l.log.WithField("component", "psi")
		l.wake.recheck = make(chan struct{}, 1)
		recheck := l.wake.recheck
		l.wake.wg.Go(func() { runTrigger(ctx, w.TriggerFile, w.PSITrigger, recheck, l.Trigger, log) })
	}
	if w.MemoryEvents != nil {
		log := l.log.WithField("component", "memory-events")
		log.WithField("watch", w.MemoryEvents.String()).Info("memory.events watch armed")
		l.wake.wg.Go(func() {
			err := w.MemoryEvents.Run(ctx, func() {
				log.Debug("memory.events changed")
				l.wake.fire(passMemoryEvents)
			})
			if err != nil && ctx.Err() == nil {
				log.WithError(err).Warn("memory.events watch stopped: the fast poll, the PSI trigger and housekeeping watch")
			}
		})
	}
	l.armNotifiers(w.Thresholds)
}

// armNotifiers replaces the running notifiers by those for ts.
func (l *Loop) armNotifiers(ts []pressure.Threshold) {
	if l.wake.stopNotifiers != nil {
		l.wake.stopNotifiers()
		l.wake.stopNotifiers = nil
	}
	l.wake.gen++
	l.wake.covered = nil
	l.wake.notifiers = nil
	if l.cfg.Wakeups.Notifiers == nil || l.wake.ctx == nil || l.wake.noNotification {
		return
	}
	log := l.log.WithField("component", "memcg")
	ns, err := l.cfg.Wakeups.Notifiers(ts)
	if errors.Is(err, pressure.ErrNoMemcgNotification) {
		l.wake.noNotification = true
		log.WithError(err).Info("kernel memcg notification not available on this host: the memory.events watch, the PSI trigger, the fast poll and housekeeping watch the pods cgroup")
		return
	}
	if err != nil {
		log.WithError(err).Error("kernel memcg notification disabled")
		return
	}
	ctx, cancel := context.WithCancel(l.wake.ctx)
	l.wake.stopNotifiers = cancel
	l.wake.notifiers = ns
	gen := l.wake.gen
	for _, n := range ns {
		log.WithField("notifier", n.String()).Info("kernel memcg notification armed")
		if n.Near() {
			if l.wake.covered == nil {
				l.wake.covered = map[pressure.Signal]bool{}
			}
			l.wake.covered[n.Signal()] = true
		}
		l.wake.wg.Go(func() {
			err := n.Run(ctx, func() {
				log.Debug("kernel memcg notification fired")
				l.notified()
			})
			if err != nil && ctx.Err() == nil {
				log.WithError(err).WithField("notifier", n.String()).Warn("kernel memcg notification stopped: only the fast poll and housekeeping watch")
				if n.Near() {
					// the fast poll's watch samples for the signal again
					l.postUnless(ctx, func() {
						if l.wake.gen == gen {
							delete(l.wake.covered, n.Signal())
						}
					})
				}
			}
		})
	}
}

// afterTick hands the housekeeping tick's sample to the kernel
// notifiers (their levels follow inactive_file) and asks the PSI trigger
// to look at its file: the tick is their only clock, so that an idle node
// wakes nothing between two ticks (loop goroutine).
func (l *Loop) afterTick() {
	select {
	case l.wake.recheck <- struct{}{}:
	default:
	}
	if len(l.wake.notifiers) == 0 {
		return
	}
	s := l.ev.Evaluation().Sample
	for _, n := range l.wake.notifiers {
		n.Relevel(s)
	}
}

// postUnless runs f on the loop like post, unless ctx ends first (a
// wake-up's goroutine while the loop stops: Run waits for them).
func (l *Loop) postUnless(ctx context.Context, f func()) {
	select {
	case l.updates <- f:
	case <-ctx.Done():
	case <-l.done:
	}
}

// notified asks for a pass now because the kernel said a memory threshold
// was crossed; it never blocks.
func (l *Loop) notified() { l.wake.fire(passNotify) }

// runTrigger arms the PSI trigger on file() and calls fire each time it
// fires. It follows file, looked at again at each recheck (the loop's
// housekeeping tick): a pods cgroup that appears after start-up (the
// kubelet creates kubepods.slice after cri-guard on a booting systemd
// node, seen in the guest) gets the trigger by the next tick, and a
// trigger whose cgroup went away falls back to the node's.
func runTrigger(ctx context.Context, file func() string, spec string, recheck <-chan struct{}, fire func(), log *logrus.Entry) {
	for ctx.Err() == nil {
		path := file()
		tctx, cancel := context.WithCancel(ctx)
		moved := make(chan struct{})
		go func() {
			for {
				select {
				case <-tctx.Done():
					return
				case <-recheck:
					if file() != path {
						close(moved)
						cancel()
						return
					}
				}
			}
		}()
		retry, wider := runTriggerOn(tctx, path, spec, fire, log)
		cancel()
		if wider != "" {
			log.WithFields(logrus.Fields{"trigger": spec, "armed": wider}).Info("psi trigger: the kernel takes windows under 2s only from a process with CAP_SYS_RESOURCE: armed with the window widened")
			spec = wider
			continue
		}
		select {
		case <-moved:
			log.WithField("trigger_file", file()).Info("psi trigger file changed: re-arming")
			continue
		default:
		}
		if !retry {
			return
		}
		select { // armed again at the next tick
		case <-ctx.Done():
		case <-recheck:
		}
	}
}

// runTriggerOn runs one trigger on path until ctx ends or it fails; it
// reports whether arming again may help, and the spec to arm instead when
// the kernel refused a sub-2s window (no CAP_SYS_RESOURCE).
func runTriggerOn(ctx context.Context, path, spec string, fire func(), log *logrus.Entry) (retry bool, wider string) {
	tr, err := pressure.NewTrigger(path, spec)
	if err != nil {
		if errors.Is(err, pressure.ErrNotPressureFile) {
			log.WithError(err).Warn("psi trigger disabled: not a kernel pressure file, only housekeeping polls")
			return false, ""
		}
		log.WithError(err).Error("psi trigger disabled")
		return false, ""
	}
	tr.Armed = func() { log.WithField("trigger", tr.String()).Info("psi trigger armed") }
	err = tr.Run(ctx, func() {
		log.Debug("psi trigger fired")
		fire()
	})
	switch {
	case err == nil:
		return false, ""
	case errors.Is(err, pressure.ErrNotPressureFile):
		log.WithError(err).Warn("psi trigger disabled: not a kernel pressure file, only housekeeping polls")
		return false, ""
	case errors.Is(err, pressure.ErrTriggerRejected):
		if w, ok := pressure.WidenTriggerSpec(spec); ok {
			return false, w
		}
		log.WithError(err).Error("psi trigger rejected by the kernel: only housekeeping polls (use a window that is a multiple of 2s)")
		return false, ""
	default:
		log.WithError(err).Warn("psi trigger stopped: re-armed when its file is back, housekeeping polls meanwhile")
		return true, ""
	}
}
