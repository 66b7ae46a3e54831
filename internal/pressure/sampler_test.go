package pressure

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

// copyTree copies testdata/<name> into a fresh temporary directory.
func copyTree(t testing.TB, name string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", name))); err != nil {
		t.Fatalf("copy testdata %q: %v", name, err)
	}
	return dst
}

func newTreeSampler(t testing.TB, root, pods string) *Sampler {
	t.Helper()
	s, err := NewSampler(SamplerConfig{
		CgroupRoot: filepath.Join(root, "cgroup"),
		ProcRoot:   filepath.Join(root, "proc"),
		SysRoot:    filepath.Join(root, "sys"), // none in these trees: no huge pages
		PodsCgroup: pods,
		Now:        func() time.Time { return time.Unix(1000, 0) },
	})
	if err != nil {
		t.Fatalf("NewSampler: %v", err)
	}
	return s
}

func TestSamplerNode(t *testing.T) {
	tests := []struct {
		name, tree, pods string
		wantSource       string
		wantWS, wantAv   int64
		wantAlloc        bool
		wantAllocCap     int64
		wantAllocAv      int64
		wantSome10       float64 // node
		wantPodsSome10   float64 // -1: PodsSome nil
		wantObsSome10    float64
		wantObsFull60    float64
	}{
		{
			name: "no pressure", tree: "v2-idle", pods: "/kubepods.slice", wantSource: SourceCgroupV2,
			wantWS: 1536 * mi, wantAv: 6656 * mi, wantAlloc: true, wantAllocCap: 8 * gi, wantAllocAv: 8*gi - 768*mi,
			wantSome10: 0, wantPodsSome10: 0, wantObsSome10: 0,
		},
		{
			name: "low memory.available and pods cgroup with a limit", tree: "v2-lowmem", pods: "kubepods.slice",
			wantSource: SourceCgroupV2, wantWS: 8*gi - 80*mi, wantAv: 80 * mi,
			wantAlloc: true, wantAllocCap: 6 * gi, wantAllocAv: 144 * mi,
			wantSome10: 3.5, wantPodsSome10: 2, wantObsSome10: 2, wantObsFull60: 0.5,
		},
		{
			name: "high PSI some and full from pods cgroup", tree: "v2-psi", pods: "/kubepods.slice", wantSource: SourceCgroupV2,
			wantWS: 3 * gi, wantAv: 5 * gi, wantAlloc: true, wantAllocCap: 8 * gi, wantAllocAv: 6 * gi,
			wantSome10: 55.12, wantPodsSome10: 60, wantObsSome10: 60, wantObsFull60: 22.75,
		},
		{
			name: "high PSI from node without pods cgroup", tree: "v2-psi", wantSource: SourceCgroupV2,
			wantWS: 3 * gi, wantAv: 5 * gi, wantSome10: 55.12, wantPodsSome10: -1, wantObsSome10: 55.12, wantObsFull60: 20,
		},
		{
			name: "hybrid layout", tree: "hybrid", pods: "kubepods", wantSource: SourceMeminfo,
			wantWS: 5 * gi, wantAv: 3 * gi, wantAlloc: true, wantAllocCap: 8 * gi, wantAllocAv: 8*gi - 1536*mi,
			wantSome10: 12.25, wantPodsSome10: 20, wantObsSome10: 20, wantObsFull60: 7,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTreeSampler(t, filepath.Join("testdata", tc.tree), tc.pods)
			n, err := s.Node()
			if err != nil {
				t.Fatalf("Node: %v", err)
			}
			if n.PodsError != nil {
				t.Fatalf("PodsError: %v", n.PodsError)
			}
			if n.Source != tc.wantSource || n.CapacityBytes != 8*gi || n.WorkingSetBytes != tc.wantWS || n.AvailableBytes != tc.wantAv {
				t.Errorf("got source %s capacity %d ws %d available %d, want %s %d %d %d",
					n.Source, n.CapacityBytes, n.WorkingSetBytes, n.AvailableBytes, tc.wantSource, 8*gi, tc.wantWS, tc.wantAv)
			}
			if n.HasAllocatable != tc.wantAlloc || n.AllocatableCapacityBytes != tc.wantAllocCap || n.AllocatableAvailableBytes != tc.wantAllocAv {
				t.Errorf("allocatable %v %d %d, want %v %d %d", n.HasAllocatable, n.AllocatableCapacityBytes,
					n.AllocatableAvailableBytes, tc.wantAlloc, tc.wantAllocCap, tc.wantAllocAv)
			}
			if !n.HasPSI || n.Some.Avg10 != tc.wantSome10 {
				t.Errorf("node PSI %v some avg10 %v, want %v", n.HasPSI, n.Some.Avg10, tc.wantSome10)
			}
			switch {
			case tc.wantPodsSome10 < 0 && n.PodsSome != nil:
				t.Errorf("PodsSome = %+v, want nil", *n.PodsSome)
			case tc.wantPodsSome10 >= 0 && (n.PodsSome == nil || n.PodsSome.Avg10 != tc.wantPodsSome10):
				t.Errorf("PodsSome = %+v, want avg10 %v", n.PodsSome, tc.wantPodsSome10)
			}
			if !n.Time.Equal(time.Unix(1000, 0)) {
				t.Errorf("Time = %v, want injected clock", n.Time)
			}
			obs := n.Observations()
			if got := obs[SignalMemoryAvailable]; got.Available != tc.wantAv || got.Capacity != 8*gi {
				t.Errorf("memory.available observation %+v", got)
			}
			if _, ok := obs[SignalAllocatableMemoryAvailable]; ok != tc.wantAlloc {
				t.Errorf("allocatable observation present %v, want %v", ok, tc.wantAlloc)
			}
			if got := obs[SignalPSISomeAvg10].Percent; got != tc.wantObsSome10 {
				t.Errorf("some.avg10 observation %v, want %v", got, tc.wantObsSome10)
			}
			if got := obs[SignalPSIFullAvg60].Percent; got != tc.wantObsFull60 {
				t.Errorf("full.avg60 observation %v, want %v", got, tc.wantObsFull60)
			}
		})
	}
}

