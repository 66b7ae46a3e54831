//go:build integration

package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestRealPSIEviction: a pod whose container makes real memory pressure
// (tools/memhog maps a 400 MiB file in a 256 MiB container and keeps
// writing it) is evicted by cri-guard. It runs twice side by side: with the
// PSI trigger, and with the 10 s housekeeping alone, and reports the time
// from the container's start (pressure onset) to the sandbox being stopped.
func TestRealPSIEviction(t *testing.T) {
	env := needRuntime(t)
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err != nil {
			t.Skip("no cgroup2 hierarchy: container memory PSI cannot be read here")
		}
	}
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		t.Skip("kernel without PSI (/proc/pressure/memory): nothing to trigger on")
	}
	removePodsAtCleanup(t, env)
	hog := harness.BuildMemhog(t)
	results := map[string]time.Duration{}
	for _, mode := range []struct{ name, trigger string }{
		{"psi-trigger", `"some 100000 2000000"`}, // the default as armed without CAP_SYS_RESOURCE ("some 50000 1000000" widened)
		{"housekeeping-only", `""`},
	} {
		t.Run(mode.name, func(t *testing.T) {
			waitCalm(t)
			d := evictHog(t, env, hog, mode.trigger)
			results[mode.name] = d
			t.Logf("%s: first stall to sandbox stopped: %v", mode.name, d.Round(10*time.Millisecond))
		})
	}
	t.Logf("first stall to sandbox stopped: with PSI trigger %v, housekeeping (10s) alone %v",
		results["psi-trigger"].Round(10*time.Millisecond), results["housekeeping-only"].Round(10*time.Millisecond))
}

func evictHog(t *testing.T, env harness.Runtime, hog, trigger string) time.Duration {
	cfg := writeConfig(t, `
housekeepingInterval: 10s
podsCgroup: `+podCgroupRoot+`
evictionHard: {memory.pressure.some.avg10: "2%"}
evictionPressureTransitionPeriod: 5s
evictionMaxPodGracePeriod: 2s
psiTrigger: `+trigger+`
metricsAddress: ""
adminSocket: ""
`)
	g := startGuard(t, env, cfg...)
	dir := t.TempDir()
	data := harness.ShortTempDir(t)
	uid := harness.NewUID(t)
	pc := qosPodConfig("hog-"+uid[:6], uid, "besteffort")
	pc.LogDirectory = filepath.Join(dir, "logs")
	podJSON := writeJSON(t, dir, "pod.json", pc)
	ctrJSON := writeJSON(t, dir, "ctr.json", map[string]any{
		"metadata": map[string]any{"name": "memhog"},
		"image":    map[string]any{"image": harness.BusyboxImage},
		"command":  []string{"/memhog", "-file", "/data/hog", "-size", "400"},
		"log_path": "memhog.log",
		"mounts": []map[string]any{
			{"host_path": hog, "container_path": "/memhog", "readonly": true},
			{"host_path": data, "container_path": "/data"},
		},
		"linux": map[string]any{"resources": map[string]any{"memory_limit_in_bytes": 256 << 20}},
	})
	pod := env.Crictl(t, g.Socket, "runp", podJSON)
	ctr := env.Crictl(t, g.Socket, "create", pod, ctrJSON, podJSON)
	pressureFile := filepath.Join("/sys/fs/cgroup/unified", podCgroupRoot, "memory.pressure")
	total0 := stallTotal(pressureFile)
	env.Crictl(t, g.Socket, "start", ctr)
	started := time.Now()
	var onset time.Time // first stall of the pods cgroup after the start
	for {
		if onset.IsZero() && stallTotal(pressureFile) > total0 {
			onset = time.Now()
		}
		st := env.Crictl(t, env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", pod)
		if st == "SANDBOX_NOTREADY" {
			break
		}
		if time.Since(started) > 60*time.Second {
			t.Fatalf("memhog pod not evicted within 60s\n%s", g.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := time.Now()
	full, _ := os.ReadFile(g.Log)
	decided, ok := logTime(string(full), "evicting pod")
	if !ok {
		t.Fatalf("sandbox stopped, but not by cri-guard's eviction:\n%s", g.LogTail())
	}
	if onset.IsZero() {
		onset = started
	}
	fired := "none"
	if tm, ok := logTime(string(full), "psi trigger fired"); ok {
		fired = tm.Sub(onset).Round(10 * time.Millisecond).String()
	}
	t.Logf("container start → first stall %v; first stall → first trigger %s, → eviction decision %v, → sandbox NOTREADY %v",
		onset.Sub(started).Round(10*time.Millisecond), fired, decided.Sub(onset).Round(10*time.Millisecond), stopped.Sub(onset).Round(10*time.Millisecond))
	return stopped.Sub(onset)
}

// stallTotal reads the "some" total (µs) of a memory.pressure file, 0 if unreadable.
func stallTotal(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(b), "total=")
	if !ok {
		return 0
	}
	var total uint64
	_, _ = fmt.Sscanf(rest, "%d", &total)
	return total
}

// logTime returns the time of the first cri-guard log line with msg.
func logTime(log, msg string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, `time="`)
		if !ok {
			continue
		}
		ts, _, _ := strings.Cut(rest, `"`)
		if tm, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return tm, true
		}
	}
	return time.Time{}, false
}

// waitCalm waits until the test pods' memory PSI (avg10) has decayed, so
// that one run's pressure does not refuse the next run's pod.
func waitCalm(t *testing.T) {
	t.Helper()
	p := filepath.Join("/sys/fs/cgroup/unified", podCgroupRoot, "memory.pressure")
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(p)
		if err != nil {
			return // no pods cgroup yet: nothing to wait for
		}
		var avg10 float64
		if _, err := fmt.Sscanf(string(b), "some avg10=%f", &avg10); err != nil || avg10 < 0.5 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("memory PSI of %s did not calm down within 90s", p)
}
