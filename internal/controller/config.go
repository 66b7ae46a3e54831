package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cri-guard/cri-guard/internal/kube"
)

// TaintKey is the key of the taint the controller keeps. Releases of the
// daemon that set the taint from the node used the same key, so that a
// taint left by one is taken over, not duplicated.
const TaintKey = "cri-guard.io/memory-pressure"

// conditionType is the node condition the taint follows.
const conditionType = kube.NodeConditionType

// DefaultStaleAfter is how old a condition's heartbeat may be before it
// counts as Unknown: three node status reports (the kubelet reports every
// 5 minutes when nothing changes; cri-guard refreshes its heartbeat more
// often), so that one or two lost writes do not untaint a node.
const DefaultStaleAfter = 3 * 5 * time.Minute

// DefaultWorkers is how many nodes are reconciled at once.
const DefaultWorkers = 2

// Config is what the operator chooses.
type Config struct {
	// Effect is the taint's effect: NoSchedule (default), PreferNoSchedule
	// or NoExecute.
	Effect corev1.TaintEffect
	// StaleAfter: a condition whose lastHeartbeatTime is older counts as
	// Unknown and untaints its node (default DefaultStaleAfter).
	StaleAfter time.Duration
	// Workers is how many nodes are reconciled at once (default
	// DefaultWorkers).
	Workers int
}

// withDefaults fills the zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Effect == "" {
		c.Effect = corev1.TaintEffectNoSchedule
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if err := ValidEffect(c.Effect); err != nil {
		return c, err
	}
	if c.StaleAfter < 0 {
		return c, fmt.Errorf("stale-after %v: want a positive duration", c.StaleAfter)
	}
	if c.Workers < 0 {
		return c, fmt.Errorf("workers %d: want a positive number", c.Workers)
	}
	return c, nil
}

// ValidEffect says whether e is a taint effect the controller may set.
func ValidEffect(e corev1.TaintEffect) error {
	switch e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("taint effect %q: want NoSchedule, PreferNoSchedule or NoExecute", e)
}
