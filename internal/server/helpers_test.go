package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

// env is a fake runtime, the runtime client, a cri-guard server in front and
// CRI clients to both.
type env struct {
	fake    *fakeruntime.Backend
	backend *runtimeproxy.Client
	srv     *Server
	// proxy and direct are CRI clients through cri-guard and straight to the fake.
	proxy, direct           runtimeapi.RuntimeServiceClient
	proxyImage, directImage runtimeapi.ImageServiceClient
	proxyConn, directConn   *grpc.ClientConn
	dir                     string
}

func shortDir(t testing.TB) string {
	t.Helper()
	// unix socket paths are limited to 108 bytes: t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "cg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func testLog() *logrus.Entry {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l.WithField("component", "server")
}

func dialCRI(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(runtimeproxy.DefaultMaxMsgSize), grpc.MaxCallSendMsgSize(runtimeproxy.DefaultMaxMsgSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// serveGuard serves a cri-guard server on listen in front of the runtime at
// endpoint (a runtime connection of its own), configured by hooks and
// adjust, until the test ends.
func serveGuard(t testing.TB, endpoint, listen string, hooks Hooks, adjust func(cfg *Config, backend *runtimeproxy.Client)) (*Server, *runtimeproxy.Client) {
	t.Helper()
	backend, err := runtimeproxy.New(runtimeproxy.Config{Endpoint: endpoint}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	cfg := Config{Listen: listen}
	if adjust != nil {
		adjust(&cfg, backend)
	}
	srv, err := New(cfg, backend, hooks, testLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, backend
}

func newEnv(t testing.TB, hooks Hooks) *env {
	t.Helper()
	return newEnvCfg(t, hooks, nil)
}

// newEnvCfg is newEnv with a chance to adjust the server's Config.
func newEnvCfg(t testing.TB, hooks Hooks, adjust func(cfg *Config, backend *runtimeproxy.Client)) *env {
	t.Helper()
	dir := shortDir(t)
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"),
		grpc.MaxRecvMsgSize(runtimeproxy.DefaultMaxMsgSize), grpc.MaxSendMsgSize(runtimeproxy.DefaultMaxMsgSize))
	srv, backend := serveGuard(t, fake.Path, filepath.Join(dir, "guard", "cri-guard.sock"), hooks, adjust)
	pc := dialCRI(t, filepath.Join(dir, "guard", "cri-guard.sock"))
	dc := dialCRI(t, fake.Path)
	return &env{
		fake: fake, backend: backend, srv: srv, dir: dir,
		proxy: runtimeapi.NewRuntimeServiceClient(pc), direct: runtimeapi.NewRuntimeServiceClient(dc),
		proxyImage: runtimeapi.NewImageServiceClient(pc), directImage: runtimeapi.NewImageServiceClient(dc),
		proxyConn: pc, directConn: dc,
	}
}

func sandboxConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Labels:   map[string]string{"app": name},
	}
}
