//go:build integration

package guest

import (
	"strings"
	"testing"
	"time"
)

// TestGuestPackage: an upgrade of the .deb, from the same tree or from the
// previous release, restarts cri-guard and nothing
// else (the kubelet's drop-in Wants= it), keeps the state and the operator's
// config; an upgrade whose new binary rejects the config fails and leaves the
// running cri-guard serving; a removal is refused while the kubelet's drop-in
// points it at cri-guard; a purge (forced) leaves nothing behind.
func TestGuestPackage(t *testing.T) {
	needGuest(t)
	t.Run("upgrade", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "package.sh", "upgrade")
		expect(t, r, map[string]string{
			"active": "active", "restarted": "yes", "kubelet_restarted": "no", "config_kept": "yes",
			"state_kept": "yes", "sandboxes_kept": "yes", "containers_kept": "yes",
		})
		if !strings.HasSuffix(r.get("to"), "+upgrade") || !strings.Contains(r.get("version"), "+upgrade") {
			t.Errorf("upgraded to %q, binary says %q", r.get("to"), r.get("version"))
		}
		if r.get("restore") == "" {
			t.Error("the upgraded cri-guard logged no restore")
		}
	})
	t.Run("upgrade-rejected", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "package.sh", "upgrade-rejected")
		expect(t, r, map[string]string{
			"problem_named": "1", "db_status": "half-configured", "same_pid": "yes", "active": "active", "cri": "ok",
			"configured_status": "installed", "configured_active": "active", "configured_restarted": "yes",
		})
		if r.get("dpkg_exit") == "0" || r.get("dpkg_exit") == "" {
			t.Errorf("dpkg -i with a rejected config: exit %q, want a failure", r.get("dpkg_exit"))
		}
	})
	t.Run("remove-refused", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "package.sh", "remove-refused")
		expect(t, r, map[string]string{
			"refused": "1", "names_drop_in": "1", "db_status": "installed", "binary": "present",
			"same_pid": "yes", "active": "active", "enabled": "enabled", "cri": "ok",
		})
		if r.get("dpkg_exit") == "0" || r.get("dpkg_exit") == "" {
			t.Errorf("dpkg -r with the kubelet's drop-in installed: exit %q, want a failure", r.get("dpkg_exit"))
		}
	})
	t.Run("upgrade-from-previous", func(t *testing.T) {
		r := runScript(t, 8*time.Minute, "package.sh", "upgrade-from-previous")
		expect(t, r, map[string]string{
			"active": "active", "restarted": "yes", "kubelet_restarted": "no", "config_kept": "yes",
			"state_kept": "yes", "sandboxes_kept": "yes", "containers_kept": "yes",
		})
		if r.get("previous") == "" || r.get("from") == r.get("to") || r.get("records_before") == "0" {
			t.Errorf("upgraded from %q (%s, %s records) to %q: want the previous release's records carried to this tree's",
				r.get("from"), r.get("previous"), r.get("records_before"), r.get("to"))
		}
		if r.get("restore") == "" {
			t.Error("the upgraded cri-guard logged no restore")
		}
	})
	t.Run("purge", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "package.sh", "purge")
		expect(t, r, map[string]string{
			"dpkg": "absent", "unit_loaded": "not-found", "unit_files": "", "state_dir": "absent",
			"config_dir": "absent", "binary": "absent", "process": "none", "reinstalled": "active",
		})
	})
}
