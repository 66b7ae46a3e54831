package guard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

const mib = 1 << 20

// evalEvictor is a ruleEvictor whose evaluation is a real one: of its
// thresholds with allocatableMemory.available at avail bytes of 1Gi. It
// counts the node samples and records what woke each pass.
type evalEvictor struct {
	ruleEvictor
	ts       []pressure.Threshold
	avail    atomic.Int64
	observes atomic.Int64
	mu       sync.Mutex
	woken    []evictor.Wakeup
}

func (e *evalEvictor) Observe() { e.observes.Add(1) }

func (e *evalEvictor) Evaluation() evictor.Evaluation {
	s := pressure.SignalAllocatableMemoryAvailable
	return evictor.Evaluation{Thresholds: e.ts, Observations: map[pressure.Signal]pressure.Observation{
		s: {Signal: s, Available: e.avail.Load(), Capacity: 1 << 30}}}
}

func (e *evalEvictor) Synchronize(p evictor.Pass) evictor.Action {
	e.mu.Lock()
	e.woken = append(e.woken, p.Wakeup)
	e.mu.Unlock()
	a := e.ruleEvictor.Synchronize(p)
	a.Near = e.Evaluation().NearThreshold(p.NearMargin)
	return a
}

func (e *evalEvictor) wokenBy(w evictor.Wakeup) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.woken, w)
}

// TestWatchSpacedByHeadroom: far from every threshold the watch samples
// are spaced by the distance to the near band over MaxRate, between Watch
// and the housekeeping interval (none beyond it), and not at all for a
// signal whose near level a kernel notification watches.
func TestWatchSpacedByHeadroom(t *testing.T) {
	ev := &evalEvictor{ts: thresholds(t, "200Mi")}
	cfg := FastPoll{Interval: 10 * time.Millisecond, Watch: 200 * time.Millisecond, Margin: 256 * mib, MaxRate: 1 << 30}
	covered := false
	f := newFastPoller(cfg, ev, func(pressure.Signal) bool { return covered }, 10*time.Second)
	for _, c := range []struct {
		name  string
		avail int64
		want  time.Duration
	}{
		{"512Mi from the band at 1Gi/s", (200 + 256 + 512) * mib, 500 * time.Millisecond},
		{"10Mi from the band: no sooner than watch", (200 + 256 + 10) * mib, 200 * time.Millisecond},
		{"20Gi from the band: housekeeping samples first", (200+256)*mib + 20<<30, 0},
	} {
		ev.avail.Store(c.avail)
		if got := f.watchPeriod(); got != c.want {
			t.Errorf("%s: watch period %s, want %s", c.name, got, c.want)
		}
	}
	ev.avail.Store((200 + 256 + 512) * mib)
	covered = true
	if got := f.watchPeriod(); got != 0 {
		t.Errorf("near level watched by the kernel: watch period %s, want none", got)
	}
	covered = false
	f.cfg.MaxRate = 0
	if got := f.watchPeriod(); got != cfg.Watch {
		t.Errorf("no max rate: watch period %s, want every watch (%s)", got, cfg.Watch)
	}
	f.cfg.MaxRate = 1 << 30
	if got := newFastPoller(cfg, &nearEvictor{}, nil, time.Hour).watchPeriod(); got != cfg.Watch {
		t.Errorf("no sample yet: watch period %s, want %s", got, cfg.Watch)
	}
}

// TestNearNotifierReplacesWatch: with a kernel notification at the near
// level of the only memory threshold the fast poll takes no watch sample
// (without one it samples every Watch); when the notification fires near
// the threshold the fast poll starts, and its passes say the notification
// armed it.
func TestNearNotifierReplacesWatch(t *testing.T) {
	cfg := Config{HousekeepingInterval: time.Hour,
		FastPoll: FastPoll{Interval: time.Millisecond, Watch: time.Millisecond, Margin: 100 * mib, MaxRate: 1 << 50}}
	far := int64(800 * mib)

	plain := &evalEvictor{ts: thresholds(t, "200Mi")}
	plain.avail.Store(far)
	newHarness(t, withConfig(func(c *Config) { *c = cfg }), withEvictor(plain), running())
	testutil.WaitFor(t, "20 watch samples", func() bool { return plain.observes.Load() >= 20 })

	f := &notifierFactory{near: true}
	ev := &evalEvictor{ts: thresholds(t, "200Mi")}
	ev.avail.Store(far)
	cfg.Wakeups = Wakeups{Notifiers: f.notifiers, Thresholds: ev.ts}
	l := newHarness(t, withConfig(func(c *Config) { *c = cfg }), withEvictor(ev), running()).loop
	testutil.WaitFor(t, "the notifier to be armed", func() bool { return len(f.levels()) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := ev.observes.Load(); n != 0 {
		t.Fatalf("the kernel watches the near level, yet the fast poll took %d watch samples", n)
	}
	ev.avail.Store(250 * mib) // within the 100Mi margin of 200Mi
	f.last().fire <- struct{}{}
	testutil.WaitFor(t, "a fast-poll pass armed by the notification", func() bool { return ev.wokenBy(evictor.Wakeup{Source: "fast-poll", ArmedBy: "notification"}) })
	if !ev.wokenBy(evictor.Wakeup{Source: "notification"}) {
		t.Error("no pass woken by the notification")
	}
	w := l.Wakeups()
	if w["notification"] < 1 || w["fast-poll"] < 1 || w["watch"] != 0 {
		t.Errorf("wake-ups %v: want notification and fast-poll, no watch", w)
	}
}

// fakeWatcher fires when the test says, until its context ends.
type fakeWatcher struct{ fire chan struct{} }

func (w *fakeWatcher) String() string { return "memory.events.local" }

func (w *fakeWatcher) Run(ctx context.Context, fire func()) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.fire:
			fire()
		}
	}
}

