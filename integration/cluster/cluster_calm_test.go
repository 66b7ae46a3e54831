//go:build integration

package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterCalm: without memory pressure, pods of every QoS class, a
// system-node-critical pod in kube-system and a static pod all reach Running
// through cri-guard, and `kubectl logs` and `kubectl exec` work on them.
func TestClusterCalm(t *testing.T) {
	c := needCluster(t)
	ns := c.namespace(t, "cg-calm")

	c.apply(t, deploymentManifest(ns, "besteffort", 2))
	c.apply(t, podManifest(ns, "burstable", "{requests: {cpu: 10m, memory: 16Mi}}", ""))
	c.apply(t, podManifest(ns, "guaranteed", "{limits: {cpu: 100m, memory: 64Mi}}", ""))
	critical := c.criticalPod(t, ns)
	static := c.staticPod(t, ns, "static", podManifest(ns, "static", "{}", ""))

	c.waitFor(t, "deployment besteffort: 2 pods Running and Ready", 3*time.Minute, func() (bool, string) {
		ps := c.pods(t, ns, "app=besteffort")
		var detail []string
		ready := 0
		for _, p := range ps {
			ok, d := p.running()
			if ok {
				ready++
			}
			detail = append(detail, d)
		}
		return ready == 2 && len(ps) == 2, strings.Join(detail, "; ")
	})
	c.waitRunning(t, ns, 3*time.Minute, "burstable", "guaranteed", static)
	c.waitRunning(t, "kube-system", 3*time.Minute, critical)

	want := map[string]string{"burstable": "Burstable", "guaranteed": "Guaranteed", static: "BestEffort"}
	for name, qos := range want {
		p, err := c.pod(t, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.QOSClass != qos {
			t.Errorf("pod %s: qosClass %q, want %q", name, p.Status.QOSClass, qos)
		}
	}
	cp, err := c.pod(t, "kube-system", critical)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Spec.Priority == nil || *cp.Spec.Priority != 2000001000 || cp.Status.QOSClass != "BestEffort" {
		t.Errorf("critical pod: priority %v qosClass %q, want 2000001000 BestEffort", cp.Spec.Priority, cp.Status.QOSClass)
	}

	// kubectl logs and exec go apiserver -> kubelet -> cri-guard -> containerd.
	for _, name := range []string{"burstable", static} {
		c.waitFor(t, "kubectl logs "+name, 30*time.Second, func() (bool, string) {
			out, err := c.kubectl("", "-n", ns, "logs", name)
			return err == nil && strings.Contains(out, "hello from "), fmt.Sprint(out, err)
		})
		out, err := c.kubectl("", "-n", ns, "exec", name, "--", "sh", "-c", "echo exec-ok; cat /proc/1/cmdline")
		if err != nil || !strings.HasPrefix(out, "exec-ok\n") {
			t.Errorf("kubectl exec %s: %q %v", name, out, err)
		}
	}

	// cri-guard admitted every one of them and knows each one's QoS class
	// from the kubelet's cgroup parent.
	st := c.guardStatus(t)
	t.Logf("cri-guard status:\n%s", st)
	for _, name := range []string{ns + "/burstable", ns + "/guaranteed", ns + "/" + static, "kube-system/" + critical, ns + "/besteffort-"} {
		if !strings.Contains(st, name) {
			t.Errorf("cri-guard status does not list %s", name)
		}
	}
	t.Logf("kubectl get pods -o wide:\n%s", c.must(t, "get", "pods", "-A", "-o", "wide"))
}
