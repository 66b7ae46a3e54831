package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// harness is a Loop over fakes (the defaults of newLoopSetup), not
// running until start unless running() says so.
type harness struct {
	loop  *Loop
	rt    *fakeRuntime
	store *memStore    // nil when an option gave the loop another Store
	ev    *ruleEvictor // nil when an option gave the loop another Evictor
}

func newHarness(tb testing.TB, opts ...loopOption) *harness {
	tb.Helper()
	s := newLoopSetup(opts)
	h := &harness{}
	h.rt, _ = s.o.Runtime.(*fakeRuntime)
	h.store, _ = s.o.Store.(*memStore)
	h.ev, _ = s.o.Evictor.(*ruleEvictor)
	h.loop = s.build(tb)
	return h
}

// start runs the loop until the test ends.
func (h *harness) start(tb testing.TB) {
	tb.Helper()
	runLoop(tb, h.loop)
}

// run is one RunPodSandbox through the loop, the runtime's answer proving
// o.
func (h *harness) run(p *pod.Pod, o runtimeproxy.RunOutcome) (string, error) {
	return h.loop.RunPodSandbox(context.Background(), p, func(context.Context) runtimeproxy.RunOutcome { return o })
}

// listing runs one housekeeping pass, waits for its listing of the
// runtime to be applied and for the writes it made.
func (h *harness) listing(t *testing.T) {
	t.Helper()
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	resynced(t, h.loop)
	flushed(t, h.loop)
}

func newPod(uid string, attempt uint32, qos pod.QOSClass, critical bool) *pod.Pod {
	return &pod.Pod{UID: uid, Name: "n-" + uid, Namespace: "default", Attempt: attempt, QOS: qos,
		Critical: critical, Evictable: !critical, Created: time.Unix(1000, 0)}
}

func TestAdmitSandbox(t *testing.T) {
	tests := []struct {
		name      string
		pressure  bool
		qos       pod.QOSClass
		critical  bool
		wantAdmit bool
	}{
		{"no pressure besteffort", false, pod.BestEffort, false, true},
		{"pressure besteffort", true, pod.BestEffort, false, false},
		{"pressure burstable", true, pod.Burstable, false, true},
		{"pressure critical besteffort", true, pod.BestEffort, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.start(t)
			h.ev.pressure.Store(tt.pressure)
			p := newPod("u1", 0, tt.qos, tt.critical)
			for range 2 { // the kubelet's retry of the same attempt gets the same decision
				forwarded := false
				_, err := h.loop.RunPodSandbox(context.Background(), p.Clone(), func(context.Context) runtimeproxy.RunOutcome {
					forwarded = true
					// the pending record is on disk before the runtime is asked
					if rec, ok := h.store.get(p.Key()); !ok || rec.State != pod.StatePending {
						t.Errorf("record when forwarding = %+v (present %v), want pending", rec, ok)
					}
					return runtimeproxy.NotCreated(status.Error(codes.Unavailable, "no runtime in this test"))
				})
				var refused *refusedError
				if gotAdmit := !errors.As(err, &refused); gotAdmit != tt.wantAdmit || forwarded != tt.wantAdmit {
					t.Fatalf("admitted = %v, forwarded = %v, want %v (%v)", gotAdmit, forwarded, tt.wantAdmit, err)
				}
			}
			flushed(t, h.loop)
			if _, ok := h.store.get(p.Key()); ok {
				t.Fatal("a record is left after the runtime refused the sandbox")
			}
		})
	}
}

