// Package controller is cri-guard's cluster-side taint controller: it maps
// each Node's CriGuardMemoryPressure condition (written by cri-guard on the
// node, with the kubelet's own credentials) to the taint
// cri-guard.io/memory-pressure, as the node lifecycle controller maps the
// kubelet's MemoryPressure to node.kubernetes.io/memory-pressure. The taint
// then needs no identity on the nodes that may patch Nodes.
//
// It owns:
//   - the decision for one Node (Decide): tainted while the condition is
//     True and its heartbeat is fresher than Config.StaleAfter; a stale
//     condition counts as Unknown (a node whose cri-guard died does not stay
//     tainted), and is re-checked when it goes stale by a delayed requeue,
//     not by polling;
//   - the write: a JSON patch of spec.taints built from the informer's copy,
//     with a test of metadata.resourceVersion, touching the controller's own
//     taint only; a refused or failed patch is requeued with a rate-limited
//     back-off and never disables the controller;
//   - leader election on a Lease (RunElected): only the leader writes, every
//     replica keeps a synced cache so that a new leader starts at once;
//   - its Prometheus series (cri_guard_controller_*) on a registry of its own.
//
// It reads Nodes through a shared informer only (list and watch, never a
// GET per node). It imports kube for the condition type only; it must not
// import the daemon's packages (server, guard, evictor, cmd): it runs in
// the cluster, not on the node.
package controller
