package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUnitLimitNOFILE: the unit sets a finite descriptor limit well above
// what cri-guard's capped listeners can use (CRI 1024, metrics 64, admin 64,
// plus the runtime connection, checkpoints and PSI triggers).
func TestUnitLimitNOFILE(t *testing.T) {
	f, err := os.Open(filepath.Join(contribDir, "systemd", "cri-guard.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "LimitNOFILE="); ok {
			got = v
		}
	}
	n, err := strconv.ParseUint(got, 10, 64)
	if err != nil || n < 16384 {
		t.Fatalf("LimitNOFILE=%q: want a number of at least 16384", got)
	}
}

// TestRuntimeRaisesNofileSoftLimit documents why cri-guard does not raise
// RLIMIT_NOFILE itself: since Go 1.19 the runtime (syscall's init) raises the
// soft limit to the hard limit (minus one) at start-up, in every process,
// this test binary included; os/exec restores the original for children.
func TestRuntimeRaisesNofileSoftLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur+1 < lim.Max {
		t.Errorf("RLIMIT_NOFILE soft %d, hard %d: the Go runtime did not raise the soft limit", lim.Cur, lim.Max)
	}
}
