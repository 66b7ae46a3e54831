package guard

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/checkpoint"
	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
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
	h := newRealHarnessWith(t, store, rt, time.Second, api, 512<<20) // under the 1Gi hard threshold

	waitFor(t, func() bool { return slices.Equal(h.kinds(), []evictor.Kind{evictor.KindEvict}) })
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
	h2 := newRealHarnessWith(t, store, rt, time.Second, nil, 512<<20)
	_, err := h2.run(newPod("be", 1, pod.Burstable, false))
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Reason != evictor.ReasonEvicted {
		t.Fatalf("recreation after another restart: %v, want refused as Evicted", err)
	}
}
