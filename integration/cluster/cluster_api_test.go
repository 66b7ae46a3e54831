//go:build integration

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/admin"
)

// TestClusterAPI: cri-guard connected to the API server with the kubelet's
// own credentials (cluster.sh start-cri-guard api) decides with what only
// the API says and reports its decisions as the kubelet does, so that
// kubectl and controllers see the same outcome as after a kubelet eviction:
//
//   - an evicted BestEffort Deployment replica ends Failed, reason Evicted,
//     the kubelet's message and DisruptionTarget, with a Warning event
//     Evicted, and its ReplicaSet creates a replacement;
//   - a Burstable pod below its API memory request ranks after the
//     BestEffort one (so it is not the victim);
//   - a BestEffort pod created under MemoryPressure ends Failed, "Pod was
//     rejected: The node had condition: [MemoryPressure]. ", and the kubelet
//     stops trying; one that tolerates node.kubernetes.io/memory-pressure is
//     admitted;
//   - a system-node-critical pod without any annotation (no critical
//     namespace in this configuration) is never evicted;
//   - cri-guard's node condition CriGuardMemoryPressure shows its view.
func TestClusterAPI(t *testing.T) {
	c := needCluster(t)
	// v1 memory stats under cri-guard's fake cgroup root, so that pod
	// usage can be set; cri-guard detects the layout at start-up
	mem := filepath.Join(c.dir, "stats", "cgroup", "memory")
	if err := os.MkdirAll(mem, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.WriteAtomic(t, filepath.Join(mem, "memory.usage_in_bytes"), "0\n")
	c.script(t, false, "kill-cri-guard")
	c.script(t, false, "start-cri-guard", "api")
	t.Cleanup(func() {
		c.setAvailable(t, 12<<30)
		c.script(t, false, "kill-cri-guard")
		_ = os.RemoveAll(mem)
		c.script(t, false, "start-cri-guard")
	})
	ns := c.namespace(t, "cg-api")
	t.Cleanup(func() { c.setAvailable(t, 12<<30) })
	rec := recordScrapes(t)

	c.apply(t, deploymentManifest(ns, "web", 1))
	c.apply(t, podManifest(ns, "bu", "{requests: {memory: 512Mi}, limits: {memory: 1Gi}}", ""))
	critical := c.criticalPod(t, ns)
	c.waitRunning(t, ns, 3*time.Minute, "bu")
	c.waitRunning(t, "kube-system", 3*time.Minute, critical)
	var web kPod
	c.waitFor(t, "the web replica running", 3*time.Minute, func() (bool, string) {
		ps := c.pods(t, ns, "app=web")
		if len(ps) != 1 {
			return false, fmt.Sprintf("%d web pods", len(ps))
		}
		web = ps[0]
		return web.running()
	})
	crit, err := c.pod(t, "kube-system", critical)
	if err != nil {
		t.Fatal(err)
	}
	critContainer := crit.Status.ContainerStatuses[0].ContainerID
	bu, err := c.pod(t, ns, "bu")
	if err != nil {
		t.Fatal(err)
	}
	// usage: the BestEffort replica 100Mi over its (zero) request, the
	// Burstable pod 300Mi under its 512Mi request (which only the API says:
	// its cgroup shows none), the critical pod the largest
	podMem := func(p kPod, qos string, usage int64) {
		parent := "/cri-guard-cluster-pods/kubepods/pod" + p.Metadata.UID
		if qos != "" {
			parent = "/cri-guard-cluster-pods/kubepods/" + qos + "/pod" + p.Metadata.UID
		}
		dir := filepath.Join(mem, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		harness.WriteAtomic(t, filepath.Join(dir, "memory.usage_in_bytes"), fmt.Sprintf("%d\n", usage))
		harness.WriteAtomic(t, filepath.Join(dir, "memory.stat"), "cache 0\nrss 0\ntotal_inactive_file 0\n")
		harness.WriteAtomic(t, filepath.Join(dir, "memory.limit_in_bytes"), "9223372036854771712\n")
		harness.WriteAtomic(t, filepath.Join(dir, "memory.soft_limit_in_bytes"), "0\n")
	}
	podMem(web, "besteffort", 100<<20)
	podMem(bu, "burstable", 300<<20)
	podMem(crit, "besteffort", 900<<20)

	// Pressure: one pass evicts the web replica, then the pressure is gone
	// but MemoryPressure holds for the transition period (60 s).
	start := time.Now()
	rec.mark("pressure")
	c.setAvailable(t, 500<<20)
	var evictedAt, replacedAt time.Duration
	c.waitFor(t, "the web replica Failed/Evicted in the API", time.Minute, func() (bool, string) {
		p, err := c.pod(t, ns, web.Metadata.Name)
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == "Failed" && p.Status.Reason == "Evicted", fmt.Sprintf("%+v", p.Status)
	})
	evictedAt = time.Since(start)
	rec.mark("calm")
	c.setAvailable(t, 12<<30)
	// The kubelet's status manager may write its own status over the
	// report (seen: phase and reason kept, message cleared); cri-guard's
	// watch sees it and patches its fields again at once: the message must
	// be there within 15 s.
	const evictMsg = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. "
	var w kPod
	msgDeadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		if w, err = c.pod(t, ns, web.Metadata.Name); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(w.Status.Message, evictMsg) {
			break
		}
		if time.Now().After(msgDeadline) {
			t.Errorf("evicted pod message %q 15 s after the eviction, want the kubelet's %q", w.Status.Message, evictMsg)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	dt := false
	for _, cd := range w.Status.Conditions {
		dt = dt || (cd.Type == "DisruptionTarget" && cd.Status == "True" && cd.Reason == "TerminationByKubelet")
	}
	if !dt {
		t.Errorf("evicted pod conditions %+v, want DisruptionTarget True TerminationByKubelet", w.Status.Conditions)
	}
	if e, err := findEvent(c.events(t, ns, web.Metadata.Name), "Evicted", evictMsg); err != nil {
		t.Errorf("evicted pod: %v", err)
	} else if e.Source.Component != "cri-guard" {
		t.Errorf("Evicted event from %q, want cri-guard's own component", e.Source.Component)
	}
	c.waitFor(t, "a replacement replica created", time.Minute, func() (bool, string) {
		ps := c.pods(t, ns, "app=web")
		return len(ps) >= 2, fmt.Sprintf("%d web pods", len(ps))
	})
	replacedAt = time.Since(start)
	t.Logf("pressure to the replica Failed/Evicted in the API: %.1fs; to its replacement: %.1fs", evictedAt.Seconds(), replacedAt.Seconds())
	// the replacements land on this node and are rejected while
	// MemoryPressure holds: stop the churn
	c.must(t, "-n", ns, "scale", "deployment", "web", "--replicas=0")
	// the order of cri-guard's evictions: the BestEffort replica first, the
	// Burstable pod below its request (which only the API says) after it
	var evicted []string
	for _, d := range c.guardStatusJSON(t).Decisions {
		if d.Kind == "evict" && d.Pod != nil && d.Pod.Namespace == ns {
			evicted = append(evicted, d.Pod.Name)
		}
	}
	if len(evicted) == 0 || !strings.HasPrefix(evicted[0], "web-") {
		t.Errorf("evictions in %s, in order: %v; want the web replica first", ns, evicted)
	}

	// Under MemoryPressure: a new BestEffort pod is rejected, one tolerating
	// memory-pressure is admitted.
	c.apply(t, podManifest(ns, "newcomer", "{}", ""))
	c.apply(t, podManifest(ns, "tolerant", "{}", "  tolerations: [{key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}]\n"))
	const rejected = "Pod was rejected: The node had condition: [MemoryPressure]. "
	c.waitFor(t, "the newcomer rejected", time.Minute, func() (bool, string) {
		p, err := c.pod(t, ns, "newcomer")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == "Failed" && strings.HasPrefix(p.Status.Message, rejected), fmt.Sprintf("%+v", p.Status)
	})
	c.waitRunning(t, ns, time.Minute, "tolerant")
	tries := func() int {
		n := 0
		for _, e := range c.events(t, ns, "newcomer") {
			if e.Reason == "FailedCreatePodSandBox" {
				n += max(e.Count, 1)
			}
		}
		return n
	}
	// The kubelet's status manager may write its own status (Pending) over
	// the rejection before it has seen it; its next retry (10-15 s back-off)
	// is refused again and the rejection written again, which it then
	// keeps: the retries must stop, 20 s with no new attempt, within 100 s
	// (a slow machine was seen taking a third attempt before it settled).
	before := tries()
	for settle := time.Now().Add(100 * time.Second); ; {
		time.Sleep(20 * time.Second)
		after := tries()
		if after == before {
			break
		}
		if time.Now().After(settle) {
			t.Errorf("the kubelet kept trying the rejected pod: %d FailedCreatePodSandBox events, then %d, 20 s later, after 100 s", before, after)
			break
		}
		before = after
	}
	t.Logf("sandbox attempts of the rejected pod: %d", before)
	if p, err := c.pod(t, ns, "newcomer"); err != nil || p.Status.Phase != "Failed" || !strings.HasPrefix(p.Status.Message, rejected) {
		t.Errorf("the rejected pod at the end: %+v, %v; want it still Failed, rejected", p.Status, err)
	}
	if conds := c.nodeConditions(t); conds["CriGuardMemoryPressure"] != "True" || conds["MemoryPressure"] != "False" {
		t.Errorf("node conditions %v: want CriGuardMemoryPressure True (cri-guard's), MemoryPressure False (the kubelet's)", conds)
	}

	for _, args := range [][]string{
		{"-n", ns, "get", "pods", "-o", "wide"},
		{"-n", ns, "get", "pod", web.Metadata.Name, "-o", "yaml"},
		{"-n", ns, "get", "pod", "newcomer", "-o", "yaml"},
		{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
		{"describe", "node", clusterNode},
	} {
		// what an operator would see, logged; not a check: the evicted
		// replica may be gone by now (seen once in CI: NotFound after the
		// scale to 0; its Failed/Evicted status was checked above)
		out, err := c.kubectl("", args...)
		if err != nil {
			out = err.Error()
		}
		t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	}
	t.Logf("$ cri-guard status\n%s", c.guardStatus(t))

	// The critical pod: never evicted, its container not restarted.
	p, err := c.pod(t, "kube-system", critical)
	if err != nil {
		t.Fatal(err)
	}
	if ok, d := p.running(); !ok || p.Status.ContainerStatuses[0].ContainerID != critContainer {
		t.Errorf("system-node-critical pod: %s, container %s (was %s)", d, p.Status.ContainerStatuses[0].ContainerID, critContainer)
	}
	if !strings.Contains(c.guardStatus(t), "api server:") {
		t.Error("cri-guard status does not show the API connection")
	}
}

// TestClusterAPIOutage: with the API server stopped, cri-guard still
// evicts from what CRI tells it; the report waits, shown as pending in
// cri-guard status, and is written once when the API server is back: the
// pod ends Failed/Evicted with exactly one Evicted event.
func TestClusterAPIOutage(t *testing.T) {
	c := needCluster(t)
	c.script(t, false, "kill-cri-guard")
	c.script(t, false, "start-cri-guard", "api")
	apiDown := false
	t.Cleanup(func() {
		c.setAvailable(t, 12<<30)
		if apiDown {
			c.script(t, false, "start-apiserver")
		}
		c.script(t, false, "kill-cri-guard")
		c.script(t, false, "start-cri-guard")
	})
	ns := c.namespace(t, "cg-outage")
	c.apply(t, podManifest(ns, "victim", "{}", ""))
	c.waitRunning(t, ns, 3*time.Minute, "victim")
	// the API has the pod; give cri-guard's cache a moment to see it
	c.waitFor(t, "cri-guard's API cache synced", 30*time.Second, func() (bool, string) {
		st := c.guardStatus(t)
		return strings.Contains(st, "api server:") && strings.Contains(st, "connected"), st
	})

	c.script(t, false, "stop-apiserver")
	apiDown = true
	c.setAvailable(t, 500<<20)
	sandboxState := func() string {
		out, err := c.rt.CrictlErr(c.rt.Containerd, "pods", "--namespace", ns, "--name", "^victim$", "-o", "json")
		if err != nil {
			return err.Error()
		}
		return out
	}
	c.waitFor(t, "victim's sandbox stopped with the API server down", time.Minute, func() (bool, string) {
		s := sandboxState()
		return strings.Contains(s, "SANDBOX_NOTREADY") && !strings.Contains(s, "SANDBOX_READY\""), s
	})
	st := c.guardStatus(t)
	t.Logf("$ cri-guard status (API server down)\n%s", st)
	if !regexp.MustCompile(`[1-9][0-9]* pending`).MatchString(st) {
		t.Errorf("cri-guard status does not show the pending report:\n%s", st)
	}
	c.setAvailable(t, 12<<30)
	c.script(t, false, "start-apiserver")
	apiDown = false
	back := time.Now()
	c.waitFor(t, "victim Failed/Evicted once the API server is back", 2*time.Minute, func() (bool, string) {
		p, err := c.pod(t, ns, "victim")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == "Failed" && p.Status.Reason == "Evicted", fmt.Sprintf("%+v", p.Status)
	})
	t.Logf("API server back to the pod Failed/Evicted: %.1fs", time.Since(back).Seconds())
	time.Sleep(5 * time.Second) // a duplicate would come from a retry by now
	n := 0
	for _, e := range c.events(t, ns, "victim") {
		if e.Reason == "Evicted" {
			n += max(e.Count, 1)
		}
	}
	if n != 1 {
		t.Errorf("%d Evicted events, want exactly one", n)
	}
}

// guardStatusJSON is `cri-guard status --json` of the cluster's cri-guard.
func (c *cluster) guardStatusJSON(t *testing.T) admin.Status {
	t.Helper()
	st, err := harness.Status(filepath.Join(c.dir, "bin", "cri-guard"), filepath.Join(c.dir, "cri-guard", "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}
