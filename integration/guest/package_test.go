//go:build integration

package guest

import (
	"strings"
	"testing"
	"time"
)

// TestGuestPackage: an upgrade of the .deb restarts cri-guard and nothing
// else (the kubelet's drop-in Wants= it), keeps the state and the operator's
// config; a purge leaves nothing behind.
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
	t.Run("purge", func(t *testing.T) {
		r := runScript(t, 5*time.Minute, "package.sh", "purge")
		expect(t, r, map[string]string{
			"dpkg": "absent", "unit_loaded": "not-found", "unit_files": "", "state_dir": "absent",
			"config_dir": "absent", "binary": "absent", "process": "none", "reinstalled": "active",
		})
	})
}
