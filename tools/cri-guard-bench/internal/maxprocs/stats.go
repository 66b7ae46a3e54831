package maxprocs

import (
	"fmt"
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// latencySummary is the distribution of a sample of durations.
type latencySummary struct {
	n                int
	median, p90, max time.Duration
}

func summarizeLatencies(ds []time.Duration) latencySummary {
	if len(ds) == 0 {
		return latencySummary{}
	}
	return latencySummary{n: len(ds), median: benchutil.Percentile(ds, 50), p90: benchutil.Percentile(ds, 90), max: slices.Max(ds)}
}

// fmtMs1 prints a duration in milliseconds with one decimal.
func fmtMs1(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// cpuRate is CPU seconds per wall second.
func cpuRate(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// rateRange is the mean and extremes of CPU rates over blocks.
type rateRange struct{ mean, min, max float64 }

func summarizeRates(rs []float64) rateRange {
	if len(rs) == 0 {
		return rateRange{}
	}
	s := 0.0
	for _, r := range rs {
		s += r
	}
	return rateRange{mean: s / float64(len(rs)), min: slices.Min(rs), max: slices.Max(rs)}
}

func (r rateRange) String() string {
	return fmt.Sprintf("%.3f (%.3f-%.3f)", r.mean, r.min, r.max)
}
