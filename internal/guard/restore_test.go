package guard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestRestoredRefusedEvicted: a restored BestEffort pod that admission
// refuses at start-up under pressure is evicted through the one eviction
// path: stopped with its own terminationGracePeriodSeconds (45 s, from its
// container), counted as an eviction, reported to the API, and recorded
// stopped with EvictedAt, so that after another restart its recreation is
// refused while the pressure lasts.
func TestRestoredRefusedEvicted(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s-be", "be", 0, true, time.Unix(1, 0))
	rt.ctrs["c-s-be"].Annotations = map[string]string{pod.AnnotationTerminationGracePeriod: "45"}
	store := newMemStore()
	be := newPod("be", 0, pod.BestEffort, false)
	be.State, be.SandboxID = pod.StateReady, "s-be"
	if err := store.Put(checkpoint.Record{Pod: *be, State: be.State, SandboxID: be.SandboxID}); err != nil {
		t.Fatal(err)
	}
	api := &fakeAPI{pods: map[string]pod.API{"be": {}}}
	h := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(time.Second), withAPI(api), available(512<<20)) // under the 1Gi hard threshold

	testutil.WaitFor(t, "the restored pod evicted", func() bool { return slices.Equal(h.kinds(), []evictor.Kind{evictor.KindEvict}) })
	h.settled(t)
	calls := rt.Calls()
	if i, j := slices.Index(calls, "StopContainer c-s-be 45"), slices.Index(calls, "StopPodSandbox s-be"); i < 0 || i > j {
		t.Fatalf("calls %v, want StopContainer with the pod's 45 s, then StopPodSandbox", calls)
	}
	var restored bool
	for _, d := range h.ev.Snapshot().Decisions {
		restored = restored || (d.Kind == evictor.KindRefuse && d.Restored && d.Pod.UID == "be")
	}
	if !restored {
		t.Fatal("no refusal of the restored pod among the decisions")
	}
	if got := api.reports(); len(got) != 1 || !strings.HasPrefix(got[0], "evict be The node had condition: [MemoryPressure].") {
		t.Fatalf("reports %q, want the eviction with the refusal's message", got)
	}
	flushed(t, h.loop)
	if rec, ok := store.get("be/0"); !ok || rec.State != pod.StateStopped || rec.Pod.EvictedAt.IsZero() {
		t.Fatalf("record %+v (present %v), want stopped with EvictedAt", rec, ok)
	}

	// another restart, pressure still on: the recreation is refused by the
	// re-admission guard, even Burstable (a BestEffort pod would be refused
	// by the condition alone)
	h2 := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(time.Second), available(512<<20))
	_, err := h2.run(newPod("be", 1, pod.Burstable, false))
	var refused *refusedError
	if !errors.As(err, &refused) || refused.Reason != evictor.ReasonEvicted {
		t.Fatalf("recreation after another restart: %v, want refused as Evicted", err)
	}
}

func TestRestoreReconciles(t *testing.T) {
	h := newHarness(t, enforceRestored())
	t0 := time.Unix(5000, 0)
	// a: checkpointed and running; b: checkpointed but gone; c: pending that
	// containerd did create; d: running without record (adopted); e: pending never created.
	h.rt.addSandbox("sa", "a", 0, true, t0)
	h.rt.addSandbox("sc", "c", 0, true, t0.Add(time.Second))
	h.rt.addSandbox("sd", "d", 0, true, t0.Add(2*time.Second))
	put := func(p *pod.Pod, st pod.State, id string) {
		p.State, p.SandboxID = st, id
		if err := h.store.Put(checkpoint.Record{Pod: *p, State: st, SandboxID: id}); err != nil {
			t.Fatal(err)
		}
	}
	put(newPod("a", 0, pod.Burstable, false), pod.StateReady, "sa")
	put(newPod("b", 0, pod.Burstable, false), pod.StateReady, "sb")
	put(newPod("c", 0, pod.Burstable, false), pod.StatePending, "")
	put(newPod("e", 0, pod.Burstable, false), pod.StatePending, "")
	rep, err := h.loop.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := RestoreReport{Records: 4, Dropped: 2, Completed: 1, Adopted: 1, Admitted: 3}
	if rep != want {
		t.Fatalf("report = %+v, want %+v", rep, want)
	}
	for _, key := range []string{"b/0", "e/0"} { // Restore returns once its writes are done
		if _, ok := h.store.get(key); ok {
			t.Errorf("record %s should be dropped", key)
		}
	}
	if rec, ok := h.store.get("c/0"); !ok || rec.SandboxID != "sc" || rec.State != pod.StateReady {
		t.Errorf("pending record c not completed: %+v", rec)
	}
	if _, ok := h.store.get("d/0"); !ok {
		t.Error("adopted sandbox d has no record")
	}
}

