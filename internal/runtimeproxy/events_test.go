package runtimeproxy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

func newHub(t *testing.T) (*EventHub, *fakeruntime.Backend) {
	t.Helper()
	fake := fakeruntime.Start(t, filepath.Join(t.TempDir(), "rt.sock"))
	c, err := New(Config{Endpoint: fake.Path}, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return NewEventHub(c, logrus.NewEntry(logrus.New())), fake
}

// TestSubscribeCancelled: a subscription whose context is already done ends
// at once with Canceled and leaves no subscriber behind.
func TestSubscribeCancelled(t *testing.T) {
	hub, _ := newHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := hub.Subscribe(ctx)
	select {
	case _, ok := <-s.Events():
		if ok {
			t.Fatal("event on a cancelled subscription")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled subscription not ended")
	}
	if status.Code(s.Err()) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", s.Err())
	}
	s.Close() // idempotent
}

// TestHubBroadcast: every subscriber gets every event of one runtime stream.
func TestHubBroadcast(t *testing.T) {
	hub, fake := newHub(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := hub.Subscribe(ctx), hub.Subscribe(ctx)
	for i := range 3 {
		fake.Events <- &runtimeapi.ContainerEventResponse{ContainerId: "c", CreatedAt: int64(i)}
	}
	for _, s := range []*Subscription{a, b} {
		for i := range 3 {
			ev, err := s.Recv()
			if err != nil || ev.CreatedAt != int64(i) {
				t.Fatalf("event %d = %v, %v", i, ev, err)
			}
		}
	}
	if n := hub.Subscribers(); n != 2 {
		t.Fatalf("subscribers = %d, want 2", n)
	}
	a.Close()
	if n := hub.Subscribers(); n != 1 {
		t.Fatalf("subscribers after Close = %d, want 1", n)
	}
}

// TestHubRuntimeStopIsUnavailable: an event arrives decoded; when the runtime
// goes away the subscription ends with Unavailable.
func TestHubRuntimeStopIsUnavailable(t *testing.T) {
	hub, fake := newHub(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := hub.Subscribe(ctx)
	want := &runtimeapi.ContainerEventResponse{ContainerId: "c9", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT}
	fake.Events <- want
	got, err := s.Recv()
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("Recv = %v, %v", got, err)
	}
	fake.Stop()
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("after runtime stop: %v, want Unavailable", err)
	}
}
