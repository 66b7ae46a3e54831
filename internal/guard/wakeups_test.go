package guard

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeNotifier is one armed notification: it runs until its context ends
// and fires when the test says.
type fakeNotifier struct {
	level string
	near  bool
	fire  chan struct{}
	done  chan struct{} // closed when Run returned

	mu       sync.Mutex
	relevels []pressure.NodeSample // what each Relevel handed it
}

func (n *fakeNotifier) Relevel(s pressure.NodeSample) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.relevels = append(n.relevels, s)
}

func (n *fakeNotifier) relevelled() []pressure.NodeSample {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.relevels)
}

func (n *fakeNotifier) String() string { return n.level }

func (n *fakeNotifier) Signal() pressure.Signal { return pressure.SignalAllocatableMemoryAvailable }

func (n *fakeNotifier) Near() bool { return n.near }

func (n *fakeNotifier) Run(ctx context.Context, fire func()) error {
	defer close(n.done)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.fire:
			fire()
		}
	}
}

// notifierFactory records every arming, one fakeNotifier per threshold.
type notifierFactory struct {
	near  bool // the notifiers fire at the near level
	mu    sync.Mutex
	armed []*fakeNotifier
}

func (f *notifierFactory) notifiers(ts []pressure.Threshold) ([]Notifier, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Notifier
	for _, t := range ts {
		n := &fakeNotifier{level: t.String(), near: f.near, fire: make(chan struct{}), done: make(chan struct{})}
		f.armed = append(f.armed, n)
		out = append(out, n)
	}
	return out, nil
}

func (f *notifierFactory) levels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range f.armed {
		out = append(out, n.level)
	}
	return out
}

func (f *notifierFactory) last() *fakeNotifier {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armed[len(f.armed)-1]
}

func thresholds(t *testing.T, v string) []pressure.Threshold {
	t.Helper()
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{Hard: map[string]string{"allocatableMemory.available": v}})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestReloadRearmsNotifiers: the loop arms the kernel notifications for the
// start-up thresholds, a reload that changes them replaces them at once by
// notifications at the new levels (the old ones end), a reload that changes
// nothing keeps them, a notification runs a pass, and every notification
// ends with the loop. Before the loop owned them, a reload left them at
// the old levels until a restart.
func TestReloadRearmsNotifiers(t *testing.T) {
	f := &notifierFactory{}
	old, lower := thresholds(t, "150Mi"), thresholds(t, "300Mi")
	rt, ev := newFakeRuntime(), &ruleEvictor{}
	var passes sync.WaitGroup
	l := newHarness(t, withConfig(func(c *Config) { c.Wakeups = Wakeups{Notifiers: f.notifiers, Thresholds: old} }),
		withRuntime(rt), withEvictor(ev), withOptions(func(o *Options) { o.Watchdog = func() { passes.Done() } })).loop
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()

	testutil.WaitFor(t, "the notifier to be armed", func() bool { return len(f.levels()) == 1 })
	first := f.last()
	if first.level != old[0].String() {
		t.Fatalf("armed %q at start-up, want %q", first.level, old[0].String())
	}

	// a notification runs a housekeeping pass (the watchdog is called after each)
	passes.Add(1)
	first.fire <- struct{}{}
	passes.Wait()

	if _, _, err := l.SetThresholds(context.Background(), lower, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the notification at the old level still runs after the reload")
	}
	if got, want := f.levels(), []string{old[0].String(), lower[0].String()}; !slices.Equal(got, want) {
		t.Fatalf("armed %v, want %v", got, want)
	}
	second := f.last()
	passes.Add(1)
	second.fire <- struct{}{}
	passes.Wait()

	// the evictor says what changed: a reload it reports as changing
	// nothing (the fake reports each threshold given as added, none here)
	// keeps the notifications running
	if _, _, err := l.SetThresholds(context.Background(), nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.done:
		t.Fatal("a reload that changed nothing stopped the notification")
	default:
	}
	if got := len(f.levels()); got != 2 {
		t.Errorf("%d notifications armed in all, want 2", got)
	}

	// a notification armed when the loop ends is stopped with it
	if _, _, err := l.SetThresholds(context.Background(), lower, time.Minute); err != nil {
		t.Fatal(err)
	}
	third := f.last()
	cancel()
	<-done
	select {
	case <-third.done:
	default:
		t.Error("Run returned with a notification still running")
	}
}

// TestNoNotificationSaidOnce: a host without kernel memory notifications
// is told once; reloads do not ask again.
func TestNoNotificationSaidOnce(t *testing.T) {
	calls := 0
	notifiers := func([]pressure.Threshold) ([]Notifier, error) {
		calls++
		return nil, pressure.ErrNoMemcgNotification
	}
	h := newHarness(t, enforceRestored())
	h.loop.cfg.Wakeups = Wakeups{Notifiers: notifiers, Thresholds: thresholds(t, "150Mi")}
	h.start(t)
	for _, v := range []string{"200Mi", "250Mi"} {
		if _, _, err := h.loop.SetThresholds(context.Background(), thresholds(t, v), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := h.loop.do(context.Background(), func() { n = calls }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("asked for notifications %d times, want 1", n)
	}
}

// TestTickRelevelsNotifiers: each housekeeping tick hands the kernel
// notifiers the evictor's sample (their levels follow inactive_file: the
// tick is their only clock, so an idle notifier takes no timer), and a
// pass the kernel woke does not.
func TestTickRelevelsNotifiers(t *testing.T) {
	f := &notifierFactory{near: true}
	sample := pressure.NodeSample{HasAllocatable: true, AllocatableCapacityBytes: 1 << 30, AllocatableInactiveFileBytes: 7 << 20}
	rt, ev := newFakeRuntime(), &ruleEvictor{sample: sample}
	l := newHarness(t, withConfig(func(c *Config) {
		c.HousekeepingInterval = 20 * time.Millisecond
		c.Wakeups = Wakeups{Notifiers: f.notifiers, Thresholds: thresholds(t, "150Mi")}
	}), withRuntime(rt), withEvictor(ev), running()).loop
	testutil.WaitFor(t, "the notifier to be armed", func() bool { return len(f.levels()) == 1 })
	n := f.last()
	testutil.WaitFor(t, "3 relevels", func() bool { return len(n.relevelled()) >= 3 })
	for i, s := range n.relevelled() {
		if s != sample {
			t.Fatalf("relevel %d handed %+v, want the evictor's sample %+v", i, s, sample)
		}
	}
	if got := l.Wakeups()["tick"]; got < 3 {
		t.Errorf("%d ticks for 3 relevels", got)
	}
}

func TestNotificationPassDoesNotRelevel(t *testing.T) {
	f := &notifierFactory{near: true}
	rt, ev := newFakeRuntime(), &ruleEvictor{sample: pressure.NodeSample{HasAllocatable: true}}
	var passes sync.WaitGroup
	newHarness(t, withConfig(func(c *Config) { c.Wakeups = Wakeups{Notifiers: f.notifiers, Thresholds: thresholds(t, "150Mi")} }),
		withRuntime(rt), withEvictor(ev), withOptions(func(o *Options) { o.Watchdog = func() { passes.Done() } }), running())
	testutil.WaitFor(t, "the notifier to be armed", func() bool { return len(f.levels()) == 1 })
	n := f.last()
	passes.Add(1)
	n.fire <- struct{}{}
	passes.Wait()
	if got := n.relevelled(); len(got) != 0 {
		t.Errorf("a notification pass relevelled %d times", len(got))
	}
}
