//go:build integration

package host

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestEvictionOrder: pods of each QoS class and a critical static pod run
// through cri-guard; pressure comes from a fake stats tree. cri-guard stops
// the pods one per interval in the kubelet's rank order (BestEffort above
// its request first), never the critical one; the recreation of an evicted
// pod is refused while the pressure lasts and admitted after it.
func TestEvictionOrder(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	stats := newFakeStats(t)
	stats.withV1Memory(t)
	metricsAddr := testutil.FreeAddr(t)
	adminSocket := filepath.Join(harness.ShortTempDir(t), "admin.sock")
	cfg := writeConfig(t, `
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 3s
evictionMaxPodGracePeriod: 2s
psiTrigger: ""
metricsAddress: `+metricsAddr+`
adminSocket: `+adminSocket+`
`)
	// a fixed state dir: the guard is restarted on it below
	args := append(append(cfg, stats.args()...), "--state-dir", filepath.Join(harness.ShortTempDir(t), "state"))
	g := startGuard(t, env, args...)
	dir := t.TempDir()

	type testPod struct {
		name, qos    string
		usage, req   int64
		static       bool
		uid, id, cfg string
	}
	pods := []*testPod{
		{name: "guaranteed", qos: "", usage: 100 << 20, req: 500 << 20},
		{name: "burstable", qos: "burstable", usage: 200 << 20, req: 100 << 20},
		{name: "critical", qos: "besteffort", usage: 900 << 20, static: true},
		{name: "besteffort", qos: "besteffort", usage: 300 << 20},
	}
	for _, p := range pods {
		p.uid = harness.NewUID(t)
		pc := qosPodConfig(p.name+"-"+p.uid[:6], p.uid, p.qos)
		if p.static {
			pc.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		}
		stats.setPodMemory(t, pc.Linux.CgroupParent, p.usage, p.req)
		p.cfg = writeJSON(t, dir, p.uid+".json", pc)
		p.id = env.Crictl(t, g.Socket, "runp", p.cfg)
	}
	state := func(p *testPod) string {
		return env.Crictl(t, env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", p.id)
	}

	stats.setAvailable(t, 500<<20)
	var order []string
	stopped := map[string]bool{}
	// Other sandboxes in this containerd (left by other tools) are adopted
	// too and may be ranked first; only the order among ours is checked.
	deadline := time.Now().Add(150 * time.Second)
	for len(order) < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		for _, p := range pods {
			if !stopped[p.name] && state(p) == "SANDBOX_NOTREADY" {
				stopped[p.name] = true
				order = append(order, p.name)
			}
		}
	}
	if len(order) < 3 {
		t.Fatalf("evicted within 150s: %v, want three pods\n%s", order, g.LogTail())
	}
	// Quick passes evict again 100 ms after a stop while the (fake) memory
	// stays short: two evictions can fall between two polls, so the order
	// is cri-guard's own, from its "evicting pod" lines.
	order = order[:0]
	b, err := os.ReadFile(g.Log)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, `msg="evicting pod"`) {
			continue
		}
		for _, p := range pods {
			if strings.Contains(line+" ", " pod="+p.name+"-"+p.uid[:6]+" ") {
				order = append(order, p.name)
			}
		}
	}
	if got, want := strings.Join(order, ","), "besteffort,burstable,guaranteed"; got != want {
		t.Fatalf("eviction order = %q, want %q\n%s", got, want, g.LogTail())
	}
	time.Sleep(2 * time.Second) // a few more passes with only the critical pod left
	if s := state(pods[2]); s != "SANDBOX_READY" {
		t.Fatalf("critical pod state = %s, want SANDBOX_READY", s)
	}
	if !strings.Contains(g.LogTail(), "unable to evict any pods") {
		t.Errorf("no \"unable to evict any pods\" in the log with only a critical pod left")
	}

	// The kubelet recreates the evicted Burstable pod with attempt+1: refused
	// while the pressure lasts, with the kubelet's eviction message.
	recreate := func() (string, error) {
		pc := qosPodConfig("burstable-"+pods[1].uid[:6], pods[1].uid, "burstable")
		pc.Metadata.Attempt = 1
		return env.CrictlErr(g.Socket, "runp", writeJSON(t, dir, "recreate.json", pc))
	}
	_, err = recreate()
	if err == nil || !strings.Contains(err.Error(), "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi.") {
		t.Fatalf("recreation of the evicted pod under pressure: %v", err)
	}

	// What an operator sees now: metrics and `cri-guard status`.
	metrics := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`cri_guard_evictions_total{signal="memory.available"} 3`,
		`cri_guard_node_condition{condition="MemoryPressure"} 1`,
		`cri_guard_threshold_value{kind="hard",signal="memory.available"} 1.073741824e+09`,
		`cri_guard_signal_value{signal="memory.available"} 5.24288e+08`,
		`cri_guard_runtime_connected 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !regexp.MustCompile(`cri_guard_admissions_total\{reason="Evicted",result="refuse"\} [1-9]`).MatchString(metrics) {
		t.Errorf("metrics lack a refused admission:\n%s", grepLines(metrics, "cri_guard_admissions_total"))
	}
	out, err := exec.Command(guardBin, "status", "--admin", adminSocket).CombinedOutput()
	if err != nil {
		t.Fatalf("cri-guard status: %v\n%s", err, out)
	}
	t.Logf("cri-guard status under pressure:\n%s", out)
	for _, want := range []string{"MemoryPressure", "memory.available", "cri-guard-e2e/critical-", "evict", "The node was low on resource: memory"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cri-guard status lacks %q", want)
		}
	}

	// The re-admission guard survives a restart: the checkpoint says
	// cri-guard evicted the pod.
	g.Stop(t)
	g = startGuard(t, env, args...)
	_, err = recreate()
	if err == nil || !strings.Contains(err.Error(), "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi.") {
		t.Fatalf("recreation of the evicted pod after a cri-guard restart under pressure: %v", err)
	}

	stats.setAvailable(t, 12<<30)
	deadline = time.Now().Add(20 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		if _, err = recreate(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("evicted pod still refused 20s after the pressure ended: %v", err)
		}
	}
}

// scrape GETs a metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
