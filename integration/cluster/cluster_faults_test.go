//go:build integration

package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClusterFaults: with the kubelet running, cri-guard is SIGKILLed and
// restarted, then containerd is SIGKILLed and restarted. No running container
// is restarted, no sandbox recreated, the Node stays Ready throughout and no
// pod ends Failed.
func TestClusterFaults(t *testing.T) {
	c := needCluster(t)
	ns := c.namespace(t, "cg-faults")
	names := []string{"besteffort", "burstable", "guaranteed"}
	c.apply(t, podManifest(ns, "besteffort", "{}", ""))
	c.apply(t, podManifest(ns, "burstable", "{requests: {cpu: 10m, memory: 16Mi}}", ""))
	c.apply(t, podManifest(ns, "guaranteed", "{limits: {cpu: 100m, memory: 64Mi}}", ""))
	c.waitRunning(t, ns, 3*time.Minute, names...)
	before := map[string]string{}
	for _, n := range names {
		p, err := c.pod(t, ns, n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = p.Status.ContainerStatuses[0].ContainerID
	}

	// Watch the node and the pods for the whole run, once a second.
	var mu sync.Mutex
	var seen []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			out, err := c.kubectl("", "get", "node", clusterNode, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if err == nil && out != "True" {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s node Ready=%s", time.Now().Format(time.TimeOnly), out))
				mu.Unlock()
			}
			out, err = c.kubectl("", "-n", ns, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}`)
			if err == nil && strings.Contains(out, "=Failed") {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s pods %s", time.Now().Format(time.TimeOnly), out))
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	// A failure below must not leave the cluster without cri-guard or
	// containerd for the tests after this one (both starts are idempotent).
	t.Cleanup(func() {
		c.script(t, true, "start-containerd")
		c.script(t, false, "start-cri-guard")
	})
	// cri-guard SIGKILLed: the kubelet's calls fail for a few seconds.
	c.script(t, false, "kill-cri-guard")
	time.Sleep(5 * time.Second) // the outage (not an assertion)
	c.script(t, false, "start-cri-guard")
	// containerd SIGKILLed and restarted under cri-guard and the kubelet.
	c.script(t, true, "restart-containerd")

	// The kubelet's PLEG relists every second and its runtime status every
	// 5 s: within 40 s any restart or Ready change it would make is visible.
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range names {
			p, err := c.pod(t, ns, n)
			if err != nil {
				t.Fatal(err)
			}
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].ContainerID != before[n] || cs[0].RestartCount != 0 {
				t.Fatalf("pod %s: container %+v, want %s with no restart\n%s", n, cs, before[n],
					c.must(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp"))
			}
			if p.Status.Phase == "Failed" {
				t.Fatalf("pod %s Failed: %s", n, p.Status.Message)
			}
		}
		time.Sleep(2 * time.Second)
	}
	c.waitRunning(t, ns, time.Minute, names...)
	evs := c.must(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	for _, bad := range []string{"SandboxChanged", "Killing", "BackOff"} {
		if strings.Contains(evs, bad) {
			t.Errorf("event %s after the faults:\n%s", bad, evs)
		}
	}
	t.Logf("$ kubectl get events\n%s", evs)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("during the faults:\n%s", strings.Join(seen, "\n"))
	}
}
