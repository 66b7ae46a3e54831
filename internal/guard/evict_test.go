package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// nodeSampler is a sampler whose node memory.available the test sets;
// pods have no stats (they rank by priority, then age) unless podWS is
// set: then every pod's working set is that.
type nodeSampler struct {
	mu        sync.Mutex
	available int64
	podWS     int64
	killed    []string // the cgroup parents KillPod was asked to kill
	nodes     int      // the node samples taken
}

// KillPod records the kill (podkill.Killer.KillPod signals the cgroup).
func (s *nodeSampler) KillPod(cgroupParent string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = append(s.killed, cgroupParent)
	return 1, nil
}

func (s *nodeSampler) kills() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.killed)
}

// samples is how many node samples were taken.
func (s *nodeSampler) samples() int { s.mu.Lock(); defer s.mu.Unlock(); return s.nodes }

func (s *nodeSampler) set(b int64) { s.mu.Lock(); s.available = b; s.mu.Unlock() }

func (s *nodeSampler) setPods(ws int64) { s.mu.Lock(); s.podWS = ws; s.mu.Unlock() }

func (s *nodeSampler) Node() (pressure.NodeSample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes++
	return pressure.NodeSample{CapacityBytes: 4 << 30, WorkingSetBytes: 4<<30 - s.available, AvailableBytes: s.available}, nil
}

func (s *nodeSampler) Pod(string) (pressure.PodStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.podWS == 0 {
		return pressure.PodStats{}, pressure.ErrNoStats
	}
	return pressure.PodStats{HasMemory: true, WorkingSetBytes: s.podWS, UsageBytes: s.podWS}, nil
}

// realHarness is a loop with the real eviction manager (hard threshold
// memory.available < 1Gi) over a fake runtime, store and sampler.
type realHarness struct {
	loop    *Loop
	rt      *fakeRuntime
	store   *memStore
	ev      *evictor.Manager
	sampler *nodeSampler
}

// newRealHarness is a loop with the real eviction manager over the
// defaults of newLoopSetup, enforcing restored records, restored and
// running (opts may change any of it); h.store is nil unless the loop's
// Store is a memStore.
func newRealHarness(tb testing.TB, opts ...loopOption) *realHarness {
	tb.Helper()
	s := newLoopSetup(append([]loopOption{enforceRestored(), restored(), running()}, opts...))
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}})
	if err != nil {
		tb.Fatal(err)
	}
	h := &realHarness{sampler: &nodeSampler{available: s.available}}
	h.ev, err = evictor.New(evictor.Config{Thresholds: ts, TransitionPeriod: time.Minute, HardGracePeriod: time.Second},
		evictor.Options{Sampler: h.sampler, Log: s.o.Log})
	if err != nil {
		tb.Fatal(err)
	}
	s.o.Evictor, s.o.PodStats, s.o.Killer = h.ev, h.sampler, h.sampler
	h.rt, _ = s.o.Runtime.(*fakeRuntime)
	h.store, _ = s.o.Store.(*memStore)
	h.loop = s.build(tb)
	return h
}

func (h *realHarness) kinds() (out []evictor.Kind) {
	for _, d := range h.ev.Snapshot().Decisions {
		if d.Kind == evictor.KindEvict || d.Kind == evictor.KindEvictFailed {
			out = append(out, d.Kind)
		}
	}
	return out
}

// settled waits until no eviction is under way (the loop owns the flag).
func (h *realHarness) settled(t testing.TB) {
	t.Helper()
	testutil.WaitFor(t, "no eviction under way", func() bool {
		var busy bool
		_ = h.loop.do(context.Background(), func() { busy = len(h.loop.evictions.inflight) > 0 })
		return !busy
	})
}

// underWay lists the sandboxes of the evictions under way, and how many
// of them have their containers stopped and their grace cut.
func (h *realHarness) underWay() (ids []string, killed, cut int) {
	_ = h.loop.do(context.Background(), func() {
		for _, f := range h.loop.evictions.inflight {
			ids = append(ids, f.sandboxID)
			if !f.killedAt.IsZero() {
				killed++
			}
			if f.graceCut {
				cut++
			}
		}
	})
	return ids, killed, cut
}

func (h *realHarness) podState(key string) pod.State {
	for _, p := range h.loop.Pods() {
		if p.Key() == key {
			return p.State
		}
	}
	return ""
}

