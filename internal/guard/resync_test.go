package guard

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeStream is an event stream the test feeds (send); every Recv after
// the first tells handled: the event before it has been handled on the
// loop.
type fakeStream struct {
	ctx     context.Context
	evs     chan *runtimeapi.ContainerEventResponse
	handled chan struct{}
	recvs   int // Recv calls (the follow goroutine's)
}

func (s *fakeStream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	if s.recvs++; s.recvs > 1 {
		select {
		case s.handled <- struct{}{}:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
	select {
	case ev := <-s.evs:
		return ev, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// brokenStream is a stream that breaks at once.
type brokenStream struct{}

func (brokenStream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	return nil, status.Error(codes.Unavailable, "containerd restarting")
}

// followEvents runs l.RunEvents until the test ends; the first stream is
// first (nil: a feedable one, returned), later ones are feedable.
func followEvents(t *testing.T, l *Loop, first EventStream) *fakeStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &fakeStream{ctx: ctx, evs: make(chan *runtimeapi.ContainerEventResponse), handled: make(chan struct{})}
	opened := 0
	done := make(chan struct{})
	go func() {
		_ = l.RunEvents(ctx, func(context.Context) (EventStream, error) {
			if opened++; opened == 1 && first != nil {
				return first, nil
			}
			return s, nil
		})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// send hands ev to the loop through the stream and waits until it is handled.
func (s *fakeStream) send(t *testing.T, ev *runtimeapi.ContainerEventResponse) {
	t.Helper()
	s.evs <- ev
	<-s.handled
}

func sandboxStatus(id string, ready bool) *runtimeapi.PodSandboxStatus {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandboxStatus{Id: id, State: st}
}

func (h *harness) states() map[string]pod.State {
	out := map[string]pod.State{}
	for _, p := range h.loop.Pods() {
		out[p.Key()] = p.State
	}
	return out
}

// TestEventUpdatesOneSandbox: a runtime event updates the one sandbox it
// names, from the status it carries, and lists nothing; the other pod is
// untouched. Stops and deletions are final; a ready status in an event
// never makes a stopped pod ready (it may predate the stop).
func TestEventUpdatesOneSandbox(t *testing.T) {
	const (
		stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
		deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
		started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	)
	ev := func(ctr string, typ runtimeapi.ContainerEventType, sb *runtimeapi.PodSandboxStatus) *runtimeapi.ContainerEventResponse {
		return &runtimeapi.ContainerEventResponse{ContainerId: ctr, ContainerEventType: typ, PodSandboxStatus: sb}
	}
	ready, gone := pod.StateReady, pod.State("")
	tests := []struct {
		name    string
		stopped bool // p1 is marked stopped first (StopPodSandbox through cri-guard)
		ev      *runtimeapi.ContainerEventResponse
		wantP1  pod.State // "": gone
	}{
		{"container stopped, sandbox ready", false, ev("c-s1", stopped, sandboxStatus("s1", true)), ready},
		{"container stopped, sandbox not ready", false, ev("c-s1", stopped, sandboxStatus("s1", false)), pod.StateStopped},
		{"sandbox stopped", false, ev("s1", stopped, sandboxStatus("s1", false)), pod.StateStopped},
		{"sandbox deleted, no status (containerd 2.x)", true, ev("s1", deleted, nil), gone},
		{"sandbox deleted with its status", false, ev("s1", deleted, sandboxStatus("s1", false)), gone},
		{"container deleted, sandbox ready", false, ev("c-s1", deleted, sandboxStatus("s1", true)), ready},
		{"container deleted, no status", false, ev("c-s1", deleted, nil), ready},
		{"container started is not read", false, ev("c-s1", started, sandboxStatus("s1", false)), ready},
		{"an unknown sandbox", false, ev("s9", deleted, nil), ready},
		{"a ready status after a stop", true, ev("c-s1", stopped, sandboxStatus("s1", true)), pod.StateStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
			h.rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
			if _, err := h.loop.Restore(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.start(t)
			if tt.stopped {
				h.loop.SandboxStopped("s1")
			}
			// the runtime agrees with its event
			h.rt.mu.Lock()
			switch tt.wantP1 {
			case gone:
				delete(h.rt.sandboxes, "s1")
			case pod.StateStopped:
				h.rt.sandboxes["s1"].State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			}
			h.rt.mu.Unlock()
			h.rt.mu.Lock()
			base := h.rt.lists
			h.rt.mu.Unlock()
			s := followEvents(t, h.loop, nil)
			s.send(t, tt.ev)

			want := map[string]pod.State{"p2/0": ready}
			if tt.wantP1 != gone {
				want["p1/0"] = tt.wantP1
			}
			if got := h.states(); !mapsEqual(got, want) {
				t.Fatalf("pods after the event = %v, want %v", got, want)
			}
			h.rt.mu.Lock()
			lists := h.rt.lists - base
			h.rt.mu.Unlock()
			if lists != 0 {
				t.Fatalf("%d ListPodSandbox calls for one event, want 0", lists)
			}
			flushed(t, h.loop)
			rec, ok := h.store.get("p1/0")
			if ok != (tt.wantP1 != gone) || (ok && rec.State != tt.wantP1) {
				t.Fatalf("p1's record = %+v (present %v), want state %q", rec, ok, tt.wantP1)
			}
		})
	}
}

func mapsEqual(a, b map[string]pod.State) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// listing is where a listing of the runtime's sandboxes comes from.
type listing int

const (
	fromHousekeeping listing = iota // a housekeeping pass (resync)
	fromBrokenStream                // the event stream broke (relist)
)

func (s listing) String() string { return [...]string{"housekeeping", "broken stream"}[s] }

// startListing starts a listing from src on the running loop, and returns
// once its picture of the runtime is taken (held: holdLists); wait waits
// until it is applied.
func (h *harness) startListing(t *testing.T, src listing, taken <-chan struct{}) (wait func()) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	switch src {
	case fromHousekeeping:
		if err := h.loop.syncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		close(done)
	case fromBrokenStream:
		go func() { h.loop.relist(ctx); close(done) }()
	}
	<-taken
	return func() { <-done; resynced(t, h.loop) }
}

// TestStaleListing: a listing of the runtime's sandboxes is a picture taken
// while the loop goes on. An outcome recorded after the picture was taken
// (a sandbox created, an eviction's stop, a stop by the kubelet or an
// event) is newer than the listing, and the listing does not override it:
// a naive apply drops the new pod as gone, or makes the stopped one ready
// (a candidate, evicted again). A record the listing does predate takes
// its word.
func TestStaleListing(t *testing.T) {
	tests := []struct {
		name   string
		before func(t *testing.T, h *harness) // before the listing starts
		during func(t *testing.T, h *harness) // while it is held
		key    string
		want   pod.State // "": gone
	}{
		{name: "a sandbox created meanwhile is kept", key: "new/0", want: pod.StateReady,
			during: func(t *testing.T, h *harness) {
				p := newPod("new", 0, pod.Burstable, false)
				if _, err := h.loop.RunPodSandbox(context.Background(), p, func(context.Context) runtimeproxy.RunOutcome {
					h.rt.addSandbox("s-new", "new", 0, true, time.Unix(3, 0))
					return runtimeproxy.Created("s-new")
				}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "an eviction settled meanwhile stays stopped", key: "p1/0", want: pod.StateStopped,
			before: func(t *testing.T, h *harness) {
				h.rt.mu.Lock()
				h.rt.stopHang = make(chan struct{}) // the stop returns only once the picture is taken
				h.rt.mu.Unlock()
				h.ev.pressure.Store(true)
			},
			during: func(t *testing.T, h *harness) {
				if err := h.loop.syncOnce(context.Background()); err != nil { // a pass that evicts p1
					t.Fatal(err)
				}
				h.rt.mu.Lock()
				close(h.rt.stopHang)
				h.rt.stopHang = nil
				h.rt.mu.Unlock()
				testutil.WaitFor(t, "p1 evicted", func() bool {
					var evicted []string
					_ = h.loop.do(context.Background(), func() { evicted = slices.Clone(h.ev.evicted) })
					return slices.Equal(evicted, []string{"p1"})
				})
				h.ev.pressure.Store(false)
			}},
		{name: "a stop by the kubelet meanwhile stays stopped", key: "p1/0", want: pod.StateStopped,
			during: func(t *testing.T, h *harness) {
				h.rt.mu.Lock()
				h.rt.sandboxes["s1"].State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
				h.rt.mu.Unlock()
				h.loop.SandboxStopped("s1")
			}},
		{name: "a stop by an event meanwhile stays stopped", key: "p1/0", want: pod.StateStopped,
			during: func(t *testing.T, h *harness) {
				_ = h.loop.do(context.Background(), func() { h.loop.applyEvent(sandboxEvent{id: "s1", notReady: true}) })
			}},
		{name: "a sandbox gone before the listing is dropped", key: "p1/0", want: "",
			before: func(t *testing.T, h *harness) {
				h.rt.mu.Lock()
				delete(h.rt.sandboxes, "s1")
				h.rt.mu.Unlock()
			}},
		{name: "a record stopped before the listing of a ready sandbox is ready again", key: "p1/0", want: pod.StateReady,
			before: func(t *testing.T, h *harness) { h.loop.SandboxStopped("s1") }},
	}
	for _, src := range []listing{fromHousekeeping, fromBrokenStream} {
		for _, tt := range tests {
			t.Run(src.String()+"/"+tt.name, func(t *testing.T) {
				h := newHarness(t, enforceRestored())
				h.rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
				if _, err := h.loop.Restore(context.Background()); err != nil {
					t.Fatal(err)
				}
				h.start(t)
				if tt.before != nil {
					tt.before(t, h)
				}
				taken, release := h.rt.holdLists()
				defer release()
				wait := h.startListing(t, src, taken)
				if tt.during != nil {
					tt.during(t, h)
				}
				release()
				wait()
				if got := h.states()[tt.key]; got != tt.want {
					t.Fatalf("%s after the listing: state %q, want %q", tt.key, got, tt.want)
				}
				flushed(t, h.loop)
				rec, ok := h.store.get(tt.key)
				if ok != (tt.want != "") || (ok && rec.State != tt.want) {
					t.Fatalf("%s's record = %+v (present %v), want state %q", tt.key, rec, ok, tt.want)
				}
			})
		}
	}
}

// TestSlowListDoesNotHoldTheLoop: while a listing of the runtime's
// sandboxes does not return (a runtime slow to answer), the loop evicts
// under pressure and admits a pod; the listing is still under way when
// both are done (on the loop, with its 5 s bound, they waited for it).
func TestSlowListDoesNotHoldTheLoop(t *testing.T) {
	for _, src := range []listing{fromHousekeeping, fromBrokenStream} {
		t.Run(src.String(), func(t *testing.T) {
			rt := newFakeRuntime()
			rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
			h := newRealHarness(t, withRuntime(rt), stopTimeout(time.Second))
			taken, release := rt.holdLists()
			defer release()
			switch src {
			case fromHousekeeping:
				h.sampler.set(512 << 20)
				if err := h.loop.syncOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				<-taken
			case fromBrokenStream:
				followEvents(t, h.loop, brokenStream{})
				<-taken
				h.sampler.set(512 << 20)
				if err := h.loop.syncOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			h.settled(t)
			if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict}) {
				t.Fatalf("decisions while the list is held = %v, want the eviction", got)
			}
			if _, err := h.run(newPod("crit", 0, pod.BestEffort, true)); err != nil {
				t.Fatalf("admission while the list is held: %v", err)
			}
			if rt.held() == 0 {
				t.Fatal("the listing returned before the eviction and the admission were done: they waited for it")
			}
			release()
			if st := h.podState("p1/0"); st != pod.StateStopped {
				t.Fatalf("evicted pod = %q, want stopped", st)
			}
		})
	}
}