// TestCheckpointFailureNeverRefuses: a state disk that cannot be written
// (full) refuses no pod, critical or not; the records are kept in memory
// and written once the disk takes them again.
func TestCheckpointFailureNeverRefuses(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.start(t)
	h.store.mu.Lock()
	h.store.err = errors.New("no space left on device")
	h.store.mu.Unlock()
	for _, p := range []*pod.Pod{newPod("crit", 0, pod.BestEffort, true), newPod("plain", 0, pod.Burstable, false)} {
		h.rt.addSandbox("sb-"+p.UID, p.UID, 0, true, time.Unix(1, 0)) // what containerd creates
		if id, err := h.run(p, runtimeproxy.Created("sb-"+p.UID)); err != nil || id != "sb-"+p.UID {
			t.Fatalf("%s with the disk full: %q, %v; want admitted and created", p.UID, id, err)
		}
	}
	if n := len(h.loop.Pods()); n != 2 {
		t.Fatalf("pods in memory = %d, want 2", n)
	}
	flushed(t, h.loop)
	if _, ok := h.store.get("crit/0"); ok {
		t.Fatal("a record was written to a full disk")
	}
	h.store.mu.Lock()
	h.store.err = nil
	h.store.mu.Unlock()
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	flushed(t, h.loop) // the probe: one record, written
	flushed(t, h.loop) // then the rest
	for _, key := range []string{"crit/0", "plain/0"} {
		if rec, ok := h.store.get(key); !ok || rec.State != pod.StateReady {
			t.Fatalf("record %s after the disk is back: %+v (present %v), want ready", key, rec, ok)
		}
	}
}

func TestSandboxLifecycle(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.start(t)
	p := newPod("u1", 0, pod.Burstable, false)
	if id, err := h.run(p, runtimeproxy.Created("sb1")); err != nil || id != "sb1" {
		t.Fatalf("RunPodSandbox = %q, %v", id, err)
	}
	flushed(t, h.loop)
	rec, ok := h.store.get(p.Key())
	if !ok || rec.SandboxID != "sb1" || rec.State != pod.StateReady {
		t.Fatalf("record after create = %+v, %v", rec, ok)
	}
	h.loop.SandboxStopped("sb1")
	flushed(t, h.loop)
	if rec, _ := h.store.get(p.Key()); rec.State != pod.StateStopped {
		t.Fatalf("record state after stop = %q", rec.State)
	}
	h.loop.SandboxRemoved("sb1")
	flushed(t, h.loop)
	if _, ok := h.store.get(p.Key()); ok {
		t.Fatal("record still there after remove")
	}
	if n := len(h.loop.Pods()); n != 0 {
		t.Fatalf("pods = %d, want 0", n)
	}
}

func TestSandboxFailed(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		outcome  func(error) runtimeproxy.RunOutcome
		wantKept bool
	}{
		{"definite failure drops the record", status.Error(codes.InvalidArgument, "bad"), runtimeproxy.NotCreated, false},
		{"deadline keeps it for reconciliation", status.Error(codes.DeadlineExceeded, "late"), runtimeproxy.MaybeCreated, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.start(t)
			p := newPod("u1", 0, pod.Burstable, false)
			if _, err := h.run(p, tt.outcome(tt.err)); err != tt.err {
				t.Fatalf("err = %v, want the runtime's %v unchanged", err, tt.err)
			}
			flushed(t, h.loop)
			if _, ok := h.store.get(p.Key()); ok != tt.wantKept {
				t.Fatalf("record kept = %v, want %v", ok, tt.wantKept)
			}
		})
	}
}

