//go:build integration

package guest

import (
	"strconv"
	"testing"
	"time"
)

// TestGuestSystemd: cri-guard as its unit runs it, with the kubelet and its
// static pods running through it.
func TestGuestSystemd(t *testing.T) {
	needGuest(t)
	t.Run("hardening", func(t *testing.T) {
		r := runScript(t, 3*time.Minute, "systemd.sh", "hardening")
		expect(t, r, map[string]string{
			"protect_system": "strict", "nnp": "yes", "stats_error": "", "source": "cgroupv2",
			"runtime_connected": "true", "cri": "ok", "psi_disabled": "0",
		})
		if r.get("psi_armed") == "0" {
			t.Error("the PSI trigger was not armed under the unit's hardening")
		}
		if n, _ := strconv.Atoi(r.get("metrics")); n == 0 {
			t.Error("no cri_guard_ metrics served")
		}
		// The unit's rating here, as on the host (cmd/cri-guard's
		// TestSystemdUnitSecurity rates the file offline).
		if e, err := strconv.ParseFloat(r.get("exposure"), 64); err != nil || e > 3.0 {
			t.Errorf("systemd-analyze security: exposure %q, want 3.0 or better", r.get("exposure"))
		}
		// PSI triggers with 1 s windows need CAP_SYS_RESOURCE: the pods
		// cgroup's for this process, the node's for provision.sh's start
		// before the kubelet made kubepods.slice.
		if r.get("psi_cgroup_1s") == "0" || r.get("psi_cgroup_1s") == "" {
			t.Error("no PSI trigger with a 1 s window armed on the pods cgroup's memory.pressure")
		}
		if r.get("psi_node_1s") == "0" || r.get("psi_node_1s") == "" {
			t.Error("no PSI trigger with a 1 s window armed on /proc/pressure/memory in this boot")
		}
		expect(t, r, map[string]string{
			"psi_widened": "0",
			// CAP_KILL (5) and CAP_SYS_RESOURCE (24), nothing else
			"cap_eff":        "0000000001000020",
			"cgroup_mount":   "rw",
			"proc_sys_mount": "ro",
		})
	})
	t.Run("containerd-restart", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "systemd.sh", "containerd-restart")
		expect(t, r, map[string]string{
			"containerd_restarted": "yes", "same_pid": "yes", "nrestarts": "0", "active": "active",
			"runtime_name": "containerd", "runtime_connected": "true", "sandboxes_kept": "yes",
		})
	})
	t.Run("ready-after-restore", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "systemd.sh", "ready")
		expect(t, r, map[string]string{"active": "active"})
		done, err1 := strconv.ParseFloat(r.get("restore_done_at"), 64)
		started, err2 := strconv.ParseFloat(r.get("started_at"), 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("no restore/started times in the journal: %q %q", r.get("restore_done_at"), r.get("started_at"))
		}
		if done > started {
			t.Errorf("systemd saw READY at %.3f, before the restore was done at %.3f", started, done)
		}
		if n, _ := strconv.Atoi(r.get("restored")); n < 2 {
			t.Errorf("restore done with %q records, want the 2 static pods at least", r.get("restored"))
		}
	})
	t.Run("reload", func(t *testing.T) {
		r := runScript(t, 3*time.Minute, "systemd.sh", "reload")
		expect(t, r, map[string]string{"threshold": "170Mi", "same_pid": "yes", "restored_threshold": "150Mi"})
	})
	t.Run("watchdog", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "systemd.sh", "watchdog")
		expect(t, r, map[string]string{"nrestarts": "1", "new_pid": "yes", "sandboxes_kept": "yes", "containers_kept": "yes"})
		if r.get("watchdog_logged") == "0" {
			t.Error("systemd did not log a watchdog timeout")
		}
	})
	t.Run("sigkill", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "systemd.sh", "sigkill")
		expect(t, r, map[string]string{"nrestarts": "1", "sandboxes_kept": "yes"})
		if r.get("restore") == "" {
			t.Error("the restarted cri-guard logged no restore")
		}
		if n, _ := strconv.Atoi(r.get("status_pods")); n < 2 {
			t.Errorf("status after the restart shows %q ready pods, want the 2 static pods at least", r.get("status_pods"))
		}
	})
}

// expect checks key=value results.
func expect(t *testing.T, r result, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := r.get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}
