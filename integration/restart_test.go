//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerdRestart kills containerd under a running cri-guard: calls
// must fail with Unavailable during the outage and succeed again once
// containerd is back, without restarting cri-guard. The time from containerd
// answering again to the first success through cri-guard is measured (poll
// every 20 ms) and logged; the test fails only if it never recovers in 15 s.
func TestContainerdRestart(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	g := startGuard(t, env)
	rt, _ := dialCRI(t, g.socket)
	call := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err
	}
	if err := call(5 * time.Second); err != nil {
		t.Fatalf("ListPodSandbox before the outage: %v", err)
	}

	// A pod made before the outage must still be there after it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	uid := newUID(t)
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("restart-"+uid[:6], uid)})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}

	rtScriptRun(t, "stop-containerd")
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			rtScriptRun(t, "start-containerd")
		}
	})
	for i := 0; i < 3; i++ {
		err := call(2 * time.Second)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d during the outage: %v (code %s), want Unavailable", i, err, status.Code(err))
		}
	}
	if _, err := rt.Version(context.Background(), &runtimeapi.VersionRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Version during the outage: %v, want Unavailable", err)
	}

	rtScriptRun(t, "start-containerd") // returns once containerd answers on its socket
	restarted = true
	back := time.Now()
	var lastErr error
	for attempt := 1; ; attempt++ {
		lastErr = call(time.Second)
		if lastErr == nil {
			t.Logf("first success through cri-guard %v after containerd was back (%d attempts, 20ms poll)", time.Since(back).Round(time.Millisecond), attempt)
			break
		}
		if time.Since(back) > 15*time.Second {
			t.Fatalf("cri-guard did not recover within 15s of containerd restarting: %v\n%s", lastErr, g.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId})
	if err != nil {
		t.Fatalf("PodSandboxStatus after the restart: %v", err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox state after the restart = %s, want SANDBOX_READY", st.Status.State)
	}
	select {
	case err := <-g.done:
		g.done <- err
		t.Fatalf("cri-guard exited during the test: %v", err)
	default:
	}
}
