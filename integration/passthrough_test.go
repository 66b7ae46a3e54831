//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCrictlLifecycle drives a whole pod lifecycle with crictl through
// cri-guard and checks each step's result against containerd directly.
func TestCrictlLifecycle(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	dir := t.TempDir()
	uid := newUID(t)

	version := crictl(t, env, g.socket, "version")
	if !strings.Contains(version, "RuntimeName:  containerd") {
		t.Fatalf("crictl version through cri-guard = %q, want containerd", version)
	}
	// The daemon re-executed itself (same PID) with sysmon kept awake.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", g.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "GODEBUG=schedtrace=2147483647") {
		t.Errorf("cri-guard pid %d runs without GODEBUG=schedtrace=2147483647", g.cmd.Process.Pid)
	}

	crictl(t, env, g.socket, "pull", busyboxImage)
	images := crictl(t, env, g.socket, "images", "-q")
	direct := crictl(t, env, env.containerd, "images", "-q")
	if images != direct || images == "" {
		t.Fatalf("crictl images through cri-guard:\n%s\ndirect:\n%s", images, direct)
	}

	pcfg := podConfig("crictl-"+uid[:6], uid)
	pcfg.LogDirectory = filepath.Join(dir, "logs") // crictl logs reads the file containerd writes
	podJSON := writeJSON(t, dir, "pod.json", pcfg)
	ctrJSON := writeJSON(t, dir, "ctr.json", map[string]any{
		"metadata": map[string]any{"name": "sleeper"},
		"image":    map[string]any{"image": busyboxImage},
		"command":  []string{"sh", "-c", "echo hello-from-cri-guard; exec sleep 3600"},
		"log_path": "sleeper.log",
		"linux":    map[string]any{},
	})
	pod := crictl(t, env, g.socket, "runp", podJSON)
	if got := crictl(t, env, env.containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", pod); got != "SANDBOX_READY" {
		t.Fatalf("sandbox %s state seen by containerd = %q, want SANDBOX_READY", pod, got)
	}
	ctr := crictl(t, env, g.socket, "create", pod, ctrJSON, podJSON)
	crictl(t, env, g.socket, "start", ctr)
	if got := crictl(t, env, g.socket, "inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr); got != "CONTAINER_RUNNING" {
		t.Fatalf("container %s state = %q, want CONTAINER_RUNNING", ctr, got)
	}
	if got := crictl(t, env, g.socket, "exec", ctr, "sh", "-c", "echo $((6*7))"); got != "42" {
		t.Fatalf("crictl exec = %q, want 42", got)
	}
	var logs string
	for i := 0; i < 50; i++ { // the log line is written asynchronously
		if logs = crictl(t, env, g.socket, "logs", ctr); strings.Contains(logs, "hello-from-cri-guard") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs, "hello-from-cri-guard") {
		t.Fatalf("crictl logs = %q, want hello-from-cri-guard", logs)
	}
	if stats := crictl(t, env, g.socket, "stats", "-o", "json", ctr); !strings.Contains(stats, ctr) {
		t.Fatalf("crictl stats does not mention %s: %s", ctr, stats)
	}
	if ps := crictl(t, env, g.socket, "ps", "-q", "--pod", pod); ps != ctr {
		t.Fatalf("crictl ps --pod = %q, want %q", ps, ctr)
	}
	crictl(t, env, g.socket, "stop", ctr)
	crictl(t, env, g.socket, "rm", ctr)
	crictl(t, env, g.socket, "stopp", pod)
	crictl(t, env, g.socket, "rmp", pod)
	if _, err := crictlErr(env, env.containerd, "inspectp", pod); err == nil {
		t.Fatalf("sandbox %s still known to containerd after rmp through cri-guard", pod)
	}
	// An error status passes through: the sandbox is gone.
	if _, err := crictlErr(env, g.socket, "inspectp", pod); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("crictl inspectp of a removed sandbox through cri-guard: %v, want NotFound", err)
	}
}

// TestCRIClientLifecycle drives the same lifecycle with a Go CRI client and
// checks status codes and results pass through unchanged.
func TestCRIClientLifecycle(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	rt, img := dialCRI(t, g.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}}); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	st, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus = %v, %v; want the image", st, err)
	}
	_, err = img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/e2e-test-images/no-such-image:0"}})
	if err == nil {
		t.Fatal("PullImage of a missing image succeeded")
	}

	uid := newUID(t)
	cfg := podConfig("client-"+uid[:6], uid)
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := run.PodSandboxId
	cc, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  id,
		SandboxConfig: cfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
			Image:    &runtimeapi.ImageSpec{Image: busyboxImage},
			Command:  []string{"sleep", "3600"},
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", cfg.Linux.CgroupParent)); err != nil {
		t.Fatalf("pod cgroup %s: %v", cfg.Linux.CgroupParent, err)
	}
	ex, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cc.ContainerId, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if string(ex.Stdout) != "out\n" || string(ex.Stderr) != "err\n" || ex.ExitCode != 3 {
		t.Fatalf("ExecSync = stdout %q stderr %q exit %d; want out, err, 3", ex.Stdout, ex.Stderr, ex.ExitCode)
	}
	cs, err := rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: cc.ContainerId})
	if err != nil || cs.Stats.GetAttributes().GetId() != cc.ContainerId {
		t.Fatalf("ContainerStats = %v, %v", cs, err)
	}
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
	if err != nil || len(list.Items) != 1 || list.Items[0].Metadata.Uid != uid {
		t.Fatalf("ListPodSandbox = %v, %v; want the sandbox of pod %s", list, err, uid)
	}
	_, err = rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "no-such-container"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus of a missing container: %v, want NotFound", err)
	}
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cc.ContainerId, Timeout: 1}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	_, err = rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("PodSandboxStatus after remove: %v, want NotFound", err)
	}
}
