//go:build integration

package guest

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wakeThreshold is the hard allocatableMemory.available threshold of
// TestGuestWakeupBeforeHousekeeping: about 200Mi over what the pods use at
// rest (kubepods.slice's memory.max is ~505Mi), so the hog crosses it within
// a minute of guest time.
const wakeThreshold = "300Mi"

// wakeups are the values of the `wakeup` field of cri-guard's `evicting pod`
// line: what woke the pass that decided.
var wakeups = map[string]bool{
	"tick": true, "trigger": true, "notification": true, "memory-events": true,
	"follow-up": true, "fast-poll": true,
}

// TestGuestWakeupBeforeHousekeeping: with housekeeping every 60 s,
// a runaway pod pushes kubepods.slice under a hard threshold and cri-guard
// evicts it from a pass that something other than the housekeeping tick woke,
// its log naming that wake-up, before any OOM kill in the slice.
func TestGuestWakeupBeforeHousekeeping(t *testing.T) {
	needGuest(t)
	r := runScript(t, 15*time.Minute, "wake.sh", wakeThreshold)
	expect(t, r, map[string]string{
		"housekeeping": "1m0s", "threshold": wakeThreshold,
		"restored_housekeeping": "10s", "restored_active": "active",
		"memhog_cgroup_seen": "yes", "memhog_cgroup_gone": "yes",
		// the shipped unit's WatchdogSec (30s) with housekeeping every 60s,
		// over an idle minute before the hog (wake.sh)
		"watchdog": "30s", "same_pid": "yes", "nrestarts": "0", "watchdog_timeouts": "0",
	})
	decision := r.get("decision")
	if r.get("decision_at") == "" || !strings.Contains(decision, "pod=memhog-vm") {
		t.Fatalf("cri-guard logged no `evicting pod` for memhog-vm: %q", decision)
	}
	if r.get("evicted_at") == "" {
		t.Error("cri-guard logged no `pod evicted` for memhog-vm")
	}
	expect(t, r, map[string]string{"memhog_ready": "0"})
	if n, _ := strconv.Atoi(r.get("memhog_notready")); n < 1 {
		t.Errorf("memhog-vm has %q NOTREADY sandboxes, want its stopped one", r.get("memhog_notready"))
	}
	t.Logf("the kubelet, since cri-guard's restart: %s `No ready sandbox for pod` lines for memhog-vm, %s refusals `The node had condition: [MemoryPressure]`",
		r.get("kubelet_no_ready_sandbox"), r.get("kubelet_saw_refusal"))
	if b, a := r.get("oom_kill_before"), r.get("oom_kill_after"); b == "" || b != a {
		t.Errorf("the OOM killer struck in kubepods.slice: oom_kill %q -> %q", b, a)
	}

	// What woke the deciding pass.
	wakeup, armedBy := r.get("wakeup"), r.get("armed_by")
	switch {
	case wakeup == "":
		t.Errorf("cri-guard's `evicting pod` line names no wakeup= (a cri-guard older than the wake-up fields): %q", decision)
	case !wakeups[wakeup]:
		t.Errorf("wakeup=%q is none of tick, trigger, notification, memory-events, follow-up, fast-poll: %q", wakeup, decision)
	case wakeup == "tick":
		t.Errorf("the eviction was decided by the 60 s housekeeping tick, not by a wake-up before it: %q", decision)
	case wakeup == "fast-poll" && armedBy == "":
		t.Errorf("wakeup=fast-poll without armed_by= (what started the fast poll): %q", decision)
	}
	t.Logf("wake-up that fired: wakeup=%s armed_by=%s (status: %q)", wakeup, armedBy, r.get("status_wakeup"))
	if wakeup != "" {
		// cri_guard_wakeups_total{source=wakeup} counted the deciding pass
		// (counters since the restart at the start of wake.sh).
		before, e1 := strconv.ParseFloat(r.get("wakeups_before_"+wakeup), 64)
		after, e2 := strconv.ParseFloat(r.get("wakeups_after_"+wakeup), 64)
		if e1 != nil || e2 != nil || !(after > before) {
			t.Errorf("cri_guard_wakeups_total{source=%q}: %q before the hog, %q after its eviction, want a rise", wakeup, r.get("wakeups_before_"+wakeup), r.get("wakeups_after_"+wakeup))
		}
		if s := r.get("status_wakeup"); !strings.HasPrefix(s, wakeup) {
			t.Errorf("cri-guard status gives the eviction's wake-up as %q, its log %q", s, wakeup)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.kv)) {
		if src, ok := strings.CutPrefix(k, "wakeups_after_"); ok {
			t.Logf("cri_guard_wakeups_total{source=%q}: %s -> %s", src, r.get("wakeups_before_"+src), r.get(k))
		}
	}

	// In order: the last reading over the threshold, the decision, the stop.
	f := func(k string) float64 {
		v, err := strconv.ParseFloat(r.get(k), 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	above, crossed, dec, ev := f("above_at"), f("crossed_at"), f("decision_at"), f("evicted_at")
	// cri-guard's own time of a line (ms) when it has one, rather than
	// the journal's (when journald took it in, batched)
	if v, ok := logTime(decision); ok {
		dec = v
	}
	if v, ok := logTime(r.get("evicted")); ok {
		ev = v
	}
	added, started := f("memhog_added_at"), f("guard_started_at")
	if !(above < dec) {
		t.Errorf("the decision (%.3f) is not after the sampler's last reading over the threshold (%.3f)", dec, above)
	}
	if !(dec <= ev) {
		t.Errorf("`pod evicted` (%.3f) is not after `evicting pod` (%.3f)", ev, dec)
	}
	// The timings, printed (guest clock; UML's are not the host's). The
	// sampler reads every 100 ms and the fast poll every 10 ms: the
	// sampler's first reading under the threshold may come after the decision.
	t.Logf("hog added -> crossing (between the sampler's readings at +%.2fs and +%.2fs) -> decision +%.2fs -> pod evicted +%.2fs",
		above-added, crossed-added, dec-added, ev-added)
	t.Logf("crossing -> decision: %.3fs after the last reading over the threshold, %.3fs from the first under it; decision -> pod evicted %.2fs",
		dec-above, dec-crossed, ev-dec)
	if !math.IsNaN(started) && dec > started {
		const hk = 60.0
		next := started + hk*math.Ceil((dec-started)/hk)
		t.Logf("housekeeping ticks every %.0fs from cri-guard's start (%.2fs before the decision): the next was due %.2fs after the decision", hk, dec-started, next-dec)
	}
}

// logTimeRE is the time of a logrus text line.
var logTimeRE = regexp.MustCompile(`\btime="([^"]+)"`)

// logTime is the time="..." of a logrus text line, in Unix seconds.
func logTime(line string) (float64, bool) {
	m := logTimeRE.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	ts, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		return 0, false
	}
	return float64(ts.UnixNano()) / 1e9, true
}
