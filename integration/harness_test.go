//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/admin"
)

// processLabel marks every pod this test process makes with processID, so that its
// cleanup removes only its own pods.
const processLabel = "cri-guard-e2e-process"

// processID identifies this test process; set once at start-up.
var processID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

const (
	// podCgroupRoot is the v1 cgroup every test pod lives under (rt.sh down
	// removes it): a relative cgroup parent would land in the test's own cgroup.
	podCgroupRoot = "/cri-guard-rt-pods"
	busyboxImage  = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	rtScript      = "../scripts/rt.sh"
)

// runtimeEnv is the containerd stack that scripts/rt.sh started.
type runtimeEnv struct {
	dir        string // $CRI_GUARD_RT
	containerd string // containerd's CRI socket
	crictl     string
	critest    string
	ginkgo     string
	images     string // critest's test-images.yaml
}

func lookupRuntime() (runtimeEnv, error) {
	dir := os.Getenv("CRI_GUARD_RT")
	if dir == "" {
		return runtimeEnv{}, errors.New("CRI_GUARD_RT is not set: run `scripts/rt.sh up` and export CRI_GUARD_RT (or use `make test`)")
	}
	env := runtimeEnv{
		dir:        dir,
		containerd: filepath.Join(dir, "containerd.sock"),
		crictl:     filepath.Join(dir, "bin", "crictl"),
		critest:    filepath.Join(dir, "bin", "critest"),
		ginkgo:     filepath.Join(dir, "bin", "ginkgo"),
		images:     filepath.Join(dir, "test-images.yaml"),
	}
	if fi, err := os.Stat(env.containerd); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return runtimeEnv{}, fmt.Errorf("no containerd socket at %s: run `scripts/rt.sh up`", env.containerd)
	}
	return env, nil
}

// needRuntime returns the harness, or skips the test saying why it cannot run.
func needRuntime(t *testing.T) runtimeEnv {
	t.Helper()
	env, err := lookupRuntime()
	if err != nil {
		t.Skip("integration: ", err)
	}
	if guardBin == "" {
		t.Fatal("integration: cri-guard binary was not built")
	}
	return env
}

// shortTempDir is a t.TempDir-like directory with a short path: unix socket
// paths are limited to 108 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// guard is one running cri-guard process.
type guard struct {
	socket string
	log    string
	cmd    *exec.Cmd
	done   chan error
}

// startGuard runs cri-guard on a socket in a temporary directory in front of
// containerd, waits until it answers Version, and stops it at cleanup.
func startGuard(t *testing.T, env runtimeEnv, extra ...string) *guard {
	t.Helper()
	dir := shortTempDir(t)
	g := &guard{socket: filepath.Join(dir, "cri-guard.sock"), log: filepath.Join(dir, "cri-guard.log"), done: make(chan error, 1)}
	logf, err := os.Create(g.log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--listen", g.socket, "--runtime-endpoint", env.containerd, "--log-level", "debug",
		"--state-dir", filepath.Join(dir, "state")}, extra...)
	g.cmd = exec.Command(guardBin, args...)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start cri-guard: %v", err)
	}
	go func() { g.done <- g.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { g.stop(t) })

	rt, _ := dialCRI(t, g.socket)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			return g
		}
		select {
		case werr := <-g.done:
			g.done <- werr
			t.Fatalf("cri-guard exited at start-up: %v\n%s", werr, g.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cri-guard not answering Version after 30s: %v\n%s", err, g.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *guard) logTail() string {
	b, _ := os.ReadFile(g.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop sends SIGTERM and fails the test if cri-guard does not exit cleanly.
func (g *guard) stop(t *testing.T) {
	if g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil && !t.Failed() {
			t.Errorf("cri-guard exit: %v\n%s", err, g.logTail())
		}
	case <-time.After(15 * time.Second):
		_ = g.cmd.Process.Kill()
		t.Errorf("cri-guard did not stop within 15s of SIGINT\n%s", g.logTail())
	}
	if t.Failed() {
		t.Logf("cri-guard log tail:\n%s", g.logTail())
	}
}

// dialCRI returns runtime and image clients on a unix socket.
func dialCRI(t *testing.T, socket string) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

// crictl runs crictl against socket and returns its stdout; a non-zero exit
// fails the test.
func crictl(t *testing.T, env runtimeEnv, socket string, args ...string) string {
	t.Helper()
	out, err := crictlErr(env, socket, args...)
	if err != nil {
		t.Fatalf("crictl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func crictlErr(env runtimeEnv, socket string, args ...string) (string, error) {
	full := append([]string{"--runtime-endpoint", "unix://" + socket, "--image-endpoint", "unix://" + socket, "--timeout", "60s"}, args...)
	cmd := exec.Command(env.crictl, full...)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null") // flags only; no config-file warnings
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func newUID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// podConfig is a BestEffort-looking pod with an absolute cgroup parent under
// podCgroupRoot and host-independent CNI networking.
func podConfig(name, uid string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "cri-guard-e2e"},
		Hostname:     name,
		LogDirectory: "",
		Labels:       map[string]string{"cri-guard-e2e": "true", processLabel: processID},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: podCgroupRoot + "/pod" + uid,
		},
	}
}

// writeJSON writes v as JSON into dir/name and returns the path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// removePodsAtCleanup stops and removes every sandbox labelled by the tests,
// directly on containerd, so that a failing test leaves nothing behind.
func removePodsAtCleanup(t *testing.T, env runtimeEnv) {
	t.Cleanup(func() {
		conn, err := grpc.NewClient("unix://"+env.containerd, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Errorf("cleanup: dial containerd: %v", err)
			return
		}
		defer conn.Close()
		rt := runtimeapi.NewRuntimeServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
			// Only this test process's pods: other runs may share the containerd.
			Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{processLabel: processID}},
		})
		if err != nil {
			t.Errorf("cleanup: list sandboxes: %v", err)
			return
		}
		for _, s := range resp.Items {
			if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil && status.Code(err) != codes.NotFound {
				t.Errorf("cleanup: stop sandbox %s: %v", s.Id, err)
			}
			if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil && status.Code(err) != codes.NotFound {
				t.Errorf("cleanup: remove sandbox %s: %v", s.Id, err)
			}
		}
	})
}

// rtScriptRun runs scripts/rt.sh with the given command.
func rtScriptRun(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{rtScript}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rt.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// statusOf runs `cri-guard status --json` of binary bin on the admin
// socket, bounded to 5 s (a status that hangs is an error, not a hung test).
func statusOf(bin, socket string) (admin.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st admin.Status
	out, err := exec.CommandContext(ctx, bin, "status", "--admin", socket, "--json").Output()
	if ctx.Err() != nil {
		return st, fmt.Errorf("cri-guard status: no answer within 5s")
	}
	if err != nil {
		return st, fmt.Errorf("cri-guard status: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("cri-guard status --json: %w", err)
	}
	return st, nil
}
