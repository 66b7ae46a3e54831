// Package evictor makes cri-guard's node-stability decisions, as the
// kubelet's eviction manager does (pkg/kubelet/eviction):
//
//   - Admit decides a new or restored pod sandbox before the runtime sees
//     it (canAdmitPod). It is a read of the last evaluation, as the
//     kubelet's Admit reads its cached conditions: it neither samples nor
//     moves a grace timer.
//   - Observe samples pressure and evaluates the thresholds.
//   - Synchronize observes, ranks the active pods and, when a threshold
//     acts, chooses one non-critical pod to stop. It stops nothing: it
//     returns an Eviction, the caller stops the pod and reports the outcome
//     with Evicted (counted, the re-admission guard armed) or
//     EvictionFailed (counted as a failure; the pod stays a candidate).
//   - EvictRestored is the eviction of a restored pod Admit refused at
//     start-up (the kubelet's rejectPod on a restart: the pod's own grace
//     period); in dry run, as for Synchronize, the choice is only recorded.
//   - Evaluation is the last evaluation as a plain value: how near a
//     threshold the node is, whether a memory signal acts, whether it is
//     a moment from OOM; the sync loop times its passes and cuts a grace
//     period short by it (GraceCut records the cut).
//
// Snapshot is the one view of its state that status and metrics show: the
// observations, every threshold as the last evaluation saw it and the last
// ranking. Thresholds live only here; SetThresholds replaces them.
//
// It imports pod and pressure only. Reading stats and the clock are
// injected, so tests drive it with a fake sampler and a stepped clock. It
// owns no goroutine: the caller (the sync loop) calls it from one
// goroutine; Snapshot may be called from any.
package evictor
