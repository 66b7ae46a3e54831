// Package admin is cri-guard's local admin interface: an HTTP server on a
// unix socket (mode 0600 in a 0750 directory) answering GET /status with a
// JSON Status, and the client `cri-guard status` uses.
//
// It owns the Status document and how it is assembled (Build) from the
// eviction manager's snapshot (its observations, its own evaluation of each
// threshold, minimum reclaim included, and its own ranking with the stats
// it read) and the sync loop's pods. It evaluates and ranks nothing itself.
// It imports evictor, pod and pressure for their types; it must not import
// server, guard, metrics or cmd.
package admin
