package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPassThrough(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	run, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("a")})
	if err != nil {
		t.Fatalf("RunPodSandbox through proxy: %v", err)
	}
	if _, err := e.proxy.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  run.PodSandboxId,
		Config:        &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "pause"}},
		SandboxConfig: sandboxConfig("a"),
	}); err != nil {
		t.Fatalf("CreateContainer through proxy: %v", err)
	}
	e.fake.Image.SetFakeImages([]string{"registry.k8s.io/pause:3.9", "busybox"})

	tests := []struct {
		name string
		call func(rt runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient) (proto.Message, error)
	}{
		{"Version", func(rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) (proto.Message, error) {
			return rt.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
		}},
		{"ListPodSandbox", func(rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) (proto.Message, error) {
			return rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		}},
		{"PodSandboxStatus", func(rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) (proto.Message, error) {
			return rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId})
		}},
		{"ListContainers", func(rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) (proto.Message, error) {
			return rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: run.PodSandboxId}})
		}},
		{"ListImages", func(_ runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient) (proto.Message, error) {
			return im.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		}},
		{"ImageFsInfo", func(_ runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient) (proto.Message, error) {
			return im.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := tt.call(e.direct, e.directImage)
			if err != nil {
				t.Fatalf("direct: %v", err)
			}
			got, err := tt.call(e.proxy, e.proxyImage)
			if err != nil {
				t.Fatalf("proxy: %v", err)
			}
			sortImages(got)
			sortImages(want) // the fake lists its images in map order
			if !proto.Equal(got, want) {
				t.Errorf("proxy response differs from direct:\n got %v\nwant %v", got, want)
			}
		})
	}
	if err := e.fake.Runtime.AssertCalls([]string{"RunPodSandbox", "CreateContainer",
		"Version", "Version", "ListPodSandbox", "ListPodSandbox", "PodSandboxStatus", "PodSandboxStatus",
		"ListContainers", "ListContainers"}); err != nil {
		t.Error(err)
	}
}

func TestMetadataAndDeadlinePassThrough(t *testing.T) {
	e := newEnv(t, nil)
	deadline := time.Now().Add(20 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace-id", "abc123", "x-multi", "1", "x-multi", "2")
	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	calls := e.fake.Calls()
	if len(calls) != 1 {
		t.Fatalf("backend saw %d calls, want 1", len(calls))
	}
	c := calls[0]
	if c.Method != runtimeapi.RuntimeService_Version_FullMethodName {
		t.Errorf("method = %q", c.Method)
	}
	if got := c.MD.Get("x-trace-id"); len(got) != 1 || got[0] != "abc123" {
		t.Errorf("x-trace-id = %v, want [abc123]", got)
	}
	if got := c.MD.Get("x-multi"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("x-multi = %v, want [1 2]", got)
	}
	if c.Deadline.IsZero() {
		t.Fatal("backend saw no deadline")
	}
	// The deadline travels as a relative timeout (grpc-timeout, rounded):
	// the backend's is the client's give or take the hop and the rounding.
	if d := deadline.Sub(c.Deadline).Abs(); d > 2*time.Second {
		t.Errorf("backend deadline %v, client deadline %v", c.Deadline, deadline)
	}
}

func TestBackendDownIsUnavailableNamingEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Stop()
	// A long deadline: failing fast means Unavailable, not DeadlineExceeded.
	_, err := e.proxy.Version(ctxT(t), &runtimeapi.VersionRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("code = %v (%v), want Unavailable", status.Code(err), err)
	}
	if !strings.Contains(status.Convert(err).Message(), e.fake.Path) {
		t.Errorf("message %q does not name the endpoint %q", status.Convert(err).Message(), e.fake.Path)
	}
}

func TestDeadlineExceeded(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Delay(runtimeapi.RuntimeService_Version_FullMethodName, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("code = %v (%v), want DeadlineExceeded", status.Code(err), err)
	}
}

