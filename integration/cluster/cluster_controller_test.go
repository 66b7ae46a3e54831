//go:build integration

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// controllerRegistry is rt.sh's registry (REG): the harness containerd's
// mirror of docker.io (certs.d), so an image pushed there as library/X is
// what the kubelet pulls as X, as the harness's test images reach it.
const controllerRegistry = "127.0.0.1:5088"

// controllerImageRef is the image contrib/controller/03-deployment.yaml
// names (cri-guard-controller:dev), as containerd resolves it.
const controllerImageRef = "docker.io/library/cri-guard-controller:dev"

const controllerLease = "cri-guard-controller"

// controllerReplica is one running controller pod.
type controllerReplica struct {
	pod      string
	identity string // its Lease holder identity
	metrics  string // host:port of /metrics, /healthz, /readyz
}

// deployController builds cri-guard-controller from this checkout, pushes
// its image to the harness registry, applies contrib/controller/ (the
// Deployment patched for this cluster only, see controllerDeployment) and
// waits for both replicas to run; at cleanup it deletes all of it, the
// Lease, the image and the taint. Each of args ("--flag=value") replaces
// the shipped Deployment's argument of that flag.
func (c *cluster) deployController(t *testing.T, args ...string) []controllerReplica {
	t.Helper()
	dir := t.TempDir()
	root := harness.Path(t, ".")
	bin := filepath.Join(dir, "cri-guard-controller")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/cri-guard-controller")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cri-guard-controller: %v\n%s", err, out)
	}
	// tools/mkimages is a module of its own
	mk := exec.Command("go", "run", ".", "-out", dir, "-controller", bin, "-controller-name", controllerImageRef, "-push", controllerRegistry)
	mk.Dir = filepath.Join(root, "tools", "mkimages")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("mkimages -controller: %v\n%s", err, out)
	}
	// an image of an earlier run under the same name would be used as it
	// is (IfNotPresent): this run's is pulled
	for _, n := range c.nodes {
		_, _ = c.rt.CrictlErr(c.nodeContainerd(n), "rmi", controllerImageRef)
	}

	var manifests []string
	for _, f := range []string{"01-admission-policy.yaml", "02-rbac.yaml", "03-deployment.yaml"} {
		b, err := os.ReadFile(harness.Path(t, "contrib/controller/"+f))
		if err != nil {
			t.Fatal(err)
		}
		m := string(b)
		if f == "03-deployment.yaml" {
			host, port := c.apiServer(t)
			m = controllerDeployment(t, b, host, port, args...)
		}
		manifests = append(manifests, m)
	}
	t.Cleanup(func() {
		for i := len(manifests) - 1; i >= 0; i-- {
			if _, err := c.kubectl(manifests[i], "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		_, _ = c.kubectl("", "-n", "kube-system", "delete", "lease", controllerLease, "--ignore-not-found")
		for _, n := range c.nodes {
			_, _ = c.kubectl("", "taint", "node", n.name, "cri-guard.io/memory-pressure-")
			_, _ = c.rt.CrictlErr(c.nodeContainerd(n), "rmi", controllerImageRef)
		}
	})
	for _, m := range manifests {
		c.apply(t, m)
	}
	if out, err := c.kubectl("", "-n", "kube-system", "rollout", "status", "deployment/cri-guard-controller", "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s\npods:\n%s", err, out, c.must(t, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=cri-guard-controller", "-o", "wide"))
	}
	return c.controllerReplicas(t, 2)
}

// controllerDeployment is the shipped Deployment with what this cluster
// needs and production does not: the API server listens on one address
// only (127.0.0.1; the nodes' network with several nodes) and no
// kube-proxy serves the kubernetes Service, so the pods share the host's
// network (their node's) and are pointed at apiHost:apiPort; two replicas
// on one host network cannot share the metrics port, so each listens on a
// port of its own (127.0.0.1:0, read from its log) and the probes, which
// need a fixed one, go. Everything else (RBAC, policy, tolerations,
// priority, security context, two replicas, leader election) is as shipped,
// but for the arguments that overrides ("--flag=value") replace.
func controllerDeployment(t *testing.T, shipped []byte, apiHost, apiPort string, overrides ...string) string {
	t.Helper()
	var d map[string]any
	if err := yaml.Unmarshal(shipped, &d); err != nil {
		t.Fatalf("03-deployment.yaml: %v", err)
	}
	pod := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	pod["hostNetwork"] = true
	ctr := pod["containers"].([]any)[0].(map[string]any)
	var args []any
	found := false
	replaced := map[string]bool{}
	for _, a := range ctr["args"].([]any) {
		s, _ := a.(string)
		if strings.HasPrefix(s, "--metrics-address=") {
			a, found = "--metrics-address=127.0.0.1:0", true
		}
		for _, o := range overrides {
			if flag, _, _ := strings.Cut(o, "="); strings.HasPrefix(s, flag+"=") {
				a, replaced[o] = o, true
			}
		}
		args = append(args, a)
	}
	if !found {
		t.Fatal("03-deployment.yaml: no --metrics-address argument")
	}
	for _, o := range overrides {
		if !replaced[o] {
			t.Fatalf("03-deployment.yaml: no argument for %s to replace", o)
		}
	}
	ctr["args"] = args
	ctr["env"] = []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": apiHost},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort},
	}
	delete(ctr, "ports")
	delete(ctr, "livenessProbe")
	delete(ctr, "readinessProbe")
	b, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// controllerReplicas waits for n running controller pods that have logged
// their start, and returns them.
func (c *cluster) controllerReplicas(t *testing.T, n int) []controllerReplica {
	t.Helper()
	var out []controllerReplica
	c.waitFor(t, fmt.Sprintf("%d controller replicas started", n), 2*time.Minute, func() (bool, string) {
		out = nil
		var seen []string
		for _, p := range c.pods(t, "kube-system", "app.kubernetes.io/name=cri-guard-controller") {
			ok, why := p.running()
			seen = append(seen, why)
			if !ok {
				continue
			}
			logs, err := c.kubectl("", "-n", "kube-system", "logs", p.Metadata.Name)
			if err != nil {
				continue
			}
			out = append(out, startedReplicas(p.Metadata.Name, logs)...)
		}
		return len(out) == n, fmt.Sprintf("started %+v; pods %q", out, seen)
	})
	return out
}

// follower is the replica of two that is not leading.
func follower(replicas []controllerReplica, leader controllerReplica) controllerReplica {
	for _, r := range replicas {
		if r != leader {
			return r
		}
	}
	return controllerReplica{}
}

// controllerReplicaOf waits for the running controller pod whose start
// logged identity, and returns it.
func (c *cluster) controllerReplicaOf(t *testing.T, identity string) controllerReplica {
	t.Helper()
	var found controllerReplica
	c.waitFor(t, "the controller pod of "+identity, time.Minute, func() (bool, string) {
		var seen []string
		for _, p := range c.pods(t, "kube-system", "app.kubernetes.io/name=cri-guard-controller") {
			logs, err := c.kubectl("", "-n", "kube-system", "logs", p.Metadata.Name)
			if err != nil {
				seen = append(seen, p.Metadata.Name+": "+err.Error())
				continue
			}
			for _, r := range startedReplicas(p.Metadata.Name, logs) {
				seen = append(seen, r.identity)
				if r.identity == identity {
					found = r
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("started %q", seen)
	})
	return found
}

// startedReplicas is the replica a pod's log says started (its json
// "cri-guard-controller started" line: none yet, or one per container
// start).
func startedReplicas(pod, logs string) []controllerReplica {
	var out []controllerReplica
	for _, l := range strings.Split(logs, "\n") {
		var e struct {
			Msg      string `json:"msg"`
			Identity string `json:"identity"`
			Metrics  string `json:"metrics_address"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "cri-guard-controller started" {
			out = append(out, controllerReplica{pod: pod, identity: e.Identity, metrics: e.Metrics})
		}
	}
	return out
}

// leaseHolder is the controller Lease's holder identity ("" if none).
func (c *cluster) leaseHolder(t *testing.T) string {
	t.Helper()
	out, _ := c.kubectl("", "-n", "kube-system", "get", "lease", controllerLease, "-o", "jsonpath={.spec.holderIdentity}")
	return strings.TrimSpace(out)
}

// controllerGet is an HTTP GET of a replica's metrics listener.
func controllerGet(r controllerReplica, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.metrics+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue is the value of an unlabelled series in a /metrics page
// ("" when absent).
func metricValue(page, name string) string {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// nodeWatch streams the Node's changes: each line is the time it arrived
// and the CriGuardMemoryPressure status and taint keys then. Both come by
// the same watch, so their difference is what the controller took, not
// the test's polling.
type nodeWatch struct {
	mu    sync.Mutex
	lines []nodeEvent
	cmd   *exec.Cmd
}

type nodeEvent struct {
	at        time.Time
	condition string
	taints    string
}

func (c *cluster) watchNode(t *testing.T) *nodeWatch {
	t.Helper()
	return c.watchNodeNamed(t, clusterNode)
}

// watchNodeNamed is watchNode of the Node name.
func (c *cluster) watchNodeNamed(t *testing.T, name string) *nodeWatch {
	t.Helper()
	tmpl := `jsonpath={.metadata.resourceVersion}{"|"}{.status.conditions[?(@.type=="CriGuardMemoryPressure")].status}{"|"}{.spec.taints[*].key}{"\n"}`
	cmd := exec.Command(c.kubectlBin, "--kubeconfig", c.kubeconfig, "get", "node", name, "--watch", "-o", tmpl)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &nodeWatch{cmd: cmd}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			parts := strings.SplitN(sc.Text(), "|", 3)
			if len(parts) != 3 {
				continue
			}
			w.mu.Lock()
			w.lines = append(w.lines, nodeEvent{at: time.Now(), condition: parts[1], taints: parts[2]})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return w
}

// first waits for the first event from index from on that matches, and
// returns its index and time.
func (w *nodeWatch) first(t *testing.T, c *cluster, what string, from int, match func(nodeEvent) bool) (int, time.Time) {
	t.Helper()
	var i int
	var at time.Time
	c.waitFor(t, what, 2*time.Minute, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i = from; i < len(w.lines); i++ {
			if match(w.lines[i]) {
				at = w.lines[i].at
				return true, ""
			}
		}
		if len(w.lines) == 0 {
			return false, "no watch event yet"
		}
		return false, fmt.Sprintf("last: %+v", w.lines[len(w.lines)-1])
	})
	return i, at
}

func (w *nodeWatch) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lines)
}

func tainted(e nodeEvent) bool { return strings.Contains(e.taints, "cri-guard.io/memory-pressure") }

// episode puts the node under pressure and takes it off again; it returns
// how long the controller took from the condition True to the taint, and
// from the condition False to the taint gone, as the watch saw them.
func (c *cluster) episode(t *testing.T, w *nodeWatch, during func()) (on, off time.Duration) {
	t.Helper()
	return c.episodeAt(t, w, c.dir, during)
}

// episodeAt is episode on the node whose directory is dir (its stats
// tree), watched by w.
func (c *cluster) episodeAt(t *testing.T, w *nodeWatch, dir string, during func()) (on, off time.Duration) {
	t.Helper()
	from := w.len()
	setAvailableAt(t, dir, 500<<20)
	i, condTrue := w.first(t, c, "CriGuardMemoryPressure True", from, func(e nodeEvent) bool { return e.condition == "True" })
	_, taint := w.first(t, c, "the taint set", i, tainted)
	if during != nil {
		during()
	}
	setAvailableAt(t, dir, 12<<30)
	i, condFalse := w.first(t, c, "CriGuardMemoryPressure False", i, func(e nodeEvent) bool { return e.condition == "False" })
	_, gone := w.first(t, c, "the taint removed", i, func(e nodeEvent) bool { return !tainted(e) })
	return taint.Sub(condTrue), gone.Sub(condFalse)
}

// TestClusterController: the taint controller of contrib/controller/ runs
// in the cluster, from an image built from this checkout, two replicas
// under leader election, while cri-guard on the node writes only its
// condition with the node's own credentials:
//
//   - pressure on the node: cri-guard's CriGuardMemoryPressure True, the
//     leading replica taints the Node; a BestEffort pod created then waits
//     Pending (FailedScheduling for the taint), never Failed; the pressure
//     over, the taint goes and the pod runs;
//   - the leader's pod deleted: another replica (the follower, or the pod
//     that replaces the deleted one) takes the Lease, and reconciles the
//     next episodes (its own applied counter moves);
//   - the node's identity may not taint another Node, nor its own (server
//     side dry runs of the write itself, refused by NodeRestriction);
//   - the condition-to-taint latency over the episodes is logged, not
//     asserted.
func TestClusterController(t *testing.T) {
	c := needCluster(t)
	cfgPath, orig := c.restoreAPIConfigAtCleanup(t)
	// the CRI-only config's transition period: each episode's calm is 10 s
	// rather than a minute
	s := strings.Replace(string(orig), "evictionPressureTransitionPeriod: 60s", "evictionPressureTransitionPeriod: 10s", 1)
	if s == string(orig) {
		t.Fatalf("config-api.yaml has no 60s transition period:\n%s", orig)
	}
	harness.WriteAtomic(t, cfgPath, s)
	c.script(t, false, "kill-cri-guard")
	c.script(t, false, "start-cri-guard", "api")

	replicas := c.deployController(t)
	byIdentity := map[string]controllerReplica{}
	for _, r := range replicas {
		byIdentity[r.identity] = r
		for _, p := range []string{"/healthz", "/readyz"} {
			c.waitFor(t, r.pod+" "+p, time.Minute, func() (bool, string) {
				code, body, err := controllerGet(r, p)
				return err == nil && code == http.StatusOK, fmt.Sprint(code, body, err)
			})
		}
	}
	var leader controllerReplica
	c.waitFor(t, "a replica leading", time.Minute, func() (bool, string) {
		h := c.leaseHolder(t)
		var ok bool
		leader, ok = byIdentity[h]
		return ok, "holder " + h
	})
	for _, r := range replicas {
		_, page, err := controllerGet(r, "/metrics")
		want := "0"
		if r == leader {
			want = "1"
		}
		if err != nil || metricValue(page, "cri_guard_controller_leader") != want {
			t.Errorf("%s: cri_guard_controller_leader %q (%v), want %s", r.pod, metricValue(page, "cri_guard_controller_leader"), err, want)
		}
	}
	t.Logf("replicas %+v; leader %s", replicas, leader.pod)

	w := c.watchNode(t)
	ns := c.namespace(t, "cg-ctl")
	var ons, offs []time.Duration
	on, off := c.episode(t, w, func() {
		c.apply(t, podManifest(ns, "waiter", "{}", ""))
		c.waitFor(t, "the waiter unschedulable for the taint", time.Minute, func() (bool, string) {
			var seen []string
			for _, e := range c.events(t, ns, "waiter") {
				seen = append(seen, e.Reason+": "+e.Message)
				if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "taint") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("events %q", seen)
		})
		if p, err := c.pod(t, ns, "waiter"); err != nil || p.Status.Phase != "Pending" {
			t.Fatalf("waiter %+v, %v: want Pending under the taint", p.Status, err)
		}
	})
	ons, offs = append(ons, on), append(offs, off)
	c.waitRunning(t, ns, 2*time.Minute, "waiter")

	// The leader's pod goes; another replica takes the Lease: the one
	// that was following, or the pod the Deployment starts in its place
	// (it campaigns as soon as it starts, the follower every retry
	// period: either may win), and reconciles the next episodes.
	deleted := time.Now()
	c.must(t, "-n", "kube-system", "delete", "pod", leader.pod, "--wait=false")
	var next string
	c.waitFor(t, "the Lease taken by another replica", 2*time.Minute, func() (bool, string) {
		next = c.leaseHolder(t)
		return next != "" && next != leader.identity, "holder " + next
	})
	failover := time.Since(deleted)
	newLeader := c.controllerReplicaOf(t, next)
	t.Logf("leader pod deleted to the Lease held by %s (the follower: %v): %.1fs", newLeader.pod, newLeader.identity == follower(replicas, leader).identity, failover.Seconds())
	_, page, err := controllerGet(newLeader, "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", newLeader.pod, err)
	}
	appliedBefore := metricValue(page, "cri_guard_controller_taints_applied_total")
	for range 4 {
		on, off := c.episode(t, w, nil)
		ons, offs = append(ons, on), append(offs, off)
	}
	_, page, err = controllerGet(newLeader, "/metrics")
	if err != nil || metricValue(page, "cri_guard_controller_leader") != "1" || metricValue(page, "cri_guard_controller_taints_applied_total") == appliedBefore {
		t.Errorf("new leader %s: leader %q, taints applied %q (before %q), %v: want it leading and tainting",
			newLeader.pod, metricValue(page, "cri_guard_controller_leader"), metricValue(page, "cri_guard_controller_taints_applied_total"), appliedBefore, err)
	}

	// The node's own identity (cri-guard's: the kubelet's credentials).
	other := "cg-other-node"
	c.apply(t, fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: %s}\nspec:\n  unschedulable: true\n", other))
	t.Cleanup(func() { _, _ = c.kubectl("", "delete", "node", other, "--ignore-not-found") })
	asNode := []string{"--as", "system:node:" + clusterNode, "--as-group", "system:nodes"}
	// The Node authorizer answers yes to a node's write of any Node and
	// leaves the name to NodeRestriction, which `auth can-i` (authorization
	// only) does not run: the answer is logged, the writes are tried.
	canI, err := c.kubectl("", append([]string{"auth", "can-i", "update", "nodes/" + other}, asNode...)...)
	t.Logf("kubectl auth can-i update nodes/%s --as system:node:%s --as-group system:nodes: %s (%v)", other, clusterNode, strings.TrimSpace(canI), err)
	for _, w := range []struct{ node, want string }{
		{other, `is not allowed to modify node "` + other + `"`},
		{clusterNode, "is not allowed to modify taints"},
	} {
		err := c.putTaintDryRun(t, w.node, c.kubeconfig, asNode...)
		if err == nil || !strings.Contains(err.Error(), w.want) {
			t.Errorf("the taint on %s by the node's identity: %v, want refused with %q", w.node, err, w.want)
		} else {
			t.Logf("the taint on %s by the node's identity: %v", w.node, err)
		}
	}

	t.Logf("condition True -> taint set, per episode: %v", ons)
	t.Logf("condition False -> taint removed, per episode: %v", offs)
}
