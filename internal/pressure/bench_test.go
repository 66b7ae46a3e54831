package pressure

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// realCgroup creates an empty cgroup named name in the host's memory (v1)
// and unified hierarchies for the benchmark's lifetime, or skips.
func realCgroup(b *testing.B, name string) {
	b.Helper()
	var made []string
	for _, h := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(h); err != nil {
			continue
		}
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Skipf("cannot create cgroup %s: %v", dir, err)
		}
		made = append(made, dir)
	}
	b.Cleanup(func() {
		for _, d := range made {
			_ = os.Remove(d)
		}
	})
}

func BenchmarkNodeSample(b *testing.B) {
	cases := []struct{ name, cgroup, proc, pods string }{
		{"testdata-v2", "testdata/v2-psi/cgroup", "testdata/v2-psi/proc", "/kubepods.slice"},
		{"testdata-hybrid", "testdata/hybrid/cgroup", "testdata/hybrid/proc", "kubepods"},
		{"host", "/sys/fs/cgroup", "/proc", ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewSampler(SamplerConfig{CgroupRoot: c.cgroup, ProcRoot: c.proc, PodsCgroup: c.pods})
			if err != nil {
				b.Skipf("NewSampler: %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Node(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPodSample(b *testing.B) {
	hostPod := fmt.Sprintf("/cri-guard-bench-%d", os.Getpid())
	cases := []struct{ name, cgroup, proc, parent string }{
		{"testdata-v2", "testdata/v2-idle/cgroup", "testdata/v2-idle/proc", "kubepods-burstable-pod1234_abcd.slice"},
		{"testdata-hybrid", "testdata/hybrid/cgroup", "testdata/hybrid/proc", "kubepods/burstable/podabc"},
		{"host", "/sys/fs/cgroup", "/proc", hostPod},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.parent == hostPod {
				realCgroup(b, hostPod)
			}
			s, err := NewSampler(SamplerConfig{CgroupRoot: c.cgroup, ProcRoot: c.proc})
			if err != nil {
				b.Skipf("NewSampler: %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Pod(c.parent); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCgroup2StatMemory is the cgroups/v3 alternative for one v2 pod
// cgroup, for comparison with BenchmarkPodSample/testdata-v2.
func BenchmarkCgroup2StatMemory(b *testing.B) {
	m, err := cgroup2.Load("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice",
		cgroup2.WithMountpoint("testdata/v2-idle/cgroup"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.StatFiltered(cgroup2.StatMemory); err != nil {
			b.Fatal(err)
		}
	}
}
