// Package guard is cri-guard's sync loop, the one goroutine that owns pod
// state, as the kubelet's syncLoopIteration does. It takes pod additions
// from the server (ADD), restored pods from checkpoints (RESTORE),
// housekeeping ticks, PSI trigger events and runtime events, and hands
// decisions to the evictor.
//
// It imports pod, evictor, pressure, checkpoint and runtimeproxy's types
// through small interfaces; it never imports server. Readers get snapshots.
package guard
