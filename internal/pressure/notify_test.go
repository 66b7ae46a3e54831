package pressure

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/testutil"
)

func memcgThreshold(t *testing.T) Threshold {
	t.Helper()
	ts, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{"allocatableMemory.available": "200Mi"}})
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

func TestMemcgUsageThreshold(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.limit_in_bytes", "1073741824\n")
	write("memory.stat", "cache 0\ntotal_inactive_file 10485760\n")
	write("meminfo", "MemTotal: 25165824 kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n")
	n := &MemcgNotifier{dir: dir, meminfo: filepath.Join(dir, "meminfo"), threshold: memcgThreshold(t)}
	got, err := n.usageThreshold()
	if err != nil {
		t.Fatal(err)
	}
	// working set = usage - inactive_file meets 1Gi - 200Mi at usage 824Mi + 10Mi
	if want := int64(834 << 20); got != want {
		t.Errorf("usage threshold = %d, want %d", got, want)
	}
	// the near notifier fires the fast poll's margin (256Mi) sooner
	n.margin = 256 << 20
	if got, err = n.usageThreshold(); err != nil || got != 578<<20 {
		t.Errorf("near usage threshold = %d, %v; want %d", got, err, 578<<20)
	}
	if !n.Near() || n.Signal() != SignalAllocatableMemoryAvailable {
		t.Errorf("near notifier: Near %v, Signal %s", n.Near(), n.Signal())
	}
}

