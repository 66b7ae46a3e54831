// Package overhead is cri-guard-bench without a subcommand: what cri-guard
// costs against a real containerd. It creates a workload (sandboxes and
// containers), then calls the same CRI methods directly and through
// cri-guard, interleaved, and prints p50/p99 per method, throughput with
// concurrent clients, CPU time per proxied call and cri-guard's resident
// memory, next to the targets. Everything it creates is removed at the end.
//
//	cri-guard-bench --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary ./cri-guard [--sandboxes 30 --containers 60]
//
// cri-guard runs as a child process (--cri-guard-binary; CPU and memory are
// then measured from /proc/<pid>), or an already running one is used
// (--proxy-endpoint, with --proxy-pid for CPU and memory), or, with neither,
// the bench re-executes itself as "serve-core" (ServeCoreMain): the proxy
// core alone (runtimeproxy + server), without the sync loop.
package overhead
