package server

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type refusal struct{ reason, msg string }

func (r refusal) Error() string                      { return r.reason + ": " + r.msg }
func (r refusal) AdmissionRefused() (string, string) { return r.reason, r.msg }

type hookRecorder struct {
	mu    sync.Mutex
	names []string
}

func (h *hookRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.names...)
}

func TestHooks(t *testing.T) {
	rec := &hookRecorder{}
	hooks := Hooks{
		runtimeapi.RuntimeService_RunPodSandbox_FullMethodName: func(ctx context.Context, raw []byte, next UnaryNext) ([]byte, error) {
			var req runtimeapi.RunPodSandboxRequest
			if err := proto.Unmarshal(raw, &req); err != nil {
				return nil, fmt.Errorf("decode: %w: %w", errInvalidRequest, err)
			}
			rec.mu.Lock()
			rec.names = append(rec.names, req.GetConfig().GetMetadata().GetName())
			rec.mu.Unlock()
			if req.GetConfig().GetMetadata().GetName() == "refused" {
				return nil, fmt.Errorf("admit pod %q: %w", "refused", refusal{"Evicted", "The node had condition: [MemoryPressure]. "})
			}
			req.Config.Labels["cri-guard.io/admitted"] = "true"
			b, err := proto.Marshal(&req)
			if err != nil {
				return nil, err
			}
			return next(ctx, b)
		},
	}
	e := newEnv(t, hooks)
	ctx := ctxT(t)

	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("hook ran for unhooked methods: %v", got)
	}

	resp, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("ok")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.direct.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Labels["cri-guard.io/admitted"] != "true" {
		t.Errorf("hook rewrite did not reach the runtime: labels %v", st.Status.Labels)
	}

	_, err = e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("refused")})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("refused: %v, want ResourceExhausted", err)
	}
	if want := "Evicted: The node had condition: [MemoryPressure]. "; status.Convert(err).Message() != want {
		t.Errorf("message %q, want %q", status.Convert(err).Message(), want)
	}
	if got := rec.seen(); len(got) != 2 || got[0] != "ok" || got[1] != "refused" {
		t.Errorf("hook saw %v, want [ok refused]", got)
	}
	// The refused sandbox never reached the runtime.
	if err := e.fake.Runtime.AssertCalls([]string{"Version", "ListPodSandbox", "RunPodSandbox", "PodSandboxStatus"}); err != nil {
		t.Error(err)
	}

	// A runtime error behind a hook comes back unchanged.
	e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.AlreadyExists, "name reserved"))
	_, err = e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig("dup")})
	if status.Code(err) != codes.AlreadyExists || status.Convert(err).Message() != "name reserved" {
		t.Errorf("runtime error through hook: %v", err)
	}
}
