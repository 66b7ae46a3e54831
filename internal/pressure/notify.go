package pressure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ErrNoMemcgNotification is returned by Sampler.MemcgNotifiers when the
// host has no v1 memory cgroup for the pods cgroup: cgroup v2 has no usage
// thresholds (its memory.events change only on high, max and oom events),
// so there the fast poll is the fast path.
var ErrNoMemcgNotification = errors.New("no v1 memory cgroup for kernel memcg notifications")

// MemcgNotifier is a kernel memcg threshold notification on the pods
// cgroup (cgroup v1 cgroup.event_control with an eventfd on
// memory.usage_in_bytes), the kubelet's kernelMemcgNotification: the
// eventfd becomes readable when usage crosses the threshold, in either
// direction. The usage threshold is set where the working set meets the
// eviction threshold: limit − threshold + inactive_file, as the kubelet's
// memcgThresholdNotifier computes it, and registered again after each
// crossing and whenever inactive_file moved it: the owner hands it each
// housekeeping sample (Relevel), so an idle notifier takes no timer and
// reads no file of its own (an idle node costs nothing), the kubelet re-arms at each
// synchronize. A near notifier (Near) is set Margin bytes before that
// level: it wakes the sync loop when memory comes within the fast poll's
// margin, so that nothing samples a node far from every threshold.
type MemcgNotifier struct {
	dir       string // the pods cgroup in the v1 memory hierarchy
	meminfo   string
	threshold Threshold
	margin    int64 // > 0: a near notifier, this many bytes before the threshold
	// ReArm, when positive, makes the notifier recompute its level itself
	// that often (reading the cgroup) while it does not fire; zero (as
	// MemcgNotifiers returns them): its owner calls Relevel.
	ReArm time.Duration

	mu   sync.Mutex
	want int64    // the level of the last Relevel; 0: none yet
	cur  int64    // the level registered now
	ev   *os.File // the registered eventfd, nil between registrations
}

// MemcgNotifiers returns a notifier for each threshold on
// allocatableMemory.available (the pods cgroup's signal) and, when margin
// is positive, a near notifier margin bytes before each. It returns
// ErrNoMemcgNotification when the pods cgroup is not in a v1 memory
// hierarchy, and no notifiers when no threshold is on that signal.
func (s *Sampler) MemcgNotifiers(ts []Threshold, margin int64) ([]*MemcgNotifier, error) {
	if s.podsGroup == "" || s.layout.memoryVersion != 1 {
		return nil, ErrNoMemcgNotification
	}
	dir := filepath.Join(s.layout.memoryDir, s.podsGroup)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.event_control")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoMemcgNotification, err)
	}
	var ns []*MemcgNotifier
	for _, t := range ts {
		if t.Signal == SignalAllocatableMemoryAvailable {
			ns = append(ns, &MemcgNotifier{dir: dir, meminfo: s.meminfo, threshold: t})
			if margin > 0 {
				ns = append(ns, &MemcgNotifier{dir: dir, meminfo: s.meminfo, threshold: t, margin: margin})
			}
		}
	}
	return ns, nil
}

// String names the notifier for logs.
func (n *MemcgNotifier) String() string {
	if n.margin > 0 {
		return fmt.Sprintf("%s memory.usage_in_bytes %s before %s", n.dir, resource.NewQuantity(n.margin, resource.BinarySI), n.threshold)
	}
	return fmt.Sprintf("%s memory.usage_in_bytes for %s", n.dir, n.threshold)
}

// Signal is the signal whose threshold the notifier watches.
func (n *MemcgNotifier) Signal() Signal { return n.threshold.Signal }

// Near reports whether it is a near notifier (Margin bytes before the
// threshold) rather than one at the threshold.
func (n *MemcgNotifier) Near() bool { return n.margin > 0 }

