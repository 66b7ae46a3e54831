// Package evictor makes cri-guard's node-stability decisions, as the
// kubelet's eviction manager does (pkg/kubelet/eviction): Admit, the
// admit-handler chain that decides a new or restored pod sandbox before the
// runtime sees it (canAdmitPod), and Synchronize, which samples pressure,
// evaluates the thresholds, ranks the active pods and stops at most one
// non-critical pod per call.
//
// It imports pod and pressure only. Stopping a pod, reading stats and the
// clock are injected, so tests drive it with a fake sampler, a recording
// stopper and a stepped clock. It owns no goroutine: the caller (the sync
// loop) calls it from one goroutine; Snapshot may be called from any.
package evictor
