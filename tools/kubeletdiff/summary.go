package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/server/stats"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// How the kubelet's stats reach its eviction manager.
//
// From 1.37 the huge page adjustment of memory.available happens in the
// summary provider (pkg/kubelet/server/stats summary.go adjustForHugePages,
// behind the HugepageAwareEviction gate), not in the eviction package: a
// fake SummaryProvider would skip it. So the kubelet side runs the real
// summary provider (stats.NewSummaryProvider) over a fake stats.Provider
// that serves the step's cgroup and pod figures and the Node, whose
// capacity the kubelet's own code builds (cadvisor.CapacityFromMachineInfo)
// from cadvisor's own reading (sysinfo.GetHugePagesInfo) of the scenario's
// fake sysfs tree: the tree cri-guard's sampler reads.

// podsCgroupName is the pods cgroup both sides watch.
const podsCgroupName = "/kubepods"

// fakeStatsProvider is the stats.Provider behind the real summary
// provider. Only what Get and GetCPUAndMemoryStats call is implemented; the
// embedded nil interface makes any other call panic, so a kubelet that
// starts asking for more cannot pass unnoticed.
type fakeStatsProvider struct {
	stats.Provider
	k *kubeletSide
}

func (f fakeStatsProvider) GetNode(context.Context) (*v1.Node, error) { return f.k.node, nil }
func (f fakeStatsProvider) GetNodeConfig() cm.NodeConfig              { return cm.NodeConfig{} }
func (f fakeStatsProvider) GetPodCgroupRoot() string                  { return podsCgroupName }

func (f fakeStatsProvider) GetCgroupStats(_ context.Context, name string, _ bool) (*statsapi.ContainerStats, *statsapi.NetworkStats, error) {
	s, err := f.GetCgroupCPUAndMemoryStats(name, false)
	return s, nil, err
}

func (f fakeStatsProvider) GetCgroupCPUAndMemoryStats(name string, _ bool) (*statsapi.ContainerStats, error) {
	n := f.k.summary.Node
	switch name {
	case "/":
		return &statsapi.ContainerStats{Name: name, Memory: n.Memory}, nil
	case podsCgroupName:
		for _, c := range n.SystemContainers {
			if c.Name == statsapi.SystemContainerPods {
				c := c
				return &c, nil
			}
		}
	}
	return nil, fmt.Errorf("no stats for cgroup %q", name)
}

func (f fakeStatsProvider) ListPodStats(context.Context) ([]statsapi.PodStats, error) {
	return f.k.summary.Pods, nil
}

func (f fakeStatsProvider) ListPodStatsAndUpdateCPUNanoCoreUsage(context.Context) ([]statsapi.PodStats, error) {
	return f.k.summary.Pods, nil
}

func (f fakeStatsProvider) ListPodCPUAndMemoryStats(context.Context) ([]statsapi.PodStats, error) {
	return f.k.summary.Pods, nil
}

// No filesystems and no rlimits: no disk signals, as with the summary the
// fake provider of earlier releases returned.
func (f fakeStatsProvider) RootFsStats() (*statsapi.FsStats, error) { return nil, nil }
func (f fakeStatsProvider) ImageFsStats(context.Context) (*statsapi.FsStats, *statsapi.FsStats, error) {
	return nil, nil, nil
}
func (f fakeStatsProvider) RlimitStats() (*statsapi.RlimitStats, error) { return nil, nil }

// kubeletNode is the Node the kubelet reports for a scenario: capacity as
// pkg/kubelet/nodestatus MachineInfo sets it from cadvisor's machine info,
// whose huge pages cadvisor reads from <sysRoot>/kernel/mm/hugepages.
func kubeletNode(capacity int64, sysRoot string) (*v1.Node, error) {
	// cadvisor's machine/info.go passes "/sys/kernel/mm/hugepages/", with
	// the slash GetHugePagesNr joins on
	hp, err := sysinfo.GetHugePagesInfo(sysfs.NewRealSysFs(), filepath.Join(sysRoot, "kernel", "mm", "hugepages")+"/")
	if err != nil {
		return nil, fmt.Errorf("cadvisor huge pages: %w", err)
	}
	info := &cadvisorapi.MachineInfo{NumCores: 4, MemoryCapacity: uint64(capacity), HugePages: hp}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node"},
		Status:     v1.NodeStatus{Capacity: cadvisor.CapacityFromMachineInfo(info)},
	}, nil
}

// writeHugePages lays out a fake sysfs tree with the two sizes an x86-64
// kernel offers, and the scenario's page counts.
func writeHugePages(sysRoot string, pools []hugePool) error {
	counts := map[int64]int64{2048: 0, 1048576: 0}
	for _, p := range pools {
		counts[p.PageKB] += p.Pages
	}
	for kb, n := range counts {
		dir := filepath.Join(sysRoot, "kernel", "mm", "hugepages", fmt.Sprintf("hugepages-%dkB", kb))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "nr_hugepages"), fmt.Appendf(nil, "%d\n", n), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kubeletSubtractsHugePages reports the kubelet's HugepageAwareEviction
// gate as this build of it has it by default.
func kubeletSubtractsHugePages() bool {
	return utilfeature.DefaultFeatureGate.Enabled(features.HugepageAwareEviction)
}

// nodeFiles are the proc and cgroup files of cri-guard's sampler for one
// scenario's node: a cgroup v2 root with the memory controller, whose
// working set is memory.current (no inactive file), and MemTotal the
// node's capacity. Bytes, not the kB of meminfo's MemAvailable, so that
// samples one byte from an edge stay there.
type nodeFiles struct {
	dir     string
	sampler *pressure.Sampler
}

func newNodeFiles(dir string, capacity int64, subtractHugePages bool, now func() time.Time) (*nodeFiles, error) {
	f := &nodeFiles{dir: dir}
	files := map[string]string{
		"proc/meminfo":              fmt.Sprintf("MemTotal: %d kB\nMemFree: 0 kB\nMemAvailable: 0 kB\n", capacity>>10),
		"cgroup/cgroup.controllers": "cpu memory pids\n",
		"cgroup/memory.stat":        "anon 0\nfile 0\ninactive_file 0\n",
		"cgroup/memory.current":     "0\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	s, err := pressure.NewSampler(pressure.SamplerConfig{
		CgroupRoot: filepath.Join(dir, "cgroup"), ProcRoot: filepath.Join(dir, "proc"), SysRoot: filepath.Join(dir, "sys"),
		SubtractHugePages: subtractHugePages, Now: now,
	})
	if err != nil {
		return nil, err
	}
	if src, _ := s.Source(); src != pressure.SourceCgroupV2 {
		return nil, fmt.Errorf("fake node tree read as %s, want %s", src, pressure.SourceCgroupV2)
	}
	f.sampler = s
	return f, nil
}

// sample writes the node's working set and takes cri-guard's sample.
func (f *nodeFiles) sample(workingSet int64) (pressure.NodeSample, error) {
	if err := os.WriteFile(filepath.Join(f.dir, "cgroup", "memory.current"), fmt.Appendf(nil, "%d\n", workingSet), 0o644); err != nil {
		return pressure.NodeSample{}, err
	}
	n, err := f.sampler.Node()
	if err == nil && n.HugePagesError != nil {
		err = n.HugePagesError
	}
	return n, err
}
