package main

import "runtime"

// setMaxProcs runs cri-guard on one P unless the GOMAXPROCS environment
// variable says otherwise. A forwarded call is a chain of goroutine hand-offs
// (transport reader → handler → writer, twice); with one P they are plain
// run-queue switches instead of futex wake-ups of other threads. Measured
// with cri-guard-bench --compare-env GOMAXPROCS=1 against containerd on a
// 2-core VM: less added latency (p50 -40..-130 µs), about 25% less CPU per
// proxied call and higher throughput with 8 clients.
//
// One P also serves the fast path with the API connection, where
// the informer decodes every change of the node's pods on the P the sync
// loop needs: with 1000 pods updated 50 times a second and a ready sandbox
// each, a crossing of a hard threshold was decided no later on one P than on
// Go's default (2 here), for less CPU. cri-guard-bench maxprocs --rounds 6
// (fresh children interleaved, 25 crossings each, fast poll defaults; pods
// in the bench's in-process HTTPS/HTTP2 API, a fake CRI runtime; 2-core VM),
// GOMAXPROCS 1 vs 2: decision median 11.5 vs 13.0 ms, p90 18.2 vs 23.1, max
// 26.4 vs 59.2 (138/139 decisions); CPU 0.045 vs 0.048 s/s with the updates
// alone, 0.124 vs 0.135 with the crossings; VmRSS 55 vs 58 MiB. An earlier
// run (the API over plain HTTP) with a CI run beside it: median 13.1 vs
// 16.3 ms, p90 24.4 vs 29.1. The difference goes with the informer's load
// (two rounds each, plain HTTP): none at 0 updates/s (median 14.0 vs
// 13.5 ms), one P ahead at 500/s (13.4 vs 15.3). Against the one-node
// cluster's kube-apiserver (--kubeconfig, 1000 pods on a node no kubelet
// serves, 49.2 updates/s, 3 rounds): median 16.1 vs 18.2 ms, p90 27.0 vs
// 30.4, max 58.5 vs 91.9 (56/54 decisions); CPU 0.057 vs 0.060 s/s with
// the updates alone, 0.145 vs 0.155 with the crossings.
func setMaxProcs(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
