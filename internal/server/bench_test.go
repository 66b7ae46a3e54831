package server

import (
	"context"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// Benchmarks of the hop: the same call straight to the fake runtime and
// through cri-guard. Compare with benchstat:
//
//	go test -run '^$' -bench . -benchmem -count 10 ./server/ > bench.txt
func BenchmarkVersion(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		rt   runtimeapi.RuntimeServiceClient
	}{{"direct", e.direct}, {"proxy", e.proxy}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkListContainers60(b *testing.B) {
	e := newEnv(b, nil)
	var cs []*apitest.FakeContainer
	for i := range 60 {
		c := &apitest.FakeContainer{SandboxID: fmt.Sprintf("sandbox-%02d", i/2)}
		c.Id = fmt.Sprintf("%064d", i)
		c.Metadata = &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i)}
		c.Image = &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.9"}
		c.Labels = map[string]string{"io.kubernetes.pod.name": fmt.Sprintf("pod-%d", i/2), "io.kubernetes.pod.namespace": "default"}
		cs = append(cs, c)
	}
	e.fake.Runtime.SetFakeContainers(cs)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		rt   runtimeapi.RuntimeServiceClient
	}{{"direct", e.direct}, {"proxy", e.proxy}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