// TestMemoryEventsWakeup: a change of the pods cgroup's memory.events
// runs a pass at once, which the eviction it chooses names; the watch
// ends with the loop.
func TestMemoryEventsWakeup(t *testing.T) {
	w := &fakeWatcher{fire: make(chan struct{})}
	ev := &evalEvictor{ts: thresholds(t, "200Mi")}
	ev.avail.Store(100 * mib)
	l := newHarness(t, withConfig(func(c *Config) { c.Wakeups.MemoryEvents = w }), withEvictor(ev), running()).loop
	w.fire <- struct{}{}
	testutil.WaitFor(t, "a pass woken by memory-events", func() bool { return ev.wokenBy(evictor.Wakeup{Source: "memory-events"}) })
	if n := l.Wakeups()["memory-events"]; n != 1 {
		t.Errorf("memory-events wake-ups = %d, want 1", n)
	}
}

// TestTriggerWidenedWithoutCapability: a sub-2s PSI window, which the
// kernel refuses a process without CAP_SYS_RESOURCE, is armed widened to
// 2 s (said in the log) rather than left off.
func TestTriggerWidenedWithoutCapability(t *testing.T) {
	const path = "/proc/pressure/memory"
	if _, err := pressure.NewTrigger(path, "some 50000 1000000"); err != nil {
		t.Skipf("no PSI here: %v", err)
	}
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runTrigger(ctx, func() string { return path }, "some 50000 1000000", nil, func() {}, logrus.NewEntry(logger))
	}()
	defer func() { cancel(); <-done }()
	armed := func() string {
		for _, e := range hook.AllEntries() {
			if e.Message == "psi trigger armed" {
				return e.Data["trigger"].(string)
			}
		}
		return ""
	}
	testutil.WaitFor(t, "the psi trigger to be armed", func() bool { return armed() != "" })
	time.Sleep(100 * time.Millisecond) // a refusal comes at once
	var said []string
	for _, e := range hook.AllEntries() {
		said = append(said, e.Message)
	}
	widened := slices.ContainsFunc(said, func(m string) bool { return strings.Contains(m, "armed with the window widened") })
	switch {
	case !widened && slices.ContainsFunc(said, func(m string) bool { return strings.Contains(m, "rejected") }):
		t.Fatalf("the refused window was not widened: %q", said)
	case !widened:
		t.Skip("the kernel took a 1 s window (CAP_SYS_RESOURCE)")
	case !strings.HasSuffix(armed(), "some 100000 2000000"):
		// the refused 1 s spec is never said to be armed
		t.Errorf("first armed %q, want the widened some 100000 2000000; log %q", armed(), said)
	}
}

// TestWatchdogBetweenPasses: with a housekeeping interval longer than the
// watchdog's, the loop still calls Watchdog every WatchdogInterval, so that
// systemd does not kill a healthy cri-guard whose housekeeping is long.
func TestWatchdogBetweenPasses(t *testing.T) {
	var pings atomic.Int64
	l := newHarness(t, withConfig(func(c *Config) { c.WatchdogInterval = 5 * time.Millisecond }),
		withOptions(func(o *Options) { o.Watchdog = func() { pings.Add(1) } }), running()).loop
	testutil.WaitFor(t, "3 watchdog pings", func() bool { return pings.Load() >= 3 })
	if n := l.Wakeups()["tick"]; n != 0 {
		t.Errorf("%d housekeeping ticks in an hour's interval", n)
	}
}

// TestTriggerFollowsFileAtRecheck: the PSI trigger looks whether its file
// changed only when the loop's tick asks (recheck), with no timer of its
// own: the file changes, nothing happens until a recheck, then the trigger
// is armed on the new file.
func TestTriggerFollowsFileAtRecheck(t *testing.T) {
	const memory, io = "/proc/pressure/memory", "/proc/pressure/io"
	for _, p := range []string{memory, io} {
		if _, err := pressure.NewTrigger(p, "some 100000 2000000"); err != nil {
			t.Skipf("no PSI trigger on %s here: %v", p, err)
		}
	}
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.InfoLevel)
	var file atomic.Value
	file.Store(memory)
	recheck := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runTrigger(ctx, func() string { return file.Load().(string) }, "some 100000 2000000", recheck, func() {}, logrus.NewEntry(logger))
	}()
	defer func() { cancel(); <-done }()
	armedOn := func() []string {
		var out []string
		for _, e := range hook.AllEntries() {
			if e.Message == "psi trigger armed" {
				out = append(out, e.Data["trigger"].(string))
			}
		}
		return out
	}
	testutil.WaitFor(t, "the trigger armed on one file", func() bool { return len(armedOn()) == 1 })
	file.Store(io)
	time.Sleep(200 * time.Millisecond)
	if got := armedOn(); len(got) != 1 {
		t.Fatalf("re-armed without a recheck: %v", got)
	}
	recheck <- struct{}{}
	testutil.WaitFor(t, "the trigger armed on the second file", func() bool { return len(armedOn()) == 2 })
	if got := armedOn()[1]; !strings.HasPrefix(got, io+":") {
		t.Errorf("armed %q after the recheck, want on %s", got, io)
	}
}