func TestRestoreUnderPressure(t *testing.T) {
	for _, enforce := range []bool{true, false} {
		name := map[bool]string{true: "enforce", false: "warn"}[enforce]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, withConfig(func(c *Config) { c.EnforceRestored = enforce }))
			h.ev.pressure.Store(true)
			h.rt.addSandbox("s-be", "be", 0, true, time.Unix(1, 0))
			h.rt.addSandbox("s-crit", "crit", 0, true, time.Unix(2, 0))
			be := newPod("be", 0, pod.BestEffort, false)
			crit := newPod("crit", 0, pod.BestEffort, true)
			for id, p := range map[string]*pod.Pod{"s-be": be, "s-crit": crit} {
				p.State, p.SandboxID = pod.StateReady, id
				_ = h.store.Put(checkpoint.Record{Pod: *p, State: pod.StateReady, SandboxID: id})
			}
			rep, err := h.loop.Restore(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[enforce]; rep.Refused != 1 || rep.Evicting != want {
				t.Fatalf("refused = %d, evicting %d; want 1, %d", rep.Refused, rep.Evicting, want)
			}
			if len(h.rt.Calls()) != 0 {
				t.Fatalf("restore stopped pods itself: %v", h.rt.Calls())
			}
			if !enforce {
				return
			}
			// the loop evicts it as every other eviction, before any pass
			// of the evictor's own
			h.start(t)
			testutil.WaitFor(t, "StopPodSandbox s-be", func() bool { return slices.Contains(h.rt.Calls(), "StopPodSandbox s-be") })
			flushed(t, h.loop)
			if slices.Contains(h.rt.Calls(), "StopPodSandbox s-crit") || !slices.Equal(h.ev.evicted, []string{"be"}) || h.ev.syncs != 0 {
				t.Fatalf("calls = %v, evicted %v after %d passes; want be evicted through the restore queue", h.rt.Calls(), h.ev.evicted, h.ev.syncs)
			}
		})
	}
}

func TestRestoreKeepsEvictionGuard(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.rt.addSandbox("s1", "p1", 0, false, time.Unix(1, 0))
	h.rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
	evicted := newPod("p1", 0, pod.Burstable, false)
	evicted.State, evicted.SandboxID, evicted.EvictedAt = pod.StateStopped, "s1", time.Unix(100, 0)
	plain := newPod("p2", 0, pod.Burstable, false)
	plain.State, plain.SandboxID = pod.StateReady, "s2"
	for _, p := range []*pod.Pod{evicted, plain} {
		if err := h.store.Put(checkpoint.Record{Pod: *p, State: p.State, SandboxID: p.SandboxID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.ev.marked, []string{"p1"}) {
		t.Fatalf("MarkEvicted calls = %v, want [p1]", h.ev.marked)
	}
}

// testClock is a clock a test moves, safe from any goroutine.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// clockAt gives the loop (not yet running) a test clock set to t0.
func (h *harness) clockAt(t0 time.Time) *testClock {
	c := &testClock{}
	c.set(t0)
	h.loop.now = c.now
	return c
}

// TestRestoreKeepsRecentPendingUntilListed: a pending record written just
// before a crash whose sandbox the runtime does not list yet (containerd
// still creating it under the cut-off call) is kept, unsettled: the first
// listing that shows its sandbox completes it, ready or stopped as listed;
// one never shown is dropped by the first listing past pendingGrace. An
// old pending record is dropped at once, as before.
func TestRestoreKeepsRecentPendingUntilListed(t *testing.T) {
	h := newHarness(t, enforceRestored())
	t0 := time.Unix(50_000, 0)
	clock := h.clockAt(t0)
	for _, p := range []*pod.Pod{newPod("late", 0, pod.BestEffort, false), newPod("never", 0, pod.BestEffort, false), newPod("old", 0, pod.BestEffort, false)} {
		written := t0.Add(-10 * time.Second)
		if p.UID == "old" {
			written = t0.Add(-pendingGrace - time.Second)
		}
		p.State = pod.StatePending
		h.store.mu.Lock()
		h.store.recs[p.Key()] = checkpoint.Record{Pod: *p, State: pod.StatePending, Written: written}
		h.store.mu.Unlock()
	}
	rep, err := h.loop.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (RestoreReport{Records: 3, Dropped: 1, Unsettled: 2}); rep != want {
		t.Fatalf("report = %+v, want %+v", rep, want)
	}
	if _, ok := h.store.get("old/0"); ok {
		t.Error("a pending record older than the grace was kept")
	}
	h.start(t)
	// containerd finishes the cut-off creation, and the sandbox is left
	// not ready
	h.rt.addSandbox("s-late", "late", 0, false, t0.Add(time.Second))
	clock.add(time.Second)
	h.listing(t)
	if rec, ok := h.store.get("late/0"); !ok || rec.SandboxID != "s-late" || rec.State != pod.StateStopped {
		t.Errorf("record of the sandbox listed after the restore = %+v (found %v), want s-late stopped", rec, ok)
	}
	if rec, ok := h.store.get("never/0"); !ok || rec.State != pod.StatePending {
		t.Errorf("unsettled record within its grace = %+v (found %v), want kept pending", rec, ok)
	}
	clock.add(pendingGrace)
	h.listing(t)
	if rec, ok := h.store.get("never/0"); ok {
		t.Errorf("unsettled record past its grace kept: %+v", rec)
	}
	if rec, ok := h.store.get("late/0"); !ok || rec.SandboxID != "s-late" {
		t.Errorf("completed record lost: %+v (found %v)", rec, ok)
	}
	if n := len(h.loop.Pods()); n != 1 {
		t.Errorf("pods = %d, want 1 (late)", n)
	}
}