// TestSandboxReservedByLostCall: a retried RunPodSandbox refused because
// an earlier call (its answer lost with a killed cri-guard) holds the
// attempt's name settles the record with that sandbox, as the runtime
// shows it; when the runtime cannot show it, the pending record stays. The
// kubelet gets the runtime's error either way.
func TestSandboxReservedByLostCall(t *testing.T) {
	refusal := status.Error(codes.FailedPrecondition, `failed to reserve sandbox name "n-u1_default_u1_0": name "n-u1_default_u1_0" is reserved for "sb-lost"`)
	tests := []struct {
		name      string
		sandbox   func(rt *fakeRuntime) // what the runtime has
		wantID    string
		wantState pod.State
	}{
		{"left not ready", func(rt *fakeRuntime) { rt.addSandbox("sb-lost", "u1", 0, false, time.Unix(900, 0)) }, "sb-lost", pod.StateStopped},
		{"ready", func(rt *fakeRuntime) { rt.addSandbox("sb-lost", "u1", 0, true, time.Unix(900, 0)) }, "sb-lost", pod.StateReady},
		{"not shown yet", func(*fakeRuntime) {}, "", pod.StatePending},
		{"another attempt's", func(rt *fakeRuntime) { rt.addSandbox("sb-lost", "u1", 1, true, time.Unix(900, 0)) }, "", pod.StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			tt.sandbox(h.rt)
			h.start(t)
			p := newPod("u1", 0, pod.BestEffort, false)
			id, err := h.loop.RunPodSandbox(context.Background(), p, func(context.Context) runtimeproxy.RunOutcome {
				return runtimeproxy.Reserved("sb-lost", refusal)
			})
			if err != refusal || id != "" {
				t.Fatalf("RunPodSandbox = %q, %v; want the runtime's refusal unchanged", id, err)
			}
			flushed(t, h.loop)
			rec, ok := h.store.get(p.Key())
			if !ok || rec.SandboxID != tt.wantID || rec.State != tt.wantState {
				t.Fatalf("record = %+v (found %v), want sandbox %q in state %s", rec, ok, tt.wantID, tt.wantState)
			}
			ready := slices.ContainsFunc(h.loop.Pods(), func(q *pod.Pod) bool { return q.Key() == p.Key() && q.State == pod.StateReady })
			if ready != (tt.wantState == pod.StateReady) {
				t.Errorf("pod ready in the loop's view = %v, want %v", ready, tt.wantState == pod.StateReady)
			}
		})
	}
}

// TestListingSettlesAmbiguousFailure: a RunPodSandbox whose answer was
// lost (deadline) keeps its pending record; when the kubelet does not
// retry that attempt (it saw the sandbox in its own listing), cri-guard's
// next listing completes the record, so a ready pod is rankable without
// a restart.
func TestListingSettlesAmbiguousFailure(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.start(t)
	p := newPod("u1", 0, pod.BestEffort, false)
	late := status.Error(codes.DeadlineExceeded, "late")
	if _, err := h.run(p, runtimeproxy.MaybeCreated(late)); err != late {
		t.Fatalf("err = %v", err)
	}
	h.rt.addSandbox("sb-late", "u1", 0, true, time.Unix(1000, 0))
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	resynced(t, h.loop)
	flushed(t, h.loop)
	if rec, ok := h.store.get(p.Key()); !ok || rec.SandboxID != "sb-late" || rec.State != pod.StateReady {
		t.Fatalf("record = %+v (found %v), want sb-late ready", rec, ok)
	}
	if ps := h.loop.Pods(); len(ps) != 1 || ps[0].State != pod.StateReady || ps[0].SandboxID != "sb-late" {
		t.Fatalf("pods = %v, want the one ready", ps)
	}
}

