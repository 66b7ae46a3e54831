//go:build integration

package host

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cri-guard/cri-guard/integration/harness"
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
	if _, err := harness.LookupRuntime(); err == nil || os.Getenv("CRI_GUARD_RT_EVENTS") != "" {
		dir, err := os.MkdirTemp("", "cri-guard-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "cri-guard")
		if err := harness.BuildGuard(bin); err != nil {
			fmt.Fprintln(os.Stderr, "integration: build cri-guard:", err)
			return 1
		}
		guardBin = bin
	}
	return m.Run()
}