func TestSamplerSource(t *testing.T) {
	tests := []struct {
		tree       string
		wantSource string
		wantMemV   int
	}{
		{"v2-idle", SourceCgroupV2, 2},
		{"hybrid", SourceMeminfo, 1},
	}
	for _, tc := range tests {
		t.Run(tc.tree, func(t *testing.T) {
			s := newTreeSampler(t, filepath.Join("testdata", tc.tree), "")
			src, v := s.Source()
			if src != tc.wantSource || v != tc.wantMemV {
				t.Errorf("Source() = %s, %d; want %s, %d", src, v, tc.wantSource, tc.wantMemV)
			}
		})
	}
}

func TestSamplerPod(t *testing.T) {
	tests := []struct {
		name, tree, parent string
		want               PodStats
		wantNoStats        bool
	}{
		{
			name: "v2 systemd leaf with memory.min", tree: "v2-idle", parent: "kubepods-burstable-pod1234_abcd.slice",
			want: PodStats{HasMemory: true, UsageBytes: 300 * mi, WorkingSetBytes: 200 * mi, HasRequest: true, RequestBytes: 128 * mi, HasPSI: true},
		},
		{
			name: "v2 systemd full path", tree: "v2-idle", parent: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice",
			want: PodStats{HasMemory: true, UsageBytes: 300 * mi, WorkingSetBytes: 200 * mi, HasRequest: true, RequestBytes: 128 * mi, HasPSI: true},
		},
		{
			name: "v2 cgroupfs without request", tree: "v2-idle", parent: "/kubepods/besteffort/pod5678",
			want: PodStats{HasMemory: true, UsageBytes: 50 * mi, WorkingSetBytes: 40 * mi, HasPSI: true},
		},
		{name: "v2 absent pod", tree: "v2-idle", parent: "kubepods/besteffort/podgone", wantNoStats: true},
		{
			name: "hybrid v1 memory and unified PSI", tree: "hybrid", parent: "kubepods/burstable/podabc",
			want: PodStats{
				HasMemory: true, UsageBytes: 300 * mi, WorkingSetBytes: 200 * mi, HasRequest: true, RequestBytes: 256 * mi,
				HasPSI: true, Some: PSI{Avg10: 25.5, Avg60: 12, Avg300: 4, Total: 7000000}, Full: PSI{Avg10: 18.25, Avg60: 9, Avg300: 3, Total: 3000000},
			},
		},
		{
			name: "hybrid PSI only", tree: "hybrid", parent: "/kubepods/besteffort/podpsionly",
			want: PodStats{HasPSI: true},
		},
		{name: "hybrid absent pod", tree: "hybrid", parent: "/kubepods/besteffort/podgone", wantNoStats: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTreeSampler(t, filepath.Join("testdata", tc.tree), "")
			got, err := s.Pod(tc.parent)
			if tc.wantNoStats {
				if !errors.Is(err, ErrNoStats) {
					t.Fatalf("Pod(%q) = %+v, %v; want ErrNoStats", tc.parent, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Pod(%q): %v", tc.parent, err)
			}
			if got != tc.want {
				t.Errorf("Pod(%q) = %+v\nwant %+v", tc.parent, got, tc.want)
			}
		})
	}
}

func TestSamplerMissingFiles(t *testing.T) {
	tests := []struct {
		name   string
		remove []string
		check  func(t *testing.T, s *Sampler)
	}{
		{
			name:   "node PSI falls back to root memory.pressure",
			remove: []string{"proc/pressure/memory"},
			check: func(t *testing.T, s *Sampler) {
				n, err := s.Node()
				if err != nil || !n.HasPSI {
					t.Fatalf("Node = %+v, %v; want PSI from the root cgroup", n, err)
				}
			},
		},
		{
			name:   "no PSI at all drops PSI signals",
			remove: []string{"proc/pressure/memory", "cgroup/memory.pressure", "cgroup/kubepods.slice/memory.pressure"},
			check: func(t *testing.T, s *Sampler) {
				n, err := s.Node()
				if err != nil || n.HasPSI {
					t.Fatalf("Node = %+v, %v; want no PSI", n, err)
				}
				if _, ok := n.Observations()[SignalPSISomeAvg10]; ok {
					t.Errorf("PSI observation present without PSI")
				}
			},
		},
		{
			name:   "pods cgroup gone keeps node figures",
			remove: []string{"cgroup/kubepods.slice"},
			check: func(t *testing.T, s *Sampler) {
				n, err := s.Node()
				if err != nil {
					t.Fatalf("Node: %v", err)
				}
				if !errors.Is(n.PodsError, ErrNoStats) || n.HasAllocatable || n.PodsSome != nil || n.AvailableBytes != 6656*mi {
					t.Errorf("Node = %+v; want PodsError ErrNoStats, node figures kept", n)
				}
			},
		},
		{
			name:   "pod memory.stat missing is an error, not no stats",
			remove: []string{"cgroup/kubepods/besteffort/pod5678/memory.stat"},
			check: func(t *testing.T, s *Sampler) {
				_, err := s.Pod("kubepods/besteffort/pod5678")
				if err == nil || errors.Is(err, ErrNoStats) {
					t.Errorf("Pod err = %v; want an error other than ErrNoStats", err)
				}
			},
		},
		{
			name:   "pod without memory controller files has PSI only",
			remove: []string{"cgroup/kubepods/besteffort/pod5678/memory.current"},
			check: func(t *testing.T, s *Sampler) {
				p, err := s.Pod("kubepods/besteffort/pod5678")
				if err != nil || p.HasMemory || !p.HasPSI {
					t.Errorf("Pod = %+v, %v; want PSI only", p, err)
				}
			},
		},
		{
			name:   "root memory.stat missing fails the node sample",
			remove: []string{"cgroup/memory.stat"},
			check: func(t *testing.T, s *Sampler) {
				if _, err := s.Node(); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Node err = %v; want not-exist", err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, "v2-idle")
			s := newTreeSampler(t, root, "/kubepods.slice")
			for _, p := range tc.remove {
				if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			tc.check(t, s)
		})
	}
}

func TestNewSamplerErrors(t *testing.T) {
	root := copyTree(t, "v2-idle")
	if err := os.Remove(filepath.Join(root, "proc/meminfo")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSampler(SamplerConfig{CgroupRoot: filepath.Join(root, "cgroup"), ProcRoot: filepath.Join(root, "proc")}); err == nil {
		t.Errorf("NewSampler without meminfo: want error")
	}
	if _, err := NewSampler(SamplerConfig{CgroupRoot: "testdata/v2-idle/cgroup", ProcRoot: "testdata/v2-idle/proc", PodsCgroup: "../etc"}); err == nil {
		t.Errorf("NewSampler with escaping pods cgroup: want error")
	}
}

func TestSamplerGarbage(t *testing.T) {
	tests := []struct {
		name, file, content string
		pod                 string // sample this pod instead of the node
		wantPodsErr         bool   // node succeeds with PodsError
		wantPSIErr          bool   // node succeeds with PSIError, memory signals kept
	}{
		{name: "root memory.stat", file: "cgroup/memory.stat", content: "anon 12\ninactive_file banana\n"},
		{name: "proc pressure", file: "proc/pressure/memory", content: "some avg10=abc avg60=0.00 avg300=0.00 total=0\n", wantPSIErr: true},
		{name: "meminfo", file: "proc/meminfo", content: "MemTotal: lots kB\nMemAvailable: 1 kB\n"},
		{name: "pods memory.current", file: "cgroup/kubepods.slice/memory.current", content: "lots\n", wantPodsErr: true},
		{name: "pods memory.pressure", file: "cgroup/kubepods.slice/memory.pressure", content: "full avg10=1.00\n", wantPodsErr: true},
		{name: "pod memory.max", file: "cgroup/kubepods/besteffort/pod5678/memory.max", content: "-1\n", pod: "kubepods/besteffort/pod5678"},
		{name: "pod memory.pressure", file: "cgroup/kubepods/besteffort/pod5678/memory.pressure", content: "some avg10=1.00\n", pod: "kubepods/besteffort/pod5678"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, "v2-idle")
			s := newTreeSampler(t, root, "/kubepods.slice")
			if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.pod != "" {
				if _, err := s.Pod(tc.pod); err == nil || errors.Is(err, ErrNoStats) {
					t.Errorf("Pod err = %v; want a parse error", err)
				}
				return
			}
			n, err := s.Node()
			if tc.wantPSIErr {
				if err != nil || n.PSIError == nil || n.HasPSI || n.AvailableBytes == 0 {
					t.Errorf("Node = %+v, %v; want memory.available kept and a PSI error", n, err)
				}
				return
			}
			if tc.wantPodsErr {
				if err != nil || n.PodsError == nil || errors.Is(n.PodsError, ErrNoStats) {
					t.Errorf("Node = %v, PodsError %v; want node ok and a pods parse error", err, n.PodsError)
				}
				return
			}
			if err == nil {
				t.Errorf("Node succeeded on garbage %s: %+v", tc.file, n)
			}
		})
	}
	t.Run("garbage tree", func(t *testing.T) {
		s := newTreeSampler(t, "testdata/v2-garbage", "")
		if _, err := s.Node(); err == nil {
			t.Errorf("Node on v2-garbage: want error")
		}
		if _, err := s.Pod("kubepods/pod1"); err == nil || errors.Is(err, ErrNoStats) {
			t.Errorf("Pod on v2-garbage: %v; want parse error", err)
		}
	})
}

func TestCgroupPath(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "kubepods/burstable/pod123", want: "/kubepods/burstable/pod123"},
		{in: "/kubepods/pod123", want: "/kubepods/pod123"},
		{in: "kubepods-burstable-pod1234_abcd.slice", want: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice"},
		{in: "kubepods-pod1.slice", want: "/kubepods.slice/kubepods-pod1.slice"},
		{in: "kubepods.slice", want: "/kubepods.slice"},
		{in: "/kubepods.slice/kubepods-besteffort.slice", want: "/kubepods.slice/kubepods-besteffort.slice"},
		{in: "", wantErr: true},
		{in: "/", wantErr: true},
		{in: "-.slice", wantErr: true},
		{in: "kubepods--x.slice", wantErr: true},
		{in: "kubepods/../../etc", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := CgroupPath(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("CgroupPath(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
