//go:build integration

package guest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestKubeletEviction: a current kubelet (systemd driver, cgroup v2)
// runs a runaway static pod through cri-guard; cri-guard evicts it before
// the kernel's OOM killer, keeps the critical static pod, and refuses a
// BestEffort pod while the pressure lasts.
func TestGuestKubeletEviction(t *testing.T) {
	needGuest(t)
	r := runScript(t, 15*time.Minute, "kubelet.sh")
	expect(t, r, map[string]string{"memhog_ready": "0", "late_sandboxes": "0"})
	if r.get("evicted_at") == "" {
		t.Fatal("cri-guard did not evict the runaway pod")
	}
	if r.get("oom_kill_before") != r.get("oom_kill_after") {
		t.Errorf("the OOM killer struck in kubepods.slice: oom_kill %s -> %s", r.get("oom_kill_before"), r.get("oom_kill_after"))
	}
	if c := r.get("critical_before"); c == "" || c != r.get("critical_after") {
		t.Errorf("the critical static pod's sandbox: %q before, %q after", c, r.get("critical_after"))
	}
	if !strings.Contains(r.get("decision"), "allocatableMemory.available") {
		t.Errorf("the eviction names no allocatableMemory.available signal: %q", r.get("decision"))
	}
	if !strings.Contains(r.get("late_refused"), "MemoryPressure") {
		t.Errorf("the BestEffort pod was not refused under pressure: %q", r.get("late_refused"))
	}
	cross, e1 := strconv.ParseFloat(r.get("crossed_at"), 64)
	dec, e2 := strconv.ParseFloat(r.get("decision_at"), 64)
	ev, e3 := strconv.ParseFloat(r.get("evicted_at"), 64)
	if e1 == nil && e2 == nil && e3 == nil {
		t.Logf("crossing -> decision %.2fs, -> sandbox stopped %.2fs (guest clock; UML timings are not the host's)", dec-cross, ev-cross)
	}
}
