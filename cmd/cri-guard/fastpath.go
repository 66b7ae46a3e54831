package main

import (
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/guard"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// fastPoll is the guard's fast poll from the configuration.
func fastPoll(cfg config.Config) guard.FastPoll {
	return guard.FastPoll{Interval: cfg.FastPoll.Interval.Duration, Watch: cfg.FastPoll.Watch.Duration,
		Margin: cfg.FastPoll.MarginBytes(), MaxRate: cfg.FastPoll.MaxRateBytes()}
}

// wakeups are the sync loop's kernel wake-ups from the configuration: the
// PSI trigger on the pods cgroup (else the node); with
// kernelMemcgNotification, on a v1 host a kernel memcg threshold
// notification for each allocatableMemory.available threshold and, with
// the fast poll on, one at its near level (the loop re-arms them when a
// reload changes the thresholds), on a v2 host the pods cgroup's
// memory.events watch.
func wakeups(cfg config.Config, sampler *pressure.Sampler, ts []pressure.Threshold) guard.Wakeups {
	w := guard.Wakeups{PSITrigger: cfg.PSITrigger, TriggerFile: sampler.TriggerFile, Thresholds: ts}
	if !cfg.KernelMemcgNotification {
		return w
	}
	if ev, err := sampler.MemoryEventsWatcher(); err == nil {
		w.MemoryEvents = ev
	}
	var margin int64
	if cfg.FastPoll.Interval.Duration > 0 {
		margin = cfg.FastPoll.MarginBytes()
	}
	w.Notifiers = func(ts []pressure.Threshold) ([]guard.Notifier, error) {
		ns, err := sampler.MemcgNotifiers(ts, margin)
		out := make([]guard.Notifier, len(ns))
		for i, n := range ns {
			out[i] = n
		}
		return out, err
	}
	return w
}
