package guard

import (
	"testing"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// killRecorder is a Killer that records the cgroup parents it was asked to
// signal.
type killRecorder struct {
	killed []string
}

func (k *killRecorder) KillPod(parent string) (int, error) {
	k.killed = append(k.killed, parent)
	return 1, nil
}

// TestKillPodOnlyItsOwnCgroup: a kill past the runtime reaches the killer
// only for the pod's own cgroup as the kubelet names it (pod<uid>), never
// for a QoS tier, another pod's group or a parent the kubelet would not
// give, whatever the sandbox's config said; without a killer nothing is
// signalled and the runtime's stop does it all.
func TestKillPodOnlyItsOwnCgroup(t *testing.T) {
	const uid = "0e760759-7576-4c0b-89d0-bf5c9539026e"
	tests := []struct {
		name, parent string
		kill         bool
	}{
		{"cgroupfs", "/kubepods/besteffort/pod" + uid, true},
		{"systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e760759_7576_4c0b_89d0_bf5c9539026e.slice", true},
		{"the QoS tier", "/kubepods/besteffort", false},
		{"another pod's", "/kubepods/besteffort/pod1b2c", false},
		{"not the kubelet's", "/system.slice/pod" + uid, false},
		{"none", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &killRecorder{}
			l := newHarness(t, withOptions(func(o *Options) { o.Killer = k })).loop
			p := &pod.Pod{UID: uid, Name: "victim", Namespace: "default", CgroupParent: tt.parent}
			_, err := l.killPod(p)
			if killed := len(k.killed) == 1; killed != tt.kill || (err == nil) != tt.kill {
				t.Fatalf("killPod(%q): signalled %q, err %v; want a kill: %v", tt.parent, k.killed, err, tt.kill)
			}
		})
	}
	l := newHarness(t).loop
	if _, err := l.killPod(&pod.Pod{UID: uid, CgroupParent: "/kubepods/besteffort/pod" + uid}); err == nil {
		t.Fatal("killPod without a killer: no error, want one")
	}
}
