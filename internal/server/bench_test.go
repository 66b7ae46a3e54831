package server

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	e.fake.Runtime.SetFakeContainers(fakeContainers(60))
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
