package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FastPoll configures the sync loop's fast poll near a threshold (issue 16):
// while a memory signal is within Margin of a threshold (or one is met) the
// loop evaluates every Interval; otherwise it samples the node every Watch
// to notice the approach. Interval "0s" disables it.
type FastPoll struct {
	Interval Duration `json:"interval"`
	Watch    Duration `json:"watch"`
	// Margin is a quantity ("256Mi").
	Margin string `json:"margin"`
}

// The fast path defaults: on, cheap enough to leave on (README, "Racing the
// OOM killer").
const (
	DefaultKernelMemcgNotification = true
	DefaultFastPollInterval        = 10 * time.Millisecond
	DefaultFastPollWatch           = 200 * time.Millisecond
	DefaultFastPollMargin          = "256Mi"
)

// DefaultFastPoll is the default fast poll.
func DefaultFastPoll() FastPoll {
	return FastPoll{Interval: Duration{DefaultFastPollInterval}, Watch: Duration{DefaultFastPollWatch}, Margin: DefaultFastPollMargin}
}

// MarginBytes is the margin in bytes; Validate has checked it.
func (f FastPoll) MarginBytes() int64 {
	if f.Margin == "" {
		return 0
	}
	q, err := resource.ParseQuantity(f.Margin)
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
	return errs
}
