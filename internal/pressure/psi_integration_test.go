//go:build integration

package pressure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRealPSITrigger puts a stress-ng process under real memory pressure in
// a cgroup of its own (a 256M v1 memory cgroup plus a unified cgroup for
// PSI), and checks that the trigger fires and that the sampler reports PSI
// above a threshold. It logs the time from pressure start to the trigger
// event. Run: go test -tags integration -run TestRealPSITrigger -v ./pressure/
func TestRealPSITrigger(t *testing.T) {
	stress, err := exec.LookPath("stress-ng")
	if err != nil {
		t.Skip("stress-ng not installed (apt-get install stress-ng)")
	}
	const root = "/sys/fs/cgroup"
	name := fmt.Sprintf("cri-guard-psi-test-%d", os.Getpid())
	v1 := filepath.Join(root, "memory", name)
	uni := filepath.Join(root, "unified", name)
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.usage_in_bytes")); err != nil {
		// On a pure v2 host the unified cgroup holds memory too.
		v1, uni = filepath.Join(root, name), filepath.Join(root, name)
	}
	var made []string
	for _, d := range []string{v1, uni} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			t.Skipf("cannot create cgroup %s: %v", d, err)
		}
		made = append(made, d)
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := removeCgroup(made[i]); err != nil {
				t.Errorf("remove cgroup %s: %v", made[i], err)
			}
		}
	})
	limit := filepath.Join(v1, "memory.limit_in_bytes")
	if v1 == uni {
		limit = filepath.Join(v1, "memory.max")
	}
	if err := os.WriteFile(limit, []byte("268435456"), 0o644); err != nil {
		t.Fatalf("set memory limit: %v", err)
	}

	s, err := NewSampler(SamplerConfig{PodsCgroup: "/" + name})
	if err != nil {
		t.Fatal(err)
	}
	th, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{string(SignalPSISomeAvg10): "1%"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := NewEvaluator(th, time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fired := make(chan time.Time, 1)
	trig, err := NewTrigger(filepath.Join(uni, "memory.pressure"), "some 150000 2000000")
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() {
		runDone <- trig.Run(ctx, func() {
			select {
			case fired <- time.Now():
			default:
			}
		})
	}()
	time.Sleep(100 * time.Millisecond) // let Run arm before pressure starts

	// The mapped file goes to a temporary directory on disk (stress-ng's
	// default is the working directory); 120 s leaves room on a busy host,
	// the test ends it as soon as the threshold is met.
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs; echo $$ > %s/cgroup.procs; exec %s --temp-path %s --mmap 1 --mmap-bytes 400M --mmap-file --timeout 120s",
		v1, uni, stress, t.TempDir())
	cmd := exec.Command("sh", "-c", script)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stress-ng: %v", err)
	}
	waitDone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waitDone) }()
	t.Cleanup(func() { stopStress(t, cmd.Process.Pid, waitDone, v1) })

	select {
	case at := <-fired:
		t.Logf("trigger fired %v after pressure start", at.Sub(start).Round(time.Millisecond))
	case err := <-runDone:
		t.Fatalf("trigger ended before firing: %v", err)
	case <-waitDone:
		t.Fatal("stress-ng ended before the trigger fired")
	}

	var peak float64
	for {
		n, err := s.Node()
		if err != nil {
			t.Fatal(err)
		}
		if n.PodsSome == nil {
			t.Fatalf("no PSI for the test cgroup: %v", n.PodsError)
		}
		peak = max(peak, n.PodsSome.Avg10)
		r := ev.Evaluate(n.Time, n.Observations())
		if len(r.Met) > 0 {
			t.Logf("threshold met %v after pressure start: %s (node some avg10 %.2f%%, working set %d MiB of the %d MiB limit)",
				time.Since(start).Round(time.Millisecond), r.Met[0], n.Some.Avg10,
				(n.AllocatableCapacityBytes-n.AllocatableAvailableBytes)>>20, n.AllocatableCapacityBytes>>20)
			break
		}
		select {
		case <-waitDone:
			t.Fatalf("stress-ng ended and PSI never exceeded 1%%; peak some avg10 %.2f%%", peak)
		case <-time.After(500 * time.Millisecond):
		}
	}
	p, err := s.Pod("/" + name)
	if err != nil || !p.HasMemory || !p.HasPSI {
		t.Errorf("Pod(%s) = %+v, %v; want memory and PSI", name, p, err)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("trigger Run after cancel: %v", err)
	}
}

// stopStress ends the stress process this test started and any workers it
// forked (all listed in the test's own cgroup), by PID.
func stopStress(t *testing.T, pid int, done <-chan struct{}, cgroup string) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
	}
	for i := 0; i < 50; i++ {
		b, err := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("processes left in %s", cgroup)
}

// removeCgroup removes an empty cgroup directory, retrying while exiting
// tasks are still being released.
func removeCgroup(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// TestTriggerCgroupGone arms a trigger on a fresh unified cgroup and removes
// the cgroup: Run must end with errCgroupGone.
func TestTriggerCgroupGone(t *testing.T) {
	uni := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(uni, "cgroup.controllers")); err != nil {
		uni = "/sys/fs/cgroup"
	}
	dir := filepath.Join(uni, fmt.Sprintf("cri-guard-psi-gone-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = removeCgroup(dir) })
	trig, err := NewTrigger(filepath.Join(dir, "memory.pressure"), "some 150000 2000000")
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- trig.Run(context.Background(), func() {}) }()
	time.Sleep(200 * time.Millisecond)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := <-runDone; !errors.Is(err, errCgroupGone) {
		t.Errorf("Run after rmdir = %v, want ErrCgroupGone", err)
	}
}
