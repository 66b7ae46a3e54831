//go:build integration

package host

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestEvictionAfterFailedStop: the victim's stop fails because containerd
// is down (killed; its shims and the pod live on). cri-guard must count
// failures and no eviction, keep the pod ready and ranked, and evict it once
// containerd is back.
func TestEvictionAfterFailedStop(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	stats := newFakeStats(t)
	metricsAddr := testutil.FreeAddr(t)
	adminSocket := filepath.Join(harness.ShortTempDir(t), "admin.sock")
	cfg := writeConfig(t, `
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 3s
psiTrigger: ""
metricsAddress: `+metricsAddr+`
adminSocket: `+adminSocket+`
`)
	g := startGuard(t, env, append(cfg, stats.args()...)...)
	uid := harness.NewUID(t)
	id := env.Crictl(t, g.Socket, "runp", writeJSON(t, t.TempDir(), "pod.json", qosPodConfig("failstop-"+uid[:6], uid, "besteffort")))

	harness.RunScript(t, "rt.sh", "stop-containerd")
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			harness.RunScript(t, "rt.sh", "start-containerd")
		}
	})
	stats.setAvailable(t, 500<<20)

	// every signal's child, summed (they all exist from the start, at 0)
	counter := func(name string) int {
		return int(metricValue(t, metricsAddr, name))
	}
	status := func() admin.Status {
		st, err := harness.Status(guardBin, adminSocket)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	deadline := time.Now().Add(30 * time.Second)
	for counter("cri_guard_eviction_failures_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no failed eviction counted within 30s with containerd down\n%s", g.LogTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := counter("cri_guard_evictions_total"); n != 0 {
		t.Fatalf("evictions counted while every stop failed: %d", n)
	}
	found := false
	for _, p := range status().Pods {
		if p.UID == uid {
			found = true
			if p.State != "ready" || p.Rank < 1 {
				t.Fatalf("pod after failed stops: state %q rank %d, want ready and ranked", p.State, p.Rank)
			}
		}
	}
	if !found {
		t.Fatal("pod not in cri-guard status after failed stops")
	}
	failures := counter("cri_guard_eviction_failures_total")

	harness.RunScript(t, "rt.sh", "start-containerd")
	restarted = true
	back := time.Now()
	state := func() string {
		out, err := env.CrictlErr(env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", id)
		if err != nil {
			return "error: " + err.Error()
		}
		return out
	}
	deadline = time.Now().Add(60 * time.Second)
	for state() != "SANDBOX_NOTREADY" {
		if time.Now().After(deadline) {
			t.Fatalf("pod not evicted within 60s of containerd's return (state %s)\n%s", state(), g.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d failed stops while containerd was down; evicted %.1fs after containerd was back", failures, time.Since(back).Seconds())
	deadline = time.Now().Add(10 * time.Second)
	for counter("cri_guard_evictions_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("eviction not counted after the sandbox stopped\n%s", g.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	again := qosPodConfig("failstop-"+uid[:6], uid, "besteffort")
	again.Metadata.Attempt = 1
	if _, err := env.CrictlErr(g.Socket, "runp", writeJSON(t, t.TempDir(), "again.json", again)); err == nil {
		t.Fatal("recreation of the evicted pod admitted under pressure")
	}
}
