package pod

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const testUID = "0e760759-7576-4c0b-89d0-bf5c9539026e"

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// sandboxConfig builds a kubelet-like config; parent "" leaves linux unset.
func sandboxConfig(ns, parent string, ann map[string]string) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: ns, Uid: testUID, Attempt: 2},
		Labels:      map[string]string{"app": "web", "io.kubernetes.pod.uid": testUID},
		Annotations: ann,
	}
	if parent != "" {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent}
	}
	return cfg
}

func TestFromSandboxConfigClassification(t *testing.T) {
	const be = "/kubepods/besteffort/pod" + testUID
	api := map[string]string{AnnotationConfigSource: "api"}
	file := map[string]string{AnnotationConfigSource: "file"}
	crit := map[string]string{AnnotationConfigSource: "api", annotationCriticalPod: ""}
	critVal := map[string]string{AnnotationConfigSource: "api", annotationCriticalPod: "true"}
	fileCrit := map[string]string{AnnotationConfigSource: "file", annotationCriticalPod: ""}
	prio := func(v string) map[string]string {
		return map[string]string{AnnotationConfigSource: "api", PolicyPriorityAnnotation: v}
	}
	modern := CriticalRules{}
	// the annotation is read only where the operator names it
	modernAnn := CriticalRules{PriorityAnnotation: PolicyPriorityAnnotation}
	seed := CriticalRules{Mode: modeSeed}
	tests := []struct {
		name        string
		rules       CriticalRules
		ns          string
		ann         map[string]string
		static      bool
		critical    bool
		evictable   bool
		priority    int32
		hasPriority bool
		warnings    int
	}{
		{"modern api pod", modern, "default", api, false, false, true, 0, false, 0},
		{"modern no annotations", modern, "default", nil, false, false, true, 0, false, 0},
		{"modern static file", modern, "default", file, true, true, false, 0, false, 0},
		{"modern static http", modern, "default", map[string]string{AnnotationConfigSource: "http"}, true, true, false, 0, false, 0},
		{"modern mirror", modern, "default", map[string]string{annotationConfigMirror: "abc"}, false, true, false, 0, false, 0},
		{"modern priority critical", modernAnn, "default", prio("2000000000"), false, true, false, 2000000000, true, 0},
		{"modern priority node critical", modernAnn, "default", prio("2000001000"), false, true, false, 2000001000, true, 0},
		{"modern priority below", modernAnn, "default", prio("1999999999"), false, false, true, 1999999999, true, 0},
		{"modern priority negative", modernAnn, "default", prio("-5"), false, false, true, -5, true, 0},
		{"modern priority spaces", modernAnn, "default", prio(" 100 "), false, false, true, 100, true, 0},
		{"modern priority bad", modernAnn, "default", prio("high"), false, false, true, 0, false, 1},
		{"modern priority overflow", modernAnn, "default", prio("3000000000"), false, false, true, 0, false, 1},
		{"modern priority annotation not read by default", modern, "default", prio("2000000000"), false, false, true, 0, false, 0},
		{"modern annotation ignored", modern, namespaceSystem, crit, false, false, true, 0, false, 0},
		{"modern listed namespace", CriticalRules{Namespaces: []string{"infra"}}, "infra", api, false, true, false, 0, false, 0},
		{"modern other namespace", CriticalRules{Namespaces: []string{"infra"}}, "default", api, false, false, true, 0, false, 0},
		{"modern custom priority annotation", CriticalRules{PriorityAnnotation: "x/prio"}, "default",
			map[string]string{"x/prio": "2000000000", PolicyPriorityAnnotation: "1"}, false, true, false, 2000000000, true, 0},
		{"seed annotation in kube-system", seed, namespaceSystem, crit, false, true, true, 0, false, 0},
		{"seed annotation with value", seed, namespaceSystem, critVal, false, false, true, 0, false, 0},
		{"seed annotation outside kube-system", seed, "default", crit, false, false, true, 0, false, 0},
		{"seed kube-system without annotation", seed, namespaceSystem, api, false, false, true, 0, false, 0},
		{"seed static without annotation", seed, namespaceSystem, file, true, false, true, 0, false, 0},
		{"seed static critical", seed, namespaceSystem, fileCrit, true, true, false, 0, false, 0},
		{"seed priority ignored", CriticalRules{Mode: modeSeed, PriorityAnnotation: PolicyPriorityAnnotation}, "default", prio("2000000000"), false, false, true, 2000000000, true, 0},
		{"seed listed namespace", CriticalRules{Mode: modeSeed, Namespaces: []string{"infra"}}, "infra", api, false, true, true, 0, false, 0},
		{"seed listed namespace static", CriticalRules{Mode: modeSeed, Namespaces: []string{"infra"}}, "infra", file, true, true, false, 0, false, 0},
		{"explicit modern mode", CriticalRules{Mode: ModeModern}, "default", file, true, true, false, 0, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := FromSandboxConfig(sandboxConfig(tt.ns, be, tt.ann), "runc", tt.rules, testNow)
			if err != nil {
				t.Fatalf("FromSandboxConfig: %v", err)
			}
			if p.Static != tt.static || p.Critical != tt.critical || p.Evictable != tt.evictable {
				t.Errorf("static/critical/evictable = %v/%v/%v, want %v/%v/%v",
					p.Static, p.Critical, p.Evictable, tt.static, tt.critical, tt.evictable)
			}
			if p.Priority != tt.priority || p.HasPriority != tt.hasPriority {
				t.Errorf("priority = %d (%v), want %d (%v)", p.Priority, p.HasPriority, tt.priority, tt.hasPriority)
			}
			if len(p.Warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", p.Warnings, tt.warnings)
			}
		})
	}
}

