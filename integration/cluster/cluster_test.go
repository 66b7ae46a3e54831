//go:build integration

package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// The one-node cluster of scripts/cluster.sh: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and a registered kubelet whose
// runtime endpoint is a cri-guard in front of the harness containerd. The
// TestCluster* tests drive it with the kubectl it built, as a user would.

const (
	// clusterNode is the node name cluster.sh registers the kubelet as.
	clusterNode = "localhost"
	// clusterImage is what every cluster test pod runs (imported by rt.sh).
	clusterImage = harness.BusyboxImage
)

// podCommand prints a line for `kubectl logs`, then sleeps; it exits at once
// on SIGTERM so that deleting a pod does not wait for its grace period.
const podCommand = `echo "hello from $HOSTNAME"; trap "exit 0" TERM; sleep 3600 & wait`

// cluster is the running cluster of scripts/cluster.sh.
type cluster struct {
	dir        string // $CRI_GUARD_CLUSTER
	kubeconfig string
	kubectlBin string
	rt         harness.Runtime // the containerd of rt.sh the kubelet runs on (through cri-guard)
	// nodes: what $CRI_GUARD_CLUSTER/nodes.tsv lists when the cluster has
	// several nodes (CRI_GUARD_CLUSTER_NODES); node 1 alone otherwise
	nodes []clusterNodeInfo
}

// clusterNodeInfo is one node of the cluster: its number for `cluster.sh
// node K`, its name, and its directory (its stats/ tree and cri-guard/;
// $CRI_GUARD_CLUSTER for node 1).
type clusterNodeInfo struct {
	num  int
	name string
	dir  string
}

// needCluster returns the one-node cluster, or skips the test saying why it
// cannot run. A cluster that is named but not up fails the test: `make
// test` brought it up, so it should be there. A cluster of several nodes
// skips: these tests place pods and pressure on node 1 alone.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	c := lookupCluster(t)
	if len(c.nodes) > 1 {
		t.Skipf("cluster: %d nodes; this test needs the one-node cluster (scripts/cluster.sh up without CRI_GUARD_CLUSTER_NODES)", len(c.nodes))
	}
	return c
}

// lookupCluster is needCluster's cluster, of any number of nodes.
func lookupCluster(t *testing.T) *cluster {
	t.Helper()
	dir := os.Getenv("CRI_GUARD_CLUSTER")
	if dir == "" {
		t.Skip("cluster: CRI_GUARD_CLUSTER is not set: run `scripts/cluster.sh up` and export CRI_GUARD_CLUSTER=/tmp/cri-guard-cluster (`make test` does, after the other integration tests)")
	}
	rt, err := harness.LookupRuntime()
	if err != nil {
		t.Skip("cluster: ", err)
	}
	c := &cluster{
		dir:        dir,
		kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		kubectlBin: filepath.Join(dir, "bin", "kubectl"),
		rt:         rt,
	}
	if out, err := exec.Command("bash", harness.Script(t, "cluster.sh"), "status").CombinedOutput(); err != nil {
		t.Fatalf("cluster: CRI_GUARD_CLUSTER=%s but `cluster.sh status` fails (%v): %s", dir, err, out)
	}
	c.nodes = []clusterNodeInfo{{num: 1, name: clusterNode, dir: dir}}
	b, err := os.ReadFile(filepath.Join(dir, "nodes.tsv"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err == nil {
		c.nodes = nil
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var n clusterNodeInfo
			if _, err := fmt.Sscanf(l, "%d\t%s\t%s", &n.num, &n.name, &n.dir); err != nil {
				t.Fatalf("nodes.tsv: %q: %v", l, err)
			}
			c.nodes = append(c.nodes, n)
		}
	}
	return c
}

// apiServer is the API server's host and port, from the admin kubeconfig.
func (c *cluster) apiServer(t *testing.T) (string, string) {
	t.Helper()
	out := c.must(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimSpace(out), "https://"))
	if err != nil {
		t.Fatalf("the kubeconfig's server %q: %v", out, err)
	}
	return host, port
}