// TestUnsettledGrace: a pending record whose call lost its answer, and
// whose sandbox never shows, is kept by a listing that starts within
// pendingGrace and dropped by the first that starts after it; a retry in
// flight keeps it past the grace, and a retry that fails for certain
// leaves the grace to decide (the lost call's sandbox may still appear).
func TestUnsettledGrace(t *testing.T) {
	h := newHarness(t, enforceRestored())
	t0 := time.Unix(70_000, 0)
	clock := h.clockAt(t0)
	h.start(t)
	kept := func(when string) {
		t.Helper()
		if rec, ok := h.store.get("u1/0"); !ok || rec.State != pod.StatePending {
			t.Fatalf("%s: record = %+v (found %v), want kept pending", when, rec, ok)
		}
	}
	p := newPod("u1", 0, pod.BestEffort, false)
	late := status.Error(codes.DeadlineExceeded, "late")
	if _, err := h.run(p, runtimeproxy.MaybeCreated(late)); err != late {
		t.Fatalf("err = %v", err)
	}
	clock.set(t0.Add(pendingGrace - time.Second))
	h.listing(t)
	kept("a listing within the grace")

	// a retry in flight past the grace
	clock.set(t0.Add(pendingGrace + time.Second))
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := h.loop.RunPodSandbox(context.Background(), newPod("u1", 0, pod.BestEffort, false), func(context.Context) runtimeproxy.RunOutcome {
			<-release
			return runtimeproxy.NotCreated(status.Error(codes.InvalidArgument, "no runtime handler"))
		})
		done <- err
	}()
	testutil.WaitFor(t, "the retry of u1/0 in flight", func() bool {
		var n int
		_ = h.loop.do(context.Background(), func() { n = h.loop.calls["u1/0"] })
		return n == 1
	})
	h.listing(t)
	kept("a listing past the grace while a retry is in flight")
	close(release)
	if err := <-done; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("retry: %v", err)
	}
	flushed(t, h.loop)
	kept("the retry failed for certain (the lost call's sandbox may still appear)")
	h.listing(t)
	if rec, ok := h.store.get("u1/0"); ok {
		t.Fatalf("record past the grace with no call in flight kept: %+v", rec)
	}
	if n := len(h.loop.Pods()); n != 0 {
		t.Fatalf("pods = %d, want 0", n)
	}
}

func TestHousekeepingEvictsOneAtATime(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	h.rt.addSandbox("s2", "p2", 0, true, time.Unix(2, 0))
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	h.ev.pressure.Store(true)
	ctx := context.Background()
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "StopPodSandbox s1", func() bool { return slices.Contains(h.rt.Calls(), "StopPodSandbox s1") })
	calls := h.rt.Calls()
	// the 1 s grace is raised to the kubelet's 2 s minimum for containers
	if i, j := slices.Index(calls, "StopContainer c-s1 2"), slices.Index(calls, "StopPodSandbox s1"); i < 0 || i > j {
		t.Fatalf("want StopContainer with the grace period before StopPodSandbox: %v", calls)
	}
	// the next pass may stop the second pod only after the first is done
	testutil.WaitFor(t, "a pass to stop s2", func() bool {
		_ = h.loop.syncOnce(ctx)
		return slices.Contains(h.rt.Calls(), "StopPodSandbox s2")
	})
	if got := strings.Count(strings.Join(h.rt.Calls(), ","), "StopPodSandbox"); got != 2 {
		t.Fatalf("StopPodSandbox calls = %d, want 2", got)
	}
	flushed(t, h.loop)
	if rec, ok := h.store.get("p1/0"); !ok || rec.Pod.EvictedAt.IsZero() || rec.State != pod.StateStopped {
		t.Fatalf("checkpoint of the evicted pod = %+v (found %v), want stopped with EvictedAt", rec, ok)
	}
}

func TestResyncDropsVanishedSandbox(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	h.rt.mu.Lock()
	delete(h.rt.sandboxes, "s1")
	h.rt.mu.Unlock()
	if err := h.loop.syncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	resynced(t, h.loop)
	if n := len(h.loop.Pods()); n != 0 {
		t.Fatalf("pods = %d after the sandbox vanished, want 0", n)
	}
	flushed(t, h.loop)
	if _, ok := h.store.get("p1/0"); ok {
		t.Fatal("record of a vanished sandbox kept")
	}
}

func TestSandboxRemovedByTruncatedID(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.start(t)
	for i, id := range []string{"abcdef0123", "abcdff0123"} {
		p := newPod(fmt.Sprintf("u%d", i), 0, pod.Burstable, false)
		if _, err := h.run(p, runtimeproxy.Created(id)); err != nil {
			t.Fatal(err)
		}
	}
	h.loop.SandboxRemoved("abcd") // ambiguous: nothing removed
	if n := len(h.loop.Pods()); n != 2 {
		t.Fatalf("pods = %d after an ambiguous prefix, want 2", n)
	}
	h.loop.SandboxRemoved("abcde") // crictl's truncated id
	flushed(t, h.loop)
	if _, ok := h.store.get("u0/0"); ok {
		t.Fatal("record of u0 kept after RemovePodSandbox with a unique prefix")
	}
	if _, ok := h.store.get("u1/0"); !ok {
		t.Fatal("record of u1 removed")
	}
}

