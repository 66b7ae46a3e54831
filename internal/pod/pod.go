package pod

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"
)

// QOSClass is the Kubernetes quality-of-service class of a pod.
type QOSClass string

// The three QoS classes, spelled as in the Kubernetes API.
const (
	Guaranteed QOSClass = "Guaranteed"
	Burstable  QOSClass = "Burstable"
	BestEffort QOSClass = "BestEffort"
)

// State is where a pod sandbox is in cri-guard's lifecycle.
type State string

// Sandbox states. StatePending: admitted, RunPodSandbox forwarded but not
// (yet) known to have succeeded. StateReady: containerd runs the sandbox.
// StateStopped: the sandbox was stopped (by the kubelet, by eviction or by
// itself).
const (
	StatePending State = "pending"
	StateReady   State = "ready"
	StateStopped State = "stopped"
)

// Well-known annotation keys and values the kubelet puts on pod sandboxes.
const (
	// AnnotationConfigSource names where the kubelet got the pod from:
	// "api" for pods from the API server, "file" or "http" for static pods.
	AnnotationConfigSource = "kubernetes.io/config.source"
	// configSourceAPI is the AnnotationConfigSource value of non-static pods.
	configSourceAPI = "api"
	// annotationConfigMirror marks a mirror pod (the API object of a static pod).
	annotationConfigMirror = "kubernetes.io/config.mirror"
	// annotationCriticalPod is the legacy critical-pod annotation
	// (ExperimentalCriticalPodAnnotation), honoured only by the "seed" rules.
	annotationCriticalPod = "scheduler.alpha.kubernetes.io/critical-pod"
	// AnnotationTerminationGracePeriod is the container annotation in which
	// the kubelet sends the pod's terminationGracePeriodSeconds to the
	// runtime (pkg/kubelet/kuberuntime/labels.go podTerminationGracePeriodLabel).
	AnnotationTerminationGracePeriod = "io.kubernetes.pod.terminationGracePeriod"
	// PolicyPriorityAnnotation is the annotation key that the shipped
	// admission policy (contrib/policy/priority-annotation.yaml) guards: an
	// operator running cri-guard without the API may set
	// critical.priorityAnnotation to it. It is read by no default.
	PolicyPriorityAnnotation = "cri-guard.io/priority"
	// namespaceSystem is the kube-system namespace.
	namespaceSystem = "kube-system"
	// systemCriticalPriority is the kubelet's threshold for critical pods
	// (scheduling.SystemCriticalPriority): priority >= this is critical.
	systemCriticalPriority int32 = 2000000000
)

// ErrInvalid reports a sandbox config or status that cannot describe a pod:
// missing config, missing metadata or an empty UID.
var ErrInvalid = errors.New("invalid pod sandbox")

// Pod is cri-guard's record of one pod sandbox attempt.
type Pod struct {
	// UID, Name, Namespace and Attempt come from the sandbox metadata.
	UID       string `json:"uid"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Attempt   uint32 `json:"attempt"`

	// Labels and Annotations are the sandbox's, as the kubelet sent them.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`

	// RuntimeHandler is the RuntimeClass handler ("" = default).
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	// CgroupParent is linux.cgroup_parent, the pod-level cgroup.
	CgroupParent string `json:"cgroupParent,omitempty"`

	// QOS is the pod's QoS class (see qosFromCgroupParent).
	QOS QOSClass `json:"qos"`
	// Static is true for static pods (config.source present and not "api").
	Static bool `json:"static,omitempty"`
	// Priority is the value of the configured priority annotation; it is
	// meaningful only when HasPriority is true.
	Priority    int32 `json:"priority,omitempty"`
	HasPriority bool  `json:"hasPriority,omitempty"`

	// Critical pods are always admitted.
	Critical bool `json:"critical,omitempty"`
	// Evictable pods may be stopped by eviction. Modern rules: !Critical;
	// seed rules: !(Critical && Static).
	Evictable bool `json:"evictable,omitempty"`

	// MemoryLimitBytes is linux.resources.memory_limit_in_bytes when the
	// kubelet sent it (0 = none or unknown).
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`

	// What the API server knows of the pod and CRI never carries, applied
	// by CriticalRules.ApplyAPI when cri-guard reads the API (zero
	// otherwise). FromAPI says the API knows the pod.
	FromAPI bool `json:"fromAPI,omitempty"`
	// MemoryRequestBytes is the pod's memory request as the kubelet
	// computes it, valid when HasMemoryRequest.
	MemoryRequestBytes int64 `json:"memoryRequestBytes,omitempty"`
	HasMemoryRequest   bool  `json:"hasMemoryRequest,omitempty"`
	// TerminationGracePeriod is spec.terminationGracePeriodSeconds, valid
	// when HasTerminationGracePeriod.
	TerminationGracePeriod    time.Duration `json:"terminationGracePeriod,omitempty"`
	HasTerminationGracePeriod bool          `json:"hasTerminationGracePeriod,omitempty"`
	// ToleratesMemoryPressure: the pod tolerates the
	// node.kubernetes.io/memory-pressure:NoSchedule taint, so the kubelet
	// admits it under MemoryPressure even when it is BestEffort.
	ToleratesMemoryPressure bool `json:"toleratesMemoryPressure,omitempty"`
	// Containers are the pod's containers and memory requests from the API
	// (nil without it); not checkpointed: the API says it again.
	Containers []ContainerRequest `json:"-"`

	// SandboxID is containerd's id of the sandbox, once known.
	SandboxID string `json:"sandboxId,omitempty"`
	// State is the sandbox's lifecycle state.
	State State `json:"state"`
	// Created is when cri-guard first saw the sandbox request (or, for an
	// adopted sandbox, containerd's creation time).
	Created time.Time `json:"created"`
	// EvictedAt is when cri-guard evicted this sandbox (zero if it did not):
	// kept in the checkpoint so that the re-admission guard survives a
	// restart.
	EvictedAt time.Time `json:"evictedAt,omitzero"`

	// Warnings lists problems found while deriving the record that did not
	// stop it, e.g. an unparsable priority annotation. Callers log them.
	Warnings []string `json:"warnings,omitempty"`
}

// Key identifies the sandbox attempt: "<uid>/<attempt>". The kubelet retries
// a failed RunPodSandbox with the same key and recreates a dead sandbox with
// attempt+1.
func (p *Pod) Key() string {
	return Key(p.UID, p.Attempt)
}

// Key builds the key of a sandbox attempt, as (*Pod).Key does.
func Key(uid string, attempt uint32) string {
	return uid + "/" + strconv.FormatUint(uint64(attempt), 10)
}

// String returns "namespace/name", for logs and messages.
func (p *Pod) String() string {
	return p.Namespace + "/" + p.Name
}

// Clone returns a deep copy of p (maps and slices are not shared).
func (p *Pod) Clone() *Pod {
	if p == nil {
		return nil
	}
	c := *p
	c.Labels = maps.Clone(p.Labels)
	c.Annotations = maps.Clone(p.Annotations)
	c.Warnings = slices.Clone(p.Warnings)
	c.Containers = slices.Clone(p.Containers)
	return &c
}

// TerminationGracePeriod reads the pod's terminationGracePeriodSeconds from
// a container's annotations (AnnotationTerminationGracePeriod); ok is false
// when it is absent or not a non-negative integer.
func TerminationGracePeriod(containerAnnotations map[string]string) (d time.Duration, ok bool) {
	v, found := containerAnnotations[AnnotationTerminationGracePeriod]
	if !found {
		return 0, false
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s < 0 || s > math.MaxInt64/int64(time.Second) {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}
