package guard

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/pressure"
)

// Wakeups are the kernel's ways of waking the loop before the next
// housekeeping tick. The loop owns them all, with the follow-ups and the
// fast poll (fastpath.go): it arms them when it starts, re-arms the kernel
// memory notifications when a reload changes the thresholds (their levels
// derive from the thresholds), and stops them when it ends.
type Wakeups struct {
	// PSITrigger is the PSI trigger ("some 100000 1000000"); empty: none.
	PSITrigger string
	// TriggerFile names the pressure file to arm the trigger on now
	// (pressure.Sampler.TriggerFile: the pods cgroup's memory.pressure
	// once it exists, else the node's); looked at again every
	// triggerRecheck.
	TriggerFile func() string
	// Notifiers returns the kernel memory notifications for thresholds
	// (pressure.Sampler.MemcgNotifiers, v1 memcg usage thresholds); nil:
	// none. It is called when the loop starts and after every reload that
	// changes the thresholds; pressure.ErrNoMemcgNotification says the host
	// has none.
	Notifiers func(ts []pressure.Threshold) ([]Notifier, error)
	// Thresholds are the eviction thresholds at start-up.
	Thresholds []pressure.Threshold
}

// Notifier is one kernel memory notification (pressure.MemcgNotifier).
type Notifier interface {
	// Run calls fire at each crossing until ctx ends (nil) or it fails.
	Run(ctx context.Context, fire func()) error
	String() string
}

// triggerRecheck is how often the PSI trigger looks whether its file changed.
const triggerRecheck = 5 * time.Second

// wakeups is the loop's running state of its Wakeups (loop goroutine).
type wakeups struct {
	ctx            context.Context    // ends when the loop's Run returns
	stopNotifiers  context.CancelFunc // ends the notifiers armed last
	noNotification bool               // the host has none: said once
}

// startWakeups arms the PSI trigger and the notifiers for the start-up
// thresholds, under ctx (Run's).
func (l *Loop) startWakeups(ctx context.Context) {
	l.wake.ctx = ctx
	w := l.cfg.Wakeups
	if w.PSITrigger != "" && w.TriggerFile != nil {
		log := l.log.WithField("component", "psi")
		l.wakeWG.Go(func() { runTrigger(ctx, w.TriggerFile, w.PSITrigger, l.Trigger, log) })
	}
	l.armNotifiers(w.Thresholds)
}

// armNotifiers replaces the running notifiers by those for ts.
func (l *Loop) armNotifiers(ts []pressure.Threshold) {
	if l.wake.stopNotifiers != nil {
		l.wake.stopNotifiers()
		l.wake.stopNotifiers = nil
	}
	if l.cfg.Wakeups.Notifiers == nil || l.wake.ctx == nil || l.wake.noNotification {
		return
	}
	log := l.log.WithField("component", "memcg")
	ns, err := l.cfg.Wakeups.Notifiers(ts)
	if errors.Is(err, pressure.ErrNoMemcgNotification) {
		l.wake.noNotification = true
		log.WithError(err).Info("kernel memcg notification not available on this host: the fast poll and housekeeping watch the pods cgroup")
		return
	}
	if err != nil {
		log.WithError(err).Error("kernel memcg notification disabled")
		return
	}
	ctx, cancel := context.WithCancel(l.wake.ctx)
	l.wake.stopNotifiers = cancel
	for _, n := range ns {
		log.WithField("notifier", n.String()).Info("kernel memcg notification armed")
		l.wakeWG.Go(func() {
			err := n.Run(ctx, func() {
				log.Debug("kernel memcg notification fired")
				l.notified()
			})
			if err != nil && ctx.Err() == nil {
				log.WithError(err).WithField("notifier", n.String()).Warn("kernel memcg notification stopped: only the fast poll and housekeeping watch")
			}
		})
	}
}

// notified asks for a pass now because the kernel said a memory threshold
// was crossed; it never blocks.
func (l *Loop) notified() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// runTrigger arms the PSI trigger on file() and calls fire each time it
// fires. It follows file: a pods cgroup that appears after start-up (the
// kubelet creates kubepods.slice after cri-guard on a booting systemd node,
// seen in the guest) gets the trigger within triggerRecheck, and a trigger
// whose cgroup went away falls back to the node's.
func runTrigger(ctx context.Context, file func() string, spec string, fire func(), log *logrus.Entry) {
	for ctx.Err() == nil {
		path := file()
		tctx, cancel := context.WithCancel(ctx)
		moved := make(chan struct{})
		go func() {
			t := time.NewTicker(triggerRecheck)
			defer t.Stop()
			for {
				select {
				case <-tctx.Done():
					return
				case <-t.C:
					if file() != path {
						close(moved)
						cancel()
						return
					}
				}
			}
		}()
		retry := runTriggerOn(tctx, path, spec, fire, log)
		cancel()
		select {
		case <-moved:
			log.WithField("trigger_file", file()).Info("psi trigger file changed: re-arming")
			continue
		default:
		}
		if !retry {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(triggerRecheck):
		}
	}
}

// runTriggerOn runs one trigger on path until ctx ends or it fails; it
// reports whether arming again may help.
func runTriggerOn(ctx context.Context, path, spec string, fire func(), log *logrus.Entry) bool {
	tr, err := pressure.NewTrigger(path, spec)
	if err != nil {
		if errors.Is(err, pressure.ErrNotPressureFile) {
			log.WithError(err).Warn("psi trigger disabled: not a kernel pressure file, only housekeeping polls")
			return false
		}
		log.WithError(err).Error("psi trigger disabled")
		return false
	}
	log.WithField("trigger", tr.String()).Info("psi trigger armed")
	err = tr.Run(ctx, func() {
		log.Debug("psi trigger fired")
		fire()
	})
	switch {
	case err == nil:
		return false
	case errors.Is(err, pressure.ErrNotPressureFile):
		log.WithError(err).Warn("psi trigger disabled: not a kernel pressure file, only housekeeping polls")
		return false
	case errors.Is(err, pressure.ErrTriggerRejected):
		log.WithError(err).Error("psi trigger rejected by the kernel: only housekeeping polls (use a window that is a multiple of 2s)")
		return false
	default:
		log.WithError(err).Warn("psi trigger stopped: re-armed when its file is back, housekeeping polls meanwhile")
		return true
	}
}
