//go:build integration

package guest

import (
	"strings"
	"testing"
	"time"
)

// TestGuestPlatform: the guest is the platform users run, and cri-guard,
// installed from its package and started by its unit with all its hardening,
// reads cgroup v2 and arms its PSI trigger on the pods cgroup.
func TestGuestPlatform(t *testing.T) {
	needGuest(t)
	r := runScript(t, 3*time.Minute, "platform.sh")
	want := map[string]string{
		"cgroupfs":       "cgroup2fs",
		"pid1":           "systemd",
		"active":         "active",
		"kubelet_active": "active",
		"source":         "cgroupv2",
		"crictl_runtime": "containerd",
	}
	for k, v := range want {
		if got := r.get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if c := r.get("controllers"); !strings.Contains(c, "memory") {
		t.Errorf("cgroup.controllers = %q: no memory controller", c)
	}
	if d := r.get("dpkg"); !strings.HasPrefix(d, "install ok installed ") {
		t.Errorf("dpkg status of cri-guard = %q", d)
	}
	if !strings.HasPrefix(r.get("containerd"), "containerd github.com/containerd/containerd/v2 v2.") {
		t.Errorf("containerd = %q, want 2.x", r.get("containerd"))
	}
	if !strings.HasPrefix(r.get("kubelet"), "Kubernetes v1.3") {
		t.Errorf("kubelet = %q", r.get("kubelet"))
	}
	if r.get("psi_armed") == "0" || !strings.Contains(r.get("psi_trigger"), "kubepods.slice/memory.pressure") {
		t.Errorf("psi trigger not armed on kubepods.slice/memory.pressure: armed %s, trigger %q", r.get("psi_armed"), r.get("psi_trigger"))
	}
}
