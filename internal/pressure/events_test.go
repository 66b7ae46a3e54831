package pressure

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestMemoryEventsWatcherFires changes a memory.events.local file as the
// kernel does (a write: inotify IN_MODIFY, which cgroup v2 raises on a
// counter change) and expects one wake-up per change, none for a write
// that changes nothing, and the watcher to wait for a removed cgroup.
func TestMemoryEventsWatcherFires(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "memory.events.local")
	// one write in place, as the kernel changes the file (os.WriteFile's
	// truncation would show an empty file in between)
	write := func(s string) {
		t.Helper()
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			_, err = f.WriteAt([]byte(s), 0)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
	w := &MemoryEventsWatcher{dir: dir, Retry: 20 * time.Millisecond, MinInterval: time.Millisecond}
	var fired atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() { fired.Add(1) }) }()
	waitFired := func(want int32) {
		t.Helper()
		if !testutil.Within(testutil.Bound, func() bool { return fired.Load() >= want }) {
			t.Fatalf("fired %d times, want %d", fired.Load(), want)
		}
	}
	time.Sleep(50 * time.Millisecond) // the watch is armed
	write("low 0\nhigh 0\nmax 1\noom 0\noom_kill 0\n")
	waitFired(1)
	write("low 0\nhigh 0\nmax 1\noom 0\noom_kill 0\n") // no change
	time.Sleep(50 * time.Millisecond)
	if n := fired.Load(); n != 1 {
		t.Errorf("an unchanged file fired: %d wake-ups", n)
	}
	write("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
	waitFired(2)
	// the cgroup goes away and comes back: watched again
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	write("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
	time.Sleep(100 * time.Millisecond)
	write("low 0\nhigh 0\nmax 5\noom 0\noom_kill 0\n")
	waitFired(3)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

func TestMemoryEventsWatcherNeedsV2(t *testing.T) {
	for _, s := range []*Sampler{
		{podsGroup: "/kubepods", layout: layout{memoryVersion: 1}},
		{layout: layout{memoryVersion: 2}},
	} {
		if _, err := s.MemoryEventsWatcher(); !errors.Is(err, errNoMemoryEvents) {
			t.Errorf("%+v: err = %v, want ErrNoMemoryEvents", s.layout, err)
		}
	}
	s := &Sampler{podsGroup: "/kubepods.slice", layout: layout{memoryVersion: 2, memoryDir: "/sys/fs/cgroup"}}
	w, err := s.MemoryEventsWatcher()
	if err != nil || w.dir != "/sys/fs/cgroup/kubepods.slice" {
		t.Errorf("v2: %v, %v", w, err)
	}
}
