//go:build integration

package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterPressure records what the control plane shows today, with
// cri-guard in CRI-only mode (no API connection), when cri-guard evicts a
// pod and refuses another under memory pressure (from the fake stats tree):
//
//   - the evicted BestEffort pod: cri-guard stops its sandbox, the kubelet
//     sees SandboxChanged and recreates it (attempt+1), cri-guard refuses the
//     recreation: events FailedCreatePodSandBox with cri-guard's refusal,
//     again every 10-15 s; the pod is NOT Failed in the API (the kubelet
//     does not know why);
//   - a BestEffort pod created under pressure: FailedCreatePodSandBox with the
//     admission refusal, the pod stays Pending;
//   - the node's conditions: the kubelet's own MemoryPressure stays False
//     (cri-guard sets no node condition yet);
//   - the critical pod (kube-system, system-node-critical) and the static pod
//     keep running, their containers not restarted;
//   - after the pressure and the transition period, every pod runs again.
//
// The kubectl output a user sees is logged in full (go test -v).
func TestClusterPressure(t *testing.T) {
	c := needCluster(t)
	ns := c.namespace(t, "cg-pressure")
	t.Cleanup(func() { c.setAvailable(t, 12<<30) })
	rec := recordScrapes(t)

	// The victim ignores SIGTERM, as many programs do (sleep as PID 1):
	// cri-guard's stop kills it after evictionMaxPodGracePeriod (5 s).
	c.apply(t, podManifestCmd(ns, "victim", "{}", "", `echo "hello from $HOSTNAME"; exec sleep 3600`))
	critical := c.criticalPod(t, ns)
	static := c.staticPod(t, ns, "static", podManifest(ns, "static", "{}", ""))
	c.waitRunning(t, ns, 3*time.Minute, "victim", static)
	c.waitRunning(t, "kube-system", 3*time.Minute, critical)
	containerID := func(ns, name string) string {
		p, err := c.pod(t, ns, name)
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("pod %s/%s: %v %+v", ns, name, err, p.Status.ContainerStatuses)
		}
		return p.Status.ContainerStatuses[0].ContainerID
	}
	protected := map[[2]string]string{
		{"kube-system", critical}: containerID("kube-system", critical),
		{ns, static}:              containerID(ns, static),
	}

	// Pressure: memory.available 500Mi < the hard threshold 1Gi.
	rec.mark("pressure")
	c.setAvailable(t, 500<<20)
	// A BestEffort pod is refused by the condition check before the
	// re-admission guard of evicted pods is asked, so the recreation of the
	// evicted pod and a new pod get the same message.
	const refusal = "rpc error: code = ResourceExhausted desc = Evicted: The node had condition: [MemoryPressure]. Observed memory.available 500Mi < 1Gi."
	c.waitFor(t, "the victim's recreation refused (FailedCreatePodSandBox)", 2*time.Minute, func() (bool, string) {
		_, err := findEvent(c.events(t, ns, "victim"), "FailedCreatePodSandBox", refusal)
		return err == nil, c.must(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=victim")
	})
	c.apply(t, podManifest(ns, "newcomer", "{}", ""))
	c.waitFor(t, "the newcomer refused (FailedCreatePodSandBox)", 2*time.Minute, func() (bool, string) {
		_, err := findEvent(c.events(t, ns, "newcomer"), "FailedCreatePodSandBox", refusal)
		return err == nil, c.must(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=newcomer")
	})
	// In containerd: the victim's first sandbox stopped, no second one; none for the newcomer.
	sandboxes := func(name, state string) string {
		out, err := c.rt.CrictlErr(c.rt.Containerd, "pods", "-q", "--namespace", ns, "--name", "^"+name+"$", "--state", state)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if r, nr := sandboxes("victim", "ready"), sandboxes("victim", "notready"); r != "" || len(strings.Fields(nr)) != 1 {
		t.Errorf("victim's sandboxes in containerd: ready %q, not ready %q; want none and one", r, nr)
	}
	if all := sandboxes("newcomer", "ready") + sandboxes("newcomer", "notready"); all != "" {
		t.Errorf("newcomer's sandboxes in containerd: %q, want none", all)
	}
	// The kubelet's status manager writes the refused pod's status a few
	// seconds after its first refusal: the snapshot waits for both.
	for _, name := range []string{"victim", "newcomer"} {
		c.waitFor(t, name+": the kubelet wrote Ready=False", time.Minute, func() (bool, string) {
			p, err := c.pod(t, ns, name)
			if err != nil {
				return false, err.Error()
			}
			return p.condition("Ready") == "False", fmt.Sprintf("conditions %+v", p.Status.Conditions)
		})
	}

	// What the user sees, in full.
	for _, args := range [][]string{
		{"-n", ns, "get", "pods", "-o", "wide"},
		{"-n", ns, "get", "pod", "victim", "-o", "yaml"},
		{"-n", ns, "describe", "pod", "victim"},
		{"-n", ns, "get", "pod", "newcomer", "-o", "yaml"},
		{"-n", ns, "describe", "pod", "newcomer"},
		{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
		{"describe", "node", clusterNode},
	} {
		t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), c.must(t, args...))
	}
	t.Logf("$ cri-guard status\n%s", c.guardStatus(t))

	// The evicted pod: not Failed, not ready; its events say why.
	v, err := c.pod(t, ns, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if v.Status.Phase == "Failed" || v.Status.Phase == "Succeeded" {
		t.Errorf("victim phase %s: the kubelet put a CRI-only eviction into the API", v.Status.Phase)
	}
	if v.condition("Ready") != "False" {
		t.Errorf("victim Ready=%s, want False", v.condition("Ready"))
	}
	evs := c.events(t, ns, "victim")
	if _, err := findEvent(evs, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created."); err != nil {
		t.Errorf("victim: %v", err)
	}
	if e, err := findEvent(evs, "FailedCreatePodSandBox", refusal); err != nil || e.Source.Component != "kubelet" || e.Type != "Warning" {
		t.Errorf("victim: %v (event %+v)", err, e)
	}
	// The refused pod: Pending, never had a sandbox.
	n, err := c.pod(t, ns, "newcomer")
	if err != nil {
		t.Fatal(err)
	}
	// a pod that never had a sandbox may have no Ready condition yet
	if r := n.condition("Ready"); n.Status.Phase != "Pending" || (r != "False" && r != "") {
		t.Errorf("newcomer phase %s Ready=%s, want Pending False", n.Status.Phase, n.condition("Ready"))
	}
	// The node: the kubelet's own view, untouched by cri-guard.
	if conds := c.nodeConditions(t); conds["MemoryPressure"] != "False" || conds["Ready"] != "True" {
		t.Errorf("node conditions %v, want MemoryPressure False and Ready True", conds)
	}
	// Critical and static pods: untouched.
	for k, id := range protected {
		p, err := c.pod(t, k[0], k[1])
		if err != nil {
			t.Fatal(err)
		}
		if ok, d := p.running(); !ok || p.Status.ContainerStatuses[0].ContainerID != id || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("protected pod %s: %s container %s restarts %d, want the first container %s running",
				k[1], d, p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount, id)
		}
	}

	// After the pressure and cri-guard's transition period (10 s), the
	// kubelet's retries are admitted: every pod runs again.
	rec.mark("calm")
	c.setAvailable(t, 12<<30)
	c.waitRunning(t, ns, 3*time.Minute, "victim", "newcomer", static)
	c.waitRunning(t, "kube-system", time.Minute, critical)
	rec.mark("running")
	t.Logf("after the pressure:\n$ kubectl get pods -o wide\n%s", c.must(t, "-n", ns, "get", "pods", "-o", "wide"))
	t.Logf("$ kubectl get events\n%s", c.must(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp"))
}