// TestEvictionCountsOnlyAStop: the runtime's StopPodSandbox fails (or
// hangs past the deadline), then succeeds. The failed pass counts a failure
// and no eviction, arms no guard, and leaves the pod ready and ranked; the
// next pass evicts it.
func TestEvictionCountsOnlyAStop(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(rt *fakeRuntime)
		mend    func(rt *fakeRuntime)
	}{
		{"stop fails", func(rt *fakeRuntime) {
			rt.stopErrs = []error{status.Error(codes.Unavailable, "containerd restarting")}
		}, func(*fakeRuntime) {}},
		{"stop hangs past the deadline", func(rt *fakeRuntime) {
			rt.stopHang = make(chan struct{})
		}, func(rt *fakeRuntime) {
			rt.mu.Lock()
			close(rt.stopHang)
			rt.stopHang = nil
			rt.mu.Unlock()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newFakeRuntime()
			rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
			tt.breakIt(rt)
			// grace 1 s + 200 ms: the hanging stop times out
			h := newRealHarness(t, withRuntime(rt), stopTimeout(200*time.Millisecond))
			ctx := context.Background()
			h.sampler.set(512 << 20)

			if err := h.loop.syncOnce(ctx); err != nil {
				t.Fatal(err)
			}
			h.settled(t)
			if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvictFailed}) {
				t.Fatalf("decisions after the failed stop = %v, want one evict-failed", got)
			}
			if st := h.podState("p1/0"); st != pod.StateReady {
				t.Fatalf("pod state after the failed stop = %q, want ready", st)
			}
			if r := h.ev.Snapshot().Ranked; len(r) != 1 || r[0].UID != "p1" {
				t.Fatalf("ranked after the failed stop = %+v, want p1", r)
			}
			flushed(t, h.loop)
			if rec, _ := h.store.get("p1/0"); !rec.Pod.EvictedAt.IsZero() || rec.State != pod.StateReady {
				t.Fatalf("checkpoint after the failed stop = %+v", rec)
			}
			// the recreation is not guarded: nothing was evicted
			re := newPod("p1", 1, pod.Burstable, false)
			if _, err := h.run(re); err != nil {
				t.Fatalf("attempt 1 after a failed stop refused: %v", err)
			}

			tt.mend(rt)
			if err := h.loop.syncOnce(ctx); err != nil {
				t.Fatal(err)
			}
			h.settled(t)
			if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvictFailed, evictor.KindEvict}) {
				t.Fatalf("decisions after the second pass = %v, want evict-failed then evict", got)
			}
			flushed(t, h.loop)
			if rec, _ := h.store.get("p1/0"); rec.Pod.EvictedAt.IsZero() || rec.State != pod.StateStopped {
				t.Fatalf("checkpoint after the eviction = %+v, want stopped with EvictedAt", rec)
			}
			if n := strings.Count(strings.Join(rt.Calls(), ","), "StopPodSandbox s1"); n != 2 {
				t.Fatalf("StopPodSandbox s1 calls = %d, want 2: %v", n, rt.Calls())
			}
		})
	}
}

func (h *realHarness) run(p *pod.Pod) (string, error) {
	return h.loop.RunPodSandbox(context.Background(), p, func(context.Context) runtimeproxy.RunOutcome {
		id := "sb-" + p.Key()
		h.rt.addSandbox(id, p.UID, p.Attempt, true, time.Now())
		return runtimeproxy.Created(id)
	})
}

// TestRemoveDuringEviction: RemovePodSandbox arrives while the sandbox's
// eviction is under way. Afterwards no record of it exists, in memory or in
// the store, also after a restart on the same store.
func TestRemoveDuringEviction(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.stopHang = make(chan struct{})
	store := newMemStore()
	h := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(10*time.Second))
	h.sampler.set(512 << 20)
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// the stop is under way (hanging); the kubelet removes the sandbox
	testutil.WaitFor(t, "the eviction to be under way", func() bool {
		var busy bool
		_ = h.loop.do(context.Background(), func() { busy = len(h.loop.evictions.inflight) > 0 })
		return busy
	})
	rt.mu.Lock()
	delete(rt.sandboxes, "s1")
	rt.mu.Unlock()
	h.loop.SandboxRemoved("s1")
	rt.mu.Lock()
	close(rt.stopHang)
	rt.stopHang = nil
	rt.mu.Unlock()
	h.settled(t)

	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict}) {
		t.Fatalf("decisions = %v, want the eviction counted once", got)
	}
	flushed(t, h.loop)
	if _, ok := store.get("p1/0"); ok {
		t.Fatal("the removed sandbox's record is back in the store")
	}
	if st := h.podState("p1/0"); st != "" {
		t.Fatalf("the removed sandbox is still known, state %q", st)
	}
	// restart on the same store and runtime
	h2 := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(10*time.Second))
	if n := len(h2.loop.Pods()); n != 0 {
		t.Fatalf("pods after restart = %d, want 0", n)
	}
	if recs, _ := store.List(); len(recs) != 0 {
		t.Fatalf("records after restart = %+v, want none", recs)
	}
}

