package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr []string // substrings, each must appear
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file gives defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Listen != "/run/cri-guard/cri-guard.sock" || c.HousekeepingInterval.Duration != 10*time.Second || c.EvictionHard["memory.available"] != "100Mi" {
				t.Fatalf("defaults wrong: %+v", c)
			}
		}},
		{name: "full example", yaml: `
listen: /run/x/cri-guard.sock
runtimeEndpoint: /run/containerd/containerd.sock
podsCgroup: /kubepods.slice
housekeepingInterval: 2s
evictionHard:   {memory.available: 100Mi, memory.pressure.full.avg10: "40%"}
evictionSoft:   {memory.available: 300Mi, memory.pressure.some.avg10: "20%"}
evictionSoftGracePeriod: {memory.available: 30s, memory.pressure.some.avg10: 20s}
evictionMinimumReclaim:  {memory.available: 200Mi}
evictionPressureTransitionPeriod: 1m
critical: {rules: seed, namespaces: [infra], priorityAnnotation: example.com/prio}
onStatsError: reject
restoredPods: warn
log: {level: debug, format: json}
`, check: func(t *testing.T, c Config) {
			if c.HousekeepingInterval.Duration != 2*time.Second || c.Critical.Rules != "seed" || c.OnStatsError != "reject" || c.Log.Format != "json" {
				t.Fatalf("parsed wrong: %+v", c)
			}
			ts, err := c.Thresholds()
			// the 4 given and the allocatable copy of the hard
			// memory.available (enforceNodeAllocatable: [pods], podsCgroup set)
			if err != nil || len(ts) != 5 {
				t.Fatalf("thresholds = %v, %v; want 5", ts, err)
			}
		}},
		{name: "node status heartbeat 5m by default", yaml: "", check: func(t *testing.T, c Config) {
			if d := c.Kubernetes.NodeStatusHeartbeat.Duration; d != 5*time.Minute {
				t.Fatalf("nodeStatusHeartbeat = %v, want 5m", d)
			}
		}},
		{name: "node status heartbeat", yaml: "kubernetes: {nodeStatusHeartbeat: 90s}\n", check: func(t *testing.T, c Config) {
			if d := c.Kubernetes.NodeStatusHeartbeat.Duration; d != 90*time.Second {
				t.Fatalf("nodeStatusHeartbeat = %v, want 90s", d)
			}
		}},
		{name: "node status heartbeat too short", yaml: "kubernetes: {nodeStatusHeartbeat: 5s}\n",
			wantErr: []string{"kubernetes.nodeStatusHeartbeat: must be at least 10s, got 5s"}},
		{name: "node status heartbeat not a duration", yaml: "kubernetes: {nodeStatusHeartbeat: often}\n",
			wantErr: []string{"nodeStatusHeartbeat"}},
		// The kubelet's defaulting, which cri-guard's follows: cmd/kubelet/app/server.go
		// loadConfigFile applies DefaultEvictionHard only when evictionHard
		// is nil; pkg/kubelet/apis/config/v1beta1/defaults.go turns a zero
		// evictionPressureTransitionPeriod into 5m and leaves
		// evictionMaxPodGracePeriod at 0.
		{name: "empty evictionHard means no hard thresholds", yaml: "evictionHard: {}\n", check: func(t *testing.T, c Config) {
			if ts, err := c.Thresholds(); err != nil || len(ts) != 0 {
				t.Fatalf("thresholds = %v, %v; want none", ts, err)
			}
		}},
		{name: "evictionHard given replaces the default", yaml: "evictionHard: {allocatableMemory.available: 200Mi}\n", check: func(t *testing.T, c Config) {
			if len(c.EvictionHard) != 1 || c.EvictionHard["allocatableMemory.available"] != "200Mi" {
				t.Fatalf("evictionHard = %v, want only allocatableMemory.available", c.EvictionHard)
			}
		}},
		{name: "null evictionHard keeps the default", yaml: "evictionHard:\n", check: func(t *testing.T, c Config) {
			if len(c.EvictionHard) != 1 || c.EvictionHard["memory.available"] != "100Mi" {
				t.Fatalf("evictionHard = %v, want the default", c.EvictionHard)
			}
		}},
		// helpers.go ParseThresholdConfig/addAllocatableThresholds
		{name: "enforceNodeAllocatable pods copies hard memory.available to allocatable", yaml: "podsCgroup: /kubepods\nevictionHard: {memory.available: 1Gi}\nevictionSoft: {memory.available: 2Gi}\nevictionSoftGracePeriod: {memory.available: 0s}\n", check: func(t *testing.T, c Config) {
			ts, err := c.Thresholds()
			var got []string
			for _, th := range ts {
				got = append(got, th.String())
			}
			want := "hard memory.available<1Gi,hard memory.available<2Gi,hard allocatableMemory.available<1Gi,hard allocatableMemory.available<2Gi"
			if err != nil || strings.Join(got, ",") != want {
				t.Fatalf("thresholds = %v, %v; want %s", got, err, want)
			}
		}},
		{name: "enforceNodeAllocatable without pods: no copy", yaml: "podsCgroup: /kubepods\nevictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []\n", check: func(t *testing.T, c Config) {
			if ts, err := c.Thresholds(); err != nil || len(ts) != 1 {
				t.Fatalf("thresholds = %v, %v; want only memory.available", ts, err)
			}
		}},
		{name: "bad enforceNodeAllocatable", yaml: "enforceNodeAllocatable: [pod]\n", wantErr: []string{"enforceNodeAllocatable[0]: must be one of"}},
		{name: "zero transition period is 5m", yaml: "evictionPressureTransitionPeriod: 0s\n", check: func(t *testing.T, c Config) {
			if c.EvictionPressureTransitionPeriod.Duration != 5*time.Minute {
				t.Fatalf("transition = %v, want 5m", c.EvictionPressureTransitionPeriod)
			}
		}},
		{name: "max pod grace period defaults to 0", yaml: "", check: func(t *testing.T, c Config) {
			if c.EvictionMaxPodGracePeriod.Duration != 0 {
				t.Fatalf("evictionMaxPodGracePeriod = %v, want 0", c.EvictionMaxPodGracePeriod)
			}
		}},
		{name: "unknown key", yaml: "listenn: /x\n", wantErr: []string{"listenn: unknown field"}},
		{name: "unknown key and bad values, all reported", yaml: "bogus: 1\nlisten: rel.sock\nevictionSoft: {memory.available: 300Mi}\n",
			wantErr: []string{"bogus: unknown field", `listen: must be an absolute path, got "rel.sock"`, "evictionSoftGracePeriod[memory.available]"}},
		{name: "unknown nested key", yaml: "critical: {rule: modern}\n", wantErr: []string{`critical.rule: unknown field`}},
		{name: "null duration keeps the default", yaml: "housekeepingInterval:\nevictionPressureTransitionPeriod: null\n", check: func(t *testing.T, c Config) {
			d := Default()
			if c.HousekeepingInterval != d.HousekeepingInterval || c.EvictionPressureTransitionPeriod != d.EvictionPressureTransitionPeriod {
				t.Fatalf("housekeepingInterval %v, evictionPressureTransitionPeriod %v: want the defaults %v, %v", c.HousekeepingInterval,
					c.EvictionPressureTransitionPeriod, d.HousekeepingInterval, d.EvictionPressureTransitionPeriod)
			}
		}},
		{name: "bad duration", yaml: "housekeepingInterval: fast\n", wantErr: []string{"housekeepingInterval", `bad duration "fast"`}},
		{name: "bad quantity", yaml: "evictionHard: {memory.available: lots}\n", wantErr: []string{"evictionHard[memory.available]"}},
		{name: "soft without grace", yaml: "evictionSoft: {memory.available: 300Mi}\n", wantErr: []string{"evictionSoftGracePeriod[memory.available]"}},
		{name: "unknown signal", yaml: "evictionHard: {nodefs.available: 10%}\n", wantErr: []string{"evictionHard[nodefs.available]"}},
		{name: "bad enums, all reported", yaml: "onStatsError: maybe\nrestoredPods: later\ncritical: {rules: old}\nlog: {level: loud, format: xml}\n",
			wantErr: []string{"onStatsError: must be admit or reject", "restoredPods: must be enforce or warn", "critical.rules: must be modern or seed", "log.level", "log.format"}},
		{name: "relative path", yaml: "stateDir: var/lib\n", wantErr: []string{`stateDir: must be an absolute path, got "var/lib"`}},
		{name: "bad trigger window", yaml: "psiTrigger: some 150000 20000000\n", wantErr: []string{"psiTrigger: psi trigger \"some 150000 20000000\": window must be"}},
		{name: "bad trigger form", yaml: "psiTrigger: most 1 2\n", wantErr: []string{"psiTrigger: psi trigger \"most 1 2\": want"}},
		{name: "bad fast poll", yaml: "fastPoll: {interval: 10ms, watch: 200ms, margin: -1Mi, maxRate: fast}\n",
			wantErr: []string{`fastPoll.margin: want a non-negative quantity such as 256Mi, got "-1Mi"`, `fastPoll.maxRate: want a non-negative quantity per second such as 2Gi, got "fast"`}},
		{name: "fast poll defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.FastPoll.MaxRateBytes() != 2<<30 || c.FastPoll.MarginBytes() != 256<<20 || c.PSITrigger != "some 50000 1000000" {
				t.Fatalf("fastPoll %+v (maxRate %d), psiTrigger %q", c.FastPoll, c.FastPoll.MaxRateBytes(), c.PSITrigger)
			}
		}},
		{name: "trigger disabled", yaml: "psiTrigger: \"\"\n", check: func(t *testing.T, c Config) {
			if c.PSITrigger != "" {
				t.Fatalf("psiTrigger = %q", c.PSITrigger)
			}
		}},
		{name: "interval too short", yaml: "housekeepingInterval: 1ms\n", wantErr: []string{"housekeepingInterval: must be at least 100ms"}},
		{name: "not yaml", yaml: "listen: [\n", wantErr: []string{"decode"}},
		{name: "duplicate key", yaml: "listen: /a\nlisten: /b\n", wantErr: []string{`decode: yaml: unmarshal errors: line 2: key "listen" already set in map`}},
		{name: "duplicate nested key", yaml: "critical: {rules: modern, rules: seed}\n", wantErr: []string{`key "rules" already set in map`}},
		{name: "duplicate keys, all reported", yaml: "listen: /a\nlisten: /b\ndryRun: true\ndryRun: false\n",
			wantErr: []string{`line 2: key "listen" already set in map; line 4: key "dryRun" already set in map`}},
		{name: "duplicate threshold", yaml: "evictionHard: {memory.available: 1Gi, memory.available: 2Gi}\n", wantErr: []string{`key "memory.available" already set in map`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want error containing %q, got none", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v does not name the file", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("want an error for a missing file")
	}
}

