package main

import (
	"github.com/cri-guard/cri-guard/config"
	"github.com/cri-guard/cri-guard/guard"
	"github.com/cri-guard/cri-guard/pressure"
)

// fastPoll is the guard's fast poll from the configuration.
func fastPoll(cfg config.Config) guard.FastPoll {
	return guard.FastPoll{Interval: cfg.FastPoll.Interval.Duration, Watch: cfg.FastPoll.Watch.Duration, Margin: cfg.FastPoll.MarginBytes()}
}

// wakeups are the sync loop's kernel wake-ups from the configuration: the
// PSI trigger on the pods cgroup (else the node), and a kernel memcg
// threshold notification for each allocatableMemory.available threshold
// (kernelMemcgNotification), which the loop re-arms when a reload changes
// the thresholds.
func wakeups(cfg config.Config, sampler *pressure.Sampler, ts []pressure.Threshold) guard.Wakeups {
	w := guard.Wakeups{PSITrigger: cfg.PSITrigger, TriggerFile: sampler.TriggerFile, Thresholds: ts}
	if cfg.KernelMemcgNotification {
		w.Notifiers = func(ts []pressure.Threshold) ([]guard.Notifier, error) {
			ns, err := sampler.MemcgNotifiers(ts)
			out := make([]guard.Notifier, len(ns))
			for i, n := range ns {
				out[i] = n
			}
			return out, err
		}
	}
	return w
}
