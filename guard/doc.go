// Package guard is cri-guard's sync loop, the one goroutine that owns pod
// state, as the kubelet's syncLoopIteration does. Every pod record is
// decided and changed on it; nothing rewrites a record from a stale copy.
// It never waits on a disk: a changed record is handed to a writer
// (writer.go) that writes it durably off the loop, one write per record at
// a time, a later one superseding a waiting one, and whose outcomes come
// back through the loop's queue.
//
// A sandbox change is one operation of the owner, start to end:
//
//   - RunPodSandbox (sandbox.go): admit on the loop, wait for the pending
//     record's write on the caller's goroutine, forward through the
//     function the server hands in (off the loop), settle the record with
//     the runtime's answer on the loop, wait for its write on the caller's
//     goroutine.
//   - An eviction (evict.go): the evictor chooses (or restore queued a
//     restored pod that admission refused: those go first, a second
//     apart, each with its own grace period); the loop stops the pod
//     off the loop goroutine, bounded by the grace period plus StopTimeout;
//     the outcome comes back to the loop, which records it. Only a stop that
//     happened (or a sandbox already gone) counts, arms the re-admission
//     guard and marks the record; a failed or timed-out stop leaves the pod
//     ready and ranked for the next pass. One eviction at a time; quick
//     passes (PSI trigger and follow-ups, memcg notification, fast poll)
//     start the next 100 ms after the last settled when a memory signal is
//     still met in a fresh sample, and 1 s after it on a PSI average alone
//     or after a failed stop. A sample during the grace period with a
//     memory signal under half of a hard threshold cuts it short: the
//     victim's containers are killed at once (evict.go cutGrace).
//   - StopPodSandbox/RemovePodSandbox through cri-guard, runtime events and
//     housekeeping resyncs update or drop records on the loop.
//
// With an API connection (Options.API and Reporter, kube.Client) pods are
// completed with what the API says before each decision (priority, requests,
// grace period, tolerations), a refused first attempt is reported as the
// kubelet's rejectPod and an eviction once its stop happened; both are
// queued, never waited for. A record whose write failed (full disk) is kept
// in memory and written again each housekeeping pass: bookkeeping never
// refuses a pod.
//
// Restore replays checkpoints through admission before Run, taking from
// containerd what it can tell (the sandbox's own config) and from the
// record only what only cri-guard knows; when it cannot finish, the loop
// serves degraded (ServeDegraded) and RetryRestore completes it on the
// loop later. It imports pod,
// evictor, checkpoint and runtimeproxy (their types, through small
// interfaces); it never imports server. Readers get snapshots.
package guard
