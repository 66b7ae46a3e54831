// Package maxprocs is `cri-guard-bench maxprocs`: cri-guard's GOMAXPROCS
// chosen by measurement. Per setting (children of the real binary with
// GOMAXPROCS in their environment; "default" is Go's own choice, set
// explicitly, as cri-guard sets 1 when the variable is empty) it measures
// the fast path's decision latency while the API informer decodes a steady
// stream of pod updates (1000 pods bound to the node, 50 updates/s by
// default), and CPU seconds per second. Each round starts a fresh child per
// setting, the order alternating; a child adopts a ready sandbox per pod
// from a fake runtime (fakenode) and, after a quiet window, sees
// memory.available cross its hard threshold --crossings times from within
// the fast poll's margin; the decision is its "evicting pod" log line. The
// pods live in a real API server (--kubeconfig, an admin kubeconfig; hold
// the harness lock around the cluster) or, by default, in an API this
// process serves (list and watch with real JSON, status patches, events):
//
//	make build && go -C tools/cri-guard-bench build -o /tmp/cri-guard-bench .
//	/tmp/cri-guard-bench maxprocs --cri-guard-binary bin/cri-guard \
//	    [--kubeconfig /tmp/cri-guard-cluster/admin.kubeconfig] [--rounds 4 --crossings 25]
package maxprocs