// TestStopGrace: the StopContainer timeout the kubelet would send. A soft
// eviction gives min(evictionMaxPodGracePeriod, the pod's
// terminationGracePeriodSeconds from its container annotation)
// (eviction_manager.go synchronize); every grace is raised to the 2 s
// minimum of kuberuntime_container.go killContainer.
func TestStopGrace(t *testing.T) {
	tests := []struct {
		name  string
		e     evictor.Eviction
		tgps  string // annotation value; "" for none
		wantS int64
	}{
		{"soft, TGPS below the maximum", evictor.Eviction{Grace: 30 * time.Second}, "5", 5},
		{"soft, TGPS above the maximum", evictor.Eviction{Grace: 30 * time.Second}, "60", 30},
		{"soft, no TGPS known", evictor.Eviction{Grace: 30 * time.Second}, "", 30},
		{"soft, TGPS 0 raised to the minimum", evictor.Eviction{Grace: 30 * time.Second}, "0", 2},
		{"soft, kubelet default maximum 0", evictor.Eviction{Grace: 0}, "30", 2},
		{"hard ignores TGPS", evictor.Eviction{Grace: time.Second, Hard: true}, "1", 2},
		{"garbage annotation is unknown", evictor.Eviction{Grace: 10 * time.Second}, "soon", 10},
		{"restored pod refused: its own TGPS", evictor.Eviction{Grace: 30 * time.Second, Restored: true}, "45", 45},
		{"restored pod refused, no TGPS known", evictor.Eviction{Grace: 30 * time.Second, Restored: true}, "", 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
			if tt.tgps != "" {
				h.rt.ctrs["c-s1"].Annotations = map[string]string{pod.AnnotationTerminationGracePeriod: tt.tgps}
			}
			if _, err := h.loop.Restore(context.Background()); err != nil {
				t.Fatal(err)
			}
			e := tt.e
			e.Pod = h.loop.pods["p1/0"]
			if _, err := h.loop.stop(&e, e.Pod.Clone(), nil); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("StopContainer c-s1 %d", tt.wantS); !slices.Contains(h.rt.Calls(), want) {
				t.Fatalf("calls %v, want %q", h.rt.Calls(), want)
			}
		})
	}
}

// TestEvictionMessageNamesContainers: the eviction message gets the
// kubelet's sentence for each container over its request, from the
// runtime's container stats (a BestEffort pod requests nothing).
func TestEvictionMessageNamesContainers(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.usage = map[string]uint64{"c-s1": 120 << 20}
	api := &fakeAPI{pods: map[string]pod.API{}}
	h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second), withAPI(api))
	h.sampler.set(512 << 20)
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.settled(t)
	want := "evict p1 The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. " +
		"Container main was using 120Mi, request is 0, has larger consumption of memory. "
	if got := api.reports(); !slices.Equal(got, []string{want}) {
		t.Fatalf("reports %q, want %q", got, want)
	}
}

// TestRestoreTrustsTheRuntime: a record edited to call a static (critical)
// pod plain and evictable does not make it evictable after a restart: the
// sandbox's own config in containerd says it is static. What only the
// record knows (EvictedAt) is kept.
func TestRestoreTrustsTheRuntime(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "n-p1", Namespace: "default", Uid: "p1"},
		Annotations: map[string]string{pod.AnnotationConfigSource: "file"},
		Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/podp1"},
	}
	info, err := json.Marshal(map[string]any{"config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	rt.statuses["s1"].Info = map[string]string{pod.InfoKey: string(info)}
	forged := newPod("p1", 0, pod.BestEffort, false) // not critical, evictable
	forged.State, forged.SandboxID, forged.Created = pod.StateReady, "s1", time.Unix(5, 0)
	store := newMemStore()
	if err := store.Put(checkpoint.Record{Pod: *forged, State: forged.State, SandboxID: "s1"}); err != nil {
		t.Fatal(err)
	}
	h := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(time.Second))
	h.sampler.set(512 << 20) // pressure: a pass would stop an evictable pod
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.settled(t)
	var got *pod.Pod
	for _, p := range h.loop.Pods() {
		if p.UID == "p1" {
			got = p
		}
	}
	if got == nil || !got.Static || !got.Critical || got.Evictable || !got.Created.Equal(time.Unix(5, 0)) {
		t.Fatalf("restored pod = %+v, want static, critical, not evictable, created as recorded", got)
	}
	if slices.Contains(rt.Calls(), "StopPodSandbox s1") {
		t.Fatal("the static pod was stopped on the word of a forged record")
	}
}

