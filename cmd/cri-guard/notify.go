package main

import (
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"
)

// notifier tells systemd about the daemon's state (sd_notify): READY=1 once
// restored and listening, WATCHDOG=1 from the sync loop's housekeeping
// passes while the service is up, STOPPING=1 at shutdown. Without
// NOTIFY_SOCKET every call is a no-op.
type notifier struct {
	log *logrus.Entry
	now func() time.Time
	// every is the least time between two watchdog pings: half of
	// WATCHDOG_USEC; 0 when systemd runs no watchdog for this process.
	every time.Duration

	mu       sync.Mutex
	ready    bool
	stopping bool
	lastPing time.Time
}

// newNotifier reads NOTIFY_SOCKET and WATCHDOG_USEC/WATCHDOG_PID from the
// environment (they are left in place).
func newNotifier(log *logrus.Entry) *notifier {
	n := &notifier{log: log, now: time.Now}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.WithError(err).Warn("bad systemd watchdog settings: no watchdog pings")
	}
	n.every = wd / 2
	return n
}

// watchdogInterval is WATCHDOG_USEC, 0 when no watchdog is asked for.
func (n *notifier) watchdogInterval() time.Duration { return 2 * n.every }

// send writes one state; failures are logged, never fatal.
func (n *notifier) send(state string) {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		n.log.WithError(err).WithField("state", state).Warn("sd_notify failed")
		return
	}
	if sent {
		n.log.WithField("state", state).Debug("sd_notify")
	}
}

// Ready sends READY=1.
func (n *notifier) Ready() {
	n.mu.Lock()
	n.ready = true
	n.mu.Unlock()
	n.send(daemon.SdNotifyReady)
}

// status sends STATUS=s, the line `systemctl status` shows.
func (n *notifier) status(s string) { n.send("STATUS=" + s) }

// Stopping sends STOPPING=1; no watchdog ping follows it.
func (n *notifier) Stopping() {
	n.mu.Lock()
	n.stopping = true
	n.mu.Unlock()
	n.send(daemon.SdNotifyStopping)
}

// watchdog sends WATCHDOG=1 when systemd asked for a watchdog, the service
// is ready and not stopping, and at least half the watchdog interval has
// passed since the last ping. It is the sync loop's Watchdog callback: a
// loop that stops passing makes systemd restart the service.
func (n *notifier) watchdog() {
	if n.every <= 0 {
		return
	}
	n.mu.Lock()
	now := n.now()
	if !n.ready || n.stopping || (!n.lastPing.IsZero() && now.Sub(n.lastPing) < n.every) {
		n.mu.Unlock()
		return
	}
	n.lastPing = now
	n.mu.Unlock()
	n.send(daemon.SdNotifyWatchdog)
}
