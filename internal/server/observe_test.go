package server

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

type observed struct {
	method string
	code   codes.Code
}

type recordingObserver struct {
	mu    sync.Mutex
	calls []observed
}

func (r *recordingObserver) Observe(method string, d time.Duration, err error) {
	if d < 0 {
		panic("negative duration")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, observed{method, status.Code(err)})
}

func (r *recordingObserver) get() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observed(nil), r.calls...)
}

// observedServer serves a fake runtime through a server with obs and
// returns a CRI client to it and the fake.
func observedServer(tb testing.TB, hooks Hooks, obs Observer) (runtimeapi.RuntimeServiceClient, *fakeruntime.Backend) {
	tb.Helper()
	dir := shortDir(tb)
	fake := fakeruntime.Start(tb, filepath.Join(dir, "rt.sock"))
	backend, err := runtimeproxy.New(runtimeproxy.Config{Endpoint: fake.Path}, testLog())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = backend.Close() })
	listen := filepath.Join(dir, "g", "cri-guard.sock")
	srv, err := New(Config{Listen: listen, Observer: obs}, backend, hooks, testLog())
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return runtimeapi.NewRuntimeServiceClient(dialCRI(tb, listen)), fake
}

func TestObserverSeesEveryCall(t *testing.T) {
	rec := &recordingObserver{}
	refuse := Hooks{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName: func(context.Context, []byte, UnaryNext) ([]byte, error) {
		return nil, status.Error(codes.ResourceExhausted, "Evicted: no")
	}}
	rt, fake := observedServer(t, refuse, rec)
	ctx := context.Background()

	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	fake.Runtime.InjectError("Status", errors.New("boom"))
	if _, err := rt.Status(ctx, &runtimeapi.StatusRequest{}); err == nil {
		t.Fatal("Status: want the injected error")
	}
	if _, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("a")}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	want := []observed{
		{runtimeapi.RuntimeService_Version_FullMethodName, codes.OK},
		{runtimeapi.RuntimeService_Status_FullMethodName, codes.Unknown},
		{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName, codes.ResourceExhausted},
	}
	got := rec.get()
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: observed %v, want %v", i, got[i], want[i])
		}
	}
}

type countingObserver struct{ n atomic.Int64 }

func (c *countingObserver) Observe(string, time.Duration, error) { c.n.Add(1) }

// BenchmarkVersionObserved is BenchmarkVersion with an Observer set: the
// difference is the cost of observing a pass-through call.
func BenchmarkVersionObserved(b *testing.B) {
	obs := &countingObserver{}
	rt, _ := observedServer(b, nil, obs)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	if obs.n.Load() == 0 {
		b.Fatal("observer not called")
	}
}
