// Package pod holds the record cri-guard keeps for every pod sandbox it has
// seen: identity (UID, name, namespace, attempt), labels and annotations,
// runtime handler, cgroup parent, QoS class, static/critical/evictable flags,
// priority, memory limit, sandbox id, state and creation time.
//
// It derives that record from what the kubelet sends in RunPodSandbox
// (FromSandboxConfig) and from what containerd reports for sandboxes it
// already runs (FromSandboxStatus). The CRI request carries neither the QoS
// class nor the priority: QoS is read from linux.cgroup_parent
// (qosFromCgroupParent), priority from a configurable annotation, and which
// pods are critical follows CriticalRules (docs/design.md, "Critical rules").
//
// Package pod imports no other cri-guard package; everything else may import
// it.
package pod
