package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// reloader re-reads the config file on SIGHUP and applies its eviction
// thresholds without restarting; nothing else is reloaded.
type reloader struct {
	path    string
	current config.Config
	log     *logrus.Entry
	// firing returns the hard thresholds of a config that the node meets
	// now (firingHardThresholds); nil: not checked.
	firing func(config.Config) ([]string, error)
	// stateDir, when set, keeps a copy of each file applied (the last good
	// config, saveLastGood).
	stateDir string
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
	cfg, warnings, err := config.LoadLenient(r.path)
	if err != nil {
		for _, p := range problemLines(err, r.path) {
			log.WithField("problem", p).Error("config reload rejected: keeping the old thresholds")
		}
		return err
	}
	for _, w := range warnings {
		log.WithField("problem", w).Warn("config file: left out")
	}
	// Thresholds that the node already meets would stop pods within the
	// next pass: a reload is an edit, so they are taken for a mistake, as
	// check-config takes them, unless they are the ones in force.
	if r.firing != nil && !sameThresholds(cfg, r.current) {
		fired, ferr := r.firing(cfg)
		if ferr != nil {
			log.WithError(ferr).Warn("node check of the reloaded hard thresholds skipped")
		}
		if len(fired) > 0 {
			for _, p := range fired {
				log.WithField("problem", p).Error("config reload rejected: keeping the old thresholds")
			}
			return fmt.Errorf("reload: %s", strings.Join(fired, "; "))
		}
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
	if r.stateDir != "" {
		if raw, err := os.ReadFile(r.path); err == nil {
			if err := saveLastGood(r.stateDir, raw); err != nil {
				log.WithError(err).Warn("the last good config is not saved")
			}
		}
	}
	return nil
}

// withoutThresholds clears what a reload applies, to compare the rest.
func withoutThresholds(c config.Config) config.Config {
	c.EvictionHard, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim = nil, nil, nil, nil
	c.EvictionPressureTransitionPeriod = config.Duration{}
	c.EnforceNodeAllocatable = nil
	return c
}
