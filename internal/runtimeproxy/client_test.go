package runtimeproxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

func newTestClient(t *testing.T) (*fakeruntime.Backend, *Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cgrp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	c, err := New(Config{Endpoint: fake.Path}, logrus.NewEntry(logrus.New()).WithField("component", "runtimeproxy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return fake, c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTarget(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "path", in: "/run/containerd/containerd.sock", want: "unix:///run/containerd/containerd.sock"},
		{name: "unix url", in: "unix:///run/containerd/containerd.sock", want: "unix:///run/containerd/containerd.sock"},
		{name: "tcp refused", in: "tcp://127.0.0.1:1234", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "empty unix", in: "unix://", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Target(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Target(%q) = %q, %v; want %q, err %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestTypedHelpers(t *testing.T) {
	fake, c := newTestClient(t)
	ctx := testCtx(t)
	cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}}
	run, err := c.Runtime().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	id := run.PodSandboxId
	cont := &apitest.FakeContainer{SandboxID: id}
	cont.Id = "c1"
	cont.Metadata = &runtimeapi.ContainerMetadata{Name: "c1"}
	cont.State = runtimeapi.ContainerState_CONTAINER_RUNNING
	fake.Runtime.SetFakeContainers([]*apitest.FakeContainer{cont})

	sbs, err := c.ListPodSandbox(ctx, nil)
	if err != nil || len(sbs) != 1 || sbs[0].Id != id {
		t.Fatalf("ListPodSandbox = %v, %v", sbs, err)
	}
	st, err := c.PodSandboxStatus(ctx, id)
	if err != nil || st.Status.GetMetadata().GetUid() != "u1" {
		t.Fatalf("PodSandboxStatus = %v, %v", st, err)
	}
	cs, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: id})
	if err != nil || len(cs) != 1 || cs[0].Id != "c1" {
		t.Fatalf("ListContainers = %v, %v", cs, err)
	}
	if err := c.StopContainer(ctx, "c1", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.StopPodSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := fake.Runtime.AssertCalls([]string{"RunPodSandbox", "ListPodSandbox", "PodSandboxStatus", "ListContainers",
		"StopContainer", "StopPodSandbox"}); err != nil {
		t.Error(err)
	}
	// The helpers used by the sync loop name the operation and id.
	fake.Runtime.InjectError("StopPodSandbox", status.Error(codes.Unavailable, "restarting"))
	err = c.StopPodSandbox(ctx, "s1")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), `stop pod sandbox "s1"`) {
		t.Errorf("StopPodSandbox error = %v", err)
	}
	// A sandbox or container that is gone is stopped, as the kubelet takes it.
	fake.Runtime.InjectError("StopPodSandbox", status.Error(codes.NotFound, "no such sandbox"))
	if err := c.StopPodSandbox(ctx, "gone"); err != nil {
		t.Errorf("StopPodSandbox of a gone sandbox = %v, want nil", err)
	}
	fake.Runtime.InjectError("StopContainer", status.Error(codes.NotFound, "no such container"))
	if err := c.StopContainer(ctx, "gone", 1); err != nil {
		t.Errorf("StopContainer of a gone container = %v, want nil", err)
	}
}

func TestDownFastThenReconnect(t *testing.T) {
	fake, c := newTestClient(t)
	ctx := testCtx(t)
	if _, err := c.ListPodSandbox(ctx, nil); err != nil {
		t.Fatal(err)
	}
	fake.Stop()
	_, err := c.ListPodSandbox(ctx, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), fake.Path) {
		t.Fatalf("while down: %v, want Unavailable naming %s", err, fake.Path)
	}
	fake.Restart(t)
	for ctx.Err() == nil {
		if _, err = c.ListPodSandbox(ctx, nil); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("never reconnected: %v", err)
	}
	if s := c.State().String(); s != "READY" {
		t.Errorf("state after reconnect %s, want READY", s)
	}
}

func TestFrameCodec(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"bytes", []byte{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var codec Codec
			out, err := codec.Marshal(NewFrame(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var f Frame
			if err := codec.Unmarshal(out, &f); err != nil {
				t.Fatal(err)
			}
			out.Free()
			if string(f.Bytes()) != string(tt.in) || f.size() != len(tt.in) {
				t.Errorf("round trip: %v, want %v", f.Bytes(), tt.in)
			}
			f.Free()
			f.Free()
			if _, err := codec.Marshal(&runtimeapi.VersionRequest{}); err == nil {
				t.Error("Marshal accepted a non-Frame")
			}
		})
	}
}