// usageThreshold computes the usage at which the threshold is met from the
// cgroup's files (the first registration, and ReArm's).
func (n *MemcgNotifier) usageThreshold() (int64, error) {
	limit, err := readInt(filepath.Join(n.dir, "memory.limit_in_bytes"))
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(n.dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	var inactive int64
	if v, ok := statValue(stat, "total_inactive_file"); ok {
		inactive = v
	}
	capacity := limit
	if mi, err := os.ReadFile(n.meminfo); err == nil {
		if m, err := parseMeminfo(mi); err == nil && m.TotalBytes < capacity {
			capacity = m.TotalBytes // no limit: the node's capacity, as the sampler does
		}
	}
	return n.level(capacity, inactive)
}

// level is the usage at which the threshold is met (less the margin) in a
// cgroup of that capacity holding that much inactive file.
func (n *MemcgNotifier) level(capacity, inactive int64) (int64, error) {
	lim, ok := n.threshold.Limit(Observation{Signal: n.threshold.Signal, Capacity: capacity})
	if !ok {
		return 0, fmt.Errorf("threshold %s: no capacity", n.threshold)
	}
	return max(capacity-int64(lim)-n.margin+inactive, 0), nil
}

// Relevel hands the notifier a fresh sample of the pods cgroup (the sync
// loop's, each housekeeping pass): when the level moved by reArmTolerance
// or more from the one registered, the registration is replaced. It reads
// no file and never blocks on the kernel; safe from any goroutine.
func (n *MemcgNotifier) Relevel(s NodeSample) {
	if !s.HasAllocatable {
		return
	}
	lvl, err := n.level(s.AllocatableCapacityBytes, s.AllocatableInactiveFileBytes)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.want = lvl
	if n.ev != nil && moved(n.cur, lvl) {
		_ = n.ev.SetReadDeadline(time.Now()) // wait returns to register lvl
	}
}

func moved(a, b int64) bool { return a-b >= reArmTolerance || b-a >= reArmTolerance }

// nextLevel is the level to register now: the last Relevel's, else (and
// always with ReArm) computed from the cgroup's files.
func (n *MemcgNotifier) nextLevel() (int64, error) {
	n.mu.Lock()
	want := n.want
	n.mu.Unlock()
	if want > 0 && n.ReArm <= 0 {
		return want, nil
	}
	return n.usageThreshold()
}

// Run arms the notification and calls fire each time the kernel signals a
// crossing, until ctx ends (nil) or the cgroup cannot be used.
func (n *MemcgNotifier) Run(ctx context.Context, fire func()) error {
	for ctx.Err() == nil {
		thr, err := n.nextLevel()
		if err != nil {
			return fmt.Errorf("memcg notification threshold: %w", err)
		}
		fired, err := n.wait(ctx, thr)
		if err != nil {
			return err
		}
		if fired {
			fire()
		}
	}
	return nil
}

// reArmTolerance is how far the level may move before it is registered
// again.
const reArmTolerance = 1 << 20

// wait registers one threshold and waits for it; it returns (false, nil)
// to be registered again when the level moved (a Relevel, or with ReArm
// its own look every ReArm). The eventfd is read through Go's netpoller,
// not a blocking poll: a thread parked in a syscall makes the runtime's
// sysmon retake its P and spin up again at each re-arm, which measured as
// most of the notifiers' idle cost.
func (n *MemcgNotifier) wait(ctx context.Context, thr int64) (bool, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return false, fmt.Errorf("eventfd: %w", err)
	}
	ev := os.NewFile(uintptr(efd), "memcg-eventfd")
	defer ev.Close() // closing the eventfd unregisters the event
	usage, err := os.Open(filepath.Join(n.dir, "memory.usage_in_bytes"))
	if err != nil {
		return false, fmt.Errorf("open memory.usage_in_bytes: %w", err)
	}
	defer usage.Close()
	// usage.Fd() is fine (a regular file); ev.Fd() would make the eventfd
	// blocking and take it off the netpoller: efd is used instead
	ctl := fmt.Sprintf("%d %d %d", efd, usage.Fd(), thr)
	if err := os.WriteFile(filepath.Join(n.dir, "cgroup.event_control"), []byte(ctl), 0); err != nil {
		return false, fmt.Errorf("write cgroup.event_control: %w", err)
	}
	n.mu.Lock()
	n.ev, n.cur = ev, thr
	relevel := n.want > 0 && n.ReArm <= 0 && moved(thr, n.want) // came while registering
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.ev = nil
		n.mu.Unlock()
	}()
	if relevel {
		return false, nil
	}
	// a cancellation ends the read at once
	stop := context.AfterFunc(ctx, func() { _ = ev.SetReadDeadline(time.Now()) })
	defer stop()
	var b [8]byte
	for {
		if n.ReArm > 0 {
			if err := ev.SetReadDeadline(time.Now().Add(n.ReArm)); err != nil {
				return false, fmt.Errorf("eventfd deadline: %w", err)
			}
		}
		if ctx.Err() != nil { // before the AfterFunc's deadline, not after
			return false, nil
		}
		_, err = ev.Read(b[:])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil || n.ReArm <= 0 {
				return false, nil // ended, or a Relevel moved the level
			}
			// the level moves with inactive_file: registered again only
			// when it moved (an idle node keeps its registration)
			now, err := n.usageThreshold()
			if err != nil {
				return false, fmt.Errorf("memcg notification threshold: %w", err)
			}
			if moved(thr, now) {
				return false, nil
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read eventfd: %w", err)
		}
		break
	}
	// the kernel also signals the eventfd when the cgroup is removed
	if _, err := os.Stat(filepath.Join(n.dir, "memory.usage_in_bytes")); err != nil {
		return false, errCgroupGone
	}
	return true, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(trimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", path, err)
	}
	return v, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// statValue finds "key value" in a flat-keyed cgroup file.
func statValue(b []byte, key string) (int64, bool) {
	for len(b) > 0 {
		line := b
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && string(line[:len(key)]) == key && line[len(key)] == ' ' {
			v, err := strconv.ParseInt(string(trimSpace(line[len(key)+1:])), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
