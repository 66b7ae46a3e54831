package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// asBinaryEnv makes this test binary run as cri-guard itself (TestMain): the
// maintainer scripts' tests install it as <root>/usr/bin/cri-guard, so that
// postinst runs the real check-config.
const asBinaryEnv = "CRI_GUARD_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinaryEnv) == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// maintRoot is a temporary DPKG_ROOT for the package's maintainer scripts:
// this test binary as usr/bin/cri-guard, the shipped config.yaml, and a fake
// systemctl on PATH that records its arguments.
type maintRoot struct {
	t    *testing.T
	dir  string // the DPKG_ROOT
	log  string // the fake systemctl's record, one call a line
	path string // PATH with the fake systemctl first
}

// newMaintRoot makes the root; with systemd it has /run/systemd/system, as
// a host booted with systemd has.
func newMaintRoot(t *testing.T, systemd bool) *maintRoot {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run the maintainer scripts with")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r := &maintRoot{t: t, dir: filepath.Join(tmp, "root"), log: filepath.Join(tmp, "systemctl.log")}
	fakeBin := filepath.Join(tmp, "bin")
	r.path = fakeBin + ":" + os.Getenv("PATH")
	if err := os.MkdirAll(fakeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fakeBin, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >>\"$SYSTEMCTL_LOG\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(r.dir, "usr", "bin", "cri-guard")); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(contribDir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r.write("etc/cri-guard/config.yaml", string(shipped), 0o644)
	if systemd {
		if err := os.MkdirAll(filepath.Join(r.dir, "run", "systemd", "system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// write writes a file under the root (a relative path).
func (r *maintRoot) write(rel, content string, mode os.FileMode) {
	r.t.Helper()
	p := filepath.Join(r.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		r.t.Fatal(err)
	}
}

// maintRun is what one run of a maintainer script did.
type maintRun struct {
	code           int
	stdout, stderr string
	systemctl      []string // the fake systemctl's calls, in order
}

// run runs contrib/deb/SCRIPT ARGS with sh, as dpkg does, in the root; env
// adds variables (the environment is otherwise PATH and the root alone).
func (r *maintRoot) run(script string, env []string, args ...string) maintRun {
	r.t.Helper()
	_ = os.Remove(r.log)
	p, err := filepath.Abs(filepath.Join(contribDir, "deb", script))
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{p}, args...)...)
	cmd.Env = append([]string{"PATH=" + r.path, "DPKG_ROOT=" + r.dir, "SYSTEMCTL_LOG=" + r.log, asBinaryEnv + "=1"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	res := maintRun{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		r.t.Fatalf("%s %v: %v", script, args, err)
	}
	if b, err := os.ReadFile(r.log); err == nil {
		res.systemctl = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	return res
}

// TestPostinstChecksConfig: postinst runs the new binary's check-config
// before systemd is touched; a configuration it rejects fails the
// installation with the problems on stderr and leaves the running cri-guard
// alone. The shipped configuration passes.
func TestPostinstChecksConfig(t *testing.T) {
	const bad = "evictionHard: {memory.available: lots}\nhousekeepingInterval: -1s\n"
	tests := []struct {
		name      string
		config    string // "" keeps the shipped config.yaml; "-" removes it
		args      []string
		code      int
		systemctl []string
		stderr    []string // substrings
	}{
		{name: "install shipped config", args: []string{"configure", ""}, code: 0,
			systemctl: []string{"daemon-reload", "enable cri-guard.service", "start cri-guard.service"}},
		{name: "upgrade shipped config", args: []string{"configure", "0.9.0"}, code: 0,
			systemctl: []string{"daemon-reload", "enable cri-guard.service", "try-restart cri-guard.service"}},
		{name: "upgrade rejected config", config: bad, args: []string{"configure", "0.9.0"}, code: 1,
			stderr: []string{"/etc/cri-guard/config.yaml is not a configuration the new cri-guard", "evictionHard[memory.available]",
				"housekeepingInterval: must be at least 100ms", "not restarted: the running cri-guard", "dpkg --configure -a"}},
		{name: "install rejected config", config: bad, args: []string{"configure", ""}, code: 1,
			stderr: []string{"housekeepingInterval", "not started"}},
		{name: "upgrade without config file", config: "-", args: []string{"configure", "0.9.0"}, code: 1,
			stderr: []string{"no such file or directory", "not restarted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMaintRoot(t, true)
			switch tt.config {
			case "":
			case "-":
				if err := os.Remove(filepath.Join(r.dir, "etc", "cri-guard", "config.yaml")); err != nil {
					t.Fatal(err)
				}
			default:
				r.write("etc/cri-guard/config.yaml", tt.config, 0o644)
			}
			res := r.run("postinst", nil, tt.args...)
			if res.code != tt.code {
				t.Errorf("postinst %q: exit %d, want %d; stderr:\n%s", tt.args, res.code, tt.code, res.stderr)
			}
			if !slices.Equal(res.systemctl, tt.systemctl) {
				t.Errorf("systemctl calls %q, want %q", res.systemctl, tt.systemctl)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(res.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, res.stderr)
				}
			}
		})
	}
}

// TestPrermRefusesRemovalWhileKubeletUsesIt: prerm remove fails, touching
// nothing, while a kubelet drop-in (or defaults file) points the kubelet at
// cri-guard's socket, and says how to move the kubelet back; the override
// variable removes anyway; an upgrade is never refused.
func TestPrermRefusesRemovalWhileKubeletUsesIt(t *testing.T) {
	dropIn, err := os.ReadFile(filepath.Join(contribDir, "systemd", "kubelet.service.d", "10-cri-guard.conf"))
	if err != nil {
		t.Fatal(err)
	}
	stopped := []string{"stop cri-guard.service", "disable cri-guard.service"}
	tests := []struct {
		name      string
		files     map[string]string
		config    string // replaces config.yaml when set
		env       []string
		args      []string
		code      int
		systemctl []string
		stderr    []string
	}{
		{name: "package drop-in installed", files: map[string]string{"etc/systemd/system/kubelet.service.d/10-cri-guard.conf": string(dropIn)},
			args: []string{"remove"}, code: 1,
			stderr: []string{"not removed", "  /etc/systemd/system/kubelet.service.d/10-cri-guard.conf\n", "systemctl daemon-reload",
				"systemctl restart kubelet", "CRI_GUARD_FORCE_REMOVE=1"}},
		{name: "own drop-in naming the socket", files: map[string]string{
			"etc/systemd/system/kubelet.service.d/20-runtime.conf": "[Service]\nEnvironment=\"KUBELET_EXTRA_ARGS=--container-runtime-endpoint=unix:///run/cri-guard/cri-guard.sock\"\n",
			"etc/systemd/system/kubelet.service.d/10-kubeadm.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_EXTRA_ARGS\n"},
			args: []string{"remove"}, code: 1,
			stderr: []string{"  /etc/systemd/system/kubelet.service.d/20-runtime.conf\n"}},
		{name: "defaults file naming the configured socket", config: "listen: \"/run/guard/cri.sock\"\n",
			files: map[string]string{"etc/default/kubelet": "KUBELET_EXTRA_ARGS=--container-runtime-endpoint=unix:///run/guard/cri.sock\n"},
			args:  []string{"remove"}, code: 1, stderr: []string{"  /etc/default/kubelet\n"}},
		{name: "forced", files: map[string]string{"etc/systemd/system/kubelet.service.d/10-cri-guard.conf": string(dropIn)},
			env: []string{"CRI_GUARD_FORCE_REMOVE=1"}, args: []string{"remove"}, code: 0, systemctl: stopped},
		{name: "kubelet on containerd", files: map[string]string{
			"etc/systemd/system/kubelet.service.d/10-kubeadm.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_EXTRA_ARGS\n"},
			args: []string{"remove"}, code: 0, systemctl: stopped},
		{name: "upgrade with the drop-in", files: map[string]string{"etc/systemd/system/kubelet.service.d/10-cri-guard.conf": string(dropIn)},
			args: []string{"upgrade", "1.1.0"}, code: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMaintRoot(t, true)
			for rel, content := range tt.files {
				r.write(rel, content, 0o644)
			}
			if tt.config != "" {
				r.write("etc/cri-guard/config.yaml", tt.config, 0o644)
			}
			res := r.run("prerm", tt.env, tt.args...)
			if res.code != tt.code {
				t.Errorf("prerm %q: exit %d, want %d; stderr:\n%s", tt.args, res.code, tt.code, res.stderr)
			}
			if !slices.Equal(res.systemctl, tt.systemctl) {
				t.Errorf("systemctl calls %q, want %q", res.systemctl, tt.systemctl)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(res.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, res.stderr)
				}
			}
		})
	}
}

// TestPostrmPurgeStaysInRoot: a purge removes the state, the configuration
// and the enablement under DPKG_ROOT (dpkg --root with
// --force-script-chrootless runs the script outside that root), and only
// there.
func TestPostrmPurgeStaysInRoot(t *testing.T) {
	r := newMaintRoot(t, true)
	r.write("var/lib/cri-guard/sandbox-1.json", "{}", 0o600)
	r.write("run/cri-guard/admin.sock", "", 0o600)
	r.write("etc/systemd/system/multi-user.target.wants/cri-guard.service", "", 0o644)
	r.write("etc/systemd/system/kubelet.service", "", 0o644)
	res := r.run("postrm", nil, "purge")
	if res.code != 0 {
		t.Fatalf("postrm purge: exit %d: %s", res.code, res.stderr)
	}
	for _, gone := range []string{"var/lib/cri-guard", "etc/cri-guard", "run/cri-guard", "etc/systemd/system/multi-user.target.wants/cri-guard.service"} {
		if _, err := os.Lstat(filepath.Join(r.dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/%s left after the purge (%v)", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.dir, "etc/systemd/system/kubelet.service")); err != nil {
		t.Errorf("the purge removed what is not cri-guard's: %v", err)
	}
	if want := []string{"daemon-reload"}; !slices.Equal(res.systemctl, want) {
		t.Errorf("systemctl calls %q, want %q", res.systemctl, want)
	}
}
