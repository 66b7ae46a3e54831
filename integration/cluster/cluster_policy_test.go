//go:build integration

package cluster

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestClusterPriorityPolicy: the shipped admission policy lets a pod carry
// cri-guard's priority annotation only as a copy of its spec.priority, so
// an operator who turns the annotation on gives pod authors no way to make
// a pod critical that its priority class does not grant. Checked on the
// real API server: creates (server-side dry run, admission included) and an
// update of a running pod's annotations.
func TestClusterPriorityPolicy(t *testing.T) {
	c := needCluster(t)
	policy, err := os.ReadFile(harness.Path(t, "contrib/policy/priority-annotation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.apply(t, string(policy))
	t.Cleanup(func() {
		_, _ = c.kubectl("", "delete", "validatingadmissionpolicybinding", "cri-guard-priority-annotation", "--ignore-not-found")
		_, _ = c.kubectl("", "delete", "validatingadmissionpolicy", "cri-guard-priority-annotation", "--ignore-not-found")
	})
	ns := c.namespace(t, "prio-policy")
	class := "cri-guard-test-" + ns
	c.apply(t, fmt.Sprintf("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: 1000\n", class))
	t.Cleanup(func() { _, _ = c.kubectl("", "delete", "priorityclass", class, "--ignore-not-found") })

	podManifest := func(name, annotation, priorityClass string) string {
		m := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
		if annotation != "" {
			m += fmt.Sprintf("  annotations: {cri-guard.io/priority: %q}\n", annotation)
		}
		m += "spec:\n"
		if priorityClass != "" {
			m += "  priorityClassName: " + priorityClass + "\n"
		}
		m += fmt.Sprintf("  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: %s\n    command: [sh, -c, %q]\n", clusterImage, podCommand)
		return m
	}
	create := func(manifest string) error {
		_, err := c.kubectl(manifest, "create", "--dry-run=server", "-f", "-")
		return err
	}
	// A policy is enforced a moment after it is created: wait for the
	// first refusal of a claim before checking the rest.
	claim := podManifest("claim", "2000000000", "")
	c.waitFor(t, "the policy refusing a claimed system-critical priority", time.Minute, func() (bool, string) {
		err := create(claim)
		return err != nil && strings.Contains(err.Error(), "cri-guard-priority-annotation"), fmt.Sprint(err)
	})
	if err := create(claim); err == nil || !strings.Contains(err.Error(), "must equal the pod's spec.priority (0)") {
		t.Fatalf("claim without a priority class: %v, want refused naming spec.priority 0", err)
	}
	for _, tc := range []struct {
		name, annotation, class string
		allowed                 bool
	}{
		{"no-annotation", "", "", true},
		{"copy-of-default", "0", "", true},
		{"copy-of-class", "1000", class, true},
		{"above-class", "2000000000", class, false},
		{"not-a-number", "high", "", false},
	} {
		err := create(podManifest(tc.name, tc.annotation, tc.class))
		if (err == nil) != tc.allowed {
			t.Errorf("pod %s (annotation %q, class %q): err %v, want allowed %v", tc.name, tc.annotation, tc.class, err, tc.allowed)
		}
	}
	// annotations can change after creation: the same rule holds on update
	c.apply(t, podManifest("running", "", ""))
	if _, err := c.kubectl("", "-n", ns, "annotate", "pod", "running", "cri-guard.io/priority=2000000000"); err == nil ||
		!strings.Contains(err.Error(), "cri-guard-priority-annotation") {
		t.Fatalf("annotating a running pod with a claimed priority: %v, want refused by the policy", err)
	}
	c.must(t, "-n", ns, "annotate", "pod", "running", "cri-guard.io/priority=0")
}
