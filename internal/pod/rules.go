package pod

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Critical-rule modes (CriticalRules.Mode).
const (
	// ModeModern follows today's kubelet: a pod is critical when it is static
	// or mirror, or its priority is >= systemCriticalPriority, or its
	// namespace is listed. Critical pods are never evicted.
	ModeModern = "modern"
	// modeSeed follows the kubelet with ExperimentalCriticalPodAnnotation: a
	// pod is critical when it is in kube-system and carries
	// annotationCriticalPod with an empty value, or its namespace is listed.
	// Eviction skips only pods that are critical AND static.
	modeSeed = "seed"
)

// CriticalRules says which pods are critical (docs/design.md, "Critical rules").
// The zero value is the modern rules with no priority annotation: a pod's
// priority then comes only from the API server (spec.priority), which a pod
// author cannot raise past what its priority class grants.
type CriticalRules struct {
	// Mode is ModeModern (default when empty) or modeSeed.
	Mode string `json:"rules,omitempty"`
	// Namespaces lists namespaces whose pods are all critical.
	Namespaces []string `json:"namespaces,omitempty"`
	// PriorityAnnotation is the annotation holding a pod's integer priority
	// when cri-guard has no API connection; empty (the default): none is
	// read. Pod annotations are written by the pod's author and the kubelet
	// copies them into the CRI request, so an operator who sets this must
	// also refuse the annotation from anyone but a trusted stamper
	// (contrib/policy/priority-annotation.yaml); with the API the
	// annotation is never used.
	PriorityAnnotation string `json:"priorityAnnotation,omitempty"`
}

// Validate reports the first problem in r: an unknown mode, an empty or
// blank namespace, or a priority annotation key containing white space.
func (r CriticalRules) Validate() error {
	switch r.Mode {
	case "", ModeModern, modeSeed:
	default:
		return fmt.Errorf("critical rules %q: mode must be %q or %q", r.Mode, ModeModern, modeSeed)
	}
	for _, ns := range r.Namespaces {
		if strings.TrimSpace(ns) == "" || strings.ContainsAny(ns, " \t\n/") {
			return fmt.Errorf("critical namespace %q: not a namespace name", ns)
		}
	}
	if strings.ContainsAny(r.PriorityAnnotation, " \t\n") {
		return fmt.Errorf("priority annotation %q: key contains white space", r.PriorityAnnotation)
	}
	return nil
}

// mode returns the effective mode; an unknown mode is an error.
func (r CriticalRules) mode() (string, error) {
	switch r.Mode {
	case "", ModeModern:
		return ModeModern, nil
	case modeSeed:
		return modeSeed, nil
	}
	return "", fmt.Errorf("critical rules %q: unknown mode: %w", r.Mode, ErrInvalid)
}

// Annotations are the annotation keys these rules classify a pod by
// (static, mirror, the legacy critical-pod mark, the priority key): a copy
// of the pod that keeps them is classified as the pod is (a trimmed
// checkpoint record, for one).
func (r CriticalRules) Annotations() []string {
	keys := []string{AnnotationConfigSource, annotationConfigMirror, annotationCriticalPod}
	if r.PriorityAnnotation != "" {
		keys = append(keys, r.PriorityAnnotation)
	}
	return keys
}

// isStatic reports whether annotations mark a static pod: the config source
// annotation is present and is not "api" (kubelet IsStaticPod).
func isStatic(annotations map[string]string) bool {
	src, ok := annotations[AnnotationConfigSource]
	return ok && src != configSourceAPI
}

// classify fills Static, Priority, HasPriority, Critical and Evictable of p
// from its namespace and annotations. p.Namespace and p.Annotations must be
// set.
func (r CriticalRules) classify(p *Pod) error {
	mode, err := r.mode()
	if err != nil {
		return err
	}
	p.Static = isStatic(p.Annotations)
	p.Priority, p.HasPriority = 0, false
	key := r.PriorityAnnotation // "": no annotation is trusted for priority
	if v, ok := p.Annotations[key]; key != "" && ok {
		n, perr := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if perr != nil {
			p.Warnings = append(p.Warnings, fmt.Sprintf("annotation %q: priority %q is not a 32-bit integer; ignored", key, v))
		} else {
			p.Priority, p.HasPriority = int32(n), true
		}
	}
	listed := slices.Contains(r.Namespaces, p.Namespace)
	switch mode {
	case modeSeed:
		// kubelet (<= v1.15) types.IsCritical: kube-system and the annotation
		// present with an empty value.
		v, ok := p.Annotations[annotationCriticalPod]
		p.Critical = listed || (p.Namespace == namespaceSystem && ok && v == "")
		p.Evictable = !(p.Critical && p.Static)
	default:
		_, mirror := p.Annotations[annotationConfigMirror]
		p.Critical = listed || p.Static || mirror ||
			(p.HasPriority && p.Priority >= systemCriticalPriority)
		p.Evictable = !p.Critical
	}
	return nil
}

// API is what the API server says of a pod that CRI never carries.
type API struct {
	// Priority is spec.priority (nil: unset).
	Priority *int32
	// MemoryRequestBytes is the pod's memory request as the kubelet's
	// eviction manager computes it (resource helpers' PodRequests plus
	// overhead); HasMemoryRequest is false when nothing requests memory.
	MemoryRequestBytes int64
	HasMemoryRequest   bool
	// TerminationGracePeriod is spec.terminationGracePeriodSeconds (nil: unset).
	TerminationGracePeriod *time.Duration
	// ToleratesMemoryPressure: a toleration matches the
	// node.kubernetes.io/memory-pressure:NoSchedule taint.
	ToleratesMemoryPressure bool
	// Mirror is true for the mirror pod of a static pod.
	Mirror bool
	// Containers are the pod's containers in spec order with their memory
	// requests (zero when none), for the eviction message.
	Containers []ContainerRequest
}

// ContainerRequest is one container's memory request as the pod spec says it.
type ContainerRequest struct {
	Name          string
	MemoryRequest resource.Quantity
}

// ApplyAPI completes p with what the API says of it and classifies it
// again: the priority is the API's alone (spec.priority, set by the API
// server's priority admission from the pod's priority class) and any
// priority annotation is ignored, as the kubelet trusts only spec.priority;
// under the modern rules a pod of priority >= systemCriticalPriority or a
// mirror pod is critical, as the kubelet's IsCriticalPod says.
func (r CriticalRules) ApplyAPI(p *Pod, a API) {
	p.FromAPI = true
	p.MemoryRequestBytes, p.HasMemoryRequest = a.MemoryRequestBytes, a.HasMemoryRequest
	p.TerminationGracePeriod, p.HasTerminationGracePeriod = 0, false
	if a.TerminationGracePeriod != nil {
		p.TerminationGracePeriod, p.HasTerminationGracePeriod = *a.TerminationGracePeriod, true
	}
	p.ToleratesMemoryPressure = a.ToleratesMemoryPressure
	p.Containers = slices.Clone(a.Containers)
	warnings := p.Warnings // said once, when the record was made
	apiRules := r
	apiRules.PriorityAnnotation = ""
	err := apiRules.classify(p)
	p.Warnings = warnings
	if err != nil {
		return // an unknown mode: classify already refused the pod at creation
	}
	if a.Priority != nil {
		p.Priority, p.HasPriority = *a.Priority, true
	}
	if mode, _ := r.mode(); mode == ModeModern {
		p.Critical = p.Critical || a.Mirror || (p.HasPriority && p.Priority >= systemCriticalPriority)
		p.Evictable = !p.Critical
	}
}
