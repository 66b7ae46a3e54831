package guard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestSlowStoreDoesNotHoldTheLoop: with a state disk whose writes do not
// return, the loop still runs its housekeeping pass and evicts under
// pressure; the eviction is recorded in memory at once and on disk once
// the disk answers. A RunPodSandbox waits for its own pending record (on
// its own goroutine) before the runtime sees the pod.
func TestSlowStoreDoesNotHoldTheLoop(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	store := newMemStore()
	h := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(time.Second))
	release := store.hold()
	defer release()

	forwarded := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		crit := newPod("crit", 0, pod.BestEffort, true)
		_, err := h.loop.RunPodSandbox(context.Background(), crit, func(context.Context) runtimeproxy.RunOutcome {
			close(forwarded)
			rt.addSandbox("s-crit", "crit", 0, true, time.Now())
			return runtimeproxy.Created("s-crit")
		})
		ran <- err
	}()
	testutil.WaitFor(t, "crit admitted", func() bool { // admitted: its pending record is queued
		for _, p := range h.loop.Pods() {
			if p.UID == "crit" {
				return true
			}
		}
		return false
	})

	h.sampler.set(512 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatalf("housekeeping pass with the state disk held: %v", err)
	}
	h.settled(t)
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict}) {
		t.Fatalf("decisions with the state disk held = %v, want the eviction", got)
	}
	if st := h.podState("p1/0"); st != pod.StateStopped {
		t.Fatalf("evicted pod's state in memory = %q, want stopped", st)
	}
	select {
	case <-forwarded:
		t.Fatal("RunPodSandbox forwarded before its pending record was written")
	default:
	}

	release()
	if err := <-ran; err != nil {
		t.Fatalf("RunPodSandbox after the disk answered: %v", err)
	}
	flushed(t, h.loop)
	if rec, ok := store.get("p1/0"); !ok || rec.State != pod.StateStopped || rec.Pod.EvictedAt.IsZero() {
		t.Fatalf("evicted pod's record = %+v (present %v), want stopped with EvictedAt", rec, ok)
	}
	if rec, ok := store.get("crit/0"); !ok || rec.SandboxID != "s-crit" {
		t.Fatalf("critical pod's record = %+v (present %v), want its sandbox", rec, ok)
	}
}
