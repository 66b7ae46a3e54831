package guard

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// benchLoop is a running loop that knows n ready pods, sandboxes sb-0000
// and on; stop ends it.
func benchLoop(b *testing.B, n int) (l *Loop, rt *fakeRuntime, stop func()) {
	b.Helper()
	rt = newFakeRuntime()
	for i := range n {
		rt.addSandbox(fmt.Sprintf("sb-%04d", i), fmt.Sprintf("u%d", i), 0, true, time.Unix(int64(i), 0))
	}
	l = newHarness(b, withRuntime(rt), restored()).loop
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	return l, rt, func() {
		cancel()
		<-done
		if err := l.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoopEvent measures how long one runtime event holds the sync
// loop (applyEvent, handed in through the loop's queue) with 1000 pods
// known: an event for a pod already stopped (the lookup alone), and one
// that stops a ready pod (the record changed, its write queued, the view
// published; the pod is made ready again in the same step, unmeasurably).
// No listing: before, each such event listed the runtime's sandboxes on
// the loop. Events that say nothing of a sandbox (a container stopped in a
// ready sandbox) are read off the loop and never reach it.
func BenchmarkLoopEvent(b *testing.B) {
	for _, tc := range []struct {
		name  string
		ready bool // the pod is ready when the event comes
	}{{"already_stopped", false}, {"stops_a_ready_pod", true}} {
		b.Run(tc.name, func(b *testing.B) {
			l, _, stop := benchLoop(b, 1000)
			defer stop()
			ctx := context.Background()
			e := sandboxEvent{id: "sb-0500", notReady: true}
			if err := l.do(ctx, func() { l.applyEvent(e) }); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.do(ctx, func() {
					if tc.ready {
						l.pods["u500/0"].State = pod.StateReady
					}
					l.applyEvent(e)
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyListing measures the part of a listing of the runtime's
// sandboxes that still runs on the loop: applying a listing of 1000
// sandboxes that agrees with the 1000 records (the ListPodSandbox call is
// off the loop).
func BenchmarkApplyListing(b *testing.B) {
	l, rt, stop := benchLoop(b, 1000)
	defer stop()
	ctx := context.Background()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.do(ctx, func() { l.applyListing(l.gen, l.now(), sbs, nil) }); err != nil {
			b.Fatal(err)
		}
	}
}