func TestFromSandboxConfigFields(t *testing.T) {
	cfg := sandboxConfig("shop", "/kubepods/burstable/pod"+testUID, map[string]string{AnnotationConfigSource: "api"})
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20, CpuShares: 512}
	p, err := FromSandboxConfig(cfg, "kata", CriticalRules{}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	want := &Pod{
		UID: testUID, Name: "web", Namespace: "shop", Attempt: 2,
		Labels:         map[string]string{"app": "web", "io.kubernetes.pod.uid": testUID},
		Annotations:    map[string]string{AnnotationConfigSource: "api"},
		RuntimeHandler: "kata", CgroupParent: "/kubepods/burstable/pod" + testUID,
		QOS: Burstable, Evictable: true, MemoryLimitBytes: 256 << 20,
		State: StatePending, Created: testNow,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
	if p.Key() != testUID+"/2" || p.String() != "shop/web" {
		t.Errorf("Key() = %q, String() = %q", p.Key(), p.String())
	}
	cfg.Labels["app"] = "changed"
	if p.Labels["app"] != "web" {
		t.Error("pod shares the labels map with the config")
	}
}

func TestFromSandboxConfigQOS(t *testing.T) {
	tests := []struct {
		name  string
		linux *runtimeapi.LinuxPodSandboxConfig
		want  QOSClass
	}{
		{"no linux", nil, BestEffort},
		{"parent guaranteed", &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods-pod1.slice"}, Guaranteed},
		{"parent wins over resources", &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod1",
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}}, BestEffort},
		{"unknown parent, limit", &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/custom",
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}}, Burstable},
		{"unknown parent, no resources", &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/custom"}, BestEffort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sandboxConfig("default", "", nil)
			cfg.Linux = tt.linux
			p, err := FromSandboxConfig(cfg, "", CriticalRules{}, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if p.QOS != tt.want {
				t.Errorf("QOS = %q, want %q", p.QOS, tt.want)
			}
		})
	}
}

func TestFromSandboxConfigInvalid(t *testing.T) {
	tests := []struct {
		name  string
		cfg   *runtimeapi.PodSandboxConfig
		rules CriticalRules
	}{
		{"nil config", nil, CriticalRules{}},
		{"no metadata", &runtimeapi.PodSandboxConfig{}, CriticalRules{}},
		{"empty uid", &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "b"}}, CriticalRules{}},
		{"unknown mode", sandboxConfig("default", "", nil), CriticalRules{Mode: "legacy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := FromSandboxConfig(tt.cfg, "", tt.rules, testNow)
			if !errors.Is(err, ErrInvalid) || p != nil {
				t.Errorf("FromSandboxConfig = %v, %v; want nil, ErrInvalid", p, err)
			}
		})
	}
}

// containerdInfo renders a containerd-1.6-style verbose info JSON.
func containerdInfo(t *testing.T, cfg *runtimeapi.PodSandboxConfig) map[string]string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"pid": 4242, "processStatus": "running", "runtimeHandler": "runc-info",
		"runtimeType": "io.containerd.runc.v2", "config": cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{InfoKey: string(b)}
}