// TestLoadLenient: the daemon takes a file with a key it does not know
// (a newer release's, after a downgrade) without that key, saying so,
// where Load refuses it; any other problem is still refused; an empty file
// is taken as the defaults with a warning.
func TestLoadLenient(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknown := write("unknown.yaml", "housekeepingInterval: 3s\nfutureSetting: 1\ncritical: {rules: modern, newRule: x}\n")
	if _, err := Load(unknown); !errors.Is(err, errUnknownField) {
		t.Fatalf("Load: %v, want an unknown field", err)
	}
	cfg, warnings, err := LoadLenient(unknown)
	if err != nil {
		t.Fatalf("LoadLenient: %v", err)
	}
	if cfg.HousekeepingInterval.Duration != 3*time.Second {
		t.Errorf("housekeepingInterval = %v, want the file's 3s", cfg.HousekeepingInterval)
	}
	if want := []string{"critical.newRule: unknown field: ignored", "futureSetting: unknown field: ignored"}; !slices.Equal(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
	bad := write("bad.yaml", "futureSetting: 1\nhousekeepingInterval: fast\n")
	if _, _, err := LoadLenient(bad); err == nil || !strings.Contains(err.Error(), "housekeepingInterval") || strings.Contains(err.Error(), "futureSetting") {
		t.Errorf("LoadLenient of a bad value: %v, want the bad value refused and the unknown key not named", err)
	}
	empty := write("empty.yaml", "\n  \n")
	cfg, warnings, err = LoadLenient(empty)
	if err != nil || !reflect.DeepEqual(cfg, func() Config { c := Default(); c.applyKubeletDefaults(); return c }()) || len(warnings) != 1 || !strings.Contains(warnings[0], "empty") {
		t.Errorf("LoadLenient of an empty file: %v, %q, want the defaults and a warning", err, warnings)
	}
}

// TestRemovedTaintKey: a file that still sets kubernetes.taint (the node
// taint set from the node, with an identity that could patch every Node)
// loads without it, by the daemon and by check-config alike, with a
// warning naming the controller that sets the taint now; the rest of the
// file is read, and its other problems are still refused.
func TestRemovedTaintKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := write("old.yaml", "kubernetes: {kubeconfig: /k, nodeStatusHeartbeat: 90s, taint: {enabled: true, effect: NoSchedule, kubeconfig: /t}}\n")
	for _, load := range []struct {
		name string
		load func(string) (Config, []string, error)
	}{{"LoadLenient", LoadLenient}, {"Check", Check}} {
		cfg, warnings, err := load.load(old)
		if err != nil {
			t.Fatalf("%s: %v", load.name, err)
		}
		if cfg.Kubernetes.Kubeconfig != "/k" || cfg.Kubernetes.NodeStatusHeartbeat.Duration != 90*time.Second {
			t.Errorf("%s: kubernetes = %+v, want the file's other keys", load.name, cfg.Kubernetes)
		}
		if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "kubernetes.taint: removed") || !strings.Contains(warnings[0], "cri-guard-controller") {
			t.Errorf("%s: warnings %q, want one naming kubernetes.taint and cri-guard-controller", load.name, warnings)
		}
	}
	if _, err := Load(old); err != nil {
		t.Errorf("Load: %v, want the removed key left out", err)
	}
	bad := write("bad.yaml", "kubernetes: {taint: {enabled: true}, nodeStatusHeartbeat: 5s}\n")
	if _, _, err := LoadLenient(bad); err == nil || !strings.Contains(err.Error(), "nodeStatusHeartbeat") || strings.Contains(err.Error(), "taint") {
		t.Errorf("LoadLenient of a bad value beside the removed key: %v, want the bad value refused, the removed key not named", err)
	}
}

