package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Duration is a time.Duration written as a Go duration string ("10s", "5m")
// in the config file.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts a duration string such as "30s".
// A null (a key written with no value) keeps the default, as encoding/json
// leaves a value on null.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"10s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Critical selects which pods are critical (docs/design.md, "Critical rules").
type Critical struct {
	// Rules is "modern" (today's kubelet) or "seed" (ExperimentalCriticalPodAnnotation).
	Rules string `json:"rules"`
	// Namespaces lists namespaces whose every pod is critical.
	Namespaces []string `json:"namespaces"`
	// PriorityAnnotation names the annotation that carries a pod's integer
	// priority without an API connection; empty (the default): none. A pod's
	// author writes its annotations, so turning this on needs the admission
	// policy in contrib/policy/ (pod.CriticalRules.PriorityAnnotation).
	PriorityAnnotation string `json:"priorityAnnotation"`
}

// Log configures the logger.
type Log struct {
	Level  string `json:"level"`
	Format string `json:"format"`
}

// Config is the whole configuration of cri-guard.
type Config struct {
	Listen               string   `json:"listen"`
	RuntimeEndpoint      string   `json:"runtimeEndpoint"`
	StateDir             string   `json:"stateDir"`
	CgroupRoot           string   `json:"cgroupRoot"`
	ProcRoot             string   `json:"procRoot"`
	PodsCgroup           string   `json:"podsCgroup"`
	HousekeepingInterval Duration `json:"housekeepingInterval"`
	// KubeletCompatibility is the kubelet release whose computation of
	// memory.available cri-guard follows: "1.37" (the default) takes the
	// node's huge page pool off it, as that kubelet does; "1.36" and
	// "1.35" count the pool as available.
	KubeletCompatibility KubeletRelease `json:"kubeletCompatibility"`

	EvictionHard                     map[string]string `json:"evictionHard"`
	EvictionSoft                     map[string]string `json:"evictionSoft"`
	EvictionSoftGracePeriod          map[string]string `json:"evictionSoftGracePeriod"`
	EvictionMinimumReclaim           map[string]string `json:"evictionMinimumReclaim"`
	EvictionPressureTransitionPeriod Duration          `json:"evictionPressureTransitionPeriod"`
	EvictionMaxPodGracePeriod        Duration          `json:"evictionMaxPodGracePeriod"`
	// EnforceNodeAllocatable is the kubelet's setting of the same name:
	// with "pods" (its default) and a podsCgroup, every hard
	// memory.available threshold also applies to allocatableMemory.available.
	EnforceNodeAllocatable []string `json:"enforceNodeAllocatable"`
	PSITrigger             string   `json:"psiTrigger"`
	// KernelMemcgNotification is the kubelet's setting of the same name: a
	// v1 memcg threshold notification on the pods cgroup wakes the loop
	// when allocatableMemory.available crosses a threshold (fastpath.go).
	KernelMemcgNotification bool     `json:"kernelMemcgNotification"`
	FastPoll                FastPoll `json:"fastPoll"`

	Critical       Critical `json:"critical"`
	OnStatsError   string   `json:"onStatsError"`
	RestoredPods   string   `json:"restoredPods"`
	DryRun         bool     `json:"dryRun"`
	MetricsAddress string   `json:"metricsAddress"`
	AdminSocket    string   `json:"adminSocket"`
	Log            Log      `json:"log"`
	// Kubernetes is the optional connection to the API server; without a
	// kubeconfig cri-guard works from CRI alone.
	Kubernetes Kubernetes `json:"kubernetes"`
}

// Kubernetes configures the connection to the API server.
type Kubernetes struct {
	// Kubeconfig is the kubeconfig to use (the kubelet's own is enough);
	// empty: no API connection.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName is this node's name; empty: from the kubeconfig's client
	// certificate (system:node:<name>), else the host name.
	NodeName string `json:"nodeName"`
	// NodeStatusHeartbeat is how often the node condition
	// CriGuardMemoryPressure is written while it does not change (with up
	// to a fifth more at random); a change is written at once. Default
	// 5m, the kubelet's node status report period; at least 10s.
	NodeStatusHeartbeat Duration `json:"nodeStatusHeartbeat"`
}

// The defaults that other code needs on its own (the status command's
// --admin, cri-guard-bench's --runtime-endpoint, the sampler's roots):
// Default is built from them, and they are the only definition.
const (
	defaultListen               = "/run/cri-guard/cri-guard.sock"
	DefaultRuntimeEndpoint      = "/run/containerd/containerd.sock"
	defaultStateDir             = "/var/lib/cri-guard"
	defaultCgroupRoot           = pressure.DefaultCgroupRoot
	defaultProcRoot             = pressure.DefaultProcRoot
	defaultHousekeepingInterval = 10 * time.Second
	// defaultPSITrigger is a 1 s window: the kernel takes it from a process
	// with CAP_SYS_RESOURCE (root under systemd); without it the loop arms
	// "some 100000 2000000" instead (pressure.WidenTriggerSpec).
	defaultPSITrigger     = "some 50000 1000000"
	defaultMetricsAddress = "127.0.0.1:9713"
	DefaultAdminSocket    = "/run/cri-guard/admin.sock"
	// defaultNodeStatusHeartbeat is the kubelet's nodeStatusReportFrequency.
	defaultNodeStatusHeartbeat = 5 * time.Minute
	// defaultEvictionPressureTransitionPeriod is the kubelet's, which also
	// stands for a zero in the file (v1beta1 SetDefaults_KubeletConfiguration:
	// a zero EvictionPressureTransitionPeriod becomes 5m).
	defaultEvictionPressureTransitionPeriod = 5 * time.Minute
)

