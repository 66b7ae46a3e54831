package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

func newHubEnv(t *testing.T) (*env, *runtimeproxy.EventHub) {
	t.Helper()
	var hub *runtimeproxy.EventHub
	e := newEnvCfg(t, nil, func(cfg *Config, backend *runtimeproxy.Client) {
		hub = runtimeproxy.NewEventHub(backend, testLog())
		cfg.SubscribeEvents = func(ctx context.Context) EventSubscription { return hub.Subscribe(ctx) }
	})
	return e, hub
}

// TestSharedEventStream: every client stream (and cri-guard's own
// subscriber) gets every event from one runtime stream; the fake runtime,
// like containerd 1.7, would split events among separate streams.
func TestSharedEventStream(t *testing.T) {
	e, hub := newHubEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	own := hub.Subscribe(ctx) // the sync loop's subscription
	var clients []runtimeapi.RuntimeService_GetContainerEventsClient
	for range 2 {
		s, err := e.proxy.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, s)
	}
	want := []*runtimeapi.ContainerEventResponse{
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, CreatedAt: 1},
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, CreatedAt: 2},
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, CreatedAt: 3},
	}
	waitSubscribers(t, e, hub, 3)
	for _, ev := range want {
		e.fake.Events <- ev
	}
	for i, c := range clients {
		for j, w := range want {
			got, err := c.Recv()
			if err != nil {
				t.Fatalf("client %d event %d: %v", i, j, err)
			}
			if !proto.Equal(got, w) {
				t.Fatalf("client %d event %d = %v, want %v", i, j, got, w)
			}
		}
	}
	for j, w := range want {
		got, err := own.Recv()
		if err != nil || !proto.Equal(got, w) {
			t.Fatalf("own subscriber event %d = %v, %v; want %v", j, got, err, w)
		}
	}
	// a client going away does not end the others
	cancel()
	if _, err := clients[0].Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after cancel: %v, want Canceled", err)
	}
}

// TestSharedEventStreamRuntimeError: the runtime's status ends every
// subscriber's stream unchanged (containerd 1.6 answers Unimplemented).
func TestSharedEventStreamRuntimeError(t *testing.T) {
	e, _ := newHubEnv(t)
	e.fake.Stop()
	s, err := e.proxy.GetContainerEvents(ctxT(t), &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("runtime down: %v, want Unavailable", err)
	}
}

// waitSubscribers polls until the hub has n subscribers (client streams
// subscribe when the server handles the call, asynchronously).
func waitSubscribers(t *testing.T, _ *env, hub *runtimeproxy.EventHub, n int) {
	t.Helper()
	if !testutil.Within(testutil.Bound, func() bool { return hub.Subscribers() >= n }) {
		t.Fatalf("subscribers = %d, want %d", hub.Subscribers(), n)
	}
}
