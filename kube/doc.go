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
//   - the reports of cri-guard's decisions, as the kubelet makes them: a
//     refused pod's status as rejectPod writes it (phase Failed, "Pod was
//     rejected: ..."), an evicted pod's as evictPod does (phase Failed,
//     reason Evicted, the message, DisruptionTarget), each with a Warning
//     event; a node condition of its own (CriGuardMemoryPressure).
//
// Nothing it does blocks its callers: lookups read the cache, reports are
// queued and written by its own goroutine with retries until they succeed
// or the pod is gone, and never twice. It reads and writes core/v1 only,
// with a scheme of that group alone. It imports pod only; the sync loop
// declares the small interfaces it needs.
package kube
