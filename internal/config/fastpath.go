package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FastPoll configures the sync loop's fast poll near a threshold, so that a
// fast-growing pod is caught between two housekeeping ticks: while a
// memory signal is within Margin of a threshold (or one is met) the loop
// evaluates every Interval; otherwise it samples the node (the watch) to
// notice the approach, at most every Watch and spaced by the distance to
// the near band over MaxRate (so a node far from every threshold is
// sampled rarely), not for a signal a kernel notification watches. Interval "0s" disables it.
type FastPoll struct {
	Interval Duration `json:"interval"`
	Watch    Duration `json:"watch"`
	// Margin is a quantity ("256Mi").
	Margin string `json:"margin"`
	// MaxRate is a quantity per second ("2Gi"): the fastest growth the
	// watch is spaced for; "0": every Watch.
	MaxRate string `json:"maxRate"`
}

// The fast path defaults: on, cheap enough to leave on (docs/behaviour.md,
// "Racing the OOM killer"; docs/benchmarks.md measures them).
const (
	defaultKernelMemcgNotification = true
	defaultFastPollInterval        = 10 * time.Millisecond
	defaultFastPollWatch           = 200 * time.Millisecond
	defaultFastPollMargin          = "256Mi"
	// defaultFastPollMaxRate is above the fastest first touch of fresh
	// memory measured on the machines of the race (1.6 GB/s).
	defaultFastPollMaxRate = "2Gi"
)

// defaultFastPoll is the default fast poll.
func defaultFastPoll() FastPoll {
	return FastPoll{Interval: Duration{defaultFastPollInterval}, Watch: Duration{defaultFastPollWatch}, Margin: defaultFastPollMargin, MaxRate: defaultFastPollMaxRate}
}

// MaxRateBytes is the max rate in bytes per second; Validate has checked it.
func (f FastPoll) MaxRateBytes() int64 { return quantityBytes(f.MaxRate) }

// MarginBytes is the margin in bytes; Validate has checked it.
func (f FastPoll) MarginBytes() int64 { return quantityBytes(f.Margin) }

// quantityBytes is a quantity's value, 0 when empty or invalid.
func quantityBytes(s string) int64 {
	if s == "" {
		return 0
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0
	}
	return q.Value()
}

// validateFastPath checks the fast poll.
func (c Config) validateFastPath() []error {
	var errs []error
	f := c.FastPoll
	if f.Interval.Duration < 0 || (f.Interval.Duration > 0 && f.Interval.Duration < time.Millisecond) {
		errs = append(errs, fmt.Errorf("fastPoll.interval: must be 0 (off) or at least 1ms, got %s", f.Interval))
	}
	if f.Watch.Duration < 0 || (f.Watch.Duration > 0 && f.Watch.Duration < f.Interval.Duration) {
		errs = append(errs, fmt.Errorf("fastPoll.watch: must be 0 (off) or at least fastPoll.interval, got %s", f.Watch))
	}
	if f.Margin != "" {
		if q, err := resource.ParseQuantity(f.Margin); err != nil || q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("fastPoll.margin: want a non-negative quantity such as 256Mi, got %q", f.Margin))
		}
	}
	if f.MaxRate != "" {
		if q, err := resource.ParseQuantity(f.MaxRate); err != nil || q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("fastPoll.maxRate: want a non-negative quantity per second such as 2Gi, got %q", f.MaxRate))
		}
	}
	return errs
}