func TestFromSandboxStatus(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 123, time.UTC)
	status := func(state runtimeapi.PodSandboxState, handler string) *runtimeapi.PodSandboxStatus {
		return &runtimeapi.PodSandboxStatus{
			Id:             "sb1",
			Metadata:       &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "kube-system", Uid: testUID, Attempt: 1},
			State:          state,
			CreatedAt:      created.UnixNano(),
			Labels:         map[string]string{"from": "status"},
			Annotations:    map[string]string{AnnotationConfigSource: "file", "from": "status"},
			RuntimeHandler: handler,
		}
	}
	cfg := sandboxConfig("kube-system", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+strings.ReplaceAll(testUID, "-", "_")+".slice",
		map[string]string{AnnotationConfigSource: "api", "from": "config"})
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}
	tests := []struct {
		name     string
		st       *runtimeapi.PodSandboxStatus
		info     map[string]string
		qos      QOSClass
		from     string
		static   bool
		state    State
		handler  string
		limit    int64
		warnings int
	}{
		{"full info ready", status(runtimeapi.PodSandboxState_SANDBOX_READY, ""), containerdInfo(t, cfg), Burstable, "config", false, StateReady, "runc-info", 64 << 20, 0},
		{"status handler wins", status(runtimeapi.PodSandboxState_SANDBOX_READY, "kata"), containerdInfo(t, cfg), Burstable, "config", false, StateReady, "kata", 64 << 20, 0},
		{"not ready", status(runtimeapi.PodSandboxState_SANDBOX_NOTREADY, ""), containerdInfo(t, cfg), Burstable, "config", false, StateStopped, "runc-info", 64 << 20, 0},
		{"literal containerd 1.6 info", status(runtimeapi.PodSandboxState_SANDBOX_READY, ""), map[string]string{InfoKey: literalInfo}, Guaranteed, "config", false, StateReady, "", 128 << 20, 0},
		{"no info", status(runtimeapi.PodSandboxState_SANDBOX_READY, ""), nil, BestEffort, "status", true, StateReady, "", 0, 1},
		{"bad info json", status(runtimeapi.PodSandboxState_SANDBOX_READY, ""), map[string]string{InfoKey: "{nope"}, BestEffort, "status", true, StateReady, "", 0, 1},
		{"info without config", status(runtimeapi.PodSandboxState_SANDBOX_READY, ""), map[string]string{InfoKey: `{"pid":1}`}, BestEffort, "status", true, StateReady, "", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := FromSandboxStatus(tt.st, tt.info, CriticalRules{})
			if err != nil {
				t.Fatal(err)
			}
			if p.QOS != tt.qos || p.Annotations["from"] != tt.from || p.Static != tt.static || p.State != tt.state ||
				p.RuntimeHandler != tt.handler || p.MemoryLimitBytes != tt.limit || len(p.Warnings) != tt.warnings {
				t.Errorf("got qos=%s from=%s static=%v state=%s handler=%q limit=%d warnings=%q",
					p.QOS, p.Annotations["from"], p.Static, p.State, p.RuntimeHandler, p.MemoryLimitBytes, p.Warnings)
			}
			if p.SandboxID != "sb1" || !p.Created.Equal(created) || p.Key() != testUID+"/1" || p.Namespace != "kube-system" {
				t.Errorf("identity: id=%q created=%v key=%q ns=%q", p.SandboxID, p.Created, p.Key(), p.Namespace)
			}
		})
	}
}

// literalInfo is shaped like `crictl inspectp` "info" from containerd 1.6
// (systemd cgroup driver), trimmed.
const literalInfo = `{
  "pid": 1322, "processStatus": "running", "netNamespaceClosed": false,
  "image": "registry.k8s.io/pause:3.7", "snapshotter": "overlayfs",
  "runtimeHandler": "", "runtimeType": "io.containerd.runc.v2",
  "runtimeOptions": {"systemd_cgroup": true},
  "config": {
    "metadata": {"name": "web", "uid": "0e760759-7576-4c0b-89d0-bf5c9539026e", "namespace": "kube-system"},
    "hostname": "web", "log_directory": "/var/log/pods/x",
    "dns_config": {"servers": ["10.96.0.10"], "options": ["ndots:5"]},
    "port_mappings": [{"protocol": 1, "container_port": 53}],
    "labels": {"io.kubernetes.pod.uid": "0e760759-7576-4c0b-89d0-bf5c9539026e"},
    "annotations": {"kubernetes.io/config.source": "api", "from": "config"},
    "linux": {
      "cgroup_parent": "/kubepods.slice/kubepods-pod0e760759_7576_4c0b_89d0_bf5c9539026e.slice",
      "resources": {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024, "memory_limit_in_bytes": 134217728},
      "security_context": {"namespace_options": {"pid": 1}, "seccomp": {}}
    }
  },
  "runtimeSpec": {"ociVersion": "1.0.2-dev"}
}`

