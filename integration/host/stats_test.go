//go:build integration

package host

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// fakeStats is a fake proc root (meminfo, pressure/memory) and an empty
// cgroup root, given to cri-guard with --proc-root and --cgroup-root, so a
// test decides what memory pressure cri-guard measures.
type fakeStats struct {
	proc, cgroup string
}

func newFakeStats(t *testing.T) *fakeStats {
	t.Helper()
	dir := harness.ShortTempDir(t)
	f := &fakeStats{proc: filepath.Join(dir, "proc"), cgroup: filepath.Join(dir, "cgroup")}
	for _, d := range []string{filepath.Join(f.proc, "pressure"), f.cgroup} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.setAvailable(t, 12<<30)
	f.setPSI(t, 0, 0)
	return f
}

// setAvailable writes a meminfo whose MemAvailable is b bytes. The file is
// replaced by rename so cri-guard never reads half of it.
func (f *fakeStats) setAvailable(t *testing.T, b int64) {
	t.Helper()
	harness.WriteMeminfo(t, filepath.Join(f.proc, "meminfo"), b)
}

// setPSI writes the node's memory pressure averages (percent).
func (f *fakeStats) setPSI(t *testing.T, some, full float64) {
	t.Helper()
	harness.WriteAtomic(t, filepath.Join(f.proc, "pressure", "memory"), fmt.Sprintf(
		"some avg10=%.2f avg60=%.2f avg300=0.00 total=1\nfull avg10=%.2f avg60=%.2f avg300=0.00 total=1\n", some, some, full, full))
}

func (f *fakeStats) args() []string {
	return []string{"--proc-root", f.proc, "--cgroup-root", f.cgroup}
}

// writeConfig writes a cri-guard config file and returns the --config args.
func writeConfig(t *testing.T, yaml string) []string {
	t.Helper()
	p := filepath.Join(harness.ShortTempDir(t), "cri-guard.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", p}
}

// qosPodConfig is podConfig with a kubelet-style cgroup parent for the QoS
// class ("besteffort", "burstable" or "" for guaranteed) under podCgroupRoot.
func qosPodConfig(name, uid, qos string) *runtimeapi.PodSandboxConfig {
	c := podConfig(name, uid)
	parent := podCgroupRoot + "/kubepods"
	if qos != "" {
		parent += "/" + qos
	}
	c.Linux.CgroupParent = parent + "/pod" + uid
	return c
}

// withV1Memory turns the fake cgroup root into a v1 memory hierarchy, so
// that pod usage can be faked too.
func (f *fakeStats) withV1Memory(t *testing.T) {
	t.Helper()
	root := filepath.Join(f.cgroup, "memory")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteAtomic(t, filepath.Join(root, "memory.usage_in_bytes"), "0\n")
}

// setPodMemory fakes a pod cgroup's v1 memory usage and request (soft limit).
func (f *fakeStats) setPodMemory(t *testing.T, cgroupParent string, usage, request int64) {
	t.Helper()
	dir := filepath.Join(f.cgroup, "memory", cgroupParent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteAtomic(t, filepath.Join(dir, "memory.usage_in_bytes"), fmt.Sprintf("%d\n", usage))
	harness.WriteAtomic(t, filepath.Join(dir, "memory.stat"), "cache 0\nrss 0\ntotal_inactive_file 0\n")
	harness.WriteAtomic(t, filepath.Join(dir, "memory.limit_in_bytes"), "9223372036854771712\n")
	harness.WriteAtomic(t, filepath.Join(dir, "memory.soft_limit_in_bytes"), fmt.Sprintf("%d\n", request))
}
