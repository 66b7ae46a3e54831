package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// policyGuard refuses BestEffort non-critical pods, as the eviction admit
// handler does under MemoryPressure, and records what it is told.
type policyGuard struct {
	mu      sync.Mutex
	events  []string
	failAdm error
}

func (g *policyGuard) log(s string) { g.mu.Lock(); g.events = append(g.events, s); g.mu.Unlock() }

func (g *policyGuard) RunPodSandbox(ctx context.Context, p *pod.Pod, create func(context.Context) runtimeproxy.RunOutcome) (string, error) {
	g.log("admit " + p.Key())
	if g.failAdm != nil {
		return "", g.failAdm
	}
	if p.QOS == pod.BestEffort && !p.Critical {
		return "", refusal{reason: "Evicted", msg: "The node had condition: [MemoryPressure]. "}
	}
	o := create(ctx)
	if o.Kind() != runtimeproxy.RunCreated {
		g.log(fmt.Sprintf("failed %s %v sandbox=%q err=%v", p.Key(), o.Kind(), o.SandboxID(), o.Err() != nil))
		return "", o.Err()
	}
	g.log("created " + p.Key() + " " + o.SandboxID())
	return o.SandboxID(), nil
}
func (g *policyGuard) SandboxStopped(id string) { g.log("stopped " + id) }
func (g *policyGuard) SandboxRemoved(id string) { g.log("removed " + id) }

func (g *policyGuard) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events)
}

func runCalls(e *env) int {
	n := 0
	for _, c := range e.fake.Calls() {
		if c.Method == runtimeapi.RuntimeService_RunPodSandbox_FullMethodName {
			n++
		}
	}
	return n
}

func TestSandboxHooksAdmission(t *testing.T) {
	g := &policyGuard{}
	e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
	ctx := context.Background()
	run := func(name, parent string, annotations map[string]string) (*runtimeapi.RunPodSandboxResponse, error) {
		c := sandboxConfig(name)
		c.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent}
		c.Annotations = annotations
		return e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: c})
	}

	// refused, twice (the kubelet's retry gets the same answer), never forwarded
	for range 2 {
		_, err := run("be", "/kubepods/besteffort/poduid-be", nil)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "Evicted: The node had condition: [MemoryPressure]") {
			t.Fatalf("refused RunPodSandbox: %v", err)
		}
	}
	if n := runCalls(e); n != 0 {
		t.Fatalf("backend saw %d RunPodSandbox calls for a refused pod", n)
	}

	// admitted: forwarded, and the sandbox id recorded
	resp, err := run("bu", "/kubepods/burstable/poduid-bu", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := runCalls(e); n != 1 {
		t.Fatalf("backend saw %d RunPodSandbox calls, want 1", n)
	}
	if !slices.Contains(g.seen(), "created uid-bu/0 "+resp.GetPodSandboxId()) {
		t.Fatalf("sandbox id not recorded: %v", g.seen())
	}
	// a critical BestEffort pod (static) is admitted
	if _, err := run("static", "/kubepods/besteffort/poduid-static", map[string]string{pod.AnnotationConfigSource: "file"}); err != nil {
		t.Fatalf("critical pod refused: %v", err)
	}

	// stop and remove are reported after the runtime succeeded
	id := resp.GetPodSandboxId()
	if _, err := e.proxy.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	seen := g.seen()
	if !slices.Contains(seen, "stopped "+id) || !slices.Contains(seen, "removed "+id) {
		t.Fatalf("stop/remove not reported: %v", seen)
	}
}

func TestSandboxHooksErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("no metadata is InvalidArgument", func(t *testing.T) {
		g := &policyGuard{}
		e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
		_, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
		if status.Code(err) != codes.InvalidArgument || runCalls(e) != 0 {
			t.Fatalf("err = %v, backend calls %d", err, runCalls(e))
		}
		_, err = e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no config: err = %v", err)
		}
	})
	t.Run("runtime failure is passed through and reported", func(t *testing.T) {
		g := &policyGuard{}
		e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
		e.fake.Runtime.InjectError("RunPodSandbox", status.Error(codes.FailedPrecondition, "no network"))
		c := sandboxConfig("bu")
		c.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/poduid-bu"}
		_, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: c})
		if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "no network" {
			t.Fatalf("err = %v, want containerd's status unchanged", err)
		}
		if !slices.Contains(g.seen(), `failed uid-bu/0 not-created sandbox="" err=true`) {
			t.Fatalf("failure not reported: %v", g.seen())
		}
	})
	t.Run("guard error fails the call unforwarded", func(t *testing.T) {
		g := &policyGuard{failAdm: errors.New("checkpoint: disk full")}
		e := newEnv(t, SandboxHooks(g, pod.CriticalRules{Mode: pod.ModeModern}, nil))
		c := sandboxConfig("bu")
		_, err := e.proxy.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: c})
		if err == nil || runCalls(e) != 0 {
			t.Fatalf("err = %v, backend calls %d", err, runCalls(e))
		}
	})
}
