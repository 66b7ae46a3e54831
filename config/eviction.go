package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cri-guard/cri-guard/pod"
	"github.com/cri-guard/cri-guard/pressure"
)

// ThresholdConfig returns the eviction settings in the pressure package's form.
func (c Config) ThresholdConfig() pressure.ThresholdConfig {
	return pressure.ThresholdConfig{
		Hard:             c.EvictionHard,
		Soft:             c.EvictionSoft,
		SoftGracePeriod:  c.EvictionSoftGracePeriod,
		MinimumReclaim:   c.EvictionMinimumReclaim,
		TransitionPeriod: c.EvictionPressureTransitionPeriod.Duration,
	}
}

// Thresholds parses the eviction thresholds; Validate has checked them.
func (c Config) Thresholds() ([]pressure.Threshold, error) {
	return pressure.ParseThresholds(c.ThresholdConfig())
}

// CriticalRules returns the critical-pod rules in the pod package's form.
func (c Config) CriticalRules() pod.CriticalRules {
	return pod.CriticalRules{Mode: c.Critical.Rules, Namespaces: c.Critical.Namespaces, PriorityAnnotation: c.Critical.PriorityAnnotation}
}

// validateEviction checks thresholds and the PSI trigger.
func (c Config) validateEviction() []error {
	var errs []error
	if _, err := c.Thresholds(); err != nil {
		errs = append(errs, err)
	}
	if err := c.CriticalRules().Validate(); err != nil && (c.Critical.Rules == "modern" || c.Critical.Rules == "seed") {
		errs = append(errs, fmt.Errorf("critical: %w", err))
	}
	if c.PSITrigger != "" {
		if err := ValidatePSITrigger(c.PSITrigger); err != nil {
			errs = append(errs, fmt.Errorf("psiTrigger: %w", err))
		}
	}
	return errs
}

// ValidatePSITrigger checks a trigger "some|full <stall µs> <window µs>": the
// kernel takes windows of 500ms to 10s, stall at most the window; an
// unprivileged writer (no CAP_SYS_RESOURCE) only windows that are multiples
// of 2 s.
func ValidatePSITrigger(s string) error {
	f := strings.Fields(s)
	if len(f) != 3 || (f[0] != "some" && f[0] != "full") {
		return fmt.Errorf("want \"some|full <stall µs> <window µs>\", got %q", s)
	}
	stall, err1 := strconv.ParseUint(f[1], 10, 32)
	window, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("stall and window must be whole microseconds, got %q", s)
	}
	w := time.Duration(window) * time.Microsecond
	if w < 500*time.Millisecond || w > 10*time.Second {
		return fmt.Errorf("window must be 500ms to 10s, got %s", w)
	}
	if stall == 0 || stall > window {
		return fmt.Errorf("stall must be above 0 and at most the window, got %dµs of %dµs", stall, window)
	}
	return nil
}