// TestMemcgNotifierArms registers a threshold on a real v1 memory cgroup
// (the kernel refuses a bad registration at once) and waits one re-arm.
func TestMemcgNotifierArms(t *testing.T) {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "cgroup.event_control")); err != nil {
		t.Skip("no cgroup v1 memory hierarchy: kernel memcg notifications do not exist here")
	}
	dir := filepath.Join(root, "cri-guard-notify-test-"+time.Now().Format("150405.000000"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a memory cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("1073741824"), 0); err != nil {
		t.Fatal(err)
	}
	n := &MemcgNotifier{dir: dir, meminfo: "/proc/meminfo", threshold: memcgThreshold(t), ReArm: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	fired := 0
	if err := n.Run(ctx, func() { fired++ }); err != nil {
		t.Fatalf("run: %v", err)
	}
	if fired != 0 {
		t.Errorf("an empty cgroup crossed the threshold %d times", fired)
	}
}

func TestMemcgNotifiersNeedV1(t *testing.T) {
	s := &Sampler{podsGroup: "/kubepods", layout: layout{memoryVersion: 2}}
	if _, err := s.MemcgNotifiers(nil, 0); !errors.Is(err, ErrNoMemcgNotification) {
		t.Errorf("v2 host: err = %v, want ErrNoMemcgNotification", err)
	}
}

// TestMemcgNearNotifierFires: on a real v1 memory cgroup, the near
// notifier fires when usage crosses its level, margin bytes before the
// threshold's: 100Mi of tmpfs written by a process in the cgroup (charged
// to it) crosses a near level of 64Mi (limit 1Gi, threshold 200Mi, margin
// 760Mi), far from the threshold's 824Mi.
func TestMemcgNearNotifierFires(t *testing.T) {
	dir, shm := memcgTestGroup(t, "cri-guard-near-test-")
	n := &MemcgNotifier{dir: dir, meminfo: "/proc/meminfo", threshold: memcgThreshold(t), margin: 760 << 20, ReArm: time.Minute}
	if lvl, err := n.usageThreshold(); err != nil || lvl != 64<<20 {
		t.Fatalf("near level %d (%v), want 64Mi", lvl, err)
	}
	nr := runNotifier(t, n)
	time.Sleep(200 * time.Millisecond) // armed
	nr.chargeAndWait(t, dir, shm, 100, "the near notifier did not fire when usage crossed its level")
}

// memcgTestGroup makes a v1 memory cgroup with a 1Gi limit for a notifier
// test, and the /dev/shm file a process in it charges (both removed at
// cleanup); it skips the test where there is no v1 memory hierarchy.
func memcgTestGroup(t *testing.T, prefix string) (dir, shm string) {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "cgroup.event_control")); err != nil {
		t.Skip("no cgroup v1 memory hierarchy: kernel memcg notifications do not exist here")
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	dir = filepath.Join(root, prefix+time.Now().Format("150405.000000"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a memory cgroup: %v", err)
	}
	shm = filepath.Join("/dev/shm", filepath.Base(dir))
	t.Cleanup(func() { _ = os.Remove(shm); _ = os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("1073741824"), 0); err != nil {
		t.Fatal(err)
	}
	return dir, shm
}

// notifierRun is a notifier's Run under way in a test.
type notifierRun struct {
	ctx   context.Context
	fired chan struct{}
	stop  func() error // ends Run, once, and returns what it returned
}

// runNotifier runs n for at most 30 s, until the test ends.
func runNotifier(t *testing.T, n *MemcgNotifier) *notifierRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	r := &notifierRun{ctx: ctx, fired: make(chan struct{}, 1)}
	r.stop = sync.OnceValue(func() error { cancel(); return <-done })
	go func() {
		done <- n.Run(ctx, func() {
			select {
			case r.fired <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// chargeAndWait checks the notifier has not fired, charges mib MiB of
// tmpfs to dir (a process in it writes shm), waits for the notifier to
// fire (failing with notFired) and ends its Run, which must end clean.
func (r *notifierRun) chargeAndWait(t *testing.T, dir, shm string, mib int, notFired string) {
	t.Helper()
	select {
	case <-r.fired:
		t.Fatal("fired before anything was charged")
	default:
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=1M count="$3" status=none`, "sh", dir, shm, strconv.Itoa(mib))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("charge %dMi: %v: %s", mib, err, out)
	}
	select {
	case <-r.fired:
	case <-r.ctx.Done():
		t.Fatal(notFired)
	}
	if err := r.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestMemcgNotifierRelevel: a notifier without ReArm takes its level from
// the owner's samples (Relevel), reading no file and taking no timer: on a
// real v1 memory cgroup, a sample that moves the near level from 64Mi down
// to 32Mi replaces the registration, and 48Mi charged then fires it (the
// 64Mi level would not have); a sample within the tolerance keeps the
// registration as it is.
func TestMemcgNotifierRelevel(t *testing.T) {
	dir, shm := memcgTestGroup(t, "cri-guard-relevel-test-")
	n := &MemcgNotifier{dir: dir, meminfo: "/proc/meminfo", threshold: memcgThreshold(t), margin: 760 << 20}
	registered := func() (int64, *os.File) {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.cur, n.ev
	}
	waitLevel := func(want int64) *os.File {
		t.Helper()
		var ev *os.File
		if !testutil.Within(testutil.Bound, func() bool {
			var cur int64
			cur, ev = registered()
			return cur == want && ev != nil
		}) {
			cur, _ := registered()
			t.Fatalf("registered level %d, want %d", cur, want)
		}
		return ev
	}
	nr := runNotifier(t, n)
	first := waitLevel(64 << 20) // from the files: 1Gi - 200Mi - 760Mi
	sample := func(capacity int64) NodeSample {
		return NodeSample{HasAllocatable: true, AllocatableCapacityBytes: capacity, AllocatableInactiveFileBytes: 0}
	}
	n.Relevel(sample(1<<30 - 512<<10)) // 512Ki lower: within the tolerance
	time.Sleep(50 * time.Millisecond)
	if cur, ev := registered(); cur != 64<<20 || ev != first {
		t.Fatalf("a move within the tolerance re-registered: level %d, same eventfd %v", cur, ev == first)
	}
	n.Relevel(sample(1<<30 - 32<<20))
	waitLevel(32 << 20)
	nr.chargeAndWait(t, dir, shm, 48, "the relevelled notifier did not fire when usage crossed its new level")
}
