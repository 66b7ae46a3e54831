package main

import (
	"context"
	"errors"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/config"
	"github.com/cri-guard/cri-guard/guard"
	"github.com/cri-guard/cri-guard/pressure"
)

// fastPoll is the guard's fast poll from the configuration.
func fastPoll(cfg config.Config) guard.FastPoll {
	return guard.FastPoll{Interval: cfg.FastPoll.Interval.Duration, Watch: cfg.FastPoll.Watch.Duration, Margin: cfg.FastPoll.MarginBytes()}
}

// runMemcgNotifiers arms a kernel memcg threshold notification for each
// allocatableMemory.available threshold (kernelMemcgNotification) and runs
// a housekeeping pass each time one fires; where the host has no v1 memory
// cgroup for the pods cgroup it says so once and returns. A reload of the
// thresholds is picked up at the next restart.
func runMemcgNotifiers(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, sampler *pressure.Sampler, loop *guard.Loop, log *logrus.Entry) {
	ts, err := cfg.Thresholds()
	if err != nil {
		log.WithError(err).Error("kernel memcg notification disabled")
		return
	}
	ns, err := sampler.MemcgNotifiers(ts)
	if errors.Is(err, pressure.ErrNoMemcgNotification) {
		log.WithError(err).Info("kernel memcg notification not available on this host: the fast poll and housekeeping watch the pods cgroup")
		return
	}
	if err != nil {
		log.WithError(err).Error("kernel memcg notification disabled")
		return
	}
	for _, n := range ns {
		log.WithField("notifier", n.String()).Info("kernel memcg notification armed")
		wg.Go(func() {
			err := n.Run(ctx, func() {
				log.Debug("kernel memcg notification fired")
				loop.Trigger()
			})
			if err != nil {
				log.WithError(err).WithField("notifier", n.String()).Warn("kernel memcg notification stopped: only the fast poll and housekeeping watch")
			}
		})
	}
}
