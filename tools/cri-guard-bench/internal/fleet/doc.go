// Package fleet is `cri-guard-bench fleet`: what a fleet of cri-guard
// daemons asks of a real kube-apiserver with its watch cache, per node per
// minute, for two binaries side by side (--old, the baseline, and --new).
// It runs etcd and kube-apiserver of its own (audit log at Metadata level)
// and two fleets of --nodes nodes, each node a Node with --pods pods, a fake
// runtime and proc root (fakenode) and a cri-guard child with the node's
// identity, each fleet behind a byte-counting proxy; then counts the
// audited requests per phase (start, quiet, a memory-pressure wave, after
// it, an API server restart). With --controller it runs the taint controller's two
// replicas too. It needs no harness lock (ports and --dir of its own):
//
//	bin/cri-guard-bench fleet --kbin "$(scripts/cluster.sh kbin)" \
//	    --old /tmp/cg-base/bin/cri-guard --new bin/cri-guard [--out fleet.json]
//
// docs/fleet-benchmark.md describes the phases and the tables.
package fleet
