package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// guardTimeout only keeps a broken test from hanging: nothing here waits
// for it on a working loop.
const guardTimeout = 10 * time.Second

// TestRetryRestoreOffLoop: while cri-guard serves degraded, a retried
// restore whose runtime answers late (its listing held, or a sandbox's
// status) leaves the loop deciding meanwhile: a pod is admitted and
// created, a housekeeping pass runs, a removal is recorded. Once the
// runtime answers, the restore brings back the pod from before the
// restart and keeps what the loop recorded meanwhile: the pod created
// during the read stays ready, the one removed during it stays gone.
func TestRetryRestoreOffLoop(t *testing.T) {
	tests := []struct {
		name string
		hold func(f *fakeRuntime) (taken <-chan struct{}, release func())
	}{
		{"listing held", (*fakeRuntime).holdLists},
		{"sandbox status held", (*fakeRuntime).holdStatuses},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			// from before the restart: a record and its running sandbox
			h.rt.addSandbox("s-old", "old", 0, true, time.Unix(1, 0))
			old := newPod("old", 0, pod.Burstable, false)
			old.State, old.SandboxID = pod.StateReady, "s-old"
			if err := h.store.Put(checkpoint.Record{Pod: *old, State: old.State, SandboxID: old.SandboxID}); err != nil {
				t.Fatal(err)
			}
			h.loop.ServeDegraded(errors.New("sandbox list larger than max"))
			h.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
			defer cancel()

			// served degraded: a pod created before the retry, removed
			// while the retry reads
			gone := newPod("gone", 0, pod.Burstable, false)
			if _, err := h.loop.RunPodSandbox(ctx, gone, func(context.Context) runtimeproxy.RunOutcome {
				h.rt.addSandbox("s-gone", "gone", 0, true, time.Unix(2, 0))
				return runtimeproxy.Created("s-gone")
			}); err != nil {
				t.Fatal(err)
			}
			flushed(t, h.loop)

			taken, release := tt.hold(h.rt)
			defer release()
			type result struct {
				rep RestoreReport
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := h.loop.RetryRestore(context.Background())
				done <- result{rep, err}
			}()
			select {
			case <-taken:
			case <-ctx.Done():
				t.Fatal("the retried restore never asked the runtime")
			}

			// the loop decides while the retry waits on the runtime
			fresh := newPod("new", 0, pod.Burstable, false)
			if _, err := h.loop.RunPodSandbox(ctx, fresh, func(context.Context) runtimeproxy.RunOutcome {
				h.rt.addSandbox("s-new", "new", 0, true, time.Unix(3, 0))
				return runtimeproxy.Created("s-new")
			}); err != nil {
				t.Fatalf("RunPodSandbox while a restore retry waits on the runtime: %v", err)
			}
			if err := h.loop.syncOnce(ctx); err != nil {
				t.Fatalf("housekeeping while a restore retry waits on the runtime: %v", err)
			}
			h.rt.mu.Lock()
			delete(h.rt.sandboxes, "s-gone")
			delete(h.rt.statuses, "s-gone")
			h.rt.mu.Unlock()
			if err := h.loop.do(ctx, func() { h.loop.removeSandbox("s-gone") }); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				t.Fatalf("the retry finished while the runtime was held: %+v, %v", r.rep, r.err)
			default:
			}

			release()
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("the retried restore did not finish once the runtime answered")
			}
			if r.err != nil {
				t.Fatalf("retried restore: %v", r.err)
			}
			if err := h.loop.Degraded(); err != nil {
				t.Errorf("still degraded after the restore: %v", err)
			}
			flushed(t, h.loop)
			got := map[string]string{}
			for _, p := range h.loop.Pods() {
				got[p.Key()] = string(p.State) + " " + p.SandboxID
			}
			want := map[string]string{"old/0": "ready s-old", "new/0": "ready s-new"}
			if len(got) != len(want) || got["old/0"] != want["old/0"] || got["new/0"] != want["new/0"] {
				t.Errorf("pods after the retried restore: %v, want %v", got, want)
			}
			if _, ok := h.store.get("gone/0"); ok {
				t.Error("the record of the pod removed while the restore read came back")
			}
		})
	}
}

// TestRetryRestoreOneAtATime: a second retry while one reads is refused,
// and once the first is applied a retry runs again.
func TestRetryRestoreOneAtATime(t *testing.T) {
	h := newHarness(t, enforceRestored())
	h.loop.ServeDegraded(errors.New("runtime down"))
	h.start(t)
	taken, release := h.rt.holdLists()
	defer release()
	done := make(chan error, 1)
	go func() { _, err := h.loop.RetryRestore(context.Background()); done <- err }()
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	select {
	case <-taken:
	case <-ctx.Done():
		t.Fatal("the retried restore never listed the runtime")
	}
	if _, err := h.loop.RetryRestore(ctx); !errors.Is(err, errRestoreUnderWay) {
		t.Fatalf("second retry: %v, want %v", err, errRestoreUnderWay)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := h.loop.RetryRestore(ctx); err != nil {
		t.Fatalf("a retry after the first finished: %v", err)
	}
}
