//go:build integration

package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// reloadNamespace is the namespace of TestReloadMovesFastPaths' pod.
const reloadNamespace = "cri-guard-reload"

// TestReloadMovesFastPaths: a SIGHUP that raises a
// hard allocatableMemory.available threshold (100Mi -> 400Mi of a 1Gi pods
// cgroup) moves every fast path armed for it at once. Housekeeping is an
// hour and the PSI trigger is off, so only a fast path can see a runaway
// that crosses the new level and never the old one (memhog touches 700Mi
// and holds it: about 320Mi stay available). Each fast path runs alone:
// the kernel memcg notification (v1 cgroup.event_control, re-armed by the
// loop at the new level) and the fast poll (its near band follows the
// thresholds). On a build whose reload left the notification at the old
// level the "memcg" case is never evicted.
func TestReloadMovesFastPaths(t *testing.T) {
	env := needRuntime(t)
	memRoot := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(memRoot, "memory.usage_in_bytes")); err != nil {
		t.Skip("no v1 memory hierarchy at /sys/fs/cgroup/memory: the pods cgroup cannot be limited here")
	}
	hog := harness.BuildMemhog(t)
	for _, mode := range []struct{ name, lines string }{
		{"memcg", "kernelMemcgNotification: true\nfastPoll: {interval: 0s, watch: 0s}\n"},
		{"fastpoll", "kernelMemcgNotification: false\n"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			group := fmt.Sprintf("%s/reload-%d-%s", podCgroupRoot, os.Getpid(), mode.name)
			dir := filepath.Join(memRoot, group)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// cleanups run last first: the pods are removed (a runaway
			// never evicted still runs) before the domain's cgroups
			t.Cleanup(func() { removeCgroupTree(t, dir) })
			removePodsAtCleanup(t, env)
			if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.Itoa(1<<30)), 0); err != nil {
				t.Fatal(err)
			}
			var quoted []string
			for _, ns := range foreignNamespaces(t, env) {
				quoted = append(quoted, strconv.Quote(ns))
			}
			config := func(threshold string) string {
				return `podsCgroup: ` + group + `
housekeepingInterval: 1h
psiTrigger: ""
evictionHard: {memory.available: ` + threshold + `}
evictionPressureTransitionPeriod: 1s
metricsAddress: ""
adminSocket: ""
critical: {namespaces: [` + strings.Join(quoted, ", ") + `]}
` + mode.lines
			}
			args := writeConfig(t, config("100Mi"))
			g := startGuard(t, env, args...)
			if err := os.WriteFile(args[1], []byte(config("400Mi")), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			if _, ok := waitUntil(30*time.Second, func() (bool, string) {
				b, _ := os.ReadFile(g.Log)
				return strings.Contains(string(b), "eviction thresholds reloaded"), ""
			}); !ok {
				t.Fatalf("SIGHUP not reloaded within 30s\n%s", g.LogTail())
			}

			uid := harness.NewUID(t)
			pc := qosPodConfig("runaway-"+uid[:6], uid, "besteffort")
			pc.Metadata.Namespace = reloadNamespace
			pc.Linux.CgroupParent = group + "/kubepods/besteffort/pod" + uid
			work := t.TempDir()
			pc.LogDirectory = filepath.Join(work, "logs")
			podJSON := writeJSON(t, work, "pod.json", pc)
			ctrJSON := writeJSON(t, work, "ctr.json", map[string]any{
				"metadata": map[string]any{"name": "memhog"},
				"image":    map[string]any{"image": harness.BusyboxImage},
				"command":  []string{"/memhog", "-anon", "-prefill", "700", "-size", "700"},
				"log_path": "memhog.log",
				"mounts":   []map[string]any{{"host_path": hog, "container_path": "/memhog", "readonly": true}},
			})
			sandbox := env.Crictl(t, g.Socket, "runp", podJSON)
			ctr := env.Crictl(t, g.Socket, "create", sandbox, ctrJSON, podJSON)
			env.Crictl(t, g.Socket, "start", ctr)
			started := time.Now()

			// the crossing of the new level, stamped from the domain's own
			// working set (usage - total_inactive_file, as cri-guard reads
			// it) every millisecond, apart from the slower state polls
			crossing := make(chan time.Time, 1)
			stopWatch := make(chan struct{})
			defer close(stopWatch)
			go func() {
				for {
					if ws, err := v1WorkingSet(dir); err == nil && (1<<30)-ws < 400<<20 {
						crossing <- time.Now()
						return
					}
					select {
					case <-stopWatch:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			var crossed time.Time
			for {
				select {
				case crossed = <-crossing:
				default:
				}
				st, err := env.CrictlErr(env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", sandbox)
				if err == nil && strings.TrimSpace(st) == "SANDBOX_NOTREADY" {
					break
				}
				if time.Since(started) > 90*time.Second {
					t.Fatalf("%s: the runaway (700Mi of a 1Gi pods cgroup, crossing only the reloaded 400Mi level, crossed=%v) was not evicted within 90s with housekeeping at 1h: the fast path still watches the old 100Mi level\n%s",
						mode.name, !crossed.IsZero(), g.LogTail())
				}
				time.Sleep(20 * time.Millisecond)
			}
			stopped := time.Now()
			if crossed.IsZero() {
				select {
				case crossed = <-crossing:
				case <-time.After(100 * time.Millisecond):
				}
			}
			full, _ := os.ReadFile(g.Log)
			decided, ok := logTime(string(full), "evicting pod")
			if !ok {
				t.Fatalf("sandbox stopped, but not by cri-guard's eviction:\n%s", g.LogTail())
			}
			if crossed.IsZero() {
				crossed = started
			}
			t.Logf("%s after the reload: start -> crossing of the new level %v, crossing -> eviction decision %v, -> sandbox NOTREADY %v (housekeeping 1h)",
				mode.name, crossed.Sub(started).Round(time.Millisecond), decided.Sub(crossed).Round(time.Millisecond), stopped.Sub(crossed).Round(time.Millisecond))
		})
	}
}

// v1WorkingSet reads a v1 memory cgroup's usage minus its inactive file pages.
func v1WorkingSet(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, _ := strconv.ParseInt(v, 10, 64)
			return max(usage-inactive, 0), nil
		}
	}
	return usage, nil
}

// removeCgroupTree removes a v1 cgroup directory and the empty cgroups under
// it, deepest first (rmdir is the only way to remove a cgroup).
func removeCgroupTree(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !os.IsNotExist(err) {
			t.Logf("remove cgroup %s: %v", dirs[i], err)
		}
	}
}
