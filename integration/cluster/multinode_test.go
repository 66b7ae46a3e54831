//go:build integration

package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// The TestClusterMultiNode* tests run on a cluster of several nodes
// (CRI_GUARD_CLUSTER_NODES=3 scripts/cluster.sh up): each node a kubelet
// and a cri-guard connected to the API server, nodes 2 and up each in
// network and mount namespaces of their own with a containerd of their own.
// They show what users see with more than one node: the taint of the
// pressured node sends the replacements of its evicted pods to the others.

// needMultiNode returns the cluster if it has at least n nodes, or skips.
func needMultiNode(t *testing.T, n int) *cluster {
	t.Helper()
	c := lookupCluster(t)
	if len(c.nodes) < n {
		t.Skipf("cluster: %d node(s), this test needs %d: CRI_GUARD_CLUSTER_NODES=%d scripts/cluster.sh up", len(c.nodes), n, n)
	}
	return c
}

// spreadDeploymentManifest is a Deployment of BestEffort replicas running
// podCommand, labelled app=<name>, spread over the nodes at most one apart
// (DoNotSchedule) among the nodes whose taints the pod tolerates
// (nodeTaintsPolicy Honor): three replicas on three nodes run one on each,
// and while a node is tainted its replicas' replacements may go to the
// others without breaking the spread.
func spreadDeploymentManifest(ns, name string, replicas int) string {
	return deploymentManifestSpec(ns, name, replicas, fmt.Sprintf(`      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: %s}}
`, name))
}

// runningReplicas is the replicas that run and are ready, by pod name to
// node; every pod of the selector is returned in all.
func (c *cluster) runningReplicas(t *testing.T, ns, selector string) (running map[string]string, all []kPod) {
	t.Helper()
	all = c.pods(t, ns, selector)
	running = map[string]string{}
	for _, p := range all {
		if ok, _ := p.running(); ok {
			running[p.Metadata.Name] = p.Spec.NodeName
		}
	}
	return running, all
}

// spreadDeployment creates spreadDeploymentManifest's Deployment and waits
// for its replicas to run one on each node; it returns them by pod name to
// node.
func (c *cluster) spreadDeployment(t *testing.T, ns, app string, replicas int) map[string]string {
	t.Helper()
	c.apply(t, spreadDeploymentManifest(ns, app, replicas))
	var running map[string]string
	c.waitFor(t, fmt.Sprintf("%d replicas running, one on each node", replicas), 3*time.Minute, func() (bool, string) {
		running, _ = c.runningReplicas(t, ns, "app="+app)
		on := map[string]bool{}
		for _, n := range running {
			on[n] = true
		}
		return len(running) == replicas && len(on) == replicas, podsByNode(running)
	})
	return running
}