func TestFromSandboxStatusInvalid(t *testing.T) {
	for _, st := range []*runtimeapi.PodSandboxStatus{nil, {Id: "x"}, {Id: "x", Metadata: &runtimeapi.PodSandboxMetadata{Name: "a"}}} {
		if _, err := FromSandboxStatus(st, nil, CriticalRules{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("FromSandboxStatus(%v) error = %v, want ErrInvalid", st, err)
		}
	}
}

func TestClone(t *testing.T) {
	p := &Pod{UID: "u", Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}, Warnings: []string{"w"}}
	c := p.Clone()
	if !reflect.DeepEqual(p, c) {
		t.Fatalf("clone differs: %+v vs %+v", c, p)
	}
	c.Labels["a"], c.Annotations["b"], c.Warnings[0] = "x", "x", "x"
	if p.Labels["a"] != "1" || p.Annotations["b"] != "2" || p.Warnings[0] != "w" {
		t.Error("clone shares maps or slices with the original")
	}
	if (*Pod)(nil).Clone() != nil {
		t.Error("nil Clone is not nil")
	}
}

func TestCriticalRulesValidate(t *testing.T) {
	tests := []struct {
		name    string
		rules   CriticalRules
		wantErr bool
	}{
		{"zero", CriticalRules{}, false},
		{"modern", CriticalRules{Mode: ModeModern, Namespaces: []string{"kube-system"}}, false},
		{"seed", CriticalRules{Mode: modeSeed, PriorityAnnotation: "x.io/p"}, false},
		{"unknown mode", CriticalRules{Mode: "Modern"}, true},
		{"empty namespace", CriticalRules{Namespaces: []string{""}}, true},
		{"namespace with slash", CriticalRules{Namespaces: []string{"a/b"}}, true},
		{"annotation with space", CriticalRules{PriorityAnnotation: "a b"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.rules.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func BenchmarkFromSandboxConfig(b *testing.B) {
	cfg := sandboxConfig("default", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e760759_7576.slice",
		map[string]string{AnnotationConfigSource: "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z", PolicyPriorityAnnotation: "1000"})
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30, CpuShares: 1024}
	rules := CriticalRules{Namespaces: []string{"infra", "monitoring"}, PriorityAnnotation: PolicyPriorityAnnotation}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromSandboxConfig(cfg, "", rules, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRulesAnnotations: every annotation classify reads is among the
// rules' Annotations: a pod keeping only those is classified the same.
func TestRulesAnnotations(t *testing.T) {
	for _, rules := range []CriticalRules{{}, {PriorityAnnotation: "x.io/prio"}, {Mode: modeSeed, PriorityAnnotation: "x.io/p"}} {
		ann := map[string]string{AnnotationConfigSource: "file", annotationConfigMirror: "m", annotationCriticalPod: "",
			PolicyPriorityAnnotation: "2000000000", rules.PriorityAnnotation: "2000000000", "other": "x"}
		full := &Pod{Namespace: namespaceSystem, Annotations: ann}
		kept := &Pod{Namespace: namespaceSystem, Annotations: map[string]string{}}
		for _, k := range rules.Annotations() {
			kept.Annotations[k] = ann[k]
		}
		if err := rules.classify(full); err != nil {
			t.Fatal(err)
		}
		if err := rules.classify(kept); err != nil {
			t.Fatal(err)
		}
		if full.Critical != kept.Critical || full.Static != kept.Static || full.Priority != kept.Priority || full.Evictable != kept.Evictable {
			t.Fatalf("%+v: classified from its annotations %+v, from the kept ones %+v", rules, full, kept)
		}
	}
}