// nested is the YAML mapping that sets the dotted key to value.
func nested(key, value string) string {
	parts := strings.Split(key, ".")
	s := value
	for i := len(parts) - 1; i >= 0; i-- {
		s = "{" + parts[i] + ": " + s + "}"
	}
	return s + "\n"
}

// TestKeys: every key Keys lists is read by the decoder, a key it does not
// list is refused, and its keys are
// the ones encoding/json writes for the defaults, section by section; the
// removed keys are not among them and load with a warning.
func TestKeys(t *testing.T) {
	keys := Keys()
	for _, k := range []string{"listen", "evictionHard", "fastPoll", "fastPoll.maxRate", "critical.priorityAnnotation", "log.level", "kubernetes.kubeconfig", "kubernetes.nodeStatusHeartbeat"} {
		if !slices.Contains(keys, k) {
			t.Errorf("Keys() lacks %s: %q", k, keys)
		}
	}
	if !slices.IsSorted(keys) {
		t.Errorf("Keys() not sorted: %q", keys)
	}
	for _, k := range keys {
		// a null may still be a bad value (a Duration's): only an
		// unknown field says the key is not read
		if _, err := Parse([]byte(nested(k, "null"))); errors.Is(err, errUnknownField) {
			t.Errorf("Parse(%s: null): %v", k, err)
		}
	}
	for _, k := range []string{"kubernetes.nope", "nope", "critical.rule"} {
		if _, err := Parse([]byte(nested(k, "null"))); !errors.Is(err, errUnknownField) {
			t.Errorf("Parse(%s: null): %v, want an unknown field", k, err)
		}
	}

	b, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	var walk func(prefix string, obj map[string]any)
	walk = func(prefix string, obj map[string]any) {
		for k, v := range obj {
			if prefix != "" {
				k = prefix + "." + k
			}
			written = append(written, k)
			// a section is an object whose keys Keys lists; a map
			// (evictionHard) is an object of values
			if o, ok := v.(map[string]any); ok && slices.ContainsFunc(keys, func(s string) bool { return strings.HasPrefix(s, k+".") }) {
				walk(k, o)
			}
		}
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	walk("", top)
	slices.Sort(written)
	if !slices.Equal(written, keys) {
		t.Errorf("json of the defaults has keys %q,\nKeys() = %q", written, keys)
	}

	removed := RemovedKeys()
	if len(removed) == 0 {
		t.Fatal("RemovedKeys() is empty: the removed-keys table is not read")
	}
	dir := t.TempDir()
	for _, k := range removed {
		if slices.Contains(keys, k) {
			t.Errorf("%s is both a key and removed", k)
		}
		p := filepath.Join(dir, "removed.yaml")
		if err := os.WriteFile(p, []byte(nested(k, "{}")), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, warnings, err := Check(p); err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], k+": removed") {
			t.Errorf("Check(%s): %v, %q, want one warning that it is removed", k, err, warnings)
		}
	}
}
