package server

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// echoRuntime answers Version with the header and trailer the request's
// x-echo metadata names (none without it), and fails it when x-fail is set.
type echoRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (echoRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-echo"); len(v) > 0 {
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-hdr", v[0])); err != nil {
			return nil, err
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trl", v[0])); err != nil {
			return nil, err
		}
	}
	if len(md.Get("x-fail")) > 0 {
		return nil, status.Error(codes.NotFound, "asked to fail")
	}
	return &runtimeapi.VersionResponse{RuntimeName: "echo"}, nil
}

// TestHeaderAndTrailerPassThrough: the runtime's own header and trailer
// reach the kubelet on the one-frame fast path, on success and on error,
// and a call never gets those of an earlier one (the fast path reuses its
// buffers and call options from call to call).
func TestHeaderAndTrailerPassThrough(t *testing.T) {
	dir := shortDir(t)
	rtSock := filepath.Join(dir, "rt.sock")
	l, err := net.Listen("unix", rtSock)
	if err != nil {
		t.Fatal(err)
	}
	rtSrv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(rtSrv, echoRuntime{})
	go func() { _ = rtSrv.Serve(l) }()
	t.Cleanup(rtSrv.Stop)
	listen := filepath.Join(dir, "guard", "cri-guard.sock")
	serveGuard(t, rtSock, listen, nil, func(cfg *Config, _ *runtimeproxy.Client) { cfg.StreamWorkers = 1 })
	rt := runtimeapi.NewRuntimeServiceClient(dialCRI(t, listen))

	call := func(kv ...string) (hdr, trl metadata.MD, err error) {
		cctx := metadata.AppendToOutgoingContext(ctxT(t), kv...)
		_, err = rt.Version(cctx, &runtimeapi.VersionRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
		return hdr, trl, err
	}
	for i := range 5 {
		hdr, trl, err := call("x-echo", "v")
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if got := hdr.Get("x-hdr"); len(got) != 1 || got[0] != "v" {
			t.Errorf("round %d: header x-hdr = %v, want [v]", i, got)
		}
		if got := trl.Get("x-trl"); len(got) != 1 || got[0] != "v" {
			t.Errorf("round %d: trailer x-trl = %v, want [v]", i, got)
		}
		hdr, trl, err = call("x-echo", "e", "x-fail", "1")
		if status.Code(err) != codes.NotFound {
			t.Fatalf("round %d: failing call: %v, want NotFound", i, err)
		}
		if got := trl.Get("x-trl"); len(got) != 1 || got[0] != "e" {
			t.Errorf("round %d: failed call's trailer x-trl = %v, want [e]", i, got)
		}
		hdr, trl, err = call()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if got := hdr.Get("x-hdr"); len(got) != 0 {
			t.Errorf("round %d: header x-hdr = %v on a call whose runtime sent none", i, got)
		}
		if got := trl.Get("x-trl"); len(got) != 0 {
			t.Errorf("round %d: trailer x-trl = %v on a call whose runtime sent none", i, got)
		}
	}
	// A call that never reaches the runtime has no header or trailer of
	// its own: it must not carry the last answered call's.
	for range 5 {
		if _, _, err := call("x-echo", "last"); err != nil {
			t.Fatal(err)
		}
	}
	rtSrv.Stop()
	for i := range 5 {
		_, trl, err := call()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d with the runtime gone: %v, want Unavailable", i, err)
		}
		if got := trl.Get("x-trl"); len(got) != 0 {
			t.Errorf("call %d with the runtime gone: trailer x-trl = %v, an earlier call's", i, got)
		}
	}
}
