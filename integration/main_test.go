//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// guardBin is the cri-guard binary TestMain builds, or CRI_GUARD_BIN if
// set; empty when the runtime harness is absent (every test then skips).
var guardBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if b := os.Getenv("CRI_GUARD_BIN"); b != "" {
		// another build, e.g. an older commit's, to show a test fails on it
		abs, err := filepath.Abs(b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "integration: testing CRI_GUARD_BIN", abs)
		guardBin = abs
		return m.Run()
	}
	if _, err := lookupRuntime(); err == nil || os.Getenv("CRI_GUARD_RT_EVENTS") != "" {
		dir, err := os.MkdirTemp("", "cri-guard-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "cri-guard")
		// The shipped build tags (Makefile BUILD_TAGS), plus the race detector.
		cmd := exec.Command("go", "build", "-race", "-tags", "grpcnotrace", "-o", bin, "./cmd/cri-guard")
		cmd.Dir = ".."
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "integration: build cri-guard:", err)
			return 1
		}
		guardBin = bin
	}
	return m.Run()
}
