package testutil

import (
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNotInTheProduct: no binary of the module depends on this package or
// on integration/harness, test code both (a product package that imported
// either would link the testing package into cri-guard).
func TestNotInTheProduct(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/cri-guard/cri-guard/cmd/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), "github.com/cri-guard/cri-guard/cmd/cri-guard\n") {
		t.Fatalf("go list -deps named %d packages, not cmd/cri-guard's: %q", len(deps), out)
	}
	for _, d := range deps {
		switch d {
		case "github.com/cri-guard/cri-guard/internal/testutil", "github.com/cri-guard/cri-guard/integration/harness":
			t.Errorf("a binary under cmd/ depends on %s", d)
		}
	}
}

func TestWithin(t *testing.T) {
	var n atomic.Int64
	if !Within(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that holds at the third look: not held within 1s")
	}
	if n.Load() != 3 {
		t.Errorf("looked %d times, want 3 (none after it held)", n.Load())
	}
	start := time.Now()
	if Within(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds: held")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("gave up after %v, before 20ms", d)
	}
}

func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("FreeAddr = %q, want 127.0.0.1 and a port", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the free address: %v", err)
	}
	l.Close()
}
