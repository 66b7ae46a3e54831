//go:build integration

package host

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestContainerEventsStreamShared runs against containerd 1.7 (the socket
// of `scripts/rt.sh up-events` in CRI_GUARD_RT_EVENTS), which implements
// the method.
func TestContainerEventsStreamShared(t *testing.T) {
	socket := os.Getenv("CRI_GUARD_RT_EVENTS")
	if socket == "" {
		t.Skip("CRI_GUARD_RT_EVENTS is not set: run `scripts/rt.sh up-events` (containerd 1.7) for the event stream test")
	}
	testContainerEventsImplemented(t, socket)
}

// TestContainerEventsStream opens GetContainerEvents through cri-guard, then
// creates a sandbox, and expects the stream to deliver its events. A runtime
// that does not implement the method (containerd 1.6) must give the same
// status through cri-guard as directly.
func TestContainerEventsStream(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	rt, _ := harness.DialCRI(t, g.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	events := make(chan *runtimeapi.ContainerEventResponse, 64)
	streamErr := make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				streamErr <- err
				return
			}
			events <- ev
		}
	}()
	// No header to wait for: containerd 2.x, like 1.7, sends none before the
	// first event. Give the server time to subscribe (or to refuse).
	select {
	case err := <-streamErr:
		if status.Code(err) == codes.Unimplemented {
			direct, _ := harness.DialCRI(t, env.Containerd)
			ds, derr := direct.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
			if derr == nil {
				_, derr = ds.Recv()
			}
			if status.Code(derr) != codes.Unimplemented {
				t.Fatalf("through cri-guard GetContainerEvents is Unimplemented (%v) but directly: %v", err, derr)
			}
			t.Logf("containerd here does not implement GetContainerEvents (%v); cri-guard passed the same status through", err)
			return
		}
		t.Fatalf("GetContainerEvents stream ended before any sandbox was made: %v", err)
	case <-time.After(200 * time.Millisecond):
	}

	uid := harness.NewUID(t)
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("events-"+uid[:6], uid)})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := run.PodSandboxId
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	seen := map[runtimeapi.ContainerEventType]bool{}
	timeout := time.After(30 * time.Second)
	for !seen[runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT] || !seen[runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT] {
		select {
		case ev := <-events:
			if ev.ContainerId == id || ev.GetPodSandboxStatus().GetId() == id {
				t.Logf("event %s for sandbox %s", ev.ContainerEventType, id)
				seen[ev.ContainerEventType] = true
			}
		case err := <-streamErr:
			if errors.Is(err, io.EOF) {
				t.Fatalf("event stream closed; saw %v", seen)
			}
			t.Fatalf("event stream: %v; saw %v", err, seen)
		case <-timeout:
			t.Fatalf("no created+deleted events for sandbox %s within 30s; saw %v", id, seen)
		}
	}
}
