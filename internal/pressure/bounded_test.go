package pressure

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestStatsFileIsFIFO: a FIFO where meminfo belongs (or a hung mount)
// must not block a sample: the FIFO is refused at once, and a read that
// blocks is cut off by Bounded; replacing the file recovers.
func TestStatsFileIsFIFO(t *testing.T) {
	root := copyTree(t, "hybrid")
	s := newTreeSampler(t, root, "")
	meminfo := filepath.Join(root, "proc", "meminfo")
	orig, err := os.ReadFile(meminfo)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(meminfo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(meminfo, 0o600); err != nil {
		t.Fatal(err)
	}
	b := NewBounded(s, 200*time.Millisecond)
	defer b.Close()
	start := time.Now()
	_, err = b.Node()
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("sample with a FIFO meminfo: %v after %v, want an error at once", err, time.Since(start))
	}
	if err := os.Remove(meminfo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meminfo, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Node(); err != nil {
		t.Fatalf("sample after meminfo is back: %v", err)
	}
}

// TestBoundedCutsOffABlockedRead: a read that does not return gives
// errStatsTimeout after the timeout, and later calls fail at once while it
// is stuck; once it returns, samples work again.
func TestBoundedCutsOffABlockedRead(t *testing.T) {
	s := newTreeSampler(t, copyTree(t, "hybrid"), "")
	b := NewBounded(s, 100*time.Millisecond)
	defer b.Close()
	s.mu.Lock() // a read inside the sampler that hangs
	start := time.Now()
	_, err1 := b.Node()
	_, err2 := b.Node()
	elapsed := time.Since(start)
	s.mu.Unlock()
	if !errors.Is(err1, errStatsTimeout) || !errors.Is(err2, errStatsTimeout) {
		t.Fatalf("errors %v, %v; want ErrStatsTimeout", err1, err2)
	}
	if elapsed > 5*time.Second {
		t.Fatalf("two calls took %v with a 100ms timeout", elapsed)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := b.Node(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("samples still fail after the read returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
