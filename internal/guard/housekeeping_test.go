package guard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestQuickPassEvictsAgainOnMemory: a memory signal still met after the
// last eviction settled lets the next quick pass (fast poll, memcg
// notification) evict the next pod evictor.MemoryEvictionSpacing after it, not
// evictor.EvictionSpacing later: a second runaway must not get a second to reach
// the OOM killer.
func TestQuickPassEvictsAgainOnMemory(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
	h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second))
	h.sampler.set(512 << 20)
	ctx := context.Background()
	housekeep := func(why pass) {
		t.Helper()
		if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, why) }); err != nil {
			t.Fatal(err)
		}
		h.settled(t)
	}
	clock := time.Unix(5000, 0)
	h.loop.now = func() time.Time { return clock }
	housekeep(passFastPoll)
	clock = clock.Add(evictor.MemoryEvictionSpacing / 2)
	housekeep(passFastPoll) // too soon even on a memory signal
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict}) {
		t.Fatalf("decisions after a quick pass %v after an eviction = %v, want the first only", evictor.MemoryEvictionSpacing/2, got)
	}
	clock = clock.Add(evictor.MemoryEvictionSpacing)
	housekeep(passFastPoll) // within evictor.EvictionSpacing, after evictor.MemoryEvictionSpacing
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}) {
		t.Fatalf("decisions after a quick pass %v after an eviction = %v, want two evictions", evictor.MemoryEvictionSpacing*3/2, got)
	}
}

// TestQuickPassEvictsAtOnceWhenCritical: a moment from OOM (under half of
// the hard threshold) the next quick pass evicts the next pod right after
// the last eviction settled, with no evictor.MemoryEvictionSpacing: four runaways
// at 2.5 GB/s together lost one to the OOM killer within the 100 ms.
func TestQuickPassEvictsAtOnceWhenCritical(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
	h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second))
	h.sampler.set(256 << 20) // under half of the 1Gi threshold
	ctx := context.Background()
	clock := time.Unix(5000, 0)
	h.loop.now = func() time.Time { return clock }
	housekeep := func(why pass) {
		t.Helper()
		if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, why) }); err != nil {
			t.Fatal(err)
		}
		h.settled(t)
	}
	housekeep(passFastPoll)
	clock = clock.Add(10 * time.Millisecond)
	housekeep(passFastPoll)
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}) {
		t.Fatalf("decisions after a quick pass 10ms after an eviction a moment from OOM = %v, want two evictions", got)
	}
}

// TestGraceCutShortWhenMemoryCritical: while the victim's containers are
// in their grace period (ignoring SIGTERM), a sample with memory.available
// under half of the hard threshold kills the sandbox at once
// (StopContainer with no grace), once, and recorded; above half, the grace
// period runs.
func TestGraceCutShortWhenMemoryCritical(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	rt.ctrHang = make(chan struct{})
	h := newRealHarness(t, withRuntime(rt), stopTimeout(10*time.Second))
	ctx := context.Background()
	housekeep := func(why pass) {
		t.Helper()
		if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, why) }); err != nil {
			t.Fatal(err)
		}
	}
	kills := func() int { return strings.Count(strings.Join(rt.Calls(), ",")+",", "StopContainer c-s1 0,") }
	h.sampler.set(800 << 20) // under the 1Gi threshold, above half of it
	housekeep(passTick)
	testutil.WaitFor(t, "StopContainer c-s1", func() bool { return strings.Contains(strings.Join(rt.Calls(), ","), "StopContainer c-s1") })
	housekeep(passFastPoll)
	time.Sleep(20 * time.Millisecond)
	if n := kills(); n != 0 {
		t.Fatalf("sandbox stopped %d times during the grace period with memory above half the threshold", n)
	}
	h.sampler.set(300 << 20)
	housekeep(passFastPoll)
	testutil.WaitFor(t, "one kill", func() bool { return kills() == 1 })
	housekeep(passFastPoll)
	close(rt.ctrHang) // the kill ended the container
	h.settled(t)
	if n := kills(); n != 1 {
		t.Fatalf("StopContainer c-s1 0 calls = %d, want the kill once: %v", n, rt.Calls())
	}
	if n := strings.Count(strings.Join(rt.Calls(), ","), "StopPodSandbox s1"); n != 1 {
		t.Fatalf("StopPodSandbox s1 calls = %d, want the eviction's own only: %v", n, rt.Calls())
	}
	var kinds []evictor.Kind
	for _, d := range h.ev.Snapshot().Decisions {
		if d.Kind == evictor.KindEvict || d.Kind == evictor.KindGraceCut {
			kinds = append(kinds, d.Kind)
		}
	}
	if !slices.Equal(kinds, []evictor.Kind{evictor.KindGraceCut, evictor.KindEvict}) {
		t.Fatalf("decisions = %v, want the grace cut, then the eviction", kinds)
	}
}