// Default returns the configuration cri-guard runs with when no file is given.
func Default() Config {
	return Config{
		Listen:                           defaultListen,
		RuntimeEndpoint:                  DefaultRuntimeEndpoint,
		StateDir:                         defaultStateDir,
		CgroupRoot:                       defaultCgroupRoot,
		ProcRoot:                         defaultProcRoot,
		HousekeepingInterval:             Duration{defaultHousekeepingInterval},
		KubeletCompatibility:             defaultKubeletCompatibility,
		EvictionHard:                     map[string]string{"memory.available": "100Mi"},
		EvictionPressureTransitionPeriod: Duration{defaultEvictionPressureTransitionPeriod},
		EvictionMaxPodGracePeriod:        Duration{0}, // the kubelet's: no default in v1beta1
		EnforceNodeAllocatable:           []string{"pods"},
		PSITrigger:                       defaultPSITrigger,
		KernelMemcgNotification:          defaultKernelMemcgNotification,
		FastPoll:                         defaultFastPoll(),
		Critical:                         Critical{Rules: "modern"},
		OnStatsError:                     "admit",
		RestoredPods:                     "enforce",
		MetricsAddress:                   defaultMetricsAddress,
		AdminSocket:                      DefaultAdminSocket,
		Log:                              Log{Level: "info", Format: "text"},
		Kubernetes:                       Kubernetes{NodeStatusHeartbeat: Duration{defaultNodeStatusHeartbeat}},
	}
}

// errUnknownField is the problem of a key that names no setting. Load and
// check-config refuse it; the daemon's start and reload take the file
// without the key (LoadLenient), as the kubelet's lenient decoding of its
// own config file does, so that a key from a newer release after a
// downgrade does not leave the node without a runtime.
var errUnknownField = errors.New("unknown field")

// removedKeys are the settings of earlier releases that are gone, each
// with what took its place. A file that still sets one is loaded without
// it and with a warning saying so, by the daemon and by check-config
// alike: it asks for nothing this release can do, and refusing it would
// leave the node without a runtime after an upgrade.
var removedKeys = map[string]string{
	// the taint needed an identity on every node that could patch every
	// Node (NodeRestriction forbids a node its own taints)
	"kubernetes.taint": "the node taint cri-guard.io/memory-pressure is set by the taint controller, " +
		"cri-guard-controller (kubectl apply -f contrib/controller/; docs/taint-controller.md), " +
		"from the CriGuardMemoryPressure condition; remove the key, and the taint's ServiceAccount and kubeconfig from the nodes",
}

// errRemovedField is the problem of a key in removedKeys: a warning, never
// an error.
var errRemovedField = errors.New("removed")

// Load reads the YAML file at path over the defaults and validates the result.
// A missing key keeps its default; an unknown key, a key given twice or a
// bad value is an error; a removed key is left out.
func Load(path string) (Config, error) {
	cfg, _, err := load(path, false)
	return cfg, err
}

// Check is Load with its warnings (a removed key, an empty file), for
// check-config to print.
func Check(path string) (Config, []string, error) {
	return load(path, false)
}

// LoadLenient is Load for the daemon: unknown keys are left out and
// returned as warnings, as is an empty file (it means every default, which
// is more likely a mistake than a choice); every other problem is still an
// error.
func LoadLenient(path string) (Config, []string, error) {
	return load(path, true)
}

func load(path string, lenient bool) (Config, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("read config %q: %w", path, err)
	}
	cfg, warnings, err := parse(b, lenient)
	if err != nil {
		return Config{}, nil, fmt.Errorf("config %q: %w", path, err)
	}
	return cfg, warnings, nil
}

// Parse decodes YAML over the defaults and validates the result.
func Parse(b []byte) (Config, error) {
	cfg, _, err := parse(b, false)
	return cfg, err
}

