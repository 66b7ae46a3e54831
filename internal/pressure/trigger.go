package pressure

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// errCgroupGone is returned by Trigger.Run when the kernel reports POLLERR on
// the pressure file: the cgroup it belongs to was removed.
var errCgroupGone = errors.New("cgroup removed")

// ErrTriggerRejected is returned by Trigger.Run when the kernel refuses the
// trigger (EINVAL): typically a window that is not a multiple of 2 s for a
// process without CAP_SYS_RESOURCE, or a window outside 500 ms–10 s.
var ErrTriggerRejected = errors.New("psi trigger rejected by the kernel")

// ErrNotPressureFile is returned by NewTrigger and Run when the trigger's
// path is not on procfs or cgroup2, the only filesystems whose pressure
// files take triggers (cgroup v1 has no memory.pressure): a --proc-root or
// --cgroup-root that points at a copy on disk, for example. Nothing is
// written to such a file.
var ErrNotPressureFile = errors.New("not a kernel pressure file (want procfs or cgroup2)")

// Trigger is a PSI trigger on one pressure file (/proc/pressure/memory or a
// cgroup's memory.pressure).
type Trigger struct {
	path string
	spec string
	// Armed, when set, is called once the kernel has taken the trigger
	// (before any fire): a refused spec is never said to be armed.
	Armed func()
}

// ParseTriggerSpec checks a trigger spec ("some 150000 2000000": kind, stall
// µs, window µs) and returns it with single spaces.
func ParseTriggerSpec(spec string) (string, error) {
	f := strings.Fields(spec)
	if len(f) != 3 || (f[0] != "some" && f[0] != "full") {
		return "", fmt.Errorf("psi trigger %q: want \"some|full <stall µs> <window µs>\"", spec)
	}
	stall, err1 := strconv.ParseUint(f[1], 10, 32)
	window, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("psi trigger %q: stall and window must be integers (µs)", spec)
	}
	if window < 500000 || window > 10000000 {
		return "", fmt.Errorf("psi trigger %q: window must be 500000–10000000 µs", spec)
	}
	if stall == 0 || stall > window {
		return "", fmt.Errorf("psi trigger %q: stall must be in (0, window]", spec)
	}
	return strings.Join(f, " "), nil
}

// unprivilegedWindow is the granularity of the windows the kernel takes
// from a process without CAP_SYS_RESOURCE.
const unprivilegedWindow = 2000000

// WidenTriggerSpec returns spec with its window rounded up to a multiple of
// 2 s and its stall scaled with it ("some 50000 1000000" becomes "some
// 100000 2000000"): what the kernel takes from a process without
// CAP_SYS_RESOURCE, which it refuses a sub-second window. ok is false when
// the window is one already (or spec is invalid).
func WidenTriggerSpec(spec string) (string, bool) {
	spec, err := ParseTriggerSpec(spec)
	if err != nil {
		return "", false
	}
	f := strings.Fields(spec)
	stall, _ := strconv.ParseUint(f[1], 10, 32)
	window, _ := strconv.ParseUint(f[2], 10, 32)
	if window%unprivilegedWindow == 0 {
		return "", false
	}
	wider := (window/unprivilegedWindow + 1) * unprivilegedWindow
	stall = min(stall*wider/window, wider)
	return fmt.Sprintf("%s %d %d", f[0], stall, wider), true
}

// NewTrigger checks spec (see ParseTriggerSpec) and that path is on procfs
// or cgroup2 (else ErrNotPressureFile; a missing path is fs.ErrNotExist),
// and returns a trigger for that pressure file. It writes nothing; Run arms
// it.
func NewTrigger(path, spec string) (*Trigger, error) {
	spec, err := ParseTriggerSpec(spec)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("psi trigger %q: statfs: %w", path, err)
	}
	if err := checkPressureFS(path, &st); err != nil {
		return nil, err
	}
	return &Trigger{path: path, spec: spec}, nil
}

// checkPressureFS refuses a file that is not on procfs or cgroup2: writing
// a trigger spec to anything else would overwrite it.
func checkPressureFS(path string, st *unix.Statfs_t) error {
	switch int64(st.Type) {
	case unix.PROC_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return nil
	}
	return fmt.Errorf("psi trigger %q: %w: filesystem type %s", path, ErrNotPressureFile, fsTypeName(int64(st.Type)))
}

// fsTypeName names the filesystems a misdirected root is likely to be on.
func fsTypeName(magic int64) string {
	names := map[int64]string{
		unix.CGROUP_SUPER_MAGIC: "cgroup (v1)", unix.TMPFS_MAGIC: "tmpfs", unix.EXT4_SUPER_MAGIC: "ext4",
		unix.XFS_SUPER_MAGIC: "xfs", unix.BTRFS_SUPER_MAGIC: "btrfs", unix.OVERLAYFS_SUPER_MAGIC: "overlay",
		unix.SYSFS_MAGIC: "sysfs", unix.NFS_SUPER_MAGIC: "nfs",
	}
	if n, ok := names[magic]; ok {
		return fmt.Sprintf("%s (%#x)", n, magic)
	}
	return fmt.Sprintf("%#x", magic)
}

// String returns "path: spec".
func (t *Trigger) String() string { return t.path + ": " + t.spec }

// Run arms the trigger and calls fire each time the kernel signals it (at
// most once per window), until ctx is cancelled (returns nil), the cgroup is
// removed (errCgroupGone), the kernel refuses the trigger
// (ErrTriggerRejected, not retried), the path is no longer a pressure file
// (ErrNotPressureFile: checked again on the opened file, nothing is written)
// or another error occurs. fire runs on Run's goroutine and should not block
// long.
func (t *Trigger) Run(ctx context.Context, fire func()) error {
	fd, err := unix.Open(t.path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("arm psi trigger %q: open: %w", t.path, err)
	}
	defer unix.Close(fd)
	// NewTrigger checked the path; the file opened may have replaced it since.
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("arm psi trigger %q: fstatfs: %w", t.path, err)
	}
	if err := checkPressureFS(t.path, &st); err != nil {
		return err
	}
	// The kernel parses the buffer as a C string: send the terminating NUL.
	if _, err := unix.Write(fd, append([]byte(t.spec), 0)); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("arm psi trigger %q with %q: %w (windows must be multiples of 2s without CAP_SYS_RESOURCE): %v",
				t.path, t.spec, ErrTriggerRejected, err)
		}
		return fmt.Errorf("arm psi trigger %q with %q: %w", t.path, t.spec, err)
	}
	if t.Armed != nil {
		t.Armed()
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("psi trigger %q: eventfd: %w", t.path, err)
	}
	defer unix.Close(wake)
	stop := context.AfterFunc(ctx, func() {
		var one = [8]byte{1}
		_, _ = unix.Write(wake, one[:])
	})
	defer stop()

	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("psi trigger %q: poll: %w", t.path, err)
		}
		if fds[1].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		switch re := fds[0].Revents; {
		case re&(unix.POLLERR|unix.POLLNVAL|unix.POLLHUP) != 0:
			return fmt.Errorf("psi trigger %q: %w", t.path, errCgroupGone)
		case re&unix.POLLPRI != 0:
			fire()
		default:
			// Spurious wake-up: avoid a busy loop on an unexpected event.
			time.Sleep(time.Millisecond)
		}
	}
}