// podsByNode is "node: pod, pod; node: pod" of a pod-to-node map.
func podsByNode(m map[string]string) string {
	by := map[string][]string{}
	for p, n := range m {
		by[n] = append(by[n], p)
	}
	var parts []string
	for n, ps := range by {
		sort.Strings(ps)
		parts = append(parts, n+": "+strings.Join(ps, ", "))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// event is the watch's event i.
func (w *nodeWatch) event(i int) nodeEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines[i]
}

// median of durations (the lower middle one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// TestClusterMultiNodeEviction: three nodes, the taint controller of
// contrib/controller/ (two replicas, leader election), a 3-replica
// BestEffort Deployment spread one replica per node. Ten episodes, each on
// the next node in turn: memory pressure on that node alone (its fake
// stats) until
//
//   - its cri-guard reports CriGuardMemoryPressure True and the controller
//     taints that Node;
//   - each replica that ran there ends Failed with reason Evicted;
//   - the ReplicaSet's replacements are scheduled to the other nodes and
//     run: three replicas Running and Ready again, none on the tainted node;
//
// then calm, and after cri-guard's transition period (10 s) the condition
// False and the taint gone. No pod but the evicted replicas is ever Failed
// (a replacement sent to the tainted node would be refused there and end
// Failed), as a watch of every pod version shows. Condition True -> taint
// on the Node, both seen on one watch of the Node, is logged per episode
// with its median and max, and the max is bounded.
func TestClusterMultiNodeEviction(t *testing.T) {
	c := needMultiNode(t, 3)
	nodes := c.nodes[:3]
	c.waitGuardsSynced(t, nodes)
	t.Logf("$ kubectl get nodes -o wide\n%s", c.must(t, "get", "nodes", "-o", "wide"))

	replicas := c.deployController(t)
	t.Logf("controller replicas %+v\n$ kubectl -n kube-system get pods -o wide\n%s", replicas,
		c.must(t, "-n", "kube-system", "get", "pods", "-o", "wide", "-l", "app.kubernetes.io/name=cri-guard-controller"))

	watches := map[string]*nodeWatch{}
	for _, n := range nodes {
		watches[n.name] = c.watchNodeNamed(t, n.name)
	}
	ns := c.namespace(t, "cg-multi")
	pw := c.watchPods(t, ns)
	const app, selector, want = "web", "app=web", 3
	running := c.spreadDeployment(t, ns, app, want)
	t.Logf("the replicas: %s", podsByNode(running))

	// calm first at cleanup, while the controller still runs and untaints
	t.Cleanup(func() {
		for _, n := range nodes {
			setAvailableAt(t, n.dir, 12<<30)
		}
	})
	evicted := map[string]string{} // pod -> the node it was evicted from
	var ons, offs []time.Duration
	const episodes = 10
	for i := range episodes {
		target := nodes[i%len(nodes)]
		var before map[string]string
		c.waitFor(t, "3 replicas running before the episode", 2*time.Minute, func() (bool, string) {
			before, _ = c.runningReplicas(t, ns, selector)
			return len(before) == want, podsByNode(before)
		})
		var victims []string
		for p, n := range before {
			if n == target.name {
				victims = append(victims, p)
			}
		}
		sort.Strings(victims)
		var after map[string]string
		on, off := c.episodeAt(t, watches[target.name], target.dir, func() {
			for _, v := range victims {
				c.waitFor(t, v+" Failed/Evicted", 2*time.Minute, func() (bool, string) {
					p, err := c.pod(t, ns, v)
					if err != nil {
						return false, err.Error()
					}
					return p.Status.Phase == "Failed" && p.Status.Reason == "Evicted", fmt.Sprintf("%+v", p.Status)
				})
				evicted[v] = target.name
			}
			c.waitFor(t, "3 replicas running, none on "+target.name, 3*time.Minute, func() (bool, string) {
				after, _ = c.runningReplicas(t, ns, selector)
				for _, n := range after {
					if n == target.name {
						return false, podsByNode(after)
					}
				}
				return len(after) == want, podsByNode(after)
			})
		})
		ons, offs = append(ons, on), append(offs, off)
		var replacements []string
		for p, n := range after {
			if _, ok := before[p]; !ok {
				replacements = append(replacements, p+" on "+n)
			}
		}
		sort.Strings(replacements)
		t.Logf("episode %d on %s: evicted %v; replacements %v; condition True -> taint %v, False -> untaint %v",
			i+1, target.name, victims, replacements, on.Round(time.Millisecond), off.Round(time.Millisecond))
		if len(victims) != len(replacements) {
			t.Errorf("episode %d: %d evicted, %d replacements running", i+1, len(victims), len(replacements))
		}
	}
	if len(evicted) == 0 {
		t.Fatal("no replica was evicted in any episode")
	}

	// Every version of every pod the watch saw: no pod but the evicted
	// replicas was Failed, unless it was being deleted (the ReplicaSet
	// deletes a surplus replica it made) and not refused by a node. A
	// replacement sent to a tainted node would be refused there: Failed,
	// "Pod was rejected: ...", not deleted.
	versions, err := pw.stop()
	if err != nil {
		t.Errorf("pod watch: %v", err)
	}
	history := map[string][]string{}
	failed := map[string]kPod{}
	for _, v := range versions {
		p := v.pod
		history[p.Metadata.Name] = append(history[p.Metadata.Name], fmt.Sprintf("%s %s node=%s phase=%s reason=%q message=%q deleting=%v",
			v.at.Format("15:04:05.000"), v.typ, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Metadata.DeletionTimestamp != nil))
		if p.Status.Phase == "Failed" {
			if f, ok := failed[p.Metadata.Name]; !ok || f.Metadata.DeletionTimestamp == nil {
				failed[p.Metadata.Name] = p
			}
		}
	}
	deletedFailed := 0
	for name, p := range failed {
		if _, ok := evicted[name]; ok {
			continue
		}
		rejected := strings.Contains(p.Status.Message, "rejected")
		if p.Metadata.DeletionTimestamp != nil && !rejected {
			deletedFailed++
			t.Logf("pod %s (not evicted) Failed while deleted:\n  %s", name, strings.Join(history[name], "\n  "))
			continue
		}
		t.Errorf("pod %s on %s Failed (reason %q, message %q): only the evicted replicas may fail:\n  %s",
			name, p.Spec.NodeName, p.Status.Reason, p.Status.Message, strings.Join(history[name], "\n  "))
	}
	t.Logf("%d pod versions watched; %d pods Failed: %d evicted replicas, %d deleted by their ReplicaSet", len(versions), len(failed), len(evicted), deletedFailed)
	// What the evicted pods read at the end, logged: a status sync of the
	// kubelet's replaces cri-guard's reason and message every 10 s and
	// cri-guard writes them again, but not without end (seen on this
	// cluster: a pod left Failed with neither); and a Failed pod of a
	// ReplicaSet may be deleted. Each was seen Failed/Evicted in its
	// episode.
	var gone, unreported []string
	for name := range evicted {
		out, err := c.kubectl("", "-n", ns, "get", "pod", name, "--ignore-not-found", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var p kPod
		switch {
		case strings.TrimSpace(out) == "":
			gone = append(gone, name)
		case json.Unmarshal([]byte(out), &p) != nil:
			t.Fatalf("pod %s: %s", name, out)
		case p.Status.Phase != "Failed" || p.Status.Reason != "Evicted":
			unreported = append(unreported, name)
			t.Logf("evicted pod %s at the end: phase %s, reason %q:\n  %s", name, p.Status.Phase, p.Status.Reason, strings.Join(history[name], "\n  "))
		}
	}
	t.Logf("the %d evicted pods at the end: %d deleted %v, %d without cri-guard's reason %v, the others Failed/Evicted",
		len(evicted), len(gone), gone, len(unreported), unreported)
	for _, n := range nodes {
		if taints := c.must(t, "get", "node", n.name, "-o", "jsonpath={.spec.taints[*].key}"); strings.Contains(taints, "cri-guard.io/memory-pressure") {
			t.Errorf("node %s still tainted after the calm: %s", n.name, taints)
		}
	}
	t.Logf("$ kubectl get pods -o wide\n%s", c.must(t, "-n", ns, "get", "pods", "-o", "wide"))

	// Both ends are seen on one watch of the Node: the controller's time
	// from the condition to the taint, not the test's polling. The bound
	// is generous (the fleet benchmark saw 25 ms at most on 80 nodes): it
	// catches a controller that taints only on a resync, or not at once.
	const bound = 10 * time.Second
	t.Logf("condition True -> taint on the Node, %d episodes: median %v, max %v; all %v",
		len(ons), median(ons).Round(time.Millisecond), slices.Max(ons).Round(time.Millisecond), ons)
	t.Logf("condition False -> taint removed, %d episodes: median %v, max %v; all %v",
		len(offs), median(offs).Round(time.Millisecond), slices.Max(offs).Round(time.Millisecond), offs)
	if m := slices.Max(ons); m > bound {
		t.Errorf("condition True -> taint: max %v over %d episodes, want at most %v", m, len(ons), bound)
	}
	if m := slices.Max(offs); m > bound {
		t.Errorf("condition False -> taint removed: max %v over %d episodes, want at most %v", m, len(offs), bound)
	}
}

// TestClusterMultiNodeStaleHeartbeat: a node's cri-guard is SIGKILLed while
// its CriGuardMemoryPressure is True. Nothing rewrites the condition any
// more and its heartbeat ages; the controller, run with --stale-after=30s
// over heartbeats of 10 s (the node's cri-guard with
// kubernetes.nodeStatusHeartbeat: 10s), takes the taint off that node once
// the heartbeat it last saw is 30 s old: not before (the condition is True
// throughout, only old), and not much after (a delayed recheck, no resync
// needed). Started again under the same pressure, cri-guard writes a fresh
// condition and the node is tainted again; after the calm the taint goes.
// Another node is never tainted.
func TestClusterMultiNodeStaleHeartbeat(t *testing.T) {
	c := needMultiNode(t, 3)
	target, other := c.nodes[1], c.nodes[2]
	num := strconv.Itoa(target.num)
	cfgPath := filepath.Join(target.dir, "cri-guard", "config-api.yaml")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const heartbeat, staleAfter = 10 * time.Second, 30 * time.Second
	s := strings.Replace(string(orig), "nodeName: "+target.name+"}",
		fmt.Sprintf("nodeName: %s, nodeStatusHeartbeat: %s}", target.name, heartbeat), 1)
	if s == string(orig) {
		t.Fatalf("%s: no kubernetes line naming %s:\n%s", cfgPath, target.name, orig)
	}
	t.Cleanup(func() {
		setAvailableAt(t, target.dir, 12<<30)
		c.script(t, false, "node", num, "kill-cri-guard")
		if err := os.WriteFile(cfgPath, orig, 0o644); err != nil {
			t.Error(err)
		}
		c.script(t, false, "node", num, "start-cri-guard", "api")
	})
	harness.WriteAtomic(t, cfgPath, s)
	c.script(t, false, "node", num, "kill-cri-guard")
	c.script(t, false, "node", num, "start-cri-guard", "api")
	c.waitGuardsSynced(t, []clusterNodeInfo{target})
	c.deployController(t, fmt.Sprintf("--stale-after=%s", staleAfter))

	w, wo := c.watchNodeNamed(t, target.name), c.watchNodeNamed(t, other.name)
	from := w.len()
	setAvailableAt(t, target.dir, 500<<20)
	i, condTrue := w.first(t, c, "CriGuardMemoryPressure True", from, func(e nodeEvent) bool { return e.condition == "True" })
	i, taintAt := w.first(t, c, "the taint set", i, tainted)
	// a heartbeat or two, so that the one the controller last saw is one
	// cri-guard rewrote unchanged
	time.Sleep(heartbeat + heartbeat/2)
	hbOut := c.must(t, "get", "node", target.name, "-o", `jsonpath={.status.conditions[?(@.type=="CriGuardMemoryPressure")].lastHeartbeatTime}`)
	killed := time.Now()
	c.script(t, false, "node", num, "kill-cri-guard")
	hb, err := time.Parse(time.RFC3339, strings.TrimSpace(hbOut))
	if err != nil {
		t.Fatalf("lastHeartbeatTime %q: %v", hbOut, err)
	}
	// the last heartbeat is read again once cri-guard is gone: one written
	// between the read and the kill counts
	if again := c.must(t, "get", "node", target.name, "-o", `jsonpath={.status.conditions[?(@.type=="CriGuardMemoryPressure")].lastHeartbeatTime}`); strings.TrimSpace(again) != strings.TrimSpace(hbOut) {
		if hb, err = time.Parse(time.RFC3339, strings.TrimSpace(again)); err != nil {
			t.Fatalf("lastHeartbeatTime %q: %v", again, err)
		}
	}
	j, untaintAt := w.first(t, c, "the taint removed, the condition stale", i, func(e nodeEvent) bool { return !tainted(e) })
	if e := w.event(j); e.condition != "True" {
		t.Errorf("untainted with the condition %q: want it still True (only stale)", e.condition)
	}
	staleAt := hb.Add(staleAfter)
	// lastHeartbeatTime has whole seconds: the controller's staleAt is
	// the same value, the test's clock may be up to a second past it
	if untaintAt.Before(staleAt.Add(-time.Second)) {
		t.Errorf("untainted at %s, before the heartbeat %s was %v old", untaintAt.Format(time.RFC3339Nano), hb.Format(time.RFC3339), staleAfter)
	}
	if late := untaintAt.Sub(staleAt); late > 10*time.Second {
		t.Errorf("untainted %v after the heartbeat went stale, want within 10s", late)
	}
	t.Logf("condition True -> taint %v; SIGKILL of cri-guard on %s %v after its last heartbeat (%s); untainted %v after the kill, %v after the heartbeat went stale (--stale-after=%v)",
		taintAt.Sub(condTrue).Round(time.Millisecond), target.name, killed.Sub(hb).Round(time.Second), hb.Format(time.RFC3339),
		untaintAt.Sub(killed).Round(time.Millisecond), untaintAt.Sub(staleAt).Round(time.Millisecond), staleAfter)

	// cri-guard again, the pressure unchanged: a fresh condition, the taint back
	restarted := time.Now()
	c.script(t, false, "node", num, "start-cri-guard", "api")
	j, retaint := w.first(t, c, "the taint set again", j, tainted)
	setAvailableAt(t, target.dir, 12<<30)
	j, condFalse := w.first(t, c, "CriGuardMemoryPressure False", j, func(e nodeEvent) bool { return e.condition == "False" })
	_, gone := w.first(t, c, "the taint removed", j, func(e nodeEvent) bool { return !tainted(e) })
	t.Logf("cri-guard started again: tainted %v later; calm: condition False -> taint removed %v",
		retaint.Sub(restarted).Round(time.Millisecond), gone.Sub(condFalse).Round(time.Millisecond))

	wo.mu.Lock()
	defer wo.mu.Unlock()
	for _, e := range wo.lines {
		if tainted(e) || e.condition == "True" {
			t.Errorf("%s (no pressure) at %s: condition %q, taints %q", other.name, e.at.Format(time.RFC3339Nano), e.condition, e.taints)
		}
	}
}
