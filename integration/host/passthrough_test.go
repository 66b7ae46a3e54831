//go:build integration

package host

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

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestCrictlLifecycle drives a whole pod lifecycle with crictl through
// cri-guard and checks each step's result against containerd directly.
func TestCrictlLifecycle(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	dir := t.TempDir()
	uid := harness.NewUID(t)

	version := env.Crictl(t, g.Socket, "version")
	if !strings.Contains(version, "RuntimeName:  containerd") {
		t.Fatalf("crictl version through cri-guard = %q, want containerd", version)
	}
	// The daemon runs as started: no re-execution that keeps Go's sysmon
	// awake (it cost 0.3% of a core idle; an opt-in through
	// GODEBUG now).
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", g.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(strings.Split(string(environ), "\x00"), func(kv string) bool { return strings.Contains(kv, "schedtrace") }) {
		t.Errorf("cri-guard pid %d set a schedtrace in its own environment: %q", g.Cmd.Process.Pid, environ)
	}

	env.Crictl(t, g.Socket, "pull", harness.BusyboxImage)
	images := env.Crictl(t, g.Socket, "images", "-q")
	direct := env.Crictl(t, env.Containerd, "images", "-q")
	if images != direct || images == "" {
		t.Fatalf("crictl images through cri-guard:\n%s\ndirect:\n%s", images, direct)
	}

	pcfg := podConfig("crictl-"+uid[:6], uid)
	pcfg.LogDirectory = filepath.Join(dir, "logs") // crictl logs reads the file containerd writes
	podJSON := writeJSON(t, dir, "pod.json", pcfg)
	ctrJSON := writeJSON(t, dir, "ctr.json", map[string]any{
		"metadata": map[string]any{"name": "sleeper"},
		"image":    map[string]any{"image": harness.BusyboxImage},
		"command":  []string{"sh", "-c", "echo hello-from-cri-guard; exec sleep 3600"},
		"log_path": "sleeper.log",
		"linux":    map[string]any{},
	})
	pod := env.Crictl(t, g.Socket, "runp", podJSON)
	if got := env.Crictl(t, env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", pod); got != "SANDBOX_READY" {
		t.Fatalf("sandbox %s state seen by containerd = %q, want SANDBOX_READY", pod, got)
	}
	ctr := env.Crictl(t, g.Socket, "create", pod, ctrJSON, podJSON)
	env.Crictl(t, g.Socket, "start", ctr)
	if got := env.Crictl(t, g.Socket, "inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr); got != "CONTAINER_RUNNING" {
		t.Fatalf("container %s state = %q, want CONTAINER_RUNNING", ctr, got)
	}
	if got := env.Crictl(t, g.Socket, "exec", ctr, "sh", "-c", "echo $((6*7))"); got != "42" {
		t.Fatalf("crictl exec = %q, want 42", got)
	}
	var logs string
	for i := 0; i < 50; i++ { // the log line is written asynchronously
		if logs = env.Crictl(t, g.Socket, "logs", ctr); strings.Contains(logs, "hello-from-cri-guard") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs, "hello-from-cri-guard") {
		t.Fatalf("crictl logs = %q, want hello-from-cri-guard", logs)
	}
	if stats := env.Crictl(t, g.Socket, "stats", "-o", "json", ctr); !strings.Contains(stats, ctr) {
		t.Fatalf("crictl stats does not mention %s: %s", ctr, stats)
	}
	if ps := env.Crictl(t, g.Socket, "ps", "-q", "--pod", pod); ps != ctr {
		t.Fatalf("crictl ps --pod = %q, want %q", ps, ctr)
	}
	env.Crictl(t, g.Socket, "stop", ctr)
	env.Crictl(t, g.Socket, "rm", ctr)
	env.Crictl(t, g.Socket, "stopp", pod)
	env.Crictl(t, g.Socket, "rmp", pod)
	if _, err := env.CrictlErr(env.Containerd, "inspectp", pod); err == nil {
		t.Fatalf("sandbox %s still known to containerd after rmp through cri-guard", pod)
	}
	// An error status passes through: the sandbox is gone.
	if _, err := env.CrictlErr(g.Socket, "inspectp", pod); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("crictl inspectp of a removed sandbox through cri-guard: %v, want NotFound", err)
	}
}

// TestCRIClientLifecycle drives the same lifecycle with a Go CRI client and
// checks status codes and results pass through unchanged.
func TestCRIClientLifecycle(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	rt, img := harness.DialCRI(t, g.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: harness.BusyboxImage}}); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	st, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: harness.BusyboxImage}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus = %v, %v; want the image", st, err)
	}
	_, err = img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/e2e-test-images/no-such-image:0"}})
	if err == nil {
		t.Fatal("PullImage of a missing image succeeded")
	}

	uid := harness.NewUID(t)
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
			Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
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
