//go:build integration

package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// sandboxEvents are the events containerd sends for a sandbox that is run,
// stopped and removed.
var sandboxEvents = []runtimeapi.ContainerEventType{
	runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
	runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
	runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
	runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
}

// eventsRuntime is the containerd that `scripts/rt.sh up-events` started
// (CRI_GUARD_RT_EVENTS is its socket): one that implements GetContainerEvents.
// It has no CNI, so its pods use the host network.
func eventsRuntime(t *testing.T, socket string) (harness.Runtime, string) {
	t.Helper()
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("CRI_GUARD_RT_EVENTS=%s is not a socket: run `scripts/rt.sh up-events`", socket)
	}
	if guardBin == "" {
		t.Fatal("integration: cri-guard binary was not built")
	}
	cgroup := os.Getenv("CRI_GUARD_RT_EVENTS_POD_CGROUP")
	if cgroup == "" {
		cgroup = "/cri-guard-rt-events-pods"
	}
	return harness.Runtime{Dir: filepath.Dir(socket), Containerd: socket}, cgroup
}

// hostPodConfig is podConfig on the host network (so without a hostname of its
// own) with a cgroup parent under cgroupRoot.
func hostPodConfig(name, uid, cgroupRoot string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name, uid)
	cfg.Hostname = ""
	cfg.Linux.CgroupParent = cgroupRoot + "/pod" + uid
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}
	return cfg
}

// eventStream is an open GetContainerEvents stream read by a goroutine.
type eventStream struct {
	events chan *runtimeapi.ContainerEventResponse
	errc   chan error
}

func openEvents(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient) *eventStream {
	t.Helper()
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	s := &eventStream{events: make(chan *runtimeapi.ContainerEventResponse, 256), errc: make(chan error, 1)}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				s.errc <- err
				return
			}
			select {
			case s.events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	// No header to wait for: containerd sends none before the first event.
	// Give the server time to subscribe; a stream error shows up here.
	select {
	case err := <-s.errc:
		t.Fatalf("GetContainerEvents stream ended before any sandbox was made: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	return s
}

// await collects the events of sandbox id until all of want arrived or wait
// passed, and returns the ones seen; a stream error fails the test.
func (s *eventStream) await(t *testing.T, id string, want []runtimeapi.ContainerEventType, wait time.Duration) map[runtimeapi.ContainerEventType]bool {
	t.Helper()
	seen := map[runtimeapi.ContainerEventType]bool{}
	timeout := time.After(wait)
	for !allSeen(seen, want) {
		select {
		case ev := <-s.events:
			if ev.ContainerId == id || ev.GetPodSandboxStatus().GetId() == id {
				seen[ev.ContainerEventType] = true
			}
		case err := <-s.errc:
			t.Fatalf("event stream: %v; saw %v", err, seen)
		case <-timeout:
			return seen
		}
	}
	return seen
}

func allSeen(seen map[runtimeapi.ContainerEventType]bool, want []runtimeapi.ContainerEventType) bool {
	return !slices.ContainsFunc(want, func(e runtimeapi.ContainerEventType) bool { return !seen[e] })
}

func missing(seen map[runtimeapi.ContainerEventType]bool, want []runtimeapi.ContainerEventType) []runtimeapi.ContainerEventType {
	var m []runtimeapi.ContainerEventType
	for _, e := range want {
		if !seen[e] {
			m = append(m, e)
		}
	}
	return m
}

// sandboxLifecycle runs, stops and removes a host-network sandbox and returns its id.
func sandboxLifecycle(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, cgroupRoot string) string {
	t.Helper()
	uid := harness.NewUID(t)
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: hostPodConfig("events-"+uid[:6], uid, cgroupRoot)})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := run.PodSandboxId
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox %s: %v", id, err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox %s: %v", id, err)
	}
	return id
}

// testContainerEventsImplemented runs against a containerd that implements
// GetContainerEvents (1.7). containerd 1.7 hands each event to ONE open
// stream, and a cancelled stream keeps its place until it has taken one more
// event (containerd issue 7318). So: first a direct stream, after as many
// sandboxes as it takes to use up the subscribers that earlier, cancelled
// streams left behind, must see every event of a sandbox; then a stream
// through cri-guard must see every event of a sandbox too.
func testContainerEventsImplemented(t *testing.T, socket string) {
	env, cgroupRoot := eventsRuntime(t, socket)
	removePodsAtCleanup(t, env)
	direct, _ := harness.DialCRI(t, env.Containerd)

	t.Run("direct", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := openEvents(ctx, t, direct)
		const attempts = 5 // each sandbox uses up to len(sandboxEvents) stale subscribers
		for i := 1; ; i++ {
			id := sandboxLifecycle(ctx, t, direct, cgroupRoot)
			seen := s.await(t, id, sandboxEvents, 10*time.Second)
			if allSeen(seen, sandboxEvents) {
				t.Logf("sandbox %d: direct stream saw %v", i, sandboxEvents)
				break
			}
			t.Logf("sandbox %d: direct stream missed %v (taken by stale subscribers)", i, missing(seen, sandboxEvents))
			if i == attempts {
				t.Fatalf("direct stream missed %v for all of %d sandboxes", missing(seen, sandboxEvents), attempts)
			}
		}
		cancel()
		// The stream just cancelled is now a stale subscriber: use it up.
		sandboxLifecycle(context.Background(), t, direct, cgroupRoot)
	})

	t.Run("through cri-guard", func(t *testing.T) {
		g := startGuard(t, env)
		rt, _ := harness.DialCRI(t, g.Socket)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Two client streams at once (a kubelet and crictl, say) besides
		// cri-guard's own subscription: each must see every event.
		streams := []*eventStream{openEvents(ctx, t, rt), openEvents(ctx, t, rt)}
		id := sandboxLifecycle(ctx, t, rt, cgroupRoot)
		for i, s := range streams {
			seen := s.await(t, id, sandboxEvents, 30*time.Second)
			if !allSeen(seen, sandboxEvents) {
				t.Errorf("through cri-guard stream %d missed %v of sandbox %s (saw %v); containerd 1.7 gives each event "+
					"to one stream, so cri-guard must share one runtime stream among its subscribers",
					i, missing(seen, sandboxEvents), id, seen)
			}
		}
	})
}
