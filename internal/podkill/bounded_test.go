package podkill

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestBoundedCutsOffAStuckKill: a kill whose cgroup.kill write does not
// return (here a FIFO nobody reads, as a wedged cgroup file) gives
// errTimeout after the timeout, and a kill asked for while it is stuck
// fails too instead of queueing; once it returns, kills work again.
func TestBoundedCutsOffAStuckKill(t *testing.T) {
	root := t.TempDir()
	pod := filepath.Join(root, "kubepods", "pod1")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	kill := filepath.Join(pod, "cgroup.kill")
	if err := syscall.Mkfifo(kill, 0o600); err != nil {
		t.Fatal(err)
	}
	b := NewBounded(New(root, 2, "/kubepods"), 100*time.Millisecond)
	defer b.Close()

	start := time.Now()
	_, err1 := b.KillPod("/kubepods/pod1")
	_, err2 := b.KillPod("/kubepods/pod1")
	elapsed := time.Since(start)
	if !errors.Is(err1, errTimeout) || !errors.Is(err2, errTimeout) {
		t.Fatalf("errors %v, %v; want ErrTimeout", err1, err2)
	}
	if elapsed > 5*time.Second {
		t.Fatalf("two kills took %v with a 100ms timeout", elapsed)
	}

	// the stuck write goes on: a reader lets it through
	r, err := os.OpenFile(kill, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, _ := r.Read(buf)
		if n > 0 {
			if string(buf[:n]) != "1" {
				t.Fatalf("the stuck kill wrote %q, want 1", buf[:n])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck kill never wrote cgroup.kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = r.Close()
	if err := os.Remove(kill); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kill, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := b.KillPod("/kubepods/pod1")
		if err == nil {
			if n != -1 {
				t.Fatalf("KillPod = %d, want -1 (cgroup.kill)", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kills still fail after the stuck one returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
