package pod

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Kubelet cgroup names (pkg/kubelet/cm): the pods cgroup and the QoS tiers.
const (
	kubepodsCgroup   = "kubepods"
	besteffortCgroup = "besteffort"
	burstableCgroup  = "burstable"
	podCgroupPrefix  = "pod"
	systemdSuffix    = ".slice"
)

// qosFromCgroupParent derives the QoS class from a pod sandbox's
// linux.cgroup_parent as the kubelet builds it. ok is false when the parent
// is not a kubelet pod cgroup. Accepted forms, each with or without a cgroup
// root prefix (e.g. "/custom" or "/custom.slice"):
//
//	cgroupfs: [/<root>]/kubepods/besteffort/pod<uid>  BestEffort
//	          [/<root>]/kubepods/burstable/pod<uid>   Burstable
//	          [/<root>]/kubepods/pod<uid>             Guaranteed
//	systemd:  [<path>/][<root>-]kubepods-besteffort-pod<uid>.slice
//	          [<path>/][<root>-]kubepods-burstable-pod<uid>.slice
//	          [<path>/][<root>-]kubepods-pod<uid>.slice
func qosFromCgroupParent(parent string) (QOSClass, bool) {
	parent, last := cgroupLeaf(parent)
	if parent == "" {
		return "", false
	}
	if name, ok := strings.CutSuffix(last, systemdSuffix); ok {
		return qosFromParts(strings.Split(name, "-"))
	}
	return qosFromParts(strings.Split(parent, "/"))
}

// cgroupLeaf is parent without trailing slashes, and its last element.
func cgroupLeaf(parent string) (trimmed, last string) {
	trimmed = strings.TrimRight(parent, "/")
	return trimmed, trimmed[strings.LastIndexByte(trimmed, '/')+1:]
}

// qosFromParts reads the QoS tier from cgroup name parts that must end in
// "kubepods", an optional tier and "pod<uid>".
func qosFromParts(parts []string) (QOSClass, bool) {
	n := len(parts)
	if n < 2 || !isPodPart(parts[n-1]) {
		return "", false
	}
	switch {
	case parts[n-2] == kubepodsCgroup:
		return Guaranteed, true
	case n >= 3 && parts[n-3] == kubepodsCgroup && parts[n-2] == besteffortCgroup:
		return BestEffort, true
	case n >= 3 && parts[n-3] == kubepodsCgroup && parts[n-2] == burstableCgroup:
		return Burstable, true
	}
	return "", false
}

// IsOwnCgroup reports whether parent is the kubelet's cgroup of the pod
// with uid itself, in one of qosFromCgroupParent's forms: its last element
// is pod<uid> (cgroupfs) or ends in pod<uid>.slice with the uid's dashes
// as underscores (systemd, as the kubelet escapes it). A kill past the
// runtime (podkill.Killer.KillPod) signals only such a group: never a QoS
// tier or another pod's, whatever cgroup parent a sandbox was given.
func IsOwnCgroup(parent, uid string) bool {
	if uid == "" {
		return false
	}
	if _, ok := qosFromCgroupParent(parent); !ok {
		return false
	}
	_, last := cgroupLeaf(parent)
	if name, ok := strings.CutSuffix(last, systemdSuffix); ok {
		return name[strings.LastIndexByte(name, '-')+1:] == podCgroupPrefix+strings.ReplaceAll(uid, "-", "_")
	}
	return last == podCgroupPrefix+uid
}

// isPodPart reports whether s is "pod<uid>" with a non-empty uid.
func isPodPart(s string) bool {
	return len(s) > len(podCgroupPrefix) && strings.HasPrefix(s, podCgroupPrefix)
}

// kubeletMinShares is the cpu.shares the kubelet gives a pod without a CPU
// request (cm.MinShares).
const kubeletMinShares = 2

// qosFromResources is the fallback when the cgroup parent says nothing: a pod
// with no memory limit and no CPU (shares at most the kubelet minimum, no
// quota) is BestEffort, any other Burstable. Guaranteed cannot be told from
// the summed sandbox resources, so it is never returned here: the fallback
// errs towards the classes eviction considers first.
func qosFromResources(res *runtimeapi.LinuxContainerResources) QOSClass {
	if res == nil {
		return BestEffort
	}
	if res.GetMemoryLimitInBytes() > 0 || res.GetCpuShares() > kubeletMinShares || res.GetCpuQuota() > 0 {
		return Burstable
	}
	return BestEffort
}
