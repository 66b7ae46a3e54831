// Command cri-guard-bench measures cri-guard against real runtimes and API
// servers. Each experiment is a package under internal/, whose doc says
// what it measures and how to run it:
//
//	cri-guard-bench [flags]       internal/overhead: latency, throughput, CPU and RSS through cri-guard against containerd
//	cri-guard-bench race ...      internal/race: cri-guard against the kernel's OOM killer
//	cri-guard-bench idle ...      internal/idle: the CPU time of the race modes on an idle node
//	cri-guard-bench maxprocs ...  internal/maxprocs: GOMAXPROCS chosen by decision latency and CPU
//	cri-guard-bench apicost ...   internal/apicost: CPU per informer update on a real API server
//	cri-guard-bench fleet ...     internal/fleet: what a fleet of cri-guards asks of a kube-apiserver
//
// "serve-core" is the proxy core alone, which the default benchmark starts
// when it is given no --cri-guard-binary. What several experiments use is
// in internal/benchutil (child processes, /proc figures, CRI clients,
// cleanup, formats) and internal/fakenode (a node without kubelet or
// containerd). Build it with go -C tools/cri-guard-bench build -o
// bin/cri-guard-bench . (a module of its own); `<subcommand> --help` lists
// each one's flags.
package main
