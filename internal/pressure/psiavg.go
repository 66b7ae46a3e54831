package pressure

import (
	"math"
	"time"
)

// psiMinStep is the shortest interval between two readings that moves a
// fresh average: shorter ones would turn scheduling jitter into noise.
const psiMinStep = 50 * time.Millisecond

// psiAverage keeps the 10 s and 60 s averages of one pressure file fresh
// between the kernel's updates. The kernel recomputes avg10 and avg60 only
// every 2 s, so a sample taken right after a PSI trigger still shows the
// averages of up to 2 s before: a stall that has already started is not in
// them yet. The cumulative stall time ("total", µs) is exact at every read,
// so the averages are advanced here with the kernel's own formula
// (exponential decay with a 10 s and 60 s period) from the stall share
// between two readings.
//
// A reading reports, per average, the larger of the kernel's and this
// estimate: the estimate is never older than the kernel's, and the kernel's
// corrects it after a long gap between readings, where the estimate spreads
// a burst evenly over the whole gap.
type psiAverage struct {
	at           time.Time
	total        uint64
	avg10, avg60 float64
	seeded       bool
}

// update folds a reading taken at now into the estimate and returns p with
// Avg10 and Avg60 made fresh. The first reading, a counter that went back
// (the cgroup was recreated) or a clock that went back seeds the estimate
// from the kernel's figures.
func (a *psiAverage) update(p PSI, now time.Time) PSI {
	if !a.seeded || p.Total < a.total || now.Before(a.at) {
		*a = psiAverage{at: now, total: p.Total, avg10: p.Avg10, avg60: p.Avg60, seeded: true}
		return p
	}
	if dt := now.Sub(a.at); dt >= psiMinStep {
		share := 100 * float64(p.Total-a.total) / float64(dt.Microseconds())
		share = min(max(share, 0), 100)
		a.avg10 = decay(a.avg10, share, dt, 10*time.Second)
		a.avg60 = decay(a.avg60, share, dt, 60*time.Second)
		a.at, a.total = now, p.Total
	}
	p.Avg10 = max(p.Avg10, a.avg10)
	p.Avg60 = max(p.Avg60, a.avg60)
	return p
}

// decay moves avg towards share over dt as an exponential average with the
// given period does (the kernel's calc_avgs).
func decay(avg, share float64, dt, period time.Duration) float64 {
	k := math.Exp(-dt.Seconds() / period.Seconds())
	return avg*k + share*(1-k)
}