// TestEvictionRateBound: however often passes come and whatever the
// signals say, at most evictionBurst evictions start at once and, past
// them, one per evictionRefill. Ten pods on a node a moment from OOM that
// evictions do not relieve (memory held outside the pods): passes 10 ms
// apart, each allowed to evict at once, stop eight, then the ninth after
// the refill.
func TestEvictionRateBound(t *testing.T) {
	rt := newFakeRuntime()
	const pods = 10
	for i := range pods {
		rt.addSandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("p%d", i), 0, true, time.Unix(int64(i+1), 0))
	}
	h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second))
	h.sampler.set(256 << 20) // under half of the 1Gi threshold: no spacing at all
	ctx := context.Background()
	clock := time.Unix(5000, 0)
	h.loop.now = func() time.Time { return clock }
	evictions := func() int {
		n := 0
		for _, k := range h.kinds() {
			if k == evictor.KindEvict {
				n++
			}
		}
		return n
	}
	for range 40 {
		if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, passFastPoll) }); err != nil {
			t.Fatal(err)
		}
		h.settled(t)
		clock = clock.Add(10 * time.Millisecond)
	}
	if n := evictions(); n != evictionBurst {
		t.Fatalf("evictions in 400 ms of passes = %d, want the burst of %d", n, evictionBurst)
	}
	clock = clock.Add(evictionRefill)
	if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, passFastPoll) }); err != nil {
		t.Fatal(err)
	}
	h.settled(t)
	if n := evictions(); n != evictionBurst+1 {
		t.Fatalf("evictions after one refill = %d, want %d", n, evictionBurst+1)
	}
}

// TestPassSamplesOnce: every pass decides on one node sample, whatever it
// finds: a quick pass spaced after the last eviction, one that starts the
// next eviction while a victim's sandbox still stops, a plain tick. (The
// spacing and the overlap were decided on a sample of their own, then the
// choice on a second: a quick pass read the node twice.)
func TestPassSamplesOnce(t *testing.T) {
	tests := []struct {
		name string
		// setup brings the harness to the pass counted, which it returns
		setup func(t *testing.T, h *realHarness, clock *time.Time) pass
		want  []evictor.Kind // the evictions done, the counted pass's included
	}{
		{"tick", func(t *testing.T, h *realHarness, _ *time.Time) pass {
			h.sampler.set(512 << 20)
			return passTick
		}, []evictor.Kind{evictor.KindEvict}},
		{"quick pass after an eviction, a moment from OOM", func(t *testing.T, h *realHarness, clock *time.Time) pass {
			h.sampler.set(256 << 20) // under half of the 1Gi threshold: no spacing
			h.pass(t, passFastPoll)
			h.settled(t)
			*clock = clock.Add(10 * time.Millisecond)
			return passFastPoll
		}, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}},
		{"quick pass spaced after an eviction", func(t *testing.T, h *realHarness, clock *time.Time) pass {
			h.sampler.set(512 << 20)
			h.pass(t, passFastPoll)
			h.settled(t)
			*clock = clock.Add(evictor.MemoryEvictionSpacing / 2) // too soon: nothing chosen
			return passFastPoll
		}, []evictor.Kind{evictor.KindEvict}},
		{"next eviction while the victim's sandbox stops", func(t *testing.T, h *realHarness, _ *time.Time) pass {
			h.rt.mu.Lock()
			h.rt.stopHang = make(chan struct{})
			h.rt.mu.Unlock()
			h.sampler.set(512 << 20)
			h.pass(t, passManual)
			testutil.WaitFor(t, "one eviction under way, its pod killed", func() bool { ids, killed, _ := h.underWay(); return len(ids) == 1 && killed == 1 })
			return passManual
		}, []evictor.Kind{evictor.KindEvict, evictor.KindEvict}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRealHarness(t, withRuntime(twoReadyPods()), stopTimeout(time.Second))
			clock := time.Unix(5000, 0)
			if err := h.loop.do(context.Background(), func() {
				h.loop.now = func() time.Time { return clock }
			}); err != nil {
				t.Fatal(err)
			}
			why := tt.setup(t, h, &clock)
			before := h.sampler.samples()
			h.pass(t, why)
			if n := h.sampler.samples() - before; n != 1 {
				t.Fatalf("a %s pass took %d node samples, want 1", why, n)
			}
			h.releaseAndSettle(t)
			if got := h.kinds(); !slices.Equal(got, tt.want) {
				t.Fatalf("decisions = %v, want %v", got, tt.want)
			}
		})
	}
}

// pass runs one housekeeping pass woken by why on the running loop.
func (h *realHarness) pass(t *testing.T, why pass) {
	t.Helper()
	ctx := context.Background()
	if err := h.loop.do(ctx, func() { h.loop.housekeeping(ctx, why) }); err != nil {
		t.Fatal(err)
	}
}
