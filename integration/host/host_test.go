//go:build integration

package host

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// processLabel marks every pod this test process makes with processID, so that its
// cleanup removes only its own pods.
const processLabel = "cri-guard-e2e-process"

// processID identifies this test process; set once at start-up.
var processID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

// podCgroupRoot is the v1 cgroup every test pod lives under (rt.sh down
// removes it): a relative cgroup parent would land in the test's own cgroup.
const podCgroupRoot = "/cri-guard-rt-pods"

// needRuntime returns the harness, or skips the test saying why it cannot run.
func needRuntime(t *testing.T) harness.Runtime {
	t.Helper()
	env, err := harness.LookupRuntime()
	if err != nil {
		t.Skip("integration: ", err)
	}
	if guardBin == "" {
		t.Fatal("integration: cri-guard binary was not built")
	}
	return env
}

// startGuard runs the cri-guard under test (guardBin) in front of env's
// containerd with extra flags, waits until it serves, and stops it at
// cleanup (harness.StartGuard).
func startGuard(t *testing.T, env harness.Runtime, extra ...string) *harness.Guard {
	t.Helper()
	return harness.StartGuard(t, guardBin, env.Containerd, extra...)
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
func removePodsAtCleanup(t *testing.T, env harness.Runtime) {
	t.Cleanup(func() {
		conn, err := grpc.NewClient("unix://"+env.Containerd, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
