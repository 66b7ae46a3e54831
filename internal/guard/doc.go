// Package guard is cri-guard's sync loop, the one goroutine that owns pod
// state, as the kubelet's syncLoopIteration does.
//
// Its rules:
//   - Every pod record is decided and changed on the loop; nothing rewrites
//     a record from a stale copy; readers get snapshots (Loop.Pods).
//   - A sandbox change is one operation of the owner, start to end
//     (Loop.RunPodSandbox; an eviction: choose, stop, settle), and only an
//     outcome is recorded: an eviction counts once its stop happened, a
//     failed stop leaves the pod ranked.
//   - The loop does not wait on a disk, a runtime call or the API:
//     records are written by a checkpoint.Writer off the loop, listings, restore
//     retries and stops run off it and come back through its queue,
//     reports are queued.
//   - A call is never failed after the runtime succeeded, and bookkeeping
//     never refuses a pod: a record whose write failed is kept in memory
//     and written again with back-off.
//   - The loop owns every wake-up (the PSI trigger, kernel memory
//     notifications, follow-ups, the fast poll) and re-arms them when the
//     thresholds change.
//
// docs/design.md ("The sync loop") walks a RunPodSandbox, an eviction, the
// runtime's events and listings, and a restore.
//
// Package guard imports pod, evictor, pressure, checkpoint and
// runtimeproxy (their types, through small interfaces); it never imports
// server, kube or cmd.
package guard