func parse(b []byte, lenient bool) (Config, []string, error) {
	cfg := Default()
	var warnings []string
	if len(bytes.TrimSpace(b)) == 0 {
		warnings = append(warnings, "the file is empty: every setting has its default")
	} else if err := decode(b, &cfg); err != nil {
		// Maps given in the file replace the default maps whole, as the
		// kubelet does for evictionHard.
		var errs Errors
		if !errors.As(err, &errs) {
			return Config{}, nil, err // not YAML at all
		}
		var rest Errors
		for _, e := range errs {
			switch {
			case errors.Is(e, errRemovedField):
				warnings = append(warnings, e.Error()+": ignored")
			case lenient && errors.Is(e, errUnknownField):
				warnings = append(warnings, e.Error()+": ignored")
			default:
				rest = append(rest, e)
			}
		}
		errs = rest
		if len(errs) > 0 {
			// Report the fields that did decode too: every problem at once.
			if verr, ok := cfg.Validate().(Errors); ok {
				errs = append(errs, verr...)
			}
			return Config{}, nil, errs
		}
	}
	cfg.applyKubeletDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, nil, err
	}
	return cfg, warnings, nil
}

// applyKubeletDefaults applies the kubelet's defaulting of values it
// treats as unset: a zero evictionPressureTransitionPeriod is 5m
// (pkg/kubelet/apis/config/v1beta1/defaults.go).
func (c *Config) applyKubeletDefaults() {
	if c.EvictionPressureTransitionPeriod.Duration == 0 {
		c.EvictionPressureTransitionPeriod.Duration = defaultEvictionPressureTransitionPeriod
	}
}

// Errors is every problem Validate found, one per field.
type Errors []error

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap lets errors.Is see each problem.
func (e Errors) Unwrap() []error { return e }

// Validate checks every field and returns all problems at once.
func (c Config) Validate() error {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	for field, v := range map[string]string{
		"listen": c.Listen, "runtimeEndpoint": c.RuntimeEndpoint, "stateDir": c.StateDir,
		"cgroupRoot": c.CgroupRoot, "procRoot": c.ProcRoot,
	} {
		if v == "" {
			add(field, "must not be empty")
		} else if !strings.HasPrefix(v, "/") {
			add(field, "must be an absolute path, got %q", v)
		}
	}
	if c.Kubernetes.Kubeconfig != "" && !strings.HasPrefix(c.Kubernetes.Kubeconfig, "/") {
		add("kubernetes.kubeconfig", "must be an absolute path, got %q", c.Kubernetes.Kubeconfig)
	}
	if c.Kubernetes.NodeStatusHeartbeat.Duration < 10*time.Second {
		add("kubernetes.nodeStatusHeartbeat", "must be at least 10s, got %v", c.Kubernetes.NodeStatusHeartbeat.Duration)
	}
	if c.AdminSocket != "" && !strings.HasPrefix(c.AdminSocket, "/") {
		add("adminSocket", "must be an absolute path, got %q", c.AdminSocket)
	}
	if c.PodsCgroup != "" && !strings.HasPrefix(c.PodsCgroup, "/") {
		add("podsCgroup", "must start with /, got %q", c.PodsCgroup)
	}
	if c.HousekeepingInterval.Duration < 100*time.Millisecond {
		add("housekeepingInterval", "must be at least 100ms, got %s", c.HousekeepingInterval)
	}
	if !c.KubeletCompatibility.valid() {
		add("kubeletCompatibility", "must be %s, %s or %s (the kubelet release whose memory.available cri-guard computes), got %q",
			kubelet135, kubelet136, kubelet137, c.KubeletCompatibility)
	}
	if c.EvictionPressureTransitionPeriod.Duration < 0 {
		add("evictionPressureTransitionPeriod", "must not be negative")
	}
	if c.EvictionMaxPodGracePeriod.Duration < 0 {
		add("evictionMaxPodGracePeriod", "must not be negative")
	}
	for i, v := range c.EnforceNodeAllocatable {
		switch v {
		case "pods", "system-reserved", "kube-reserved", "system-reserved-compressible", "kube-reserved-compressible", "none":
		default:
			add(fmt.Sprintf("enforceNodeAllocatable[%d]", i), "must be one of pods, system-reserved, kube-reserved, system-reserved-compressible, kube-reserved-compressible, none; got %q", v)
		}
	}
	switch c.Critical.Rules {
	case "modern", "seed":
	default:
		add("critical.rules", "must be modern or seed, got %q", c.Critical.Rules)
	}
	for i, ns := range c.Critical.Namespaces {
		if ns == "" {
			add(fmt.Sprintf("critical.namespaces[%d]", i), "must not be empty")
		}
	}
	if strings.ContainsAny(c.Critical.PriorityAnnotation, " \t\n") {
		add("critical.priorityAnnotation", "must be an annotation key, got %q", c.Critical.PriorityAnnotation)
	}
	if c.OnStatsError != "admit" && c.OnStatsError != "reject" {
		add("onStatsError", "must be admit or reject, got %q", c.OnStatsError)
	}
	if c.RestoredPods != "enforce" && c.RestoredPods != "warn" {
		add("restoredPods", "must be enforce or warn, got %q", c.RestoredPods)
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "warning", "error":
	default:
		add("log.level", "must be one of trace, debug, info, warn, error, got %q", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		add("log.format", "must be text or json, got %q", c.Log.Format)
	}
	for _, err := range c.validateEviction() {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
