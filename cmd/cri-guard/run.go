package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/checkpoint"
	"github.com/cri-guard/cri-guard/config"
	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/guard"
	"github.com/cri-guard/cri-guard/pod"
	"github.com/cri-guard/cri-guard/pressure"
	"github.com/cri-guard/cri-guard/runtimeproxy"
	"github.com/cri-guard/cri-guard/server"
)

// hardGracePeriod is the grace period of evictions for hard thresholds.
const hardGracePeriod = 2 * time.Second

// run wires the daemon: restore from checkpoints, then serve until ctx is
// done (SIGTERM/SIGINT), then stop gracefully: no new connections, in-flight
// calls get opts.ShutdownTimeout to finish.
func run(ctx context.Context, opts options, log *logrus.Entry) error {
	cfg := opts.Config
	logger := log.Logger
	rt, err := runtimeproxy.New(runtimeproxy.Config{Endpoint: cfg.RuntimeEndpoint},
		logger.WithField("component", "runtimeproxy"))
	if err != nil {
		return err
	}
	defer func() {
		if err := rt.Close(); err != nil {
			log.WithError(err).Warn("close runtime connection")
		}
	}()

	loop, ev, sampler, err := newGuard(cfg, rt, logger)
	if err != nil {
		return err
	}
	if err := restore(ctx, loop, log); err != nil {
		return err
	}

	var wg sync.WaitGroup
	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer func() { stopLoop(); wg.Wait() }()
	wg.Go(func() {
		if err := loop.Run(loopCtx); err != nil {
			log.WithError(err).Error("sync loop stopped")
		}
	})
	wg.Go(func() {
		_ = loop.RunEvents(loopCtx, func(ctx context.Context) (guard.EventStream, error) { return rt.GetContainerEvents(ctx) })
	})
	if cfg.PSITrigger != "" {
		wg.Go(func() { runTrigger(loopCtx, sampler.TriggerFile(), cfg.PSITrigger, loop, logger.WithField("component", "psi")) })
	}
	_ = ev

	hooks := server.SandboxHooks(loop, loop, cfg.CriticalRules(), nil)
	srv, err := server.New(server.Config{Listen: cfg.Listen, ShutdownTimeout: opts.ShutdownTimeout},
		rt, hooks, logger.WithField("component", "server"))
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"listen": cfg.Listen, "runtime_endpoint": rt.Endpoint(), "version": version}).Info("serving")
	if err := srv.Serve(ctx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// newGuard builds the sampler, the checkpoint store, the eviction manager
// and the sync loop from the configuration.
func newGuard(cfg config.Config, rt *runtimeproxy.Client, logger *logrus.Logger) (*guard.Loop, *evictor.Manager, *pressure.Sampler, error) {
	sampler, err := pressure.NewSampler(pressure.SamplerConfig{CgroupRoot: cfg.CgroupRoot, ProcRoot: cfg.ProcRoot, PodsCgroup: cfg.PodsCgroup})
	if err != nil {
		return nil, nil, nil, err
	}
	source, podMem := sampler.Source()
	logger.WithField("component", "pressure").WithField("source", source).WithField("pod_memory_cgroup", podMem).Info("memory stats source")
	thresholds, err := cfg.Thresholds()
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := checkpoint.New(cfg.StateDir, logger.WithField("component", "checkpoint"))
	if err != nil {
		return nil, nil, nil, err
	}
	var loop *guard.Loop
	ev, err := evictor.New(evictor.Config{
		Thresholds:        thresholds,
		TransitionPeriod:  cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriod: cfg.EvictionMaxPodGracePeriod.Duration,
		HardGracePeriod:   hardGracePeriod,
		OnStatsError:      evictor.StatsErrorPolicy(cfg.OnStatsError),
		DryRun:            cfg.DryRun,
	}, evictor.Options{
		Sampler: sampler,
		Kill: func(ctx context.Context, p *pod.Pod, grace time.Duration) error {
			return loop.KillPod(ctx, p, grace)
		},
		Log: logger.WithField("component", "evictor"),
	})
	if err != nil {
		return nil, nil, nil, err
	}
	loop, err = guard.New(guard.Config{
		HousekeepingInterval: cfg.HousekeepingInterval.Duration,
		EnforceRestored:      cfg.RestoredPods == "enforce",
		Rules:                cfg.CriticalRules(),
	}, guard.Options{Runtime: rt, Store: store, Evictor: ev, Log: logger.WithField("component", "guard")})
	if err != nil {
		return nil, nil, nil, err
	}
	return loop, ev, sampler, nil
}

// restore replays the checkpoints, retrying while containerd cannot be
// reached; cri-guard does not serve before it has finished.
func restore(ctx context.Context, loop *guard.Loop, log *logrus.Entry) error {
	for attempt := 0; ; attempt++ {
		_, err := loop.Restore(ctx)
		if err == nil {
			return nil
		}
		if !runtimeproxy.IsUnavailable(err) {
			return err
		}
		if attempt == 0 {
			log.WithError(err).Warn("runtime not reachable: restore waits for it")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runTrigger arms the PSI trigger on the pods cgroup's memory.pressure when
// one is configured and readable, else on the node's, and runs a
// housekeeping pass each time it fires.
func runTrigger(ctx context.Context, path, spec string, loop *guard.Loop, log *logrus.Entry) {
	tr, err := pressure.NewTrigger(path, spec)
	if err != nil {
		log.WithError(err).Error("psi trigger disabled")
		return
	}
	log.WithField("trigger", tr.String()).Info("psi trigger armed")
	err = tr.Run(ctx, loop.Trigger)
	switch {
	case err == nil:
	case errors.Is(err, pressure.ErrTriggerRejected):
		log.WithError(err).Error("psi trigger rejected by the kernel: only housekeeping polls (use a window that is a multiple of 2s)")
	default:
		log.WithError(err).Warn("psi trigger stopped: only housekeeping polls")
	}
}
