//go:build integration

package host

import (
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestAdmissionUnderPressure: pressure comes from a fake stats tree; crictl
// runp through cri-guard is refused for a BestEffort pod under memory
// pressure, and admitted for a Burstable one and a critical (static)
// BestEffort one; after the pressure and the transition period end the
// BestEffort pod is admitted.
func TestAdmissionUnderPressure(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	stats := newFakeStats(t)
	cfg := writeConfig(t, `
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 3s
psiTrigger: ""
metricsAddress: ""
adminSocket: ""
`)
	g := startGuard(t, env, append(cfg, stats.args()...)...)
	dir := t.TempDir()
	runp := func(name, qos string, annotations map[string]string) (string, error) {
		uid := harness.NewUID(t)
		pc := qosPodConfig(name+"-"+uid[:6], uid, qos)
		pc.Annotations = annotations
		return env.CrictlErr(g.Socket, "runp", writeJSON(t, dir, uid+".json", pc))
	}

	if id, err := runp("be-calm", "besteffort", nil); err != nil || id == "" {
		t.Fatalf("BestEffort pod without pressure: %v", err)
	}

	stats.setAvailable(t, 500<<20)
	time.Sleep(1200 * time.Millisecond) // admission resamples stats older than 1s
	out, err := runp("be-pressure", "besteffort", nil)
	if err == nil {
		t.Fatalf("BestEffort pod admitted under memory pressure: %s", out)
	}
	for _, want := range []string{"ResourceExhausted", "Evicted", "The node had condition: [MemoryPressure]", "memory.available 500Mi < 1Gi"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := runp("bu-pressure", "burstable", nil); err != nil {
		t.Errorf("Burstable pod refused under memory pressure: %v", err)
	}
	if _, err := runp("static-be", "besteffort", map[string]string{"kubernetes.io/config.source": "file"}); err != nil {
		t.Errorf("critical (static) BestEffort pod refused: %v", err)
	}

	// containerd never saw the refused pod
	if got := env.Crictl(t, env.Containerd, "pods", "-q", "--name", "be-pressure"); got != "" {
		t.Errorf("containerd has the refused sandbox: %q", got)
	}

	stats.setAvailable(t, 12<<30)
	deadline := time.Now().Add(20 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		if _, err = runp("be-after", "besteffort", nil); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BestEffort pod still refused 20s after the pressure ended: %v\n%s", err, g.LogTail())
		}
	}
}
