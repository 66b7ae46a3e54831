//go:build integration

package cluster

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestClusterTaint: cri-guard with the taint on (kubernetes.taint, the
// identity of contrib/rbac.yaml) keeps the scheduler from sending the node
// pods it would refuse (each refused pod is otherwise a failed sandbox
// the kubelet retries):
//
//   - with the kubelet's own credentials for the taint (NodeRestriction
//     forbids a node its taints) the taint is unavailable, said in status;
//   - with the ServiceAccount of contrib/rbac.yaml, under pressure the node
//     carries cri-guard.io/memory-pressure:NoSchedule; a BestEffort pod
//     created then waits Pending (FailedScheduling for an untolerated
//     taint: 1.36 does not name it), never Failed; a pod tolerating the
//     taint is scheduled and admitted;
//   - SIGKILL of cri-guard while tainted, restart after the calm: the taint
//     is gone within one pass, and the waiting pod runs.
func TestClusterTaint(t *testing.T) {
	c := needCluster(t)
	cfgPath, orig := c.restoreAPIConfigAtCleanup(t)
	// the config with the taint: the kubernetes line is one flow mapping
	withTaint := func(kubeconfig string) {
		t.Helper()
		s := strings.TrimRight(string(orig), "\n")
		i := strings.LastIndex(s, "\n") + 1
		if !strings.HasPrefix(s[i:], "kubernetes: {") || !strings.HasSuffix(s, "}") {
			t.Fatalf("config-api.yaml does not end with the kubernetes line:\n%s", s)
		}
		taint := "taint: {enabled: true}"
		if kubeconfig != "" {
			taint = fmt.Sprintf("taint: {enabled: true, kubeconfig: %s}", kubeconfig)
		}
		s = s[:len(s)-1] + ", " + taint + "}\n"
		harness.WriteAtomic(t, cfgPath, s)
		c.script(t, false, "kill-cri-guard")
		c.script(t, false, "start-cri-guard", "api")
	}
	taintLine := func() string {
		for _, l := range strings.Split(c.guardStatus(t), "\n") {
			if strings.HasPrefix(l, "node taint:") {
				return strings.TrimSpace(strings.TrimPrefix(l, "node taint:"))
			}
		}
		return ""
	}
	nodeTaints := func() string {
		return c.must(t, "get", "node", clusterNode, "-o", "jsonpath={.spec.taints}")
	}

	// The node's own credentials: forbidden.
	withTaint("")
	c.setAvailable(t, 500<<20)
	c.waitFor(t, "the taint unavailable with the node's credentials", time.Minute, func() (bool, string) {
		l := taintLine()
		return strings.HasPrefix(l, "unavailable"), l
	})
	if ts := nodeTaints(); strings.Contains(ts, "cri-guard.io") {
		t.Fatalf("node taints %s: set with the node's own credentials", ts)
	}
	// said once in the log, however many passes see the pressure: the
	// log is appended to by every start, so count from this start's line
	time.Sleep(3 * time.Second) // housekeeping passes under pressure
	if n := c.guardLogCountSinceStart(t, "node taint unavailable"); n != 1 {
		t.Fatalf("'node taint unavailable' logged %d times since this start, want once", n)
	}
	c.setAvailable(t, 12<<30)

	// The ServiceAccount of contrib/rbac.yaml.
	kc := c.taintKubeconfig(t)
	withTaint(kc)
	ns := c.namespace(t, "cg-taint")

	start := time.Now()
	c.setAvailable(t, 500<<20)
	c.waitFor(t, "the node tainted", time.Minute, func() (bool, string) {
		ts := nodeTaints()
		return strings.Contains(ts, `"key":"cri-guard.io/memory-pressure"`) && strings.Contains(ts, `"effect":"NoSchedule"`), ts
	})
	t.Logf("pressure to the taint: %.1fs; status: %s", time.Since(start).Seconds(), taintLine())
	// the threshold no longer met (nothing more evicted, the tolerant pod
	// neither), MemoryPressure and the taint hold for the transition
	// period (60 s): the rest of this part must fit in it
	c.setAvailable(t, 12<<30)
	calm := time.Now()
	c.apply(t, podManifest(ns, "waiter", "{}", ""))
	c.apply(t, podManifest(ns, "tolerant", "{}", "  tolerations:\n  - {key: cri-guard.io/memory-pressure, operator: Exists, effect: NoSchedule}\n  - {key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}\n"))
	c.waitRunning(t, ns, 45*time.Second, "tolerant")
	c.waitFor(t, "the waiter unschedulable for a taint", 30*time.Second, func() (bool, string) {
		var seen []string
		for _, e := range c.events(t, ns, "waiter") {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "taint") {
				t.Logf("waiter: FailedScheduling: %s", e.Message)
				return true, e.Message
			}
		}
		return false, fmt.Sprintf("events %q", seen)
	})
	if p, err := c.pod(t, ns, "waiter"); err != nil || p.Status.Phase != "Pending" {
		t.Fatalf("waiter %+v, %v: want Pending", p.Status, err)
	}

	// A crash while tainted; cri-guard comes back after the calm.
	c.script(t, false, "kill-cri-guard")
	if ts := nodeTaints(); !strings.Contains(ts, "cri-guard.io/memory-pressure") {
		t.Fatalf("node taints %s after SIGKILL, %.1fs after the calm: want the taint left (the transition period is 60 s)", ts, time.Since(calm).Seconds())
	}
	restart := time.Now()
	c.script(t, false, "start-cri-guard", "api")
	c.waitFor(t, "the crash's taint removed", time.Minute, func() (bool, string) {
		ts := nodeTaints()
		return !strings.Contains(ts, "cri-guard.io"), ts
	})
	t.Logf("restart to the taint removed: %.1fs", time.Since(restart).Seconds())
	c.waitRunning(t, ns, 3*time.Minute, "waiter")
	if p, err := c.pod(t, ns, "waiter"); err != nil || p.Status.Phase != "Running" {
		t.Errorf("waiter %+v, %v: want Running, never Failed", p.Status, err)
	}
}

// taintKubeconfig applies contrib/rbac.yaml and returns a kubeconfig (in
// the cluster's cri-guard directory) for its ServiceAccount, the identity
// that may patch Nodes.
func (c *cluster) taintKubeconfig(t *testing.T) string {
	t.Helper()
	rbac, err := os.ReadFile(harness.Path(t, "contrib/rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.apply(t, string(rbac))
	var token []byte
	c.waitFor(t, "the ServiceAccount's token", time.Minute, func() (bool, string) {
		out, err := c.kubectl("", "-n", "kube-system", "get", "secret", "cri-guard-taint-token", "-o", "jsonpath={.data.token}")
		if err != nil || out == "" {
			return false, fmt.Sprint(out, err)
		}
		token, err = base64.StdEncoding.DecodeString(strings.TrimSpace(out))
		return err == nil, fmt.Sprint(err)
	})
	server := c.must(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	kc := filepath.Join(c.dir, "cri-guard", "taint.kubeconfig")
	harness.WriteAtomic(t, kc, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q}
users:
- name: cri-guard-taint
  user: {token: %q}
contexts:
- name: c
  context: {cluster: c, user: cri-guard-taint}
current-context: c
`, strings.TrimSpace(server), filepath.Join(c.dir, "pki", "ca.crt"), string(token)))
	return kc
}