func TestTriggerFollowUps(t *testing.T) {
	h := newHarness(t, enforceRestored()) // housekeeping every hour: only the trigger acts
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	syncs := func() int {
		var n int
		if err := h.loop.do(context.Background(), func() { n = h.ev.syncs }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	h.loop.Trigger()
	// the trigger's own pass, then follow-ups every 100ms
	testutil.WaitFor(t, "3 listings", func() bool { return syncs() >= 3 })
}

// TestFollowUpResync: follow-up passes after a trigger evaluate every time
// but list the runtime's sandboxes at most once a second; other passes
// always list (each listing is waited for before the next step).
func TestFollowUpResync(t *testing.T) {
	h := newHarness(t, enforceRestored())
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(5000, 0)
	h.loop.now = func() time.Time { return clock }
	h.start(t)
	lists := func() int {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		return h.rt.lists
	}
	ctx := context.Background()
	steps := []struct {
		why       pass
		advance   time.Duration
		wantLists int // ListPodSandbox calls after the step, counted from the first
	}{
		{passTrigger, 0, 1},
		{passFollowUp, 100 * time.Millisecond, 1},
		{passFollowUp, 100 * time.Millisecond, 1},
		{passTick, 100 * time.Millisecond, 2},
		{passFollowUp, 900 * time.Millisecond, 2},
		{passFollowUp, 100 * time.Millisecond, 3},
		{passManual, 0, 4},
	}
	var syncs int
	if err := h.loop.do(ctx, func() { syncs = h.ev.syncs }); err != nil {
		t.Fatal(err)
	}
	base := lists()
	for i, s := range steps {
		if err := h.loop.do(ctx, func() {
			clock = clock.Add(s.advance)
			h.loop.housekeeping(ctx, s.why)
		}); err != nil {
			t.Fatal(err)
		}
		resynced(t, h.loop)
		if got := lists() - base; got != s.wantLists {
			t.Fatalf("step %d (%s): %d sandbox lists, want %d", i, s.why, got, s.wantLists)
		}
	}
	if err := h.loop.do(ctx, func() { syncs = h.ev.syncs - syncs }); err != nil {
		t.Fatal(err)
	}
	if got := syncs; got != len(steps) {
		t.Fatalf("%d eviction passes, want one per step (%d)", got, len(steps))
	}
}

// TestBusyLoopStillSettles: when the loop is busy past the bound a CRI call
// waits for it, the runtime's answer is still recorded once the loop is free
// (it was dropped, and the created sandbox's pod stayed pending, unranked,
// never evicted: seen in the UML guest, where a loop was busy for 10 s).
func TestBusyLoopStillSettles(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.loop.cfg.AfterRuntimeTimeout = 50 * time.Millisecond
	h.start(t)
	release := make(chan struct{})
	p := newPod("u1", 0, pod.BestEffort, false)
	_, err := h.loop.RunPodSandbox(context.Background(), p, func(context.Context) runtimeproxy.RunOutcome {
		// the loop gets busy while the runtime creates the sandbox
		go func() { _ = h.loop.do(context.Background(), func() { <-release }) }()
		time.Sleep(20 * time.Millisecond)
		return runtimeproxy.Created("sb1")
	})
	if err != nil {
		t.Fatalf("RunPodSandbox failed after the runtime succeeded: %v", err)
	}
	close(release)
	var st pod.State
	var id string
	if !testutil.Within(testutil.Bound, func() bool {
		_ = h.loop.do(context.Background(), func() {
			if q, ok := h.loop.pods[p.Key()]; ok {
				st, id = q.State, q.SandboxID
			}
		})
		return st == pod.StateReady && id == "sb1"
	}) {
		t.Fatalf("pod after a busy loop: state %q sandbox %q, want ready sb1", st, id)
	}
}
