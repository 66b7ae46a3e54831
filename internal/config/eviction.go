package config

import (
	"fmt"
	"slices"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// thresholdConfig returns the eviction settings in the pressure package's form.
func (c Config) thresholdConfig() pressure.ThresholdConfig {
	return pressure.ThresholdConfig{
		Hard:             c.EvictionHard,
		Soft:             c.EvictionSoft,
		SoftGracePeriod:  c.EvictionSoftGracePeriod,
		MinimumReclaim:   c.EvictionMinimumReclaim,
		TransitionPeriod: c.EvictionPressureTransitionPeriod.Duration,
		// the kubelet parses its thresholds with enforceNodeAllocatable
		// (pkg/kubelet/eviction/helpers.go ParseThresholdConfig); without
		// a pods cgroup there is no allocatableMemory.available to watch
		AllocatableFromHard: c.PodsCgroup != "" && slices.Contains(c.EnforceNodeAllocatable, "pods"),
	}
}

// Thresholds parses the eviction thresholds; Validate has checked them.
func (c Config) Thresholds() ([]pressure.Threshold, error) {
	return pressure.ParseThresholds(c.thresholdConfig())
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
		if _, err := pressure.ParseTriggerSpec(c.PSITrigger); err != nil {
			errs = append(errs, fmt.Errorf("psiTrigger: %w", err))
		}
	}
	return append(errs, c.validateFastPath()...)
}
