package server

import (
	"context"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/cri-guard/cri-guard/internal/metrics"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// nopGuard is a SandboxGuard for calls the hooks never see.
type nopGuard struct{}

func (nopGuard) RunPodSandbox(ctx context.Context, _ *pod.Pod, create func(context.Context) runtimeproxy.RunOutcome) (string, error) {
	o := create(ctx)
	return o.SandboxID(), o.Err()
}
func (nopGuard) SandboxStopped(string) {}
func (nopGuard) SandboxRemoved(string) {}

// BenchmarkForwardCost is what cri-guard's own server configuration adds to
// an ordinary forwarded call (one no hook takes: Version,
// PodSandboxStatus, ListContainers of 60 containers as the kubelet's relist) over the proxy core alone,
// as cri-guard-bench --compare-core builds it (server.Config with the
// socket only, no hooks): "full" is the server as cmd/cri-guard builds it
// (metrics Observer, the sandbox hooks, ProcessConnected, the shared event
// subscription). Both forward over real unix sockets to the same fake
// runtime. Run it on one P, as cri-guard runs:
//
//	go test -run '^$' -bench ForwardCost -cpu 1 -benchmem -count 6 ./internal/server/
func BenchmarkForwardCost(b *testing.B) {
	full := func(cfg *Config, _ *runtimeproxy.Client) {
		cfg.Observer = metrics.New()
		cfg.ProcessConnected = func(int32) {}
		cfg.SubscribeEvents = func(ctx context.Context) EventSubscription { return nil }
	}
	envs := map[string]*env{
		"core": newEnv(b, nil),
		"full": newEnvCfg(b, SandboxHooks(nopGuard{}, pod.CriticalRules{Mode: pod.ModeModern}, nil), full),
	}
	const sandbox = "sandbox-0"
	for _, e := range envs {
		s := &apitest.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
			Id: sandbox, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-web"},
			Labels:   map[string]string{"app": "web"},
		}}
		e.fake.Runtime.SetFakeSandboxes([]*apitest.FakePodSandbox{s})
		e.fake.Runtime.SetFakeContainers(fakeContainers(60))
	}
	ctx := context.Background()
	calls := []struct {
		name string
		call func(rt runtimeapi.RuntimeServiceClient) error
	}{
		{"Version", func(rt runtimeapi.RuntimeServiceClient) error {
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		}},
		{"PodSandboxStatus", func(rt runtimeapi.RuntimeServiceClient) error {
			_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandbox})
			return err
		}},
		{"ListContainers60", func(rt runtimeapi.RuntimeServiceClient) error {
			_, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
	}
	for _, c := range calls {
		for _, side := range []string{"core", "full"} {
			rt := envs[side].proxy
			b.Run(c.name+"/"+side, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := c.call(rt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// fakeContainers returns n containers of n/2 pods, as a node's relist
// lists them.
func fakeContainers(n int) []*apitest.FakeContainer {
	var cs []*apitest.FakeContainer
	for i := range n {
		c := &apitest.FakeContainer{SandboxID: fmt.Sprintf("sandbox-%02d", i/2)}
		c.Id = fmt.Sprintf("%064d", i)
		c.Metadata = &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i)}
		c.Image = &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.9"}
		c.Labels = map[string]string{"io.kubernetes.pod.name": fmt.Sprintf("pod-%d", i/2), "io.kubernetes.pod.namespace": "default"}
		cs = append(cs, c)
	}
	return cs
}
