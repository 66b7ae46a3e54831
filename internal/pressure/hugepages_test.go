package pressure

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// hugeTree copies testdata/<tree> (cgroup and proc) and the fake sysfs of
// testdata/sys-hugepages (512 pages of 2 MiB and one of 1 GiB: a 2 GiB
// pool) into one temporary root.
func hugeTree(t *testing.T, tree string) string {
	t.Helper()
	root := copyTree(t, tree)
	if err := os.CopyFS(filepath.Join(root, "sys"), os.DirFS(filepath.Join("testdata", "sys-hugepages"))); err != nil {
		t.Fatalf("copy sysfs tree: %v", err)
	}
	return root
}

// rootCurrentTree is hugeTree of v2-lowmem with a root memory.current of
// 5Gi and no inactive file: MemTotal 8Gi, a working set of 5Gi that, being
// memcg usage, counts no huge pages (as the kubelet's), 3Gi available.
func rootCurrentTree(t *testing.T) string {
	t.Helper()
	root := hugeTree(t, "v2-lowmem")
	for name, body := range map[string]string{"memory.current": "5368709120\n", "memory.stat": "anon 5368709120\nfile 0\ninactive_file 0\n"} {
		if err := os.WriteFile(filepath.Join(root, "cgroup", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// setPages writes a pool's nr_hugepages ("2048kB": the 2 MiB pool).
func setPages(t *testing.T, root, size, content string) {
	t.Helper()
	p := filepath.Join(root, "sys", hugePagesDir, "hugepages-"+size, "nr_hugepages")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func hugeSampler(t *testing.T, root string, subtract bool) (*Sampler, error) {
	t.Helper()
	return NewSampler(SamplerConfig{
		CgroupRoot:        filepath.Join(root, "cgroup"),
		ProcRoot:          filepath.Join(root, "proc"),
		SysRoot:           filepath.Join(root, "sys"),
		SubtractHugePages: subtract,
		Now:               func() time.Time { return time.Unix(1000, 0) },
	})
}

// TestHugePagesPool reads the pool as cadvisor's machine info does: every
// size's nr_hugepages × its page size, surplus pages not counted.
func TestHugePagesPool(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string)
		want    int64
		wantErr bool
	}{
		{name: "two sizes", want: 2 * gi},
		{name: "2 MiB pages only", setup: func(t *testing.T, root string) { setPages(t, root, "1048576kB", "0\n") }, want: gi},
		{name: "a few 2 MiB pages", setup: func(t *testing.T, root string) {
			setPages(t, root, "2048kB", "3")
			setPages(t, root, "1048576kB", "0")
		}, want: 6 * mi},
		{name: "no hugetlb in the kernel", setup: func(t *testing.T, root string) {
			if err := os.RemoveAll(filepath.Join(root, "sys", hugePagesDir)); err != nil {
				t.Fatal(err)
			}
		}, want: 0},
		{name: "an entry that names no page size", setup: func(t *testing.T, root string) {
			if err := os.Mkdir(filepath.Join(root, "sys", hugePagesDir, "hugepages-2MB"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true},
		{name: "a count that is not a number", setup: func(t *testing.T, root string) { setPages(t, root, "2048kB", "many\n") }, wantErr: true},
		{name: "a count out of range", setup: func(t *testing.T, root string) { setPages(t, root, "1048576kB", "9000000000000\n") }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := hugeTree(t, "hybrid")
			if tc.setup != nil {
				tc.setup(t, root)
			}
			s, err := hugeSampler(t, root, true)
			if tc.wantErr {
				if err == nil {
					t.Fatal("NewSampler accepted a broken huge page tree")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewSampler: %v", err)
			}
			n, err := s.Node()
			if err != nil {
				t.Fatalf("Node: %v", err)
			}
			if n.HugePagesBytes != tc.want || n.HugePagesError != nil {
				t.Errorf("pool %d (error %v), want %d", n.HugePagesBytes, n.HugePagesError, tc.want)
			}
		})
	}
}

// TestHugePagesAvailable: both trees have MemTotal 8Gi and 3Gi available
// without a pool. The kubelet from 1.37 takes the pool off memory.available,
// down to 0, and percentages refer to available + a working set without
// huge pages (MemTotal less the pool); up to 1.36 it does not. A root
// memory.current counts no huge pages, as the kubelet's working set; a
// MemAvailable (hybrid) already lacks the pool (the kernel takes it out of
// free memory), so there the pool leaves the working set and is taken off
// once, not twice: memory.available is MemAvailable, its capacity moves.
func TestHugePagesAvailable(t *testing.T) {
	tests := []struct {
		name, tree     string
		pages2M        string // nr_hugepages of the 2 MiB pool (the 1 GiB pool is emptied)
		subtract       bool
		wantWS         int64
		wantAvail      int64
		wantCapacity   int64
		wantSubtracted bool
	}{
		{name: "1.36: the pool counts as available", tree: "current", pages2M: "512", wantWS: 5 * gi, wantAvail: 3 * gi, wantCapacity: 8 * gi},
		{name: "1.37: the pool is taken off", tree: "current", pages2M: "512", subtract: true, wantWS: 5 * gi, wantAvail: 2 * gi, wantCapacity: 7 * gi, wantSubtracted: true},
		{name: "1.37: no pool, nothing taken off", tree: "current", pages2M: "0", subtract: true, wantWS: 5 * gi, wantAvail: 3 * gi, wantCapacity: 8 * gi},
		{name: "1.37: a pool as large as what is available leaves 0", tree: "current", pages2M: "1536", subtract: true, wantWS: 5 * gi, wantAvail: 0, wantCapacity: 5 * gi, wantSubtracted: true},
		{name: "1.37: a larger pool clamps at 0", tree: "current", pages2M: "2048", subtract: true, wantWS: 5 * gi, wantAvail: 0, wantCapacity: 5 * gi, wantSubtracted: true},
		{name: "1.36: a larger pool changes nothing", tree: "current", pages2M: "2048", wantWS: 5 * gi, wantAvail: 3 * gi, wantCapacity: 8 * gi},
		{name: "meminfo, 1.36: as before", tree: "hybrid", pages2M: "512", wantWS: 5 * gi, wantAvail: 3 * gi, wantCapacity: 8 * gi},
		{name: "meminfo, 1.37: the pool leaves the working set and is taken off once", tree: "hybrid", pages2M: "512", subtract: true,
			wantWS: 4 * gi, wantAvail: 3 * gi, wantCapacity: 7 * gi, wantSubtracted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := rootCurrentTree(t)
			if tc.tree == "hybrid" {
				root = hugeTree(t, "hybrid")
			}
			setPages(t, root, "1048576kB", "0")
			setPages(t, root, "2048kB", tc.pages2M+"\n")
			s, err := hugeSampler(t, root, tc.subtract)
			if err != nil {
				t.Fatal(err)
			}
			n, err := s.Node()
			if err != nil {
				t.Fatal(err)
			}
			if n.CapacityBytes != 8*gi || n.WorkingSetBytes != tc.wantWS {
				t.Errorf("capacity %d working set %d, want 8Gi and %d", n.CapacityBytes, n.WorkingSetBytes, tc.wantWS)
			}
			if n.AvailableBytes != tc.wantAvail || n.HugePagesSubtracted != tc.wantSubtracted {
				t.Errorf("available %d subtracted %v, want %d %v", n.AvailableBytes, n.HugePagesSubtracted, tc.wantAvail, tc.wantSubtracted)
			}
			o := n.Observations()[SignalMemoryAvailable]
			if o.Available != tc.wantAvail || o.Capacity != tc.wantCapacity {
				t.Errorf("observation available %d capacity %d, want %d %d", o.Available, o.Capacity, tc.wantAvail, tc.wantCapacity)
			}
		})
	}
}

// TestHugePagesAllocatableUnchanged: the kubelet subtracts the pool from
// the node's memory.available only; the pods cgroup's figures stay as
// they were (its limit never counted the pool as usable either way).
func TestHugePagesAllocatableUnchanged(t *testing.T) {
	root := hugeTree(t, "hybrid")
	var got [2]NodeSample
	for i, subtract := range []bool{false, true} {
		s, err := NewSampler(SamplerConfig{
			CgroupRoot: filepath.Join(root, "cgroup"), ProcRoot: filepath.Join(root, "proc"),
			SysRoot: filepath.Join(root, "sys"), PodsCgroup: "kubepods", SubtractHugePages: subtract,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got[i], err = s.Node(); err != nil {
			t.Fatal(err)
		}
	}
	if !got[1].HasAllocatable || got[0].AllocatableAvailableBytes != got[1].AllocatableAvailableBytes ||
		got[0].AllocatableCapacityBytes != got[1].AllocatableCapacityBytes {
		t.Errorf("allocatable without %d/%d, with %d/%d: want the same", got[0].AllocatableAvailableBytes, got[0].AllocatableCapacityBytes,
			got[1].AllocatableAvailableBytes, got[1].AllocatableCapacityBytes)
	}
	if got[0].Observations()[SignalMemoryAvailable].Capacity == got[1].Observations()[SignalMemoryAvailable].Capacity {
		t.Error("memory.available's capacity the same with and without the pool taken off")
	}
}

// TestHugePagesPercentThreshold: a hard memory.available<30% on the 8Gi
// node with 3Gi available (root memory.current) and a 1Gi pool. Up to 1.36: 30% of 8Gi is
// 2457.6Mi, 3Gi is above it. From 1.37: 30% of 7Gi is 2150.4Mi and 2Gi is
// below it: the threshold is met, and the message's quantity is 30% of 7Gi.
func TestHugePagesPercentThreshold(t *testing.T) {
	ths, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{"memory.available": "30%"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subtract  bool
		wantMet   bool
		wantLimit int64
	}{
		{subtract: false, wantMet: false, wantLimit: int64(float64(8*gi) * float64(float32(0.3)))},
		{subtract: true, wantMet: true, wantLimit: int64(float64(7*gi) * float64(float32(0.3)))},
	} {
		root := rootCurrentTree(t)
		setPages(t, root, "1048576kB", "1")
		setPages(t, root, "2048kB", "0")
		s, err := hugeSampler(t, root, tc.subtract)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Node()
		if err != nil {
			t.Fatal(err)
		}
		obs := n.Observations()
		r := NewEvaluator(ths, 5*time.Minute).Evaluate(time.Unix(1000, 0), obs)
		if met := len(r.Met) == 1; met != tc.wantMet {
			t.Errorf("subtract %v: met %v (%s), want %v", tc.subtract, met, joinMet(r.Met), tc.wantMet)
		}
		if got := ths[0].Value.Bytes(obs[SignalMemoryAvailable].Capacity); got != tc.wantLimit {
			t.Errorf("subtract %v: threshold %d bytes, want %d", tc.subtract, got, tc.wantLimit)
		}
	}
}

// TestHugePagesReadFailureKeepsLastPool: a pool that cannot be read at a
// sample keeps the last one read (the kubelet keeps its last machine info)
// and says why; memory.available stands.
func TestHugePagesReadFailureKeepsLastPool(t *testing.T) {
	root := rootCurrentTree(t)
	setPages(t, root, "1048576kB", "0")
	s, err := hugeSampler(t, root, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "sys", hugePagesDir, "hugepages-2048kB", "nr_hugepages")); err != nil {
		t.Fatal(err)
	}
	n, err := s.Node()
	if err != nil {
		t.Fatalf("Node: %v", err)
	}
	if !errors.Is(n.HugePagesError, fs.ErrNotExist) {
		t.Errorf("HugePagesError = %v, want a missing file", n.HugePagesError)
	}
	if n.HugePagesBytes != gi || n.AvailableBytes != 2*gi {
		t.Errorf("pool %d available %d, want the last pool 1Gi taken off: 2Gi", n.HugePagesBytes, n.AvailableBytes)
	}
	setPages(t, root, "2048kB", "256\n")
	if n, err = s.Node(); err != nil || n.HugePagesError != nil || n.HugePagesBytes != 512*mi {
		t.Errorf("after the file is back: pool %d, errors %v %v; want 512Mi", n.HugePagesBytes, err, n.HugePagesError)
	}
}
