// Package guard is cri-guard's sync loop, the one goroutine that owns pod
// state, as the kubelet's syncLoopIteration does. Every pod record is
// decided and changed on it; nothing rewrites a record from a stale copy;
// readers get snapshots (Pods).
//
// The loop never waits on a disk or a runtime listing. A changed record
// is handed to the writer (writer.go), which writes it durably off the
// loop (checkpoint.Put: fsync, rename, directory fsync): one write per
// record at a time, each with a sequence number, a later write superseding
// a waiting one; the outcomes come back through the loop's queue (recordWrites). A record whose write
// failed (full disk, a store not open) is kept in memory and written again
// with back-off (saveRetry): bookkeeping never refuses a pod. The writes a CRI call waits for
// (RunPodSandbox's pending and settled record) have writer slots of their
// own and never queue behind the others (a run of evictions' records on a
// slow state disk).
//
// A sandbox change is one operation of the owner, start to end, each owned
// by one function.
//
// # The walk of a RunPodSandbox (Loop.RunPodSandbox, sandbox.go)
//
// On the server's goroutine for the call, with the kubelet's deadline:
//
//  1. Admit, on the loop (admitAddition): the pod is completed with what
//     the API says of it, the evictor's Admit decides on the conditions of
//     the last evaluation. A refusal is logged, reported as the kubelet's
//     rejectPod when it is the first attempt of a pod the API knows, and
//     returned as a *RefusedError (the server answers ResourceExhausted
//     "<reason>: <message>"): containerd never sees the pod. A retry of an
//     attempt that already has a sandbox keeps its record as it is.
//     Otherwise the pod is recorded pending in memory and its record's
//     write queued.
//  2. Wait for the pending record's write, on the caller's goroutine: the
//     record is on disk before the runtime sees the pod, so a crash in
//     between leaves a record that start-up reconciles. A failed write does
//     not hold the pod back; a deadline that ends first fails the call
//     unforwarded and drops the record (as settleNotCreated does for a
//     certain failure).
//  3. Forward through create, the function the server hands in, off the
//     loop. It returns the outcome (runtimeproxy.RunOutcome), classified
//     once where the runtime's answer is read: created, with the
//     sandbox's id; refused because a sandbox it names holds the
//     attempt's name; certainly not created; or maybe created (no answer
//     came back, or a success whose answer names no sandbox).
//  4. Settle on the loop, by a switch over the outcome, waited for at most
//     Config.AfterRuntimeTimeout whatever the kubelet's deadline, and never
//     dropped (a busy loop settles it later): settleCreated records the
//     sandbox id and the ready state and queues the write;
//     settleNotCreated drops the pending record (unless another call of
//     the attempt is in flight, or an earlier one's sandbox may still
//     appear); settleMaybeCreated keeps it, unsettled (below). A refusal
//     that names the sandbox holding the attempt's name (containerd's "is
//     reserved for <id>", with code Unknown, or FailedPrecondition in 1.6:
//     an earlier call made it and lost its answer) settles the record
//     with that sandbox as PodSandboxStatus shows it, ready or stopped
//     (settleReserved, asked off the loop); the kubelet gets the refusal.
//     A record is pending exactly when it names no sandbox: a ready or
//     stopped record always has its sandbox id.
//  5. Wait for the settled record's write (bounded the same), then answer
//     with the runtime's answer, unchanged: a call is never failed after
//     containerd succeeded.
//
// # The walk of an eviction (Loop.housekeeping, housekeeping.go; evict.go)
//
// On the loop, for every pass (pass: the housekeeping tick; a PSI trigger
// and its follow-ups; a kernel memcg notification; a change of the pods
// cgroup's memory.events; the fast poll; the next restored pod refused at
// start-up; syncOnce, the step tests drive). The loop owns every wake-up
// (wakeups.go, fastpath.go): Run arms the PSI trigger (following the pods
// cgroup's pressure file; a sub-2s window the kernel refuses is widened to
// 2 s), the memcg notifications (v1: at each threshold and at its near
// level) and the memory.events watch (v2), SetThresholds re-arms the
// notifications at the new levels when a reload changes the thresholds,
// and they end with Run. The fast poll runs only near a threshold; far
// from them its watch samples are spaced by the distance over
// FastPoll.MaxRate and left to the kernel for a signal whose near level a
// notification watches, so an idle node is sampled by housekeeping alone.
// The eviction a pass chooses carries what woke it (evictor.Wakeup:
// wakeup, armed_by in the log; cri_guard_wakeups_total counts them):
//
//  1. Start a listing of the runtime's sandboxes off the loop (none while
//     the last one is under way; quick passes at most once a second),
//     applied when it comes back (below), and write again, as the
//     back-off allows, the records whose write failed.
//  2. An eviction under way (inFlight): sample only, so that admission
//     reads current conditions, and cut its grace period short when the
//     last evaluation is a moment from OOM (evictor.MemoryCritical: a
//     memory signal under half of a hard threshold, or under one and
//     falling faster than a stop through the runtime lands). cutGrace,
//     once per eviction, recorded: SIGKILL to the victim's pod cgroup from
//     here (Evictor.KillPod: cgroup.kill, or every process of the v1
//     memory cgroup; only the pod's own cgroup, named after its UID as
//     the kubelet names it, under the pods cgroup), then its containers
//     stopped with no grace, off the loop. The pass that chooses a victim
//     cuts at once when the node is already so. One eviction at a time, but for one case
//     (mayOverlap): once every victim under way has released its memory
//     (its containers reported stopped, or its pod cgroup's working set
//     down to an eighth: its processes are gone before containerd reports
//     it) and a fresh sample still meets a memory threshold, the next pod
//     is chosen (steps 5-6, the victims under way
//     left out of the ranking) while their sandboxes' stops go on: several
//     runaways at once must not wait on each other's teardown.
//  3. Restored pods that admission refused at start-up (Restore queues
//     them, restoredPods: enforce) come first, a second apart.
//  4. A quick pass starts the next eviction no sooner than evictionSpacing
//     after the last settled, memoryEvictionSpacing when the evaluation
//     has a memory signal met and the last stop succeeded, at once when it
//     is a moment from OOM as well.
//  5. The evictor's Synchronize samples, evaluates, ranks the active pods
//     and chooses one (or none).
//  6. evict marks the eviction in flight and stops the victim off the loop
//     (stop): the kubelet's message for its containers over their request
//     from their stats, then killContainers with the eviction's grace
//     against the pod's terminationGracePeriodSeconds (its own, for a
//     refused restored pod; 2 s at least), then StopPodSandbox, bounded by
//     the grace plus StopTimeout.
//  7. The outcome comes back to the loop (settleEviction). Only a stop that
//     happened (or a sandbox already gone) counts: the evictor records it
//     and arms the re-admission guard, the record is marked stopped with
//     EvictedAt (so the guard survives a restart) and the API is told. A
//     failed or timed-out stop leaves the pod ready and ranked for the next
//     pass.
//
// StopPodSandbox and RemovePodSandbox through cri-guard update or drop
// records on the loop.
//
// # Runtime events and listings (events.go, resync.go)
//
// A runtime event updates the one sandbox it names, from the sandbox
// status containerd sends with it (a sandbox's own events carry its id as
// the container id, and its deletion no status): gone, the record is
// dropped; not ready, a ready pod is stopped and saved. Only stops and
// deletions are read, which are final, so a late event is still true; the
// event is read off the loop (RunEvents) and applied on it, with no
// listing.
//
// A listing of the runtime's sandboxes is the fallback for missed events:
// housekeeping starts one (step 1), and the event stream does when it
// breaks, before it opens again. ListPodSandbox runs off the loop, bounded
// by 5 s; its answer comes back through the loop's queue and is applied in
// memory: a sandbox gone drops its record, one not ready stops its pod,
// one ready again (a record stopped before its stop) makes the pod a
// candidate again. A listing is a picture taken while the loop went on, so
// every outcome recorded of a sandbox (created, stopped, evicted, removed,
// an event) touches its record with the next generation number, and a
// listing changes only the records no outcome touched since it started: a
// pod created, or stopped by an eviction, after the picture was taken
// keeps what its outcome said, and the next listing sees it. A pending
// record takes the sandbox a listing shows for its attempt (uid and
// attempt), ready or stopped: its call lost its answer (the kubelet, which
// sees the sandbox in its own listing, may never retry that attempt), or
// is about to get it (the same sandbox). A pending record whose call may
// have created a sandbox (its answer lost, or restored from a crash) is
// unsettled: a listing that started pendingGrace (2 min, the kubelet's
// runtimeRequestTimeout) after it without its sandbox drops it, unless a
// RunPodSandbox of that attempt is in flight (Loop.calls counts them); a
// retry that fails for certain leaves it to the grace.
//
// With an API connection (Options.API and Reporter, kube.Client) reports
// are queued, never waited for.
//
// Restore replays checkpoints through admission before Run, taking from
// containerd what it can tell (the sandbox's own config) and from the
// record only what only cri-guard knows. A pending record whose sandbox
// containerd does not list is dropped when it was written pendingGrace
// ago or more, and kept unsettled otherwise (containerd may still be
// creating it under the cut-off call: the name reserved, the sandbox not
// listed yet); when it cannot finish, the loop
// serves degraded (ServeDegraded) and RetryRestore completes it later:
// the records, the listing and the sandboxes' statuses are read off the
// loop, bounded by the caller's deadline, and applied on it, as a listing
// is; a record whose pod an outcome touched (or dropped) since the read
// started keeps what the outcome said.
//
// Package guard imports pod, evictor, pressure, checkpoint and
// runtimeproxy (their types, through small interfaces); it never imports
// server.
package guard