func TestUnknownAndUnimplementedMethods(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name   string
		method string
	}{
		{"method unknown to both sides", "/runtime.v1.RuntimeService/NoSuchMethod"},
		{"service unknown to both sides", "/runtime.v9.FutureService/Anything"},
		{"known CRI method the runtime does not implement", runtimeapi.RuntimeService_PortForward_FullMethodName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t)
			var resp runtimeapi.VersionResponse
			direct := e.directConn.Invoke(ctx, tt.method, &runtimeapi.VersionRequest{}, &resp)
			proxied := e.proxyConn.Invoke(ctx, tt.method, &runtimeapi.VersionRequest{}, &resp)
			if status.Code(direct) != codes.Unimplemented {
				t.Fatalf("direct code = %v, want Unimplemented", status.Code(direct))
			}
			if status.Code(proxied) != status.Code(direct) || status.Convert(proxied).Message() != status.Convert(direct).Message() {
				t.Errorf("proxied %v, want runtime's %v", proxied, direct)
			}
		})
	}
}

func TestInjectedErrorsPassUnchanged(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name string
		err  error
	}{
		{"not found", status.Error(codes.NotFound, `sandbox "x" not found`)},
		{"failed precondition", status.Error(codes.FailedPrecondition, "container is running")},
		{"unavailable from the runtime itself", status.Error(codes.Unavailable, "runtime is busy")},
		{"plain error", errors.New("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t)
			e.fake.Runtime.InjectError("ListPodSandbox", tt.err)
			_, direct := e.direct.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			e.fake.Runtime.InjectError("ListPodSandbox", tt.err)
			_, proxied := e.proxy.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if direct == nil || proxied == nil {
				t.Fatalf("want errors, got direct=%v proxied=%v", direct, proxied)
			}
			if status.Code(proxied) != status.Code(direct) || status.Convert(proxied).Message() != status.Convert(direct).Message() {
				t.Errorf("proxied %v, want %v", proxied, direct)
			}
		})
	}
}

func TestLargeMessages(t *testing.T) {
	tests := []struct {
		name     string
		labelLen int
		wantCode codes.Code
	}{
		{"15 MiB response passes", 15 << 20, codes.OK},
		{"over 16 MiB is refused like containerd's limit", 17 << 20, codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			c := &apitest.FakeContainer{SandboxID: "s"}
			c.Id = "big"
			c.Metadata = &runtimeapi.ContainerMetadata{Name: "big"}
			c.Labels = map[string]string{"big": strings.Repeat("x", tt.labelLen)}
			e.fake.Runtime.SetFakeContainers([]*apitest.FakeContainer{c})
			resp, err := e.proxy.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.wantCode)
			}
			if err == nil && len(resp.Containers[0].Labels["big"]) != tt.labelLen {
				t.Errorf("label length %d, want %d", len(resp.Containers[0].Labels["big"]), tt.labelLen)
			}
		})
	}
}

func TestContainerEventsStream(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := e.proxy.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*runtimeapi.ContainerEventResponse{
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, CreatedAt: 1},
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, CreatedAt: 2},
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, CreatedAt: 3},
	}
	for _, ev := range want {
		e.fake.Events <- ev
	}
	for i, w := range want {
		got, err := stream.Recv()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !proto.Equal(got, w) {
			t.Errorf("event %d = %v, want %v", i, got, w)
		}
	}
	// When the client goes away the backend stream ends too.
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("after cancel: %v, want Canceled", err)
	}
}

func TestStopEndsStreamsWithUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	stream, err := e.proxy.GetContainerEvents(ctxT(t), &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	e.fake.Events <- &runtimeapi.ContainerEventResponse{ContainerId: "c"}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	go e.srv.stop()
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("after Stop: %v, want Unavailable", err)
	}
}

func TestBackendRestartReconnects(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	e.fake.Stop()
	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("while down: %v, want Unavailable", err)
	}
	e.fake.Restart(t)
	var err error
	for ctx.Err() == nil {
		if _, err = e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no successful call after the backend came back: %v", err)
}

func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	errc := make(chan error, 8)
	for range 8 {
		go func() {
			for range 50 {
				if _, err := e.proxy.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// sortImages orders a ListImagesResponse by image id; other messages are left alone.
func sortImages(m proto.Message) {
	if r, ok := m.(*runtimeapi.ListImagesResponse); ok {
		slices.SortFunc(r.Images, func(a, b *runtimeapi.Image) int { return strings.Compare(a.GetId(), b.GetId()) })
	}
}
