package podkill

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// TestKillPodRefusesOutsidePods: only a cgroup strictly under the pods
// cgroup is ever signalled.
func TestKillPodRefusesOutsidePods(t *testing.T) {
	s := New(t.TempDir(), 1, "/kubepods")
	for _, parent := range []string{"/kubepods", "/kubepods2/pod1", "/system.slice/pod1", "/kubepods/../x"} {
		if _, err := s.KillPod(parent); err == nil {
			t.Errorf("KillPod(%q) signalled, want a refusal", parent)
		}
	}
	if _, err := New("", 1, "").KillPod("/kubepods/pod1"); !errors.Is(err, errNotAPodCgroup) {
		t.Errorf("no pods cgroup: err = %v, want ErrNotAPodCgroup", err)
	}
}

// TestKillPodV1: on a real v1 memory cgroup, KillPod kills the processes
// of a pod's container cgroups (a child of the pod cgroup) at once, and
// leaves a process of a sibling pod alone.
func TestKillPodV1(t *testing.T) {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Skip("no cgroup v1 memory hierarchy")
	}
	pods, victim, bystander := startPodProcesses(t, root, "/cri-guard-kill-test-")
	sampler, err := pressure.NewSampler(pressure.SamplerConfig{PodsCgroup: pods})
	if err != nil {
		t.Fatal(err)
	}
	dir, version, podsGroup := sampler.MemoryCgroup()
	if version != 1 {
		t.Skipf("memory controller is v%d here", version)
	}
	b := NewBounded(New(dir, version, podsGroup), time.Second) // as the daemon calls it
	defer b.Close()
	n, err := b.KillPod(pods + "/pod-a")
	if err != nil || n != 1 {
		t.Fatalf("KillPod = %d, %v; want 1 process signalled", n, err)
	}
	wantKilledAlone(t, victim, bystander)
}

// startPodProcesses makes <root><prefix><pid>/pod-a/ctr and .../pod-b (the
// pods cgroup, returned relative to root, and two pods in it), starts a
// process in each and waits until the cgroups list them; everything is
// ended and removed at cleanup. It skips the test where the groups cannot
// be made.
func startPodProcesses(t *testing.T, root, prefix string) (pods string, victim, bystander *exec.Cmd) {
	t.Helper()
	pods = prefix + strconv.Itoa(os.Getpid())
	ctr := filepath.Join(root, pods, "pod-a", "ctr")
	other := filepath.Join(root, pods, "pod-b")
	for _, d := range []string{ctr, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Skipf("cannot create cgroups under %s: %v", root, err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{ctr, filepath.Dir(ctr), other, filepath.Join(root, pods)} {
			for i := 0; i < 100 && os.Remove(d) != nil; i++ {
				time.Sleep(10 * time.Millisecond) // a killed process leaves its group when its exit is done
			}
		}
	})
	start := func(dir string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec sleep 60`, "sh", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	victim, bystander = start(ctr), start(other)
	for _, dir := range []string{ctr, other} {
		for i := 0; ; i++ {
			if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(b) > 0 {
				break
			}
			if i == 200 {
				t.Fatalf("no process in %s", dir)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return pods, victim, bystander
}

// wantKilledAlone waits for victim to end by SIGKILL and checks bystander
// still runs.
func wantKilledAlone(t *testing.T, victim, bystander *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("victim ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pod's process still runs")
	}
	if err := bystander.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the sibling pod's process was hit: %v", err)
	}
}

// TestKillPodV2: on cgroup v2 the kernel kills the whole group through
// cgroup.kill; where a kernel has no cgroup.kill (before 5.14) every
// process listed in cgroup.procs, the group's and its children's, is
// signalled instead.
func TestKillPodV2(t *testing.T) {
	root := t.TempDir()
	s := New(root, 2, "/kubepods.slice")
	pod := filepath.Join(root, "kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-podx.slice")
	if err := os.MkdirAll(filepath.Join(pod, "cri-containerd-c1.scope"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pod, "cgroup.kill"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := s.KillPod("kubepods-besteffort-podx.slice")
	if err != nil || n != -1 {
		t.Fatalf("KillPod = %d, %v; want -1 (cgroup.kill)", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(pod, "cgroup.kill")); string(b) != "1" {
		t.Fatalf("cgroup.kill = %q, want 1", b)
	}

	// no cgroup.kill: the processes listed are signalled
	if err := os.Remove(filepath.Join(pod, "cgroup.kill")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	procs := filepath.Join(pod, "cri-containerd-c1.scope", "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := s.KillPod("kubepods-besteffort-podx.slice"); err != nil || n != 1 {
		t.Fatalf("KillPod without cgroup.kill = %d, %v; want 1 process signalled", n, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the listed process ended with %v, want SIGKILL", err)
	}
	if _, err := s.KillPod("kubepods-besteffort-podgone.slice"); err == nil {
		t.Error("a pod cgroup that does not exist: no error")
	}
}

// TestKillPodCgroupKill: the kernel's cgroup.kill on a real cgroup2 group
// (the unified hierarchy of this host, without its memory controller, has
// it from Linux 5.14): a process two levels down is killed, one in a
// sibling pod is not.
func TestKillPodCgroupKill(t *testing.T) {
	unified := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(unified, "cgroup.procs")); err != nil {
		unified = "/sys/fs/cgroup"
	}
	if _, err := os.Stat(filepath.Join(unified, "cgroup.subtree_control")); err != nil {
		t.Skip("no cgroup2 hierarchy")
	}
	pods, victim, bystander := startPodProcesses(t, unified, "/cri-guard-killv2-test-")
	if _, err := os.Stat(filepath.Join(unified, pods, "pod-a", "cgroup.kill")); err != nil {
		t.Skipf("no cgroup.kill (Linux before 5.14): %v", err)
	}
	s := New(unified, 2, pods)
	if n, err := s.KillPod(pods + "/pod-a"); err != nil || n != -1 {
		t.Fatalf("KillPod = %d, %v; want -1 (cgroup.kill)", n, err)
	}
	wantKilledAlone(t, victim, bystander)
}
