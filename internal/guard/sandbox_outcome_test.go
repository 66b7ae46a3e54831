package guard

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/server"
)

// TestSuccessNamingNoSandboxStaysPending: the runtime succeeds with an
// answer that cannot be decoded, or names no sandbox, through the
// server's interception and the loop together. The kubelet gets the
// runtime's answer unchanged; the record stays pending, never ready with
// no sandbox id (a ready pod is ranked, and evicted by its sandbox id),
// and a listing that shows the attempt's sandbox completes it.
func TestSuccessNamingNoSandboxStaysPending(t *testing.T) {
	empty, err := proto.Marshal(&runtimeapi.RunPodSandboxResponse{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		answer []byte
	}{
		{"undecodable", []byte{0xff, 0xff, 0xff}},
		{"no sandbox id", empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, enforceRestored())
			h.start(t)
			hook := server.SandboxHooks(h.loop, pod.CriticalRules{Mode: pod.ModeModern}, nil)[runtimeapi.RuntimeService_RunPodSandbox_FullMethodName]
			raw, err := proto.Marshal(&runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
				Metadata: &runtimeapi.PodSandboxMetadata{Name: "n-u1", Namespace: "default", Uid: "u1"},
				Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/podu1"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
			defer cancel()
			out, err := hook(ctx, raw, func(context.Context, []byte) ([]byte, error) {
				h.rt.addSandbox("s-u1", "u1", 0, true, time.Unix(1, 0))
				return tt.answer, nil
			})
			if err != nil || !bytes.Equal(out, tt.answer) {
				t.Fatalf("RunPodSandbox = %x, %v; want the runtime's answer %x unchanged", out, err, tt.answer)
			}
			flushed(t, h.loop)
			if got := h.states()["u1/0"]; got != pod.StatePending {
				t.Errorf("pod after a success naming no sandbox: %q, want pending", got)
			}
			for _, p := range h.loop.Pods() {
				if p.State == pod.StateReady && p.SandboxID == "" {
					t.Errorf("pod %s is ready with no sandbox id", p.Key())
				}
			}
			if rec, ok := h.store.get("u1/0"); !ok || rec.State != pod.StatePending || rec.SandboxID != "" {
				t.Errorf("record after a success naming no sandbox: %+v (present %v), want pending", rec, ok)
			}

			h.listing(t)
			if rec, ok := h.store.get("u1/0"); !ok || rec.State != pod.StateReady || rec.SandboxID != "s-u1" {
				t.Errorf("record after a listing that shows the sandbox: %+v (present %v), want ready s-u1", rec, ok)
			}
		})
	}
}

// TestRestoredReadyRecordWithoutSandbox: a record an earlier release
// settled ready with no sandbox id (a success naming none) is restored
// pending: not ranked as ready, and completed by a listing that shows its
// attempt's sandbox.
func TestRestoredReadyRecordWithoutSandbox(t *testing.T) {
	h := newHarness(t, enforceRestored())
	p := newPod("u1", 0, pod.Burstable, false)
	p.State = pod.StateReady
	if err := h.store.Put(checkpoint.Record{Pod: *p, State: pod.StateReady, Written: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	if got := h.states()["u1/0"]; got != pod.StatePending {
		t.Fatalf("restored record ready with no sandbox id: %q, want pending", got)
	}
	h.rt.addSandbox("s-u1", "u1", 0, true, time.Unix(1, 0))
	h.listing(t)
	if rec, ok := h.store.get("u1/0"); !ok || rec.State != pod.StateReady || rec.SandboxID != "s-u1" {
		t.Errorf("record after a listing that shows the sandbox: %+v (present %v), want ready s-u1", rec, ok)
	}
}
