package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cri-guard/cri-guard/internal/config"
)

const contribDir = "../../contrib"

func TestContribConfigLoads(t *testing.T) {
	path := filepath.Join(contribDir, "config.yaml")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// The example sets what the defaults leave out (a pods cgroup, a soft
	// threshold, minimum reclaim), and is read as written.
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

// TestSystemdUnitSecurity: systemd-analyze rates the shipped unit's
// exposure at 3.0 or better (--threshold=30 makes it exit non-zero above),
// so that a hardening line cannot be dropped unnoticed.
func TestSystemdUnitSecurity(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	unit, err := os.ReadFile(filepath.Join(contribDir, "systemd", "cri-guard.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "cri-guard.service")
	if err := os.WriteFile(p, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "security", "--offline=true", "--threshold=30", "--no-pager", p)
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":", "SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0")
	out, err := cmd.CombinedOutput()
	var overall string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Overall exposure level") {
			overall = strings.TrimSpace(line)
		}
	}
	if overall == "" {
		t.Fatalf("systemd-analyze security printed no overall exposure (%v):\n%s", err, out)
	}
	if err != nil {
		t.Fatalf("%s: over the threshold of 3.0 (%v):\n%s", overall, err, out)
	}
	t.Log(overall)
}

// TestSystemdUnitContainerdDependency: the unit Wants= containerd and is
// ordered After= it, and does not Require= (nor BindsTo= or PartOf=) it: a
// restart of containerd must not restart cri-guard, whose runtime connection
// reconnects by itself.
func TestSystemdUnitContainerdDependency(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(contribDir, "systemd", "cri-guard.service"))
	if err != nil {
		t.Fatal(err)
	}
	deps := unitSection(string(unit), "Unit")
	has := func(key string) bool {
		for _, v := range deps[key] {
			if slices.Contains(strings.Fields(v), "containerd.service") {
				return true
			}
		}
		return false
	}
	if !has("Wants") || !has("After") {
		t.Errorf("[Unit] Wants=%q After=%q: want containerd.service in both", deps["Wants"], deps["After"])
	}
	for _, k := range []string{"Requires", "Requisite", "BindsTo", "PartOf"} {
		if has(k) {
			t.Errorf("[Unit] %s=%q: a restart or stop of containerd would restart or stop cri-guard", k, deps[k])
		}
	}
}

// unitSection returns the KEY=VALUE lines of one [section] of a unit file.
func unitSection(unit, section string) map[string][]string {
	out := map[string][]string{}
	in := false
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			in = line == "["+section+"]"
		case in:
			if k, v, ok := strings.Cut(line, "="); ok {
				out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
			}
		}
	}
	return out
}
