package main

import "runtime"

// setMaxProcs runs cri-guard on one P unless the GOMAXPROCS environment
// variable says otherwise. A forwarded call is a chain of goroutine hand-offs
// (transport reader → handler → writer, twice); with one P they are plain
// run-queue switches instead of futex wake-ups of other threads. Measured
// with cri-guard-bench --compare-env GOMAXPROCS=1 against containerd on a
// 2-core VM: less added latency (p50 -40..-130 µs), about 25% less CPU per
// proxied call and higher throughput with 8 clients.
func setMaxProcs(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
