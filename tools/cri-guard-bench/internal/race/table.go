package race

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// raceOutcome is how one race run ended.
type raceOutcome string

// The outcomes of a race run.
const (
	// outcomeWon: cri-guard stopped the runaway's sandbox before any OOM
	// kill in the domain.
	outcomeWon raceOutcome = "won"
	// outcomeOOM: the kernel OOM-killed a process in the domain first.
	outcomeOOM raceOutcome = "oom"
	// outcomeWrongPod: cri-guard stopped another pod first (no OOM kill).
	outcomeWrongPod raceOutcome = "wrong-pod"
	// outcomeTimeout: neither happened within the run's bound.
	outcomeTimeout raceOutcome = "timeout"
	// outcomeError: the run could not be set up or watched.
	outcomeError raceOutcome = "error"
)

// raceRun is what one run measured. Durations are from the first sample
// at or below the threshold (crossed); zero when that did not happen.
type raceRun struct {
	mode    string
	rate    float64 // MB/s
	outcome raceOutcome
	// killed names the roles whose pods the OOM killer hit (outcomeOOM),
	// or the pod cri-guard stopped instead (outcomeWrongPod).
	killed []string
	// crossed reports whether allocatableMemory.available reached the
	// threshold; toDecision and toStopped are measured from then.
	crossed    bool
	toDecision time.Duration // -1: no decision logged
	toStopped  time.Duration // -1: not stopped
	peakBytes  int64         // the domain's peak usage
	// grewBytes is how much the domain's working set grew from the
	// decision to its peak (the runaway during the stop and its grace).
	grewBytes int64
	// measuredRate is the growth the runaway reached near the threshold,
	// MB/s (0: not measured).
	measuredRate float64
	err          string
}

// raceRow is the summary of one mode at one rate.
type raceRow struct {
	mode                 string
	rate                 float64
	runs, won, lost      int
	killed               map[string]int
	decision, stopped    []time.Duration
	peakMax, grewMax     int64
	measured             []float64
	timeouts, wrong, err int
}

// summarize groups runs by mode and rate, in the order the modes were
// given and by increasing rate.
func summarize(runs []raceRun, modes []string) []raceRow {
	type key struct {
		mode string
		rate float64
	}
	rows := map[key]*raceRow{}
	for _, r := range runs {
		k := key{r.mode, r.rate}
		row := rows[k]
		if row == nil {
			row = &raceRow{mode: r.mode, rate: r.rate, killed: map[string]int{}}
			rows[k] = row
		}
		row.runs++
		switch r.outcome {
		case outcomeWon:
			row.won++
		case outcomeOOM:
			row.lost++
			for _, k := range r.killed {
				row.killed[k]++
			}
		case outcomeWrongPod:
			row.lost++
			row.wrong++
		case outcomeTimeout:
			row.lost++
			row.timeouts++
		default:
			row.err++
		}
		if r.crossed && r.toDecision >= 0 {
			row.decision = append(row.decision, r.toDecision)
		}
		if r.crossed && r.toStopped >= 0 && r.outcome == outcomeWon {
			row.stopped = append(row.stopped, r.toStopped)
		}
		if r.measuredRate > 0 {
			row.measured = append(row.measured, r.measuredRate)
		}
		row.peakMax = max(row.peakMax, r.peakBytes)
		row.grewMax = max(row.grewMax, r.grewBytes)
	}
	out := make([]raceRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	order := func(m string) int {
		if i := slices.Index(modes, m); i >= 0 {
			return i
		}
		return len(modes)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].rate != out[j].rate {
			return out[i].rate < out[j].rate
		}
		if order(out[i].mode) != order(out[j].mode) {
			return order(out[i].mode) < order(out[j].mode)
		}
		return out[i].mode < out[j].mode
	})
	return out
}

// winningRate is the highest rate up to which the mode won every run at
// every rate measured (0: it lost at the lowest).
func winningRate(rows []raceRow, mode string) float64 {
	best := 0.0
	for _, r := range rows { // by increasing rate
		if r.mode != mode {
			continue
		}
		if r.won != r.runs {
			return best
		}
		best = r.rate
	}
	return best
}

func fmtDurations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	return fmt.Sprintf("%s/%s", fmtMs(med), fmtMs(s[len(s)-1]))
}

// fmtMedianRate is the median of the measured rates, or "-".
func fmtMedianRate(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	s := slices.Clone(rs)
	slices.Sort(s)
	return fmt.Sprintf("%.0f", s[len(s)/2])
}

func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
}

func fmtKilled(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// printRace writes the detailed table, then the matrix of runs won by
// rate and mode, then the winning rate of each mode.
func printRace(w io.Writer, runs []raceRun, modes []string) {
	rows := summarize(runs, modes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rate MB/s\treached MB/s\tmode\twon\tlost\tOOM-killed\tcross→decision med/max\tcross→stopped med/max\tpeak MiB\tgrew after decision MiB\tnotes")
	for _, r := range rows {
		var notes []string
		if r.wrong > 0 {
			notes = append(notes, fmt.Sprintf("%d wrong pod", r.wrong))
		}
		if r.timeouts > 0 {
			notes = append(notes, fmt.Sprintf("%d timeout", r.timeouts))
		}
		if r.err > 0 {
			notes = append(notes, fmt.Sprintf("%d error", r.err))
		}
		fmt.Fprintf(tw, "%g\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", r.rate, fmtMedianRate(r.measured), r.mode, r.won, r.runs, r.lost,
			fmtKilled(r.killed), fmtDurations(r.decision), fmtDurations(r.stopped), r.peakMax>>20, r.grewMax>>20,
			strings.Join(notes, "; "))
	}
	tw.Flush()

	fmt.Fprintln(w)
	var rates []float64
	for _, r := range rows {
		if !slices.Contains(rates, r.rate) {
			rates = append(rates, r.rate)
		}
	}
	won := map[string]map[float64]raceRow{}
	for _, r := range rows {
		if won[r.mode] == nil {
			won[r.mode] = map[float64]raceRow{}
		}
		won[r.mode][r.rate] = r
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "runs won\t")
	for _, rate := range rates {
		fmt.Fprintf(tw, "%g MB/s\t", rate)
	}
	fmt.Fprintln(tw, "wins every run up to\t")
	for _, m := range modes {
		if won[m] == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t", m)
		for _, rate := range rates {
			if r, ok := won[m][rate]; ok {
				fmt.Fprintf(tw, "%d/%d\t", r.won, r.runs)
			} else {
				fmt.Fprint(tw, "\t")
			}
		}
		if wr := winningRate(rows, m); wr > 0 {
			fmt.Fprintf(tw, "%g MB/s\t\n", wr)
		} else {
			fmt.Fprint(tw, "none\t\n")
		}
	}
	tw.Flush()
}