// nodeContainerd is the CRI socket of a node's containerd: the harness's
// for node 1, its own for the others.
func (c *cluster) nodeContainerd(n clusterNodeInfo) string {
	if n.num == 1 {
		return c.rt.Containerd
	}
	return filepath.Join(n.dir, "ctrd", "containerd.sock")
}

// kubectl runs kubectl with the admin kubeconfig; stdin may be empty.
func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	return c.kubectlWith(c.kubeconfig, stdin, args...)
}

// kubectlWith is kubectl with the credentials of another kubeconfig.
func (c *cluster) kubectlWith(kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.Command(c.kubectlBin, append([]string{"--kubeconfig", kubeconfig,
		"--cache-dir", filepath.Join(c.dir, "kube-cache"), "--request-timeout", "30s"}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// must runs kubectl and fails the test on a non-zero exit.
func (c *cluster) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kubectl("", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply creates or updates the objects in manifest.
func (c *cluster) apply(t *testing.T, manifest string) {
	t.Helper()
	if out, err := c.kubectl(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// script runs scripts/cluster.sh (or rt.sh, with rt true) and fails the test on error.
func (c *cluster) script(t *testing.T, rt bool, args ...string) {
	t.Helper()
	name := "cluster.sh"
	if rt {
		name = "rt.sh"
	}
	harness.RunScript(t, name, args...)
}

// namespace creates a namespace named prefix-<random> and deletes it (and
// waits for its pods to be gone) at cleanup.
func (c *cluster) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := prefix + "-" + harness.NewUID(t)[:6]
	c.must(t, "create", "namespace", ns)
	// the service account controller must have made "default" before pods can be created
	c.waitFor(t, "service account default in "+ns, time.Minute, func() (bool, string) {
		_, err := c.kubectl("", "-n", ns, "get", "serviceaccount", "default")
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(func() {
		if _, err := c.kubectl("", "delete", "namespace", ns, "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return ns
}

// staticPod writes a static pod manifest into the kubelet's staticPodPath
// and removes it at cleanup; the mirror pod is <name>-<node>.
func (c *cluster) staticPod(t *testing.T, ns, name, manifest string) string {
	t.Helper()
	p := filepath.Join(c.dir, "manifests", ns+"-"+name+".yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	mirror := name + "-" + clusterNode
	t.Cleanup(func() {
		if err := os.Remove(p); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		c.waitFor(t, "static pod "+mirror+" gone", 2*time.Minute, func() (bool, string) {
			out, err := c.kubectl("", "-n", ns, "get", "pod", mirror, "--ignore-not-found", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "", out
		})
	})
	return mirror
}

// waitFor polls cond every 500 ms until it is true, or fails the test with
// the last detail cond gave once timeout has passed.
func (c *cluster) waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, timeout, detail)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// setAvailable rewrites the fake meminfo that the cluster's cri-guard reads.
func (c *cluster) setAvailable(t *testing.T, b int64) {
	t.Helper()
	setAvailableAt(t, c.dir, b)
}

// setAvailableAt rewrites the fake meminfo that the cri-guard of the node
// whose directory is dir reads.
func setAvailableAt(t *testing.T, dir string, b int64) {
	t.Helper()
	harness.WriteMeminfo(t, filepath.Join(dir, "stats", "proc", "meminfo"), b)
}

// guardStatus is `cri-guard status` of the cluster's cri-guard.
func (c *cluster) guardStatus(t *testing.T) string {
	t.Helper()
	return c.guardStatusAt(t, c.dir)
}

// guardStatusAt is `cri-guard status` of the cri-guard of the node whose
// directory is dir (its admin socket is a file: reachable from outside the
// node's network namespace).
func (c *cluster) guardStatusAt(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(c.dir, "bin", "cri-guard"), "status", "--admin",
		filepath.Join(dir, "cri-guard", "admin.sock")).CombinedOutput()
	if err != nil {
		t.Fatalf("cri-guard status: %v\n%s", err, out)
	}
	return string(out)
}

// restoreAPIConfigAtCleanup returns the path and content of the cluster's
// config-api.yaml and, at cleanup, puts them back: calm, cri-guard killed,
// the file restored, cri-guard's taint removed, cri-guard started again
// (CRI-only, as cluster.sh up leaves it).
func (c *cluster) restoreAPIConfigAtCleanup(t *testing.T) (string, []byte) {
	t.Helper()
	cfgPath := filepath.Join(c.dir, "cri-guard", "config-api.yaml")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.setAvailable(t, 12<<30)
		c.script(t, false, "kill-cri-guard")
		if err := os.WriteFile(cfgPath, orig, 0o644); err != nil {
			t.Error(err)
		}
		_, _ = c.kubectl("", "taint", "node", clusterNode, "cri-guard.io/memory-pressure-")
		c.script(t, false, "start-cri-guard")
	})
	return cfgPath, orig
}

// guardLogSinceStart is the cluster's cri-guard log after its last start's
// "serving" line (the log is appended to by every start).
func (c *cluster) guardLogSinceStart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "logs", "cri-guard.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i := strings.LastIndex(s, `msg=serving`); i >= 0 {
		s = s[i:]
	} else if i := strings.LastIndex(s, `msg="serving"`); i >= 0 {
		s = s[i:]
	}
	return s
}

// guardLogLinesSinceStart counts the lines of the cluster's cri-guard log
// since its last start that carry every one of subs.
func (c *cluster) guardLogLinesSinceStart(t *testing.T, subs ...string) int {
	t.Helper()
	n := 0
	for line := range strings.SplitSeq(c.guardLogSinceStart(t), "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// kPod is the part of a Pod object the tests read.
type kPod struct {
	Metadata struct {
		Name              string  `json:"name"`
		Namespace         string  `json:"namespace"`
		UID               string  `json:"uid"`
		ResourceVersion   string  `json:"resourceVersion"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		PriorityClassName string `json:"priorityClassName"`
		Priority          *int32 `json:"priority"`
		NodeName          string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Message    string `json:"message"`
		QOSClass   string `json:"qosClass"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string                     `json:"name"`
			Ready        bool                       `json:"ready"`
			RestartCount int                        `json:"restartCount"`
			ContainerID  string                     `json:"containerID"`
			State        map[string]json.RawMessage `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// condition returns the status of the pod condition typ, or "".
func (p kPod) condition(typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// running reports whether the pod runs and is ready, and says what it is otherwise.
func (p kPod) running() (bool, string) {
	ok := p.Status.Phase == "Running" && p.condition("Ready") == "True"
	return ok, fmt.Sprintf("%s/%s phase=%s ready=%s reason=%q message=%q", p.Metadata.Namespace, p.Metadata.Name,
		p.Status.Phase, p.condition("Ready"), p.Status.Reason, p.Status.Message)
}

// pods returns the pods of a namespace matching an optional label selector.
func (c *cluster) pods(t *testing.T, ns, selector string) []kPod {
	t.Helper()
	args := []string{"-n", ns, "get", "pods", "-o", "json"}
	if selector != "" {
		args = append(args, "-l", selector)
	}
	var list struct {
		Items []kPod `json:"items"`
	}
	if err := json.Unmarshal([]byte(c.must(t, args...)), &list); err != nil {
		t.Fatalf("decode pods of %s: %v", ns, err)
	}
	return list.Items
}

// pod returns one pod.
func (c *cluster) pod(t *testing.T, ns, name string) (kPod, error) {
	t.Helper()
	out, err := c.kubectl("", "-n", ns, "get", "pod", name, "-o", "json")
	if err != nil {
		return kPod{}, err
	}
	var p kPod
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return kPod{}, fmt.Errorf("decode pod %s/%s: %w", ns, name, err)
	}
	return p, nil
}

// waitRunning waits until every named pod of ns runs and is ready.
func (c *cluster) waitRunning(t *testing.T, ns string, timeout time.Duration, names ...string) {
	t.Helper()
	for _, n := range names {
		c.waitFor(t, "pod "+ns+"/"+n+" Running and Ready", timeout, func() (bool, string) {
			p, err := c.pod(t, ns, n)
			if err != nil {
				return false, err.Error()
			}
			return p.running()
		})
	}
}

// kEvent is the part of an Event the tests read.
type kEvent struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Count   int    `json:"count"`
	Source  struct {
		Component string `json:"component"`
	} `json:"source"`
	InvolvedObject struct {
		UID string `json:"uid"`
	} `json:"involvedObject"`
}

// events returns the events about one object.
func (c *cluster) events(t *testing.T, ns, name string) []kEvent {
	t.Helper()
	var list struct {
		Items []kEvent `json:"items"`
	}
	out := c.must(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decode events of %s/%s: %v", ns, name, err)
	}
	return list.Items
}

// findEvent returns the first event with reason whose message contains substr.
func findEvent(evs []kEvent, reason, substr string) (kEvent, error) {
	for _, e := range evs {
		if e.Reason == reason && strings.Contains(e.Message, substr) {
			return e, nil
		}
	}
	return kEvent{}, errors.New("no " + reason + " event containing " + fmt.Sprintf("%q", substr))
}

// nodeConditions returns the node's conditions, type to status.
func (c *cluster) nodeConditions(t *testing.T) map[string]string {
	t.Helper()
	var node struct {
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(c.must(t, "get", "node", clusterNode, "-o", "json")), &node); err != nil {
		t.Fatalf("decode node: %v", err)
	}
	m := map[string]string{}
	for _, cd := range node.Status.Conditions {
		m[cd.Type] = cd.Status
	}
	return m
}

// podManifest is a pod running podCommand; resources is a YAML flow mapping
// for the container's resources ("{}" for BestEffort); extra spec lines
// (indented by two spaces) may follow.
func podManifest(ns, name, resources, extraSpec string) string {
	return podManifestCmd(ns, name, resources, extraSpec, podCommand)
}

// podManifestCmd is podManifest with another shell command.
func podManifestCmd(ns, name, resources, extraSpec, command string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: %s}
spec:
  terminationGracePeriodSeconds: 5
  dnsPolicy: Default # the cluster has no DNS
%s  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '%s']
    resources: %s
`, name, ns, name, extraSpec, clusterImage, command, resources)
}

// deploymentManifest is a Deployment of BestEffort replicas running
// podCommand, labelled app=<name>.
func deploymentManifest(ns, name string, replicas int) string {
	return deploymentManifestSpec(ns, name, replicas, "")
}

// deploymentManifestSpec is deploymentManifest with extra pod spec lines
// (indented by six spaces).
func deploymentManifestSpec(ns, name string, replicas int, extraSpec string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s}
spec:
  replicas: %d
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      terminationGracePeriodSeconds: 5
      dnsPolicy: Default
%s      containers:
      - name: main
        image: %s
        imagePullPolicy: IfNotPresent
        command: [sh, -c, '%s']
`, name, ns, replicas, name, name, extraSpec, clusterImage, podCommand)
}

// criticalPod creates a system-node-critical pod in kube-system named
// critical-<ns> (no annotation), deletes it at cleanup, and returns its name.
func (c *cluster) criticalPod(t *testing.T, ns string) string {
	t.Helper()
	name := "critical-" + ns
	c.apply(t, podManifest("kube-system", name, "{}", "  priorityClassName: system-node-critical\n"))
	t.Cleanup(func() {
		if _, err := c.kubectl("", "-n", "kube-system", "delete", "pod", name, "--wait=true", "--timeout=60s"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return name
}
