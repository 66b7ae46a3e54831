// Package evictor makes cri-guard's node-stability decisions, as the
// kubelet's eviction manager does (pkg/kubelet/eviction):
//
//   - Admit decides a new or restored pod sandbox before the runtime sees
//     it (canAdmitPod). It is a read of the last evaluation, as the
//     kubelet's Admit reads its cached conditions: it neither samples nor
//     moves a grace timer.
//   - Observe samples pressure and evaluates the thresholds.
//   - Synchronize is one pass (Pass: the active pods, the evictions under
//     way, what woke it): one sample, then one decision (Action): the
//     grace cuts of evictions under way when the node is a moment from
//     OOM, the pod to stop with its grace, or why none (a hold: an
//     eviction under way that has not released its memory, the rate
//     bound, the spacing of quick passes), and whether to look again
//     soon. It stops nothing: the caller carries the Action out and
//     reports each outcome with Evicted (counted, the re-admission guard
//     armed) or EvictionFailed (counted as a failure; the pod stays a
//     candidate).
//   - EvictRestored is the eviction of a restored pod Admit refused at
//     start-up (the kubelet's rejectPod on a restart: the pod's own grace
//     period); in dry run, as for Synchronize, the choice is only recorded.
//   - Evaluation is the last evaluation as a plain value: how near a
//     threshold the node is, whether a memory signal acts, whether it is
//     a moment from OOM (the fast poll's spacing and admission read it).
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
