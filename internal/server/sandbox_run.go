package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// SandboxGuard is what the sandbox interceptions need of the sync loop.
type SandboxGuard interface {
	// RunPodSandbox runs the whole operation for p: admission, the pending
	// record, create (which forwards to the runtime and says what its
	// answer proves), the settled record. An error carrying a Refusal
	// refuses p unforwarded; otherwise the error is create's outcome's.
	RunPodSandbox(ctx context.Context, p *pod.Pod, create func(ctx context.Context) runtimeproxy.RunOutcome) (string, error)
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
				return nil, fmt.Errorf("decode RunPodSandboxRequest: %w: %w", errInvalidRequest, err)
			}
			p, err := pod.FromSandboxConfig(req.GetConfig(), req.GetRuntimeHandler(), rules, now())
			if err != nil {
				return nil, fmt.Errorf("run pod sandbox: %w: %w", errInvalidRequest, err)
			}
			var out []byte
			_, err = g.RunPodSandbox(ctx, p, func(ctx context.Context) runtimeproxy.RunOutcome {
				b, err := next(ctx, raw)
				if err == nil {
					out = b
				}
				return runOutcome(b, err)
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

// runOutcome says what the runtime's answer to a forwarded RunPodSandbox
// (resp, or err) proves of the attempt's sandbox: the one place it is
// read. A success whose answer cannot be decoded, or names no sandbox, is
// still the runtime's success: the kubelet gets it unchanged, and the
// sandbox exists with an id not known here (RunMaybeCreated: the pending
// record stays until a listing shows the attempt's sandbox).
func runOutcome(resp []byte, err error) runtimeproxy.RunOutcome {
	if err != nil {
		if id, ok := reservedFor(err); ok {
			return runtimeproxy.Reserved(id, err)
		}
		if maybeCreated(err) {
			return runtimeproxy.MaybeCreated(err)
		}
		return runtimeproxy.NotCreated(err)
	}
	var r runtimeapi.RunPodSandboxResponse
	if proto.Unmarshal(resp, &r) != nil {
		return runtimeproxy.MaybeCreated(nil)
	}
	return runtimeproxy.Created(r.GetPodSandboxId())
}

// maybeCreated reports whether a RunPodSandbox that failed with err, not
// a refusal that names the sandbox holding the attempt's name (runOutcome
// reads that first), may still have created a sandbox: only when the
// request may have reached the runtime and its answer did not come back
// (the deadline passed, the call was cancelled, or the connection broke
// under it). A request that never got onto a connection created nothing,
// and neither did one the runtime answered with a status, whatever its
// code: containerd answers many definite failures (an unknown runtime
// handler, a failed network setup) with codes.Unknown. A retried attempt
// whose sandbox exists keeps its record in the sync loop whatever this
// says.
func maybeCreated(err error) bool {
	var unsent unsentError
	if errors.As(err, &unsent) {
		return false
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	case codes.AlreadyExists:
		return true // a sandbox of this name exists
	case codes.Unavailable:
		// gRPC's own, for a connection lost under the call; an
		// Unavailable the runtime sent is an answer
		return errors.Is(err, runtimeproxy.ErrTransport)
	}
	return false
}

// reservedName matches containerd's refusal of an attempt whose name is
// taken: `failed to reserve sandbox name "...": name "..." is reserved for
// "<id>"`, with code Unknown (containerd 1.7, 2.x) or FailedPrecondition
// (1.6): the sandbox <id> an earlier call created (its answer lost, e.g.
// cri-guard killed under it) exists, or is being created.
var reservedName = regexp.MustCompile(`is reserved for "([^"]+)"`)

// reservedFor returns the id of the sandbox that holds the attempt's name,
// when err is the runtime's refusal for that reason.
func reservedFor(err error) (string, bool) {
	m := reservedName.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return "", false
	}
	return m[1], true
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
