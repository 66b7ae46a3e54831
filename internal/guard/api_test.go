package guard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// fakeAPI answers Pod from a map; recorder records reports.
type fakeAPI struct {
	mu   sync.Mutex
	pods map[string]pod.API
	seen []string // reports: "reject <uid> <message>", "evict <uid> <message>"
}

func (f *fakeAPI) Pod(uid string) (pod.API, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.pods[uid]
	return a, ok
}

func (f *fakeAPI) Rejected(p *pod.Pod, _, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, "reject "+p.UID+" "+message)
}

func (f *fakeAPI) Evicted(p *pod.Pod, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, "evict "+p.UID+" "+message)
}

func (f *fakeAPI) reports() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// TestAPIReports: with the API, a refused first attempt is reported as the
// kubelet's rejectPod (only when the API knows the pod and it never ran
// here), an eviction once its stop happened; the API's priority makes a pod
// critical, its toleration admits a BestEffort pod.
func TestAPIReports(t *testing.T) {
	prio := int32(2000001000)
	api := &fakeAPI{pods: map[string]pod.API{
		"known-be":   {},
		"tolerating": {ToleratesMemoryPressure: true},
		"node-crit":  {Priority: &prio},
		"victim":     {},
	}}
	rt := newFakeRuntime()
	rt.addSandbox("s-victim", "victim", 0, true, time.Unix(1, 0))
	h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second), withAPI(api))
	h.sampler.set(512 << 20)
	if err := h.loop.syncOnce(context.Background()); err != nil { // under pressure: MemoryPressure, and the victim is stopped
		t.Fatal(err)
	}
	h.settled(t)

	run := func(uid string, attempt uint32) error {
		p := newPod(uid, attempt, pod.BestEffort, false)
		_, err := h.run(p)
		return err
	}
	var refused *refusedError
	if err := run("known-be", 0); !errors.As(err, &refused) {
		t.Fatalf("known BestEffort pod under pressure: %v, want refused", err)
	}
	if err := run("unknown-be", 0); !errors.As(err, &refused) {
		t.Fatalf("unknown BestEffort pod under pressure: %v, want refused", err)
	}
	if err := run("known-be", 1); !errors.As(err, &refused) { // a recreation: refused, not "rejected"
		t.Fatalf("attempt 1: %v, want refused", err)
	}
	if err := run("tolerating", 0); err != nil {
		t.Fatalf("BestEffort pod tolerating memory-pressure refused: %v", err)
	}
	if err := run("node-crit", 0); err != nil {
		t.Fatalf("pod of priority %d refused: %v", prio, err)
	}
	for _, p := range h.loop.Pods() {
		if p.UID == "node-crit" && (!p.Critical || p.Evictable) {
			t.Fatalf("node-crit: critical %v evictable %v", p.Critical, p.Evictable)
		}
	}
	got := api.reports()
	want := []string{
		"evict victim The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. ",
		"reject known-be The node had condition: [MemoryPressure]. Observed memory.available 512Mi < 1Gi. ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("reports\n got %q\nwant %q", got, want)
	}
}
