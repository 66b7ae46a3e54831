package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BusyboxImage is the image the test pods run (scripts/rt.sh imports it
// into the harness containerd, which the cluster's kubelet uses too).
const BusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"

// Runtime is the containerd stack that scripts/rt.sh started under
// $CRI_GUARD_RT, with the CRI tools it installed there.
type Runtime struct {
	Dir        string // $CRI_GUARD_RT
	Containerd string // containerd's CRI socket
	CrictlBin  string
	CritestBin string
	GinkgoBin  string
	Images     string // critest's test-images.yaml
}

// LookupRuntime returns the stack named by CRI_GUARD_RT, or an error that
// says how to start it when the variable or containerd's socket is missing.
func LookupRuntime() (Runtime, error) {
	dir := os.Getenv("CRI_GUARD_RT")
	if dir == "" {
		return Runtime{}, errors.New("CRI_GUARD_RT is not set: run `scripts/rt.sh up` and export CRI_GUARD_RT (or use `make test`)")
	}
	rt := Runtime{
		Dir:        dir,
		Containerd: filepath.Join(dir, "containerd.sock"),
		CrictlBin:  filepath.Join(dir, "bin", "crictl"),
		CritestBin: filepath.Join(dir, "bin", "critest"),
		GinkgoBin:  filepath.Join(dir, "bin", "ginkgo"),
		Images:     filepath.Join(dir, "test-images.yaml"),
	}
	if fi, err := os.Stat(rt.Containerd); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return Runtime{}, fmt.Errorf("no containerd socket at %s: run `scripts/rt.sh up`", rt.Containerd)
	}
	return rt, nil
}

// Crictl runs the stack's crictl against the CRI socket and returns its
// stdout; a non-zero exit fails the test.
func (r Runtime) Crictl(t testing.TB, socket string, args ...string) string {
	t.Helper()
	out, err := r.CrictlErr(socket, args...)
	if err != nil {
		t.Fatalf("crictl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// CrictlErr runs the stack's crictl against the CRI socket and returns its
// stdout, and an error carrying its stderr on a non-zero exit.
func (r Runtime) CrictlErr(socket string, args ...string) (string, error) {
	full := append([]string{"--runtime-endpoint", "unix://" + socket, "--image-endpoint", "unix://" + socket, "--timeout", "60s"}, args...)
	cmd := exec.Command(r.CrictlBin, full...)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null") // flags only; no config-file warnings
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
