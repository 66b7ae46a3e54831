//go:build integration

package guest

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestV2Readings: what cri-guard reports on cgroup v2 with the systemd
// driver agrees with the files it reads, taken just before and just after
// its status (a running node moves a little in between).
func TestGuestV2Readings(t *testing.T) {
	needGuest(t)
	r := runScript(t, 3*time.Minute, "readings.sh")
	expect(t, r, map[string]string{"source": "cgroupv2"})
	const slack = 8 << 20 // bytes: what a running node moves between two reads
	within := func(name, guard, before, after string, slack float64) {
		t.Helper()
		g, e1 := strconv.ParseFloat(r.get(guard), 64)
		b, e2 := strconv.ParseFloat(r.get(before), 64)
		a, e3 := strconv.ParseFloat(r.get(after), 64)
		if e1 != nil || e2 != nil || e3 != nil {
			t.Errorf("%s: missing figures: cri-guard %q, files %q / %q", name, r.get(guard), r.get(before), r.get(after))
			return
		}
		lo, hi := math.Min(b, a)-slack, math.Max(b, a)+slack
		if g < lo || g > hi {
			t.Errorf("%s: cri-guard %.0f, the files %.0f before and %.0f after (slack %.0f)", name, g, b, a, slack)
		} else {
			t.Logf("%s: cri-guard %.0f, files %.0f / %.0f", name, g, b, a)
		}
	}
	within("memory.available", "guard_node_available", "before_node_available", "after_node_available", slack)
	within("allocatableMemory.available", "guard_alloc_available", "before_alloc_available", "after_alloc_available", slack)
	within("memory.pressure.some.avg10 of kubepods.slice", "guard_pods_psi", "before_pods_psi", "after_pods_psi", 1)
	pods := 0
	for k := range r.kv {
		uid, ok := strings.CutPrefix(k, "guard_pod_ws_")
		if !ok {
			continue
		}
		pods++
		within("working set of pod "+uid, k, "before_pod_ws_"+uid, "after_pod_ws_"+uid, slack)
	}
	if pods < 1 {
		t.Errorf("cri-guard has stats for %d pods, want the evictable static pod at least", pods)
	}
}
