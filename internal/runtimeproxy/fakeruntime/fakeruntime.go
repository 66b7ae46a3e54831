// Package fakeruntime serves the cri-api fakes (FakeRuntimeService,
// FakeImageService from k8s.io/cri-api/pkg/apis/testing) over a real gRPC
// server on a unix socket, so that tests of runtimeproxy and server (and
// anything else talking CRI) run against a wire-level backend. It records the
// metadata and deadline of every call and can delay or stream events.
//
// It is test support only and must not import other cri-guard packages.
package fakeruntime

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// Call is what the backend saw of one call.
type Call struct {
	// Method is the full method name, e.g. /runtime.v1.RuntimeService/Version.
	Method string
	// MD is the incoming metadata.
	MD metadata.MD
	// Deadline is the call's deadline; zero when it had none.
	Deadline time.Time
}

// Backend is a running fake runtime.
type Backend struct {
	// Runtime and Image are the cri-api fakes behind the server; tests set
	// fake objects and inject errors on them directly.
	Runtime *apitest.FakeRuntimeService
	Image   *apitest.FakeImageService
	// Events feeds GetContainerEvents streams: every open stream takes events
	// from it.
	Events chan *runtimeapi.ContainerEventResponse
	// Path is the unix socket path.
	Path string

	mu     sync.Mutex
	calls  []Call
	delays map[string]time.Duration
	srv    *grpc.Server
	opts   []grpc.ServerOption
}

// Start serves new fakes on a unix socket at path until the test ends.
func Start(t testing.TB, path string, opts ...grpc.ServerOption) *Backend {
	t.Helper()
	b := &Backend{
		Runtime: apitest.NewFakeRuntimeService(),
		Image:   apitest.NewFakeImageService(),
		Events:  make(chan *runtimeapi.ContainerEventResponse, 16),
		Path:    path,
		delays:  map[string]time.Duration{},
		opts:    opts,
	}
	b.Restart(t)
	t.Cleanup(b.Stop)
	return b
}

// Restart starts serving again (after Stop) with the same fakes and socket.
func (b *Backend) Restart(t testing.TB) {
	t.Helper()
	l, err := net.Listen("unix", b.Path)
	if err != nil {
		t.Fatalf("listen fake runtime %q: %v", b.Path, err)
	}
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(b.unaryRecord),
		grpc.ChainStreamInterceptor(b.streamRecord),
	}, b.opts...)
	srv := grpc.NewServer(opts...)
	runtimeapi.RegisterRuntimeServiceServer(srv, &runtimeServer{b: b})
	runtimeapi.RegisterImageServiceServer(srv, &imageServer{f: b.Image})
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// Stop stops serving (hard: open calls fail) and removes the socket. It is
// idempotent.
func (b *Backend) Stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Delay makes calls to method wait d (or until their context ends) before
// being served.
func (b *Backend) Delay(method string, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delays[method] = d
}

// Calls returns the calls seen so far.
func (b *Backend) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Call(nil), b.calls...)
}

func (b *Backend) record(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	dl, _ := ctx.Deadline()
	b.mu.Lock()
	b.calls = append(b.calls, Call{Method: method, MD: md.Copy(), Deadline: dl})
	d := b.delays[method]
	b.mu.Unlock()
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (b *Backend) unaryRecord(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := b.record(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (b *Backend) streamRecord(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := b.record(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}
