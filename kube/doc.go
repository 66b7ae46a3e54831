// Package kube is cri-guard's optional connection to the API server, with
// the node's own credentials (the kubelet's kubeconfig: the Node authorizer
// and NodeRestriction let a node read the pods bound to it, update their
// status, create events and update its own Node status).
//
// It owns:
//   - a cache of the pods bound to this node (an informer, indexed by UID,
//     the key CRI carries), read with Pod: what CRI never carries (priority,
//     memory requests, terminationGracePeriodSeconds, the memory-pressure
//     toleration, mirror pods), derived as the kubelet derives it;
//   - the view of each cached pod cri-guard reads (APIOf), derived once per
//     informer change, not per lookup;
//   - the reports of cri-guard's decisions, as the kubelet makes them: a
//     refused pod's status as rejectPod writes it (phase Failed, "Pod was
//     rejected: ..."), an evicted pod's as evictPod does (phase Failed,
//     reason Evicted, the message, DisruptionTarget), each with a Warning
//     event of cri-guard's own (source component cri-guard, the kubelet's
//     reasons); a node condition of its own (CriGuardMemoryPressure), which
//     follows the eviction manager's view (SetNodePressure), its
//     transition time moved only by a change of status, written at once
//     on a change and otherwise every Config.Heartbeat (5 min, the
//     kubelet's node status period, with jitter);
//   - a cache of this node's own Node (an informer on it alone), from
//     which the condition and the taint are decided: the Node is never
//     read on a timer;
//   - optionally (Config.Taint, an identity allowed to patch Nodes) the
//     node taint TaintKey while that view has memory pressure, reconciled
//     at the first evaluation and whenever the Node's watch shows it
//     changed, removed on a clean stop;
//   - the bound on the rejections reported per owner (rejectBurst in
//     rejectWindow): beyond it a refused pod is left to the kubelet's
//     back-off instead of being reported Failed and replaced.
//
// A report converges by watching, not by timing: the kubelet's status
// manager writes these pods' status from its own cache too, and may replace
// cri-guard's reason and message at any time (a kubelet restart resyncs
// every pod). The statuses are strategic merge patches of the fields
// cri-guard owns (phase, reason, message, the DisruptionTarget condition),
// with the pod's UID as precondition, decided from the cache; whenever the
// informer shows a reported pod without them, the report is written again:
// at once when it had held for a while (a kubelet whose cache lacks them
// replaces them at each status sync, every 10 s, for as long as the pod
// exists), slower and slower when another writer replaces it as soon as it
// is written. A pod is reported once (Client.add), its event made once.
//
// What it costs the API server matters more than what it costs the node:
// on a 5,000-node cluster a request a minute per node is 83 a second. Its
// watches live as long as the server lets them (no client-wide timeout:
// each read and write has its own deadline), ask for bookmarks so that a
// quiet node resumes where it was rather than relisting, and speak
// protobuf; its writes are spread by jitter.
//
// Nothing it does blocks its callers: lookups read the cache, reports are
// written by its own goroutine with retries until they succeed or the pod
// is gone. It reads and writes core/v1 only, with a scheme of that group
// alone (the typed clientset would register every API group). It imports
// pod only; the sync loop declares the small interfaces it needs.
package kube
