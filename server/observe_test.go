package server

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/runtimeproxy"
	"github.com/cri-guard/cri-guard/runtimeproxy/fakeruntime"
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

func TestObserverSeesEveryCall(t *testing.T) {
	dir := shortDir(t)
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	backend, err := runtimeproxy.New(runtimeproxy.Config{Endpoint: fake.Path}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	rec := &recordingObserver{}
	refuse := Hooks{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName: func(context.Context, []byte, UnaryNext) ([]byte, error) {
		return nil, status.Error(codes.ResourceExhausted, "Evicted: no")
	}}
	listen := filepath.Join(dir, "g", "cri-guard.sock")
	srv, err := New(Config{Listen: listen, Observer: rec}, backend, refuse, testLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	rt := runtimeapi.NewRuntimeServiceClient(dialCRI(t, listen))

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