// TestNextEvictionWhileSandboxStops: once the victim's containers are
// stopped (its memory free) a fresh sample that still meets the memory
// threshold chooses the next pod while the first's sandbox stop is still
// under way (several runaways at once must not wait on each other's
// teardown); a sample above the threshold chooses none.
func TestNextEvictionWhileSandboxStops(t *testing.T) {
	rt := twoReadyPods()
	rt.stopHang = make(chan struct{})
	h := newRealHarness(t, withRuntime(rt), stopTimeout(10*time.Second))
	ctx := context.Background()
	inflight := func() (ids []string, killed int) { ids, killed, _ = h.underWay(); return ids, killed }
	h.sampler.set(512 << 20)
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "one eviction under way, its pod killed", func() bool { ids, k := inflight(); return len(ids) == 1 && k == 1 })
	first, _ := inflight()

	h.sampler.set(3 << 30) // the victim's memory is back: nothing more to do
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := inflight(); len(ids) != 1 {
		t.Fatalf("under way with memory above the threshold: %v, want only %v", ids, first)
	}
	h.sampler.set(512 << 20) // still short: the next runaway
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ids, _ := inflight()
	if len(ids) != 2 || ids[0] != first[0] || ids[1] == ids[0] {
		t.Fatalf("under way = %v, want %v and the other pod", ids, first)
	}
	h.releaseAndSettle(t)
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}) {
		t.Fatalf("decisions = %v, want two evictions", got)
	}
}

// TestNextEvictionWhenMomentFromOOM: the runtime has not reported the
// victim's containers stopped (containerd reports after its own cleanup),
// but its pod cgroup shows its memory released (its processes are gone):
// a memory signal still under the threshold chooses the next pod then,
// and not while the victim still holds its memory. A moment from OOM
// (under half of the hard threshold) neither gets a grace period: each
// victim's cgroup is killed directly in the pass that chose it.
func TestNextEvictionWhenMomentFromOOM(t *testing.T) {
	rt := twoReadyPods()
	rt.ctrHang = make(chan struct{})
	h := newRealHarness(t, withRuntime(rt), stopTimeout(10*time.Second))
	ctx := context.Background()
	under := func() (ids []string, cut int) { ids, _, cut = h.underWay(); return ids, cut }
	h.sampler.setPods(300 << 20)
	h.sampler.set(400 << 20)                     // under half of 1Gi
	if err := h.loop.syncOnce(ctx); err != nil { // the eviction and its grace cut
		t.Fatal(err)
	}
	if ids, cut := under(); len(ids) != 1 || cut != 1 || len(h.sampler.kills()) != 1 {
		t.Fatalf("after the pass that chose it: under way %v with %d cut, %d killed directly; want one, cut, killed", ids, cut, len(h.sampler.kills()))
	}
	for range 2 { // passes while the victim holds its memory
		if err := h.loop.syncOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ids, cut := under(); len(ids) != 1 || cut != 1 {
		t.Fatalf("under way %v with %d cut, want one, cut (its memory is not released)", ids, cut)
	}
	h.sampler.setPods(10 << 20) // the kill landed
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, cut := under(); len(ids) != 2 || cut != 2 {
		t.Fatalf("under way %v with %d cut, want both pods, both cut", ids, cut)
	}
	if k, want := h.sampler.kills(), []string{"/kubepods/besteffort/podp1", "/kubepods/besteffort/podp2"}; !slices.Equal(slices.Sorted(slices.Values(k)), want) {
		t.Fatalf("killed directly %q, want each victim's own cgroup once: %q", k, want)
	}
	h.releaseAndSettle(t)
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}) {
		t.Fatalf("decisions = %v, want two evictions", got)
	}
}

// twoReadyPods is a runtime with two ready sandboxes, s1 (p1, older) and
// s2 (p2), a running container each.
func twoReadyPods() *fakeRuntime {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
	rt.kubeletCgroup("s1")
	rt.kubeletCgroup("s2")
	return rt
}

// releaseAndSettle lets every held container and sandbox stop end, and
// waits until no eviction is under way.
func (h *realHarness) releaseAndSettle(t *testing.T) {
	t.Helper()
	h.rt.mu.Lock()
	for _, c := range []*chan struct{}{&h.rt.stopHang, &h.rt.ctrHang} {
		if *c != nil {
			close(*c)
			*c = nil
		}
	}
	h.rt.mu.Unlock()
	h.settled(t)
}
