package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

// BenchmarkForwardCost is what cri-guard's own server configuration adds
// to an ordinary forwarded call, one no hook takes (Version,
// PodSandboxStatus, and ListContainers of 60 containers as in the
// kubelet's relist), over the proxy core alone as cri-guard-bench
// --compare-core builds it (a Config with the socket only, no hooks).
// "full" is the server as cmd/cri-guard builds it: the metrics Observer,
// the sandbox hooks, ProcessConnected and the shared event subscription.
// Both forward over real unix sockets to the same fake runtime. Run it on
// one P, as cri-guard runs:
//
//	go test -run '^$' -bench ForwardCost -cpu 1 -benchmem -count 6 ./internal/server/
func BenchmarkForwardCost(b *testing.B) {
	full := func(cfg *Config, _ *runtimeproxy.Client) {
		cfg.Observer = metrics.New()
		cfg.ProcessConnected = func(int32) {}
		cfg.SubscribeEvents = func(ctx context.Context) EventSubscription { return nil }
	}
	// One fake runtime behind both, as one containerd is behind both in
	// cri-guard-bench: two fakes would differ in how warm their caches
	// are (the direct calls go to one of them), by up to a quarter of the
	// hop's cost for a listing of 60 containers.
	e := newEnv(b, nil)
	proxies := map[string]runtimeapi.RuntimeServiceClient{
		"core": e.proxy,
		"full": serveAlso(b, e, SandboxHooks(nopGuard{}, pod.CriticalRules{Mode: pod.ModeModern}, nil), full),
	}
	const sandbox = "sandbox-0"
	e.fake.Runtime.SetFakeSandboxes([]*apitest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: sandbox, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-web"},
		Labels:   map[string]string{"app": "web"},
	}}})
	e.fake.Runtime.SetFakeContainers(fakeContainers(60))
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
		// Straight to the fake runtime, through the core and through the
		// full server, call by call in turn (the first rotating), as
		// cri-guard-bench measures: on a loaded machine the medians of
		// one stretch of time compare where two ns/op runs apart do not.
		// The figures are the p50 each hop adds to the direct call.
		b.Run(c.name+"/interleaved", func(b *testing.B) {
			var direct, core, full []time.Duration
			sides := [3]struct {
				rt  runtimeapi.RuntimeServiceClient
				out *[]time.Duration
			}{{e.direct, &direct}, {proxies["core"], &core}, {proxies["full"], &full}}
			for i := 0; b.Loop(); i++ {
				for k := range len(sides) {
					s := sides[(i+k)%len(sides)]
					start := time.Now()
					if err := c.call(s.rt); err != nil {
						b.Fatal(err)
					}
					*s.out = append(*s.out, time.Since(start))
				}
			}
			pd, pc, pf := median(direct), median(core), median(full)
			b.ReportMetric(float64(pc-pd)/1e3, "core-added-p50-µs")
			b.ReportMetric(float64(pf-pd)/1e3, "full-added-p50-µs")
			b.ReportMetric(float64(pf-pd)/float64(pc-pd), "full/core-added")
		})
		for _, side := range []string{"core", "full"} {
			rt := proxies[side]
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

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// serveAlso serves a second cri-guard server, configured by hooks and
// adjust, in front of e's fake runtime (on a runtime connection of its
// own, as a second cri-guard would have), until the test ends, and
// returns a CRI client through it.
func serveAlso(t testing.TB, e *env, hooks Hooks, adjust func(cfg *Config, backend *runtimeproxy.Client)) runtimeapi.RuntimeServiceClient {
	t.Helper()
	listen := filepath.Join(e.dir, "also", "cri-guard.sock")
	serveGuard(t, e.fake.Path, listen, hooks, adjust)
	return runtimeapi.NewRuntimeServiceClient(dialCRI(t, listen))
}
