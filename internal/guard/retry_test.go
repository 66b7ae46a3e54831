package guard

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// TestRetryOfCreatedSandbox: the kubelet repeats RunPodSandbox for an
// attempt whose sandbox exists (its answer was lost, e.g. cri-guard was
// killed). The runtime refuses the duplicate; the pod must stay ready and
// rankable, and its record must keep the sandbox id, whatever code the
// refusal carries.
func TestRetryOfCreatedSandbox(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"name reserved (containerd: Unknown)", status.Error(codes.Unknown, `failed to reserve sandbox name "n_default_u1_0": name is reserved`)},
		{"already exists", status.Error(codes.AlreadyExists, "sandbox exists")},
		{"plain error", errors.New("refused")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.start(t)
			p := newPod("u1", 0, pod.BestEffort, false)
			if _, err := h.run(p.Clone(), runtimeproxy.Created("sb1")); err != nil {
				t.Fatalf("first RunPodSandbox: %v", err)
			}
			// whatever the runtime says of the duplicate, even "not created"
			for _, outcome := range []func(error) runtimeproxy.RunOutcome{runtimeproxy.MaybeCreated, runtimeproxy.NotCreated} {
				if _, err := h.run(p.Clone(), outcome(tt.err)); err != tt.err {
					t.Fatalf("retry: err = %v, want the runtime's", err)
				}
			}

			flushed(t, h.loop)
			rec, ok := h.store.get(p.Key())
			if !ok || rec.SandboxID != "sb1" {
				t.Errorf("record after the refused retry: %+v (present %v), want sandbox sb1", rec, ok)
			}
			var got *pod.Pod
			for _, q := range h.loop.Pods() {
				if q.Key() == p.Key() {
					got = q
				}
			}
			if got == nil || got.SandboxID != "sb1" || got.State != pod.StateReady {
				t.Errorf("pod after the refused retry: %v, want ready with sandbox sb1", describe(got))
			}
		})
	}
}

func describe(p *pod.Pod) string {
	if p == nil {
		return "not known"
	}
	return p.Key() + " state " + string(p.State) + " sandbox " + p.SandboxID
}
