package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/pod"
)

// SandboxGuard is what the RunPodSandbox interception needs of the sync loop.
type SandboxGuard interface {
	// AdmitPod decides p before the runtime sees it; an error carrying a
	// Refusal refuses it, any other error fails the call unforwarded. When
	// it returns nil, a pending checkpoint is on disk.
	AdmitPod(ctx context.Context, p *pod.Pod) error
	// SandboxCreated records the sandbox id the runtime gave p.
	SandboxCreated(p *pod.Pod, sandboxID string)
	// SandboxFailed is told that the runtime refused to create p.
	SandboxFailed(p *pod.Pod, err error)
}

// SandboxObserver is told of sandboxes stopped or removed through cri-guard.
type SandboxObserver interface {
	SandboxStopped(sandboxID string)
	SandboxRemoved(sandboxID string)
}

// SandboxHooks returns the interceptions of RunPodSandbox, StopPodSandbox and
// RemovePodSandbox. rules classify pods; now is cri-guard's clock (the
// kubelet sends no creation time). The request bytes reach the runtime as
// the kubelet sent them.
func SandboxHooks(g SandboxGuard, o SandboxObserver, rules pod.CriticalRules, now func() time.Time) Hooks {
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
			if err := g.AdmitPod(ctx, p); err != nil {
				return nil, err
			}
			out, err := next(ctx, raw)
			if err != nil {
				g.SandboxFailed(p, err)
				return nil, err
			}
			var resp runtimeapi.RunPodSandboxResponse
			if err := proto.Unmarshal(out, &resp); err != nil || resp.GetPodSandboxId() == "" {
				// Never fail a call after the runtime succeeded: the
				// pending record is settled by reconciliation.
				return out, nil
			}
			g.SandboxCreated(p, resp.GetPodSandboxId())
			return out, nil
		},
		runtimeapi.RuntimeService_StopPodSandbox_FullMethodName:   sandboxIDHook(o.SandboxStopped),
		runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName: sandboxIDHook(o.SandboxRemoved),
	}
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
