package main

import (
	"context"
	"os"
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/config"
	"github.com/cri-guard/cri-guard/pressure"
)

// reloader re-reads the config file on SIGHUP and applies its eviction
// thresholds without restarting; nothing else is reloaded.
type reloader struct {
	path    string
	current config.Config
	log     *logrus.Entry
	// apply installs new thresholds; it runs them on the sync loop
	// goroutine (evictor.Manager.SetThresholds is not goroutine-safe).
	apply func(ctx context.Context, ts []pressure.Threshold, transition time.Duration) error
}

// run reloads on every value from hup until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.reload(ctx)
		}
	}
}

// reload reads the file and applies its thresholds. A file with errors is
// logged, problem by problem, and the old thresholds stay.
func (r *reloader) reload(ctx context.Context) error {
	log := r.log.WithField("config", r.path)
	if r.path == "" {
		log.Warn("reload asked but cri-guard runs without --config: nothing to reload")
		return nil
	}
	cfg, err := config.Load(r.path)
	if err != nil {
		for _, p := range problemLines(err, r.path) {
			log.WithField("problem", p).Error("config reload rejected: keeping the old thresholds")
		}
		return err
	}
	ts, err := cfg.Thresholds()
	if err != nil { // Load validated them: not expected
		log.WithError(err).Error("config reload rejected: keeping the old thresholds")
		return err
	}
	if err := r.apply(ctx, ts, cfg.EvictionPressureTransitionPeriod.Duration); err != nil {
		log.WithError(err).Error("config reload not applied")
		return err
	}
	if !reflect.DeepEqual(withoutThresholds(cfg), withoutThresholds(r.current)) {
		log.Warn("config changes other than eviction thresholds need a restart")
	}
	r.current.EvictionHard, r.current.EvictionSoft = cfg.EvictionHard, cfg.EvictionSoft
	r.current.EvictionSoftGracePeriod, r.current.EvictionMinimumReclaim = cfg.EvictionSoftGracePeriod, cfg.EvictionMinimumReclaim
	r.current.EvictionPressureTransitionPeriod = cfg.EvictionPressureTransitionPeriod
	r.current.EnforceNodeAllocatable = cfg.EnforceNodeAllocatable
	thresholds := make([]string, len(ts))
	for i, t := range ts {
		thresholds[i] = t.String()
	}
	log.WithField("thresholds", thresholds).Info("eviction thresholds reloaded")
	return nil
}

// withoutThresholds clears what a reload applies, to compare the rest.
func withoutThresholds(c config.Config) config.Config {
	c.EvictionHard, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim = nil, nil, nil, nil
	c.EvictionPressureTransitionPeriod = config.Duration{}
	c.EnforceNodeAllocatable = nil
	return c
}
