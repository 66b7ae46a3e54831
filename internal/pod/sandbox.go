package pod

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FromSandboxConfig derives the Pod for a RunPodSandbox request. handler is
// the request's runtime handler; now is cri-guard's clock (the kubelet sends
// no creation time). The result is StatePending with no sandbox id. It fails
// with ErrInvalid when cfg or its metadata is missing, the UID is not one
// CheckUID accepts, and when rules has an unknown mode. An unparsable priority annotation is
// not an error: HasPriority stays false and a Warning is recorded.
func FromSandboxConfig(cfg *runtimeapi.PodSandboxConfig, handler string, rules CriticalRules, now time.Time) (*Pod, error) {
	if cfg == nil {
		return nil, fmt.Errorf("pod from sandbox config: no config: %w", ErrInvalid)
	}
	if err := CheckUID(cfg.GetMetadata().GetUid()); err != nil {
		md := cfg.GetMetadata()
		return nil, fmt.Errorf("pod %q: %w", md.GetNamespace()+"/"+md.GetName(), err)
	}
	p, err := fromConfig(cfg, rules)
	if err != nil {
		return nil, err
	}
	p.RuntimeHandler = handler
	p.State = StatePending
	p.Created = now
	return p, nil
}

// MaxUIDBytes is the longest pod UID accepted. The kubelet's UIDs are UUIDs
// (36 bytes) or, for static pods, 32 hex digits; the checkpoint store names
// files after the UID and takes at most 200 bytes.
const MaxUIDBytes = 200

// CheckUID accepts the pod UIDs a pod record can be kept under: the UID
// becomes a checkpoint file name on its own, so it must be non-empty, at
// most MaxUIDBytes, made of letters, digits and "-_.:" only, and must not
// start with a dot ("." and ".." included). This is exactly what the
// checkpoint store accepts; anything else is ErrInvalid, so that a
// RunPodSandbox carrying it is InvalidArgument before anything is written.
func CheckUID(uid string) error {
	if uid == "" {
		return fmt.Errorf("empty uid: %w", ErrInvalid)
	}
	if len(uid) > MaxUIDBytes {
		return fmt.Errorf("uid of %d bytes, at most %d: %w", len(uid), MaxUIDBytes, ErrInvalid)
	}
	if uid[0] == '.' {
		return fmt.Errorf("uid %q starts with a dot: %w", uid, ErrInvalid)
	}
	for i := 0; i < len(uid); i++ {
		switch c := uid[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return fmt.Errorf("uid %q: byte %q not allowed (letters, digits, \"-_.:\"): %w", uid, c, ErrInvalid)
		}
	}
	return nil
}

// fromConfig fills identity, labels, annotations, cgroup parent, QoS, memory
// limit and the critical classification from cfg.
func fromConfig(cfg *runtimeapi.PodSandboxConfig, rules CriticalRules) (*Pod, error) {
	md := cfg.GetMetadata()
	if md == nil {
		return nil, fmt.Errorf("pod from sandbox config: no metadata: %w", ErrInvalid)
	}
	if md.GetUid() == "" {
		return nil, fmt.Errorf("pod %q: empty uid: %w", md.GetNamespace()+"/"+md.GetName(), ErrInvalid)
	}
	p := &Pod{
		UID:         md.GetUid(),
		Name:        md.GetName(),
		Namespace:   md.GetNamespace(),
		Attempt:     md.GetAttempt(),
		Labels:      maps.Clone(cfg.GetLabels()),
		Annotations: maps.Clone(cfg.GetAnnotations()),
	}
	linux := cfg.GetLinux()
	p.CgroupParent = linux.GetCgroupParent()
	p.MemoryLimitBytes = max(linux.GetResources().GetMemoryLimitInBytes(), 0)
	if q, ok := qosFromCgroupParent(p.CgroupParent); ok {
		p.QOS = q
	} else {
		p.QOS = qosFromResources(linux.GetResources())
	}
	if err := rules.classify(p); err != nil {
		return nil, fmt.Errorf("pod %q: %w", p.UID, err)
	}
	return p, nil
}

// verboseInfo is the part of containerd's verbose PodSandboxStatus
// info["info"] JSON cri-guard reads (containerd 1.6+ sandboxInfo; the config
// is the PodSandboxConfig encoded with encoding/json, snake_case keys).
type verboseInfo struct {
	RuntimeHandler string                       `json:"runtimeHandler"`
	Config         *runtimeapi.PodSandboxConfig `json:"config"`
}

// InfoKey is the key of the verbose PodSandboxStatus info map that holds
// containerd's sandbox info JSON.
const InfoKey = "info"

// FromSandboxStatus derives the Pod for a sandbox containerd already runs
// (adoption at start-up). info is the verbose status info map; when its
// InfoKey entry carries the sandbox config (containerd 1.6+), cgroup parent,
// resources, labels and annotations come from there; otherwise from the
// status, and QoS falls back to BestEffort with a Warning. Created is the
// status's CreatedAt, SandboxID its Id; State is StateReady for a ready
// sandbox and StateStopped otherwise.
func FromSandboxStatus(st *runtimeapi.PodSandboxStatus, info map[string]string, rules CriticalRules) (*Pod, error) {
	if st == nil || st.GetMetadata() == nil {
		return nil, fmt.Errorf("pod from sandbox status: no metadata: %w", ErrInvalid)
	}
	var vi verboseInfo
	var warn string
	if raw, ok := info[InfoKey]; ok && raw != "" {
		if err := json.Unmarshal([]byte(raw), &vi); err != nil {
			vi = verboseInfo{}
			warn = fmt.Sprintf("sandbox %q: verbose info is not sandbox info JSON: %v", st.GetId(), err)
		}
	}
	cfg := vi.Config
	if cfg == nil {
		cfg = &runtimeapi.PodSandboxConfig{}
		if warn == "" {
			warn = fmt.Sprintf("sandbox %q: no sandbox config in verbose info; QoS guessed", st.GetId())
		}
	}
	// The status is authoritative for identity; the config fills the rest.
	merged := &runtimeapi.PodSandboxConfig{
		Metadata:    st.GetMetadata(),
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Linux:       cfg.GetLinux(),
	}
	if merged.Labels == nil {
		merged.Labels = st.GetLabels()
	}
	if merged.Annotations == nil {
		merged.Annotations = st.GetAnnotations()
	}
	p, err := fromConfig(merged, rules)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", st.GetId(), err)
	}
	if warn != "" {
		p.Warnings = append(p.Warnings, warn)
	}
	p.RuntimeHandler = st.GetRuntimeHandler()
	if p.RuntimeHandler == "" {
		p.RuntimeHandler = vi.RuntimeHandler
	}
	p.SandboxID = st.GetId()
	p.Created = time.Unix(0, st.GetCreatedAt())
	if st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
		p.State = StateReady
	} else {
		p.State = StateStopped
	}
	return p, nil
}
