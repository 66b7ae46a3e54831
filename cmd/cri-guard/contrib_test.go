package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/config"
)

const contribDir = "../../contrib"

func TestContribConfigLoads(t *testing.T) {
	path := filepath.Join(contribDir, "config.yaml")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// The example differs from the defaults where DESIGN.md says so.
	if cfg.PodsCgroup != "/kubepods.slice" || cfg.EvictionSoft["memory.available"] != "300Mi" || cfg.EvictionMinimumReclaim["memory.available"] != "200Mi" {
		t.Errorf("example config not read as written: %+v", cfg)
	}
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"check-config", "--skip-node-check", path}, &stdout, &stderr); code != 0 {
		t.Errorf("check-config: exit %d: %s", code, stderr.String())
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the unit (its
// ExecStart pointed at this test binary, which exists) and on a stand-in
// kubelet.service with the drop-in; any warning about them fails. The units
// the shipped ones name (containerd.service, kubelet.service) are stand-ins in
// the same directory, first on the unit path: the verification must not depend
// on what the host happens to have installed.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join(contribDir, "systemd", "cri-guard.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/cri-guard --config /etc/cri-guard/config.yaml\n")) {
		t.Fatal("unit does not start /usr/local/bin/cri-guard --config /etc/cri-guard/config.yaml")
	}
	dropIn, err := os.ReadFile(filepath.Join(contribDir, "systemd", "kubelet.service.d", "10-cri-guard.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"cri-guard.service":                   strings.ReplaceAll(string(unit), "/usr/local/bin/cri-guard", exe),
		"kubelet.service":                     "[Unit]\nDescription=stand-in kubelet\n[Service]\nExecStart=/bin/echo $KUBELET_EXTRA_ARGS\n",
		"containerd.service":                  "[Unit]\nDescription=stand-in containerd\n[Service]\nExecStart=/bin/true\n",
		"kubelet.service.d/10-cri-guard.conf": string(dropIn),
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"cri-guard.service", "kubelet.service"} {
		t.Run(u, func(t *testing.T) {
			cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, u))
			cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":", "SYSTEMD_LOG_COLOR=0")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, dir) || strings.Contains(line, "cri-guard") {
					t.Errorf("systemd-analyze: %s", line)
				}
			}
		})
	}
}

// TestContribRBAC: the taint's RBAC manifest is YAML of the objects the
// README names, its ClusterRole allowing get and patch on nodes, bound to
// the ServiceAccount.
func TestContribRBAC(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(contribDir, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]map[string]any{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		kinds[obj["kind"].(string)] = obj
	}
	for _, k := range []string{"ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding"} {
		if kinds[k] == nil {
			t.Errorf("rbac.yaml has no %s", k)
		}
	}
	rule := kinds["ClusterRole"]["rules"].([]any)[0].(map[string]any)
	if fmt.Sprint(rule["resources"], rule["verbs"]) != "[nodes] [get patch]" {
		t.Errorf("ClusterRole rule %v: want get and patch on nodes", rule)
	}
	subj := kinds["ClusterRoleBinding"]["subjects"].([]any)[0].(map[string]any)
	if subj["kind"] != "ServiceAccount" || subj["name"] != "cri-guard-taint" {
		t.Errorf("binding subject %v", subj)
	}
}
