package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Targets from the issue.
const (
	targetTinyP50    = 200 * time.Microsecond
	targetListP50    = 240 * time.Microsecond
	targetStatsRatio = 1.03
	targetTputRatio  = 0.6
	targetIdleRSSKiB = 16 << 10
)

func us(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func report(out io.Writer, o benchOptions, r results) {
	fmt.Fprintf(out, "\nworkload: %d sandboxes, %d containers; %d calls per method and side (ListContainerStats %d), interleaved\n\n",
		r.sandboxes, r.containers, o.Iterations, o.StatsIterations)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tdirect p50 µs\tproxy p50 µs\tadded p50 µs\tratio p50\tdirect p99 µs\tproxy p99 µs\tadded p99 µs\ttarget\t")
	var checks []string
	for _, l := range r.latencies {
		d50, p50 := percentile(l.direct, 50), percentile(l.proxied, 50)
		d99, p99 := percentile(l.direct, 99), percentile(l.proxied, 99)
		ratio := float64(p50) / float64(d50)
		var target string
		switch l.method.class {
		case "tiny":
			target = fmt.Sprintf("+%s µs %s", us(targetTinyP50), verdict(p50-d50 <= targetTinyP50))
		case "list":
			target = fmt.Sprintf("+%s µs %s", us(targetListP50), verdict(p50-d50 <= targetListP50))
		case "stats":
			target = fmt.Sprintf("≤%.2fx %s", targetStatsRatio, verdict(ratio <= targetStatsRatio))
		}
		checks = append(checks, target)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t\n", l.method.name, us(d50), us(p50), us(p50-d50), ratio, us(d99), us(p99), us(p99-d99), target)
	}
	tw.Flush()

	dt, pt := mean(r.directTput), mean(r.proxiedTput)
	fmt.Fprintf(out, "\nthroughput, ListContainers, %d clients, %d × %s per side: direct %.0f/s, cri-guard %.0f/s, ratio %.3f (target ≥ %.1f: %s)\n",
		o.Clients, o.Rounds, o.Duration, dt, pt, pt/dt, targetTputRatio, verdict(pt/dt >= targetTputRatio))
	if r.pid == 0 {
		fmt.Fprintln(out, "cri-guard CPU and memory: not measured (run with --cri-guard-binary, or --proxy-endpoint with --proxy-pid)")
		return
	}
	fmt.Fprintf(out, "cri-guard CPU per proxied call: latency phase %.1f µs (%d calls), throughput phase %.1f µs (%d calls) [10 ms tick resolution]\n",
		float64(r.latencyCPU)/float64(time.Microsecond)/float64(r.latencyCalls), r.latencyCalls,
		float64(r.tputCPU)/float64(time.Microsecond)/float64(r.proxiedCalls), r.proxiedCalls)
	fmt.Fprintf(out, "cri-guard VmRSS: idle %.1f MiB (target < 16 MiB: %s), after load %.1f MiB\n",
		float64(r.rssIdle)/1024, verdict(r.rssIdle < targetIdleRSSKiB), float64(r.rssLoad)/1024)
}
