//go:build integration

package cluster

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// TestClusterControllerPolicy: the taint controller's identity, with the
// RBAC and admission policy of contrib/controller/ applied to the real API
// server, may put cri-guard's taint on a Node with an allowed effect and
// change nothing else of it: not a label, an annotation, another taint,
// spec.unschedulable or a finalizer, nor the taint with NoExecute. The
// writes are server-side dry runs (admission included), so the Node is
// left as it was.
func TestClusterControllerPolicy(t *testing.T) {
	// node 1 is in the one-node cluster and in one of several nodes alike
	c := lookupCluster(t)
	for _, f := range []string{"contrib/controller/01-admission-policy.yaml", "contrib/controller/02-rbac.yaml"} {
		b, err := os.ReadFile(harness.Path(t, f))
		if err != nil {
			t.Fatal(err)
		}
		c.apply(t, string(b))
		t.Cleanup(func() {
			if _, err := c.kubectl(string(b), "delete", "--ignore-not-found", "-f", "-"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	as := []string{"--as", "system:serviceaccount:kube-system:cri-guard-controller"}
	node := "node/" + clusterNode
	try := func(args ...string) error {
		_, err := c.kubectl("", append(append(as, args...), "--dry-run=server")...)
		return err
	}
	// a policy is enforced a moment after it is created
	c.waitFor(t, "the policy refusing the controller a label", time.Minute, func() (bool, string) {
		err := try("label", node, "cri-guard-test=x")
		return err != nil && strings.Contains(err.Error(), "may not change a Node's labels"), "label: " + errString(err)
	})
	refused := []struct {
		what    string
		args    []string
		message string
	}{
		{"an annotation", []string{"annotate", node, "cri-guard-test=x"}, "may not change a Node's annotations"},
		{"another taint", []string{"taint", "nodes", clusterNode, "cri-guard-test=x:NoSchedule"}, "may not change a Node's other taints"},
		// a patch, not `kubectl cordon`: that one exits 0 when its patch is refused
		{"a cordon", []string{"patch", node, "--type=merge", "-p", `{"spec":{"unschedulable":true}}`}, "may not cordon or uncordon a Node"},
		{"a finalizer", []string{"patch", node, "--type=merge", "-p", `{"metadata":{"finalizers":["cri-guard.io/test"]}}`}, "may not change a Node's finalizers"},
		{"the taint with NoExecute", []string{"taint", "nodes", clusterNode, "cri-guard.io/memory-pressure=:NoExecute"}, "only with an allowed effect"},
	}
	for _, r := range refused {
		if err := try(r.args...); err == nil || !strings.Contains(err.Error(), r.message) {
			t.Errorf("%s by the controller: %v, want refused with %q", r.what, err, r.message)
		} else {
			t.Logf("%s by the controller: refused: %s", r.what, kubectlMessage(err))
		}
	}
	if err := try("taint", "nodes", clusterNode, "cri-guard.io/memory-pressure=:NoSchedule"); err != nil {
		t.Errorf("the taint with NoSchedule by the controller: %v, want allowed", err)
	}
	// the policy binds the controller's identity only: the admin may still label
	if _, err := c.kubectl("", "label", node, "cri-guard-test=x", "--dry-run=server"); err != nil {
		t.Errorf("a label by the admin: %v, want allowed", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
