// Package apicost is `cri-guard-bench apicost`: cri-guard's API side on a
// cluster's API server (scripts/cluster.sh up). A Node no kubelet serves,
// 1000 pods bound to it (no sandboxes), and each --binary in turn, the
// order alternated per round, run as that node with the given kubeconfig;
// per run its CPU time over an idle window and over a window of pod patches
// (--rate per second, one informer update each), VmRSS and VmHWM; then the
// median per binary of CPU per update (patch window minus idle window, per
// patch). The node, namespace and pods are deleted at the end:
//
//	flock /tmp/cri-guard-harness.lock cri-guard-bench apicost \
//	    --kubeconfig /tmp/cri-guard-cluster/admin.kubeconfig \
//	    --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --binary base=/tmp/cg-base/bin/cri-guard --binary new=bin/cri-guard
package apicost
