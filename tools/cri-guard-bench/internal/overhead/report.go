package overhead

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// Targets the pass-through is held to: the added latency a kubelet may
// notice on a tiny call, and the overhead on a list or a stats call.
const (
	targetTinyP50    = 200 * time.Microsecond
	targetListP50    = 240 * time.Microsecond
	targetStatsRatio = 1.03
	targetCycleRatio = 1.05
	targetTputRatio  = 0.6
	targetIdleRSSKiB = 16 << 10
	// targetOverFloor is "added p50 within 10% of the floor": cri-guard's
	// added latency over the added latency of the proxy core alone (the
	// cheapest gRPC-terminating forwarder), both measured in the same run.
	targetOverFloor = 1.10
)

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

// target returns the target for a method class and whether the
// measured p50s meet it.
func target(class string, direct, proxied time.Duration) string {
	switch class {
	case "tiny":
		return fmt.Sprintf("+%s µs %s", benchutil.Micros(targetTinyP50), verdict(proxied-direct <= targetTinyP50))
	case "list":
		return fmt.Sprintf("+%s µs %s", benchutil.Micros(targetListP50), verdict(proxied-direct <= targetListP50))
	case "cycle":
		return fmt.Sprintf("≤%.2fx %s", targetCycleRatio, verdict(float64(proxied)/float64(direct) <= targetCycleRatio))
	default:
		return fmt.Sprintf("≤%.2fx %s", targetStatsRatio, verdict(float64(proxied)/float64(direct) <= targetStatsRatio))
	}
}

func report(out io.Writer, o benchOptions, r results) {
	fmt.Fprintf(out, "\nworkload: %d sandboxes, %d containers; %d calls per method and side (ListContainerStats %d), interleaved\n",
		r.sandboxes, r.containers, o.Iterations, o.StatsIterations)
	fmt.Fprintf(out, "settled %s after creating it (CPUs %.0f%% busy when measuring began)\n", r.settled.Round(time.Second), r.settleBusy*100)
	for k, p := range r.proxies {
		fmt.Fprintf(out, "\n%s vs direct\n", p.label)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "method\tdirect p50 µs\tproxy p50 µs\tadded p50 µs\tratio p50\tdirect p99 µs\tproxy p99 µs\tadded p99 µs\ttarget\t")
		for _, l := range r.latencies {
			d, s := l.samples[0], l.samples[k+1]
			d50, p50 := benchutil.Percentile(d, 50), benchutil.Percentile(s, 50)
			d99, p99 := benchutil.Percentile(d, 99), benchutil.Percentile(s, 99)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t\n", l.method.name, benchutil.Micros(d50), benchutil.Micros(p50), benchutil.Micros(p50-d50),
				float64(p50)/float64(d50), benchutil.Micros(d99), benchutil.Micros(p99), benchutil.Micros(p99-d99), target(l.method.class, d50, p50))
		}
		tw.Flush()
		dt, pt := mean(r.directTput), mean(p.tput)
		fmt.Fprintf(out, "throughput, ListContainers, %d clients, %d × %s per side: direct %.0f/s, proxy %.0f/s, ratio %.3f (target ≥ %.1f: %s)\n",
			o.Clients, o.Rounds, o.Duration, dt, pt, pt/dt, targetTputRatio, verdict(pt/dt >= targetTputRatio))
		if p.pid == 0 {
			fmt.Fprintln(out, "CPU and memory: not measured (--proxy-endpoint without --proxy-pid)")
			continue
		}
		fmt.Fprintf(out, "CPU per proxied call: latency phase %.1f µs (%d calls, includes idle time), throughput phase %.1f µs (%d calls) [10 ms ticks]\n",
			float64(p.latCPU)/float64(time.Microsecond)/float64(r.latencyCalls), r.latencyCalls,
			float64(p.tputCPU)/float64(time.Microsecond)/float64(p.tputCalls), p.tputCalls)
		fmt.Fprintf(out, "VmRSS: idle %.1f MiB (target < 16 MiB: %s), after load %.1f MiB\n",
			float64(p.rssIdle)/1024, verdict(p.rssIdle < targetIdleRSSKiB), float64(p.rssLoad)/1024)
	}
	if o.CompareCore && len(r.proxies) == 2 {
		reportOverFloor(out, r)
	}
}

// reportOverFloor compares cri-guard (side 1) with the proxy core alone
// (side 2) measured in the same run: the hop's floor on this machine at this
// moment, which moves with the machine's speed far more than the gap
// between the two does.
func reportOverFloor(out io.Writer, r results) {
	fmt.Fprintf(out, "\n%s vs %s (the floor: the same hop without hooks, sync loop or metrics)\n", r.proxies[0].label, r.proxies[1].label)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tadded p50 µs\tfloor added p50 µs\tadded/floor\ttarget\t")
	for _, l := range r.latencies {
		if l.method.class != "tiny" && l.method.class != "list" {
			continue
		}
		d50 := benchutil.Percentile(l.samples[0], 50)
		a, f := benchutil.Percentile(l.samples[1], 50)-d50, benchutil.Percentile(l.samples[2], 50)-d50
		ratio := float64(a) / float64(max(f, time.Microsecond))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t≤%.2f %s\t\n", l.method.name, benchutil.Micros(a), benchutil.Micros(f), ratio, targetOverFloor, verdict(ratio <= targetOverFloor))
	}
	tw.Flush()
	a, f := mean(r.proxies[0].tput), mean(r.proxies[1].tput)
	fmt.Fprintf(out, "throughput over the floor's: %.3f\n", a/f)
}
