// Package kube is cri-guard's optional connection to the API server, with
// the node's own credentials (the kubelet's kubeconfig: the Node authorizer
// and NodeRestriction let a node read the pods bound to it, update their
// status, create events and update its own Node status). It needs nothing
// more, and must not: an identity on the node that may write other Nodes,
// or a Node's spec, is one that root on any node can use against every
// node. The taint that follows the condition is set by the cluster's taint
// controller (package controller), not from here.
//
// It owns the cache of the pods bound to this node (by UID, the key CRI
// carries) and what is derived from them (apiOf); the reports of
// cri-guard's decisions as the kubelet makes them (a refused pod's status as
// rejectPod writes it, an evicted pod's as evictPod does, an Event each);
// the node condition CriGuardMemoryPressure; and the bound on the rejections reported per
// owner.
//
// Its rules:
//   - Nothing blocks its callers: lookups read the cache, reports are
//     written by its own goroutine, retried until they succeed or the pod
//     is gone, each made once.
//   - Reports converge by watching, never by timed read-backs: patches of
//     the fields cri-guard owns, with the pod's UID as precondition, written
//     again when the watch shows them replaced, within a bound (report.go
//     says why), armed again when a kubelet exits or starts
//     (KubeletStopped, KubeletStarted); events
//     through client-go's broadcaster and correlator.
//   - Every request is priced for a 5,000-node cluster: watches from
//     bookmarks, no periodic GET, protobuf, jittered writes.
//   - core/v1 only, with a scheme of that group alone.
//
// docs/design.md ("The API connection") has the reasons.
//
// Package kube imports pod only; the sync loop declares the small
// interfaces it needs.
package kube
