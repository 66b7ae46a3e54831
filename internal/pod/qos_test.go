package pod

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestQOSFromCgroupParent(t *testing.T) {
	const uid = "0e760759-7576-4c0b-89d0-bf5c9539026e"
	const suid = "0e760759_7576_4c0b_89d0_bf5c9539026e"
	tests := []struct {
		name   string
		parent string
		want   QOSClass
		ok     bool
	}{
		{"cgroupfs besteffort", "/kubepods/besteffort/pod" + uid, BestEffort, true},
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid, Burstable, true},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid, Guaranteed, true},
		{"cgroupfs no leading slash", "kubepods/burstable/pod" + uid, Burstable, true},
		{"cgroupfs trailing slash", "/kubepods/besteffort/pod" + uid + "/", BestEffort, true},
		{"cgroupfs root prefix besteffort", "/custom/kubepods/besteffort/pod" + uid, BestEffort, true},
		{"cgroupfs root prefix guaranteed", "/custom/deep/kubepods/pod" + uid, Guaranteed, true},
		{"systemd besteffort base", "kubepods-besteffort-pod" + suid + ".slice", BestEffort, true},
		{"systemd burstable base", "kubepods-burstable-pod" + suid + ".slice", Burstable, true},
		{"systemd guaranteed base", "kubepods-pod" + suid + ".slice", Guaranteed, true},
		{"systemd burstable full path", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + suid + ".slice", Burstable, true},
		{"systemd besteffort full path", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + suid + ".slice", BestEffort, true},
		{"systemd guaranteed full path", "/kubepods.slice/kubepods-pod" + suid + ".slice", Guaranteed, true},
		{"systemd root prefix", "/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod" + suid + ".slice", Burstable, true},
		{"systemd root prefix guaranteed base", "custom-kubepods-pod" + suid + ".slice", Guaranteed, true},
		{"empty", "", "", false},
		{"root only", "/", "", false},
		{"kubepods only", "/kubepods", "", false},
		{"tier without pod", "/kubepods/burstable", "", false},
		{"systemd tier slice", "/kubepods.slice/kubepods-burstable.slice", "", false},
		{"systemd kubepods slice", "/kubepods.slice", "", false},
		{"pod without uid", "/kubepods/burstable/pod", "", false},
		{"unknown tier", "/kubepods/gold/pod" + uid, "", false},
		{"not kubepods", "/system.slice/containerd.service", "", false},
		{"pod elsewhere", "/user/pod" + uid, "", false},
		{"systemd not kubepods", "machine-pod" + suid + ".slice", "", false},
		{"tier without kubepods", "/besteffort/pod" + uid, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := qosFromCgroupParent(tt.parent)
			if got != tt.want || ok != tt.ok {
				t.Errorf("QOSFromCgroupParent(%q) = %q, %v; want %q, %v", tt.parent, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestQOSFromResources(t *testing.T) {
	tests := []struct {
		name string
		res  *runtimeapi.LinuxContainerResources
		want QOSClass
	}{
		{"nil", nil, BestEffort},
		{"empty", &runtimeapi.LinuxContainerResources{}, BestEffort},
		{"min shares only", &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000}, BestEffort},
		{"memory limit", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}, Burstable},
		{"cpu shares", &runtimeapi.LinuxContainerResources{CpuShares: 512}, Burstable},
		{"cpu quota", &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuQuota: 50000}, Burstable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := qosFromResources(tt.res); got != tt.want {
				t.Errorf("qosFromResources() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestIsOwnCgroup: only the pod's own cgroup, as the kubelet names it, is
// one a kill past the runtime may signal.
func TestIsOwnCgroup(t *testing.T) {
	const uid = "0e760759-7576-4c0b-89d0-bf5c9539026e"
	const suid = "0e760759_7576_4c0b_89d0_bf5c9539026e"
	tests := []struct {
		parent, uid string
		want        bool
	}{
		{"/kubepods/besteffort/pod" + uid, uid, true},
		{"/custom/kubepods/pod" + uid + "/", uid, true},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + suid + ".slice", uid, true},
		{"custom-kubepods-pod" + suid + ".slice", uid, true},
		{"/kubepods/besteffort/pod" + uid, "1b2c", false},        // another pod's
		{"/kubepods/besteffort/pod" + uid + "x", uid, false},     // a longer name
		{"kubepods-besteffort-pod" + uid + ".slice", uid, false}, // dashes not escaped
		{"/kubepods/besteffort", uid, false},
		{"/kubepods.slice/kubepods-besteffort.slice", uid, false},
		{"/system.slice/pod" + uid, uid, false},
		{"/kubepods/besteffort/pod" + uid, "", false},
		{"", uid, false},
	}
	for _, tt := range tests {
		if got := IsOwnCgroup(tt.parent, tt.uid); got != tt.want {
			t.Errorf("IsOwnCgroup(%q, %q) = %v, want %v", tt.parent, tt.uid, got, tt.want)
		}
	}
}
