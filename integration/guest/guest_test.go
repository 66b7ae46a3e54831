//go:build integration

package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stuck is set once the guest stopped answering (a script timed out
// without vm-agent taking it, or the guest is gone) and could not be
// brought back: every later script fails at once instead of waiting out
// its own timeout (seen in CI: three subtests of 3 to 5 minutes each on a
// guest that no longer answered).
var stuck atomic.Pointer[string]

// rebooted counts the guest's reboots after it stopped answering. The UML
// kernel has hung whole a few times in CI (no console output, vm-agent
// taking no command; not reproduced in 14 rounds of the same
// scenarios on fresh guests): whatever a process does, cri-guard
// included, only a kernel bug hangs a kernel whole, so the guest is booted
// again and the script run once more on it, and the test says so. One
// reboot per run: a guest that hangs again fails the run, as before.
var rebooted atomic.Int32

// maxReboots bounds rebooted.
const maxReboots = 1

// vmScript is scripts/vm.sh of this checkout.
var vmScript = func() string {
	p, _ := filepath.Abs("../../scripts/vm.sh")
	return p
}()

// needGuest skips the test unless the guest is up.
func needGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("CRI_GUARD_VM") == "" {
		t.Skip("CRI_GUARD_VM (the guest's directory, /tmp/cri-guard-vm) not set: the guest tests need `scripts/vm.sh up` (make test runs them)")
	}
	if why := stuck.Load(); why != nil {
		t.Fatal(*why)
	}
	if out, err := exec.Command(vmScript, "status").CombinedOutput(); err != nil {
		if started.Load() {
			// it answered before: it hung between two tests
			reboot(t, fmt.Sprintf("the guest stopped answering before %s (status: %v; %s)", t.Name(), err, strings.TrimSpace(string(out))))
			return
		}
		t.Fatalf("CRI_GUARD_VM is set but the guest does not answer: %v\n%s", err, out)
	}
	started.Store(true)
}

// started: the guest answered a test's status once (so a guest that does
// not answer later has hung, rather than never come up).
var started atomic.Bool

// result is what a guest script printed: its key=value lines (a key may
// repeat; the last wins in get, all are in all) and the whole output.
type result struct {
	out  string
	kv   map[string][]string
	code int
}

func (r result) get(k string) string {
	v := r.kv[k]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// runScript sends testdata/NAME to the guest and runs it there with bash,
// ARGS after it, within timeout. The output is logged whole.
func runScript(t *testing.T, timeout time.Duration, name string, args ...string) result {
	t.Helper()
	if why := stuck.Load(); why != nil {
		t.Fatalf("guest %s not run: %s", name, *why)
	}
	r, gone := runScriptOnce(t, timeout, name, args...)
	if gone == "" {
		return r
	}
	reboot(t, gone)
	t.Logf("guest %s: run once more on the guest booted again", name)
	r, again := runScriptOnce(t, timeout, name, args...)
	if again != "" {
		stuck.Store(&again)
		t.Fatalf("guest %s: %s, again after a reboot", name, again)
	}
	return r
}

// reboot boots again a guest that stopped answering (gone says how), or
// fails the test if it did so once already in this run.
func reboot(t *testing.T, gone string) {
	t.Helper()
	if rebooted.Add(1) > maxReboots {
		stuck.Store(&gone)
		t.Fatalf("%s; the guest was booted again once already in this run", gone)
	}
	t.Logf("GUEST HUNG: %s; booting it again (scripts/vm.sh down, up)", gone)
	start := time.Now()
	for _, c := range []string{"down", "up"} {
		if out, err := exec.Command(vmScript, c).CombinedOutput(); err != nil {
			why := fmt.Sprintf("%s, and scripts/vm.sh %s failed after it: %v", gone, c, err)
			stuck.Store(&why)
			t.Fatalf("%s\n%s", why, out)
		}
	}
	t.Logf("guest booted again in %.0fs", time.Since(start).Seconds())
}

// runScriptOnce is runScript without the reboot: gone says how the guest
// stopped answering, if it did; a script that timed out on a guest that
// answers fails the test.
func runScriptOnce(t *testing.T, timeout time.Duration, name string, args ...string) (r result, gone string) {
	t.Helper()
	// every script and manifest of testdata, side by side in the guest (the
	// scripts source common.sh and read their manifests from their own directory)
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v", err)
	}
	guestPath := ""
	for _, f := range files {
		out, err := exec.Command(vmScript, "cp", f).Output()
		if err != nil {
			t.Fatalf("scripts/vm.sh cp %s: %v", f, err)
		}
		if filepath.Base(f) == name {
			guestPath = strings.TrimSpace(string(out))
		}
	}
	if guestPath == "" {
		t.Fatalf("no testdata/%s", name)
	}
	cmdline := "bash " + guestPath
	for _, a := range args {
		cmdline += " '" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	start := time.Now()
	cmd := exec.Command(vmScript, "exec", "-t", strconv.Itoa(int(timeout/time.Second)), "--", cmdline)
	var stderr strings.Builder
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	outb, err := cmd.Output()
	r = result{out: string(outb), kv: map[string][]string{}}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("scripts/vm.sh exec %s: %v", name, err)
	}
	t.Logf("guest %s (%.1fs, exit %d):\n%s", name, time.Since(start).Seconds(), r.code, r.out)
	if r.code == 124 || r.code == 125 {
		// a script that timed out on a guest that still answers is the
		// script's failure; a guest that answers nothing is the guest's
		if r.code == 125 || strings.Contains(stderr.String(), "never started in the guest") {
			return r, fmt.Sprintf("the guest stopped answering during %s (exit %d; vm.sh's diagnosis above)", name, r.code)
		}
		if out, err := exec.Command(vmScript, "status").CombinedOutput(); err != nil {
			t.Logf("scripts/vm.sh status after %s timed out: %v\n%s", name, err, out)
			return r, fmt.Sprintf("the guest stopped answering during %s (it timed out, then status failed: %v; vm.sh's diagnosis above)", name, err)
		}
		t.Fatalf("guest %s: timed out (exit %d); the guest still answers", name, r.code)
	}
	sc := bufio.NewScanner(strings.NewReader(r.out))
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " \t#") && k != "" {
			r.kv[k] = append(r.kv[k], v)
		}
	}
	return r, ""
}
