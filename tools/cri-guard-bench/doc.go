// Command cri-guard-bench measures what cri-guard costs against a real
// containerd: it creates a workload (sandboxes and containers), then calls the
// same CRI methods directly and through cri-guard, interleaved, and prints
// p50/p99 per method, throughput with concurrent clients, CPU time per proxied
// call and cri-guard's resident memory, next to the targets. Everything it
// creates is removed at the end.
//
//	cri-guard-bench --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary ./cri-guard [--sandboxes 30 --containers 60]
//
// cri-guard runs as a child process (--cri-guard-binary; CPU and memory are
// then measured from /proc/<pid>), or an already running one is used
// (--proxy-endpoint, with --proxy-pid for CPU and memory), or, with neither,
// this binary re-executes itself as "serve-core": the proxy core alone
// (runtimeproxy + server), without the sync loop.
//
// The race subcommand races cri-guard against the kernel's OOM killer:
// in a pods cgroup with a memory limit (the domain), with bystanders (a
// BestEffort, a Burstable and a critical static pod), a runaway pod grows
// anonymous memory at a fixed rate (tools/memhog -anon); a run ends when
// cri-guard stops the runaway's sandbox or the kernel OOM-kills anything in
// the domain. Each mode is a cri-guard configuration; the table gives, per
// mode and rate, runs won and lost, whom the OOM killer took, the times from
// the threshold crossing to the decision and to the sandbox stopped, and the
// peak usage. Hold the harness lock while it runs:
//
//	go build -o /tmp/memhog ./tools/memhog
//	flock -o /tmp/cri-guard-harness.lock cri-guard-bench race \
//	    --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary bin/cri-guard --memhog /tmp/memhog [--quick]
//
// The race counts an OOM kill from the kernel log (/dev/kmsg "oom-kill:"
// lines, which name the victim's cgroup): on cgroup v1 the domain's own
// oom_kill counter stays 0, the kernel counting a kill only in the
// victim's cgroup.
//
// The idle subcommand starts race modes side by side on an empty pods
// cgroup and prints each one's CPU time over the same interval (default
// 10 minutes; "psi" is the previous release's default configuration):
//
//	cri-guard-bench idle --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary bin/cri-guard [--modes default,psi --duration 10m]
//
// The maxprocs subcommand chooses cri-guard's GOMAXPROCS by
// measurement: the fast path's decision latency while the API informer
// decodes a steady stream of pod updates (1000 pods bound to the node,
// 50 updates/s by default), and CPU seconds per second, for each
// GOMAXPROCS setting (children of the real binary with GOMAXPROCS set in
// their environment: "default" is Go's own choice here, set explicitly, as
// cri-guard sets 1 when the variable is empty). Each round starts a fresh
// child per setting, the order alternating; a child adopts a ready sandbox
// per pod from a fake CRI runtime served by the bench (cri-api's
// FakeRuntimeService behind gRPC: the eviction candidates, matched to the
// API pods by UID), reads memory from a fake proc root the bench writes,
// and after a quiet window (CPU with the updates alone) sees
// memory.available cross its hard threshold --crossings times from within
// the fast poll's margin; the decision is the child's "evicting pod" log
// line. The pods live in a real API server (--kubeconfig, an admin
// kubeconfig: the bench makes the node object, the pods, Running, and
// patches an annotation; hold the harness lock around the cluster) or, by
// default, in an API this process serves (list and watch of pods with real
// JSON, status patches, events: not kube-apiserver):
//
//	make build && go -C tools/cri-guard-bench build -o /tmp/cri-guard-bench .
//	/tmp/cri-guard-bench maxprocs --cri-guard-binary bin/cri-guard \
//	    [--kubeconfig /tmp/cri-guard-cluster/admin.kubeconfig] [--rounds 4 --crossings 25]
//
// The apicost subcommand measures cri-guard's API side on a
// cluster's API server (scripts/cluster.sh up): a Node no kubelet serves,
// 1000 pods bound to it (no sandboxes), and each --binary in turn, the
// order alternated per round, run as that node with the given kubeconfig;
// per run its CPU time over an idle window and over a window of pod
// patches (--rate per second, one informer update each), VmRSS and VmHWM;
// then the median per binary of CPU per update (patch window minus idle
// window, per patch). The node, namespace and pods are deleted at the end:
//
//	flock /tmp/cri-guard-harness.lock cri-guard-bench apicost \
//	    --kubeconfig /tmp/cri-guard-cluster/admin.kubeconfig \
//	    --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --binary base=/tmp/cg-base/bin/cri-guard --binary new=bin/cri-guard
package main
