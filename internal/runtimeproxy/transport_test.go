package runtimeproxy

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestErrTransport: only gRPC's own Unavailable (no runtime to answer)
// matches ErrTransport; an Unavailable the runtime sent does not, and the
// status code reaches the caller either way.
func TestErrTransport(t *testing.T) {
	fake, c := newTestClient(t)
	ctx := testCtx(t)
	// connected first: gRPC publishes a new connection's READY state a
	// moment after the first call may already have gone through it
	if err := c.Invoke(ctx, runtimeapi.RuntimeService_Version_FullMethodName, NewFrame(nil), new(Frame)); err != nil {
		t.Fatal(err)
	}
	for c.State() != connectivity.Ready {
		if !c.conn.WaitForStateChange(ctx, c.State()) {
			t.Fatal("not connected")
		}
	}
	fake.Runtime.InjectError("Version", status.Error(codes.Unavailable, "busy"))
	err := c.Invoke(ctx, runtimeapi.RuntimeService_Version_FullMethodName, NewFrame(nil), new(Frame))
	if status.Code(err) != codes.Unavailable || errors.Is(err, ErrTransport) {
		t.Errorf("runtime's Unavailable: err = %v, ErrTransport %v", err, errors.Is(err, ErrTransport))
	}
	fake.Stop()
	err = c.Invoke(ctx, runtimeapi.RuntimeService_Version_FullMethodName, NewFrame(nil), new(Frame))
	if status.Code(err) != codes.Unavailable || !errors.Is(err, ErrTransport) {
		t.Errorf("no runtime: err = %v, ErrTransport %v", err, errors.Is(err, ErrTransport))
	}
}
