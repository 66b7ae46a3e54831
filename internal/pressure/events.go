package pressure

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// errNoMemoryEvents is returned by Sampler.MemoryEventsWatcher when the
// pods cgroup is not in a v2 memory hierarchy (v1 has the memcg
// notifications instead) or no pods cgroup is configured.
var errNoMemoryEvents = errors.New("no cgroup v2 memory.events for the pods cgroup")

// MemoryEventsWatcher wakes the sync loop when the pods cgroup's
// memory.events.local changes (cgroup v2; memory.events where the kernel
// has no .local file): its high, max, oom and oom_kill counters move when
// the pods cgroup as a whole meets memory.high or memory.max, is out of
// memory or has a process OOM-killed. The kernel says so with a file
// modified event (inotify IN_MODIFY), so nothing is read while nothing
// changes. The .local file leaves out the events of the pods' own limits
// (a container at its memory limit is not node pressure).
//
// memory.max of the pods cgroup is the node's allocatable memory, which
// is lower than the hard eviction threshold's level only on a node set up
// so: the event is the last wake-up before the OOM killer, for a runaway
// faster than the fast poll's watch assumed.
type MemoryEventsWatcher struct {
	dir string // the pods cgroup in the unified hierarchy
	// Retry is how long the watcher waits for a pods cgroup that does not
	// exist yet (the kubelet makes kubepods.slice after cri-guard starts on
	// a booting node) or was removed; default 5 s.
	Retry time.Duration
	// MinInterval is the least time between two calls of fire: a pods
	// cgroup held at memory.max changes the file at each reclaim; default
	// 50 ms.
	MinInterval time.Duration
}

// MemoryEventsWatcher returns the watcher of the pods cgroup's
// memory.events, or errNoMemoryEvents.
func (s *Sampler) MemoryEventsWatcher() (*MemoryEventsWatcher, error) {
	if s.podsGroup == "" || s.layout.memoryVersion != 2 {
		return nil, errNoMemoryEvents
	}
	return &MemoryEventsWatcher{dir: filepath.Join(s.layout.memoryDir, s.podsGroup)}, nil
}

// String names the watcher for logs.
func (w *MemoryEventsWatcher) String() string { return filepath.Join(w.dir, "memory.events.local") }

// file is the events file watched: memory.events.local, else memory.events.
func (w *MemoryEventsWatcher) file() string {
	p := filepath.Join(w.dir, "memory.events.local")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return filepath.Join(w.dir, "memory.events")
}

// Run calls fire each time the counters change, until ctx ends (nil). A
// pods cgroup that is missing or goes away is looked for again every
// Retry; it fails only when inotify itself does.
func (w *MemoryEventsWatcher) Run(ctx context.Context, fire func()) error {
	if w.Retry <= 0 {
		w.Retry = 5 * time.Second
	}
	if w.MinInterval <= 0 {
		w.MinInterval = 50 * time.Millisecond
	}
	for ctx.Err() == nil {
		err := w.watch(ctx, fire)
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errCgroupGone) {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.Retry):
		}
	}
	return nil
}

// watch follows one events file until ctx ends (nil), the file is gone
// (errCgroupGone, os.ErrNotExist) or inotify fails.
func (w *MemoryEventsWatcher) watch(ctx context.Context, fire func()) error {
	path := w.file()
	last, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, path, unix.IN_MODIFY|unix.IN_DELETE_SELF|unix.IN_IGNORED); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return os.ErrNotExist
		}
		return fmt.Errorf("inotify watch %q: %w", path, err)
	}
	// the file may have changed before the watch was added
	if b, err := os.ReadFile(path); err == nil && !bytes.Equal(b, last) {
		last = b
		fire()
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	defer unix.Close(wake)
	stop := context.AfterFunc(ctx, func() { _, _ = unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0}) })
	defer stop()
	buf := make([]byte, 4096)
	var fired time.Time
	for {
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("poll inotify: %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			continue
		}
		n, err := unix.Read(in, buf)
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("read inotify: %w", err)
		}
		gone := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, name[len]
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			if mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0 {
				gone = true
			}
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
		b, err := os.ReadFile(path)
		if err != nil || gone {
			return errCgroupGone
		}
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		if wait := w.MinInterval - time.Since(fired); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		fired = time.Now()
		fire()
	}
}
