// Command cri-guard is the CRI proxy daemon: it listens where the kubelet's
// --container-runtime-endpoint points, forwards every CRI call to
// containerd, and enforces memory-pressure admission and eviction on the way.
//
//	cri-guard [--config FILE] [--listen PATH] [--runtime-endpoint PATH] [--state-dir DIR]
//	          [--cgroup-root DIR] [--proc-root DIR] [--dry-run] [--log-level L] [--log-format text|json]
//	cri-guard status [--admin PATH] [--json]
//	cri-guard check-config [--skip-node-check] FILE
//	cri-guard version
//
// main parses the command line and builds the logger; run (run.go) wires the
// components: the runtime connection, the sampler, the checkpoint store, the
// eviction manager, the sync loop (restored before the socket listens), the
// shared event stream, metrics, the admin socket, sd_notify and SIGHUP
// reloads; the kernel wake-ups (PSI trigger, memcg notifications on v1,
// the memory.events watch on v2) are given
// to the sync loop as guard.Wakeups, and the loop arms and re-arms them. This package may import every cri-guard package; none
// may import it.
package main
