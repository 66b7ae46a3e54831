package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cri-guard/cri-guard/internal/config"
)

// fakeNode writes a proc root (meminfo, pressure/memory) and an empty
// cgroup root under dir: 8Gi of memory, 2Gi available, memory PSI full
// avg10 20%.
func fakeNode(t testing.TB, dir string) (cgroupRoot, procRoot string) {
	t.Helper()
	cgroupRoot, procRoot = filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc")
	files := map[string]string{
		filepath.Join(procRoot, "meminfo"): "MemTotal:        8388608 kB\nMemFree:         1048576 kB\nMemAvailable:    2097152 kB\n",
		filepath.Join(procRoot, "pressure", "memory"): "some avg10=30.00 avg60=10.00 avg300=1.00 total=1000\n" +
			"full avg10=20.00 avg60=5.00 avg300=0.50 total=500\n",
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(cgroupRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	return cgroupRoot, procRoot
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	cg, proc := fakeNode(t, dir)
	roots := "cgroupRoot: " + cg + "\nprocRoot: " + proc + "\n"
	tests := []struct {
		name     string
		args     []string // before the file
		file     string   // contents; "-" = no file
		wantCode int
		wantErrs []string // exact stderr lines, without the "FILE: " prefix
	}{
		{name: "good", file: roots + "evictionHard: {memory.available: 1Gi, memory.pressure.full.avg10: 40%}\n"},
		{name: "soft threshold crossed is fine", file: roots + "evictionSoft: {memory.available: 3Gi}\nevictionSoftGracePeriod: {memory.available: 30s}\n"},
		{name: "hard memory threshold fires on the idle node", file: roots + "evictionHard: {memory.available: 3Gi}\n", wantCode: 1,
			wantErrs: []string{"evictionHard[memory.available]: 3Gi would fire now: memory.available is 2Gi"}},
		{name: "hard percent and psi thresholds fire", file: roots + "evictionHard: {memory.available: 50%, memory.pressure.full.avg10: 10%}\n", wantCode: 1,
			wantErrs: []string{
				"evictionHard[memory.available]: 50% would fire now: memory.available is 2Gi",
				"evictionHard[memory.pressure.full.avg10]: 10% would fire now: memory.pressure.full.avg10 is 20%",
			}},
		{name: "node check skipped", args: []string{"--skip-node-check"}, file: roots + "evictionHard: {memory.available: 3Gi}\n"},
		{name: "invalid values", file: roots + "listen: relative.sock\nhousekeepingInterval: 1ms\ncritical: {rules: old}\nonStatsError: maybe\n", wantCode: 1,
			wantErrs: []string{
				`critical.rules: must be modern or seed, got "old"`,
				"housekeepingInterval: must be at least 100ms, got 1ms",
				`listen: must be an absolute path, got "relative.sock"`,
				`onStatsError: must be admit or reject, got "maybe"`,
			}},
		{name: "bad threshold", file: roots + "evictionHard: {memory.free: 1Gi}\n", wantCode: 1,
			wantErrs: []string{"evictionHard[memory.free]: unsupported eviction signal"}},
		{name: "unknown key", file: roots + "evictionHrad: {memory.available: 1Gi}\n", wantCode: 1,
			wantErrs: []string{"evictionHrad: unknown field"}},
		{name: "missing file", file: "-", wantCode: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if tt.file != "-" {
				if err := os.WriteFile(path, []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			code := realMain(append(append([]string{"check-config"}, tt.args...), path), &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if tt.wantCode == 0 {
				if stderr.Len() > 0 {
					t.Errorf("stderr: %s", stderr.String())
				}
				// The effective config printed is valid and is the file's.
				printed, err := config.Parse(stdout.Bytes())
				if err != nil {
					t.Fatalf("printed config does not parse: %v\n%s", err, stdout.String())
				}
				want, err := config.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(normalize(printed), normalize(want)) {
					t.Errorf("printed %+v\nwant %+v", printed, want)
				}
				return
			}
			if tt.file == "-" {
				if !strings.Contains(stderr.String(), "no such file") {
					t.Errorf("stderr %q", stderr.String())
				}
				return
			}
			var want string
			for _, e := range tt.wantErrs {
				want += path + ": " + e + "\n"
			}
			if stderr.String() != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
			}
		})
	}
}

// normalize makes nil and empty maps and slices compare equal.
func normalize(c config.Config) config.Config {
	for _, m := range []*map[string]string{&c.EvictionHard, &c.EvictionSoft, &c.EvictionSoftGracePeriod, &c.EvictionMinimumReclaim} {
		if len(*m) == 0 {
			*m = nil
		}
	}
	if len(c.Critical.Namespaces) == 0 {
		c.Critical.Namespaces = nil
	}
	return c
}

func TestHumanBytes(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"}, {512, "512"}, {1024, "1Ki"}, {1536, "1.5Ki"}, {100 << 20, "100Mi"}, {20 << 30, "20Gi"}, {-(2 << 30), "-2Gi"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := humanBytes(tt.in); got != tt.want {
				t.Errorf("humanBytes(%d) = %q", tt.in, got)
			}
		})
	}
}

// TestCheckConfigKubeconfig: a kubeconfig the config names that exists and
// does not load fails the check (the daemon would only retry it forever);
// one not written yet (a joining node's) passes with a warning, since the
// daemon serves CRI-only until it appears. An empty file, and one that
// sets the removed kubernetes.taint, pass with a warning.
func TestCheckConfigKubeconfig(t *testing.T) {
	dir := t.TempDir()
	broken := writeFile(t, filepath.Join(dir, "broken.conf"), "clusters: [not, a, kubeconfig\n")
	good := writeFile(t, filepath.Join(dir, "good.conf"), "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n")
	tests := []struct {
		name, file string
		wantCode   int
		wantErr    string
	}{
		{"missing kubeconfig warns", "kubernetes: {kubeconfig: " + filepath.Join(dir, "later.conf") + "}\n", 0, "does not exist yet"},
		{"broken kubeconfig fails", "kubernetes: {kubeconfig: " + broken + "}\n", 1, "kubernetes.kubeconfig:"},
		// the node-side taint's key, gone: its kubeconfig is not read
		{"removed taint key warns, naming the controller", "kubernetes: {kubeconfig: " + good + ", taint: {enabled: true, kubeconfig: " + broken + "}}\n", 0,
			"warning: kubernetes.taint: removed in this release: the node taint cri-guard.io/memory-pressure is set by the taint controller, cri-guard-controller"},
		{"good kubeconfig", "kubernetes: {kubeconfig: " + good + "}\n", 0, ""},
		{"empty file warns", "\n", 0, "the file is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), tt.file)
			var stdout, stderr bytes.Buffer
			code := realMain([]string{"check-config", "--skip-node-check", path}, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if tt.wantErr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.wantErr)
			}
			if strings.Contains(stdout.String(), "taint") {
				t.Errorf("effective config:\n%s\nwant no taint setting", stdout.String())
			}
		})
	}
}
