package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

func burstableConfig(name string) *runtimeapi.PodSandboxConfig {
	c := sandboxConfig(name)
	c.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/pod" + c.Metadata.Uid}
	return c
}

// TestRunPodSandboxInvalidUID: a UID that cannot name a checkpoint file is
// InvalidArgument, decided before admission and never forwarded.
func TestRunPodSandboxInvalidUID(t *testing.T) {
	g := &policyGuard{}
	e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
	for _, uid := range []string{strings.Repeat("u", 300), "bad/uid", "..", "."} {
		c := burstableConfig("p")
		c.Metadata.Uid = uid
		_, err := e.proxy.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: c})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("uid %.20q: err = %v, want InvalidArgument", uid, err)
		}
	}
	if n := runCalls(e); n != 0 || len(g.seen()) != 0 {
		t.Errorf("invalid uids reached the runtime (%d calls) or the guard (%v)", n, g.seen())
	}
}

// TestRunPodSandboxFailureOutcome: what a failed RunPodSandbox tells the
// guard (not created: the pending record can go) follows from what the
// call proves. The runtime's answer, any code, proves nothing was created; no
// answer (deadline, cancellation, a connection lost under the call) does
// not; a call that never got onto a connection created nothing.
func TestRunPodSandboxFailureOutcome(t *testing.T) {
	const method = runtimeapi.RuntimeService_RunPodSandbox_FullMethodName
	tests := []struct {
		name     string
		setup    func(t *testing.T, e *env) (context.Context, func())
		code     codes.Code
		wantKind runtimeproxy.RunKind
		wantID   string // the sandbox said to hold the attempt's name
	}{
		{
			name: "containerd answers Unknown (unknown runtime handler)",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.Unknown, `failed to get sandbox runtime: no runtime for "nope" is configured`))
				return context.Background(), nil
			},
			code: codes.Unknown, wantKind: runtimeproxy.RunNotCreated,
		},
		{
			// the attempt's name is taken: a sandbox an earlier call made
			// exists, and the guard is told which
			name: "containerd answers that the name is reserved",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.Unknown,
					`failed to reserve sandbox name "p_ns_u1_0": name "p_ns_u1_0" is reserved for "0123abcd"`))
				return context.Background(), nil
			},
			code: codes.Unknown, wantKind: runtimeproxy.RunReserved, wantID: "0123abcd",
		},
		{
			// containerd 1.6 (Debian 12's) says it with FailedPrecondition
			name: "containerd 1.6 answers that the name is reserved",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.FailedPrecondition,
					`failed to reserve sandbox name "p_ns_u1_0": name "p_ns_u1_0" is reserved for "47282b6e"`))
				return context.Background(), nil
			},
			code: codes.FailedPrecondition, wantKind: runtimeproxy.RunReserved, wantID: "47282b6e",
		},
		{
			name: "containerd answers FailedPrecondition for another reason",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.FailedPrecondition, "runtime handler is not ready"))
				return context.Background(), nil
			},
			code: codes.FailedPrecondition, wantKind: runtimeproxy.RunNotCreated,
		},
		{
			name: "containerd answers Unavailable",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.Unavailable, "sandbox store busy"))
				return context.Background(), nil
			},
			code: codes.Unavailable, wantKind: runtimeproxy.RunNotCreated,
		},
		{
			name: "deadline while containerd works",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Delay(method, 5*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				return ctx, cancel
			},
			code: codes.DeadlineExceeded, wantKind: runtimeproxy.RunMaybeCreated,
		},
		{
			name: "connection lost under the call",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				e.fake.Delay(method, 10*time.Second)
				stop := make(chan struct{})
				go func() {
					// kill the runtime once it has the request
					testutil.Within(5*time.Second, func() bool {
						return slices.ContainsFunc(e.fake.Calls(), func(c fakeruntime.Call) bool { return c.Method == method })
					})
					e.fake.Stop()
					close(stop)
				}()
				return context.Background(), func() { <-stop }
			},
			code: codes.Unavailable, wantKind: runtimeproxy.RunMaybeCreated,
		},
		{
			name: "no connection to the runtime",
			setup: func(t *testing.T, e *env) (context.Context, func()) {
				if _, err := e.backend.Runtime().Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
					t.Fatal(err)
				}
				e.fake.Stop()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for s := e.backend.State(); s == connectivity.Ready; s = e.backend.State() {
					e.backend.WaitForStateChange(ctx, s)
				}
				return context.Background(), nil
			},
			code: codes.Unavailable, wantKind: runtimeproxy.RunNotCreated,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &policyGuard{}
			e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
			ctx, done := tt.setup(t, e)
			_, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: burstableConfig("bu")})
			if done != nil {
				done()
			}
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			want := fmt.Sprintf("failed uid-bu/0 %v sandbox=%q err=true", tt.wantKind, tt.wantID)
			// the kubelet's deadline may end its call before the guard is told
			if !testutil.Within(5*time.Second, func() bool { return slices.Contains(g.seen(), want) }) {
				t.Errorf("guard told %v, want %q (err %v)", g.seen(), want, err)
			}
		})
	}
}

// TestRunOutcome: the runtime's answer is classified once, here; a
// success that names no sandbox (undecodable, or no id) is a success the
// kubelet gets, after which a sandbox exists with an id not known: maybe
// created, never created with an empty id.
func TestRunOutcome(t *testing.T) {
	named, err := proto.Marshal(&runtimeapi.RunPodSandboxResponse{PodSandboxId: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := proto.Marshal(&runtimeapi.RunPodSandboxResponse{})
	if err != nil {
		t.Fatal(err)
	}
	reserved := status.Error(codes.Unknown, `failed to reserve sandbox name "p_ns_u1_0": name "p_ns_u1_0" is reserved for "0123abcd"`)
	refused := status.Error(codes.Unknown, "no runtime for \"nope\" is configured")
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	tests := []struct {
		name    string
		resp    []byte
		err     error
		kind    runtimeproxy.RunKind
		id      string
		wantErr error
	}{
		{"created", named, nil, runtimeproxy.RunCreated, "s1", nil},
		{"success, undecodable", []byte{0xff, 0xff, 0xff}, nil, runtimeproxy.RunMaybeCreated, "", nil},
		{"success, no sandbox id", empty, nil, runtimeproxy.RunMaybeCreated, "", nil},
		{"name reserved", nil, reserved, runtimeproxy.RunReserved, "0123abcd", reserved},
		{"refused", nil, refused, runtimeproxy.RunNotCreated, "", refused},
		{"never sent", nil, unsentError{deadline}, runtimeproxy.RunNotCreated, "", unsentError{deadline}},
		{"no answer", nil, deadline, runtimeproxy.RunMaybeCreated, "", deadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runOutcome(tt.resp, tt.err)
			if o.Kind() != tt.kind || o.SandboxID() != tt.id || o.Err() != tt.wantErr {
				t.Fatalf("runOutcome = %v %q %v, want %v %q %v", o.Kind(), o.SandboxID(), o.Err(), tt.kind, tt.id, tt.wantErr)
			}
		})
	}
}
