package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/pod"
)

// SandboxGuard is what the sandbox interceptions need of the sync loop.
type SandboxGuard interface {
	// RunPodSandbox runs the whole operation for p: admission, the pending
	// record, create (which forwards to the runtime), the settled record.
	// An error carrying a Refusal refuses p unforwarded.
	RunPodSandbox(ctx context.Context, p *pod.Pod, create func(ctx context.Context) (id string, notCreated bool, err error)) (string, error)
	// SandboxStopped and SandboxRemoved are told of sandboxes stopped or
	// removed through cri-guard.
	SandboxStopped(sandboxID string)
	SandboxRemoved(sandboxID string)
}

// SandboxHooks returns the interceptions of RunPodSandbox, StopPodSandbox and
// RemovePodSandbox. rules classify pods; now is cri-guard's clock (the
// kubelet sends no creation time). The request bytes reach the runtime as
// the kubelet sent them.
func SandboxHooks(g SandboxGuard, rules pod.CriticalRules, now func() time.Time) Hooks {
	if now == nil {
		now = time.Now
	}
	return Hooks{
		runtimeapi.RuntimeService_RunPodSandbox_FullMethodName: func(ctx context.Context, raw []byte, next UnaryNext) ([]byte, error) {
			var req runtimeapi.RunPodSandboxRequest
			if err := proto.Unmarshal(raw, &req); err != nil {
				return nil, fmt.Errorf("decode RunPodSandboxRequest: %w: %w", ErrInvalidRequest, err)
			}
			p, err := pod.FromSandboxConfig(req.GetConfig(), req.GetRuntimeHandler(), rules, now())
			if err != nil {
				return nil, fmt.Errorf("run pod sandbox: %w: %w", ErrInvalidRequest, err)
			}
			var out []byte
			_, err = g.RunPodSandbox(ctx, p, func(ctx context.Context) (string, bool, error) {
				b, err := next(ctx, raw)
				if err != nil {
					return "", !maybeCreated(err), err
				}
				out = b
				var resp runtimeapi.RunPodSandboxResponse
				// An undecodable answer is still containerd's success: the
				// pending record is then settled by reconciliation.
				_ = proto.Unmarshal(b, &resp)
				return resp.GetPodSandboxId(), false, nil
			})
			if err != nil {
				return nil, err
			}
			return out, nil
		},
		runtimeapi.RuntimeService_StopPodSandbox_FullMethodName:   sandboxIDHook(g.SandboxStopped),
		runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName: sandboxIDHook(g.SandboxRemoved),
	}
}

// maybeCreated reports whether a RunPodSandbox that failed with err may
// still have created a sandbox: the call ended without the runtime's
// answer (deadline, cancellation, a connection lost under the call).
func maybeCreated(err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return true
	}
	return false
}

// sandboxIDHook forwards a Stop/RemovePodSandbox call and, when the runtime
// succeeds, reports the sandbox id. Both requests carry the id in field 1.
func sandboxIDHook(done func(id string)) UnaryHook {
	return func(ctx context.Context, raw []byte, next UnaryNext) ([]byte, error) {
		out, err := next(ctx, raw)
		if err != nil {
			return nil, err
		}
		var req runtimeapi.StopPodSandboxRequest // same wire shape as RemovePodSandboxRequest
		if proto.Unmarshal(raw, &req) == nil && req.GetPodSandboxId() != "" {
			done(req.GetPodSandboxId())
		}
		return out, nil
	}
}
