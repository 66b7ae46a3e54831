package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/connectivity"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/guard"
	"github.com/cri-guard/cri-guard/internal/kube"
	"github.com/cri-guard/cri-guard/internal/metrics"
	"github.com/cri-guard/cri-guard/internal/podkill"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/server"
)

// hardGracePeriod is the grace period of evictions for hard thresholds: the
// kubelet's immediateEvictionGracePeriodSeconds.
const hardGracePeriod = time.Second

// run wires the daemon: restore from checkpoints, then serve until ctx is
// done (SIGTERM/SIGINT), then stop gracefully: no new connections, in-flight
// calls get opts.ShutdownTimeout to finish.
func run(ctx context.Context, opts options, log *logrus.Entry) error {
	cfg := opts.Config
	logger := log.Logger
	notify := newNotifier(logger.WithField("component", "systemd"))
	// SIGHUP is taken from the start: its default action would kill us.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

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

	h := newHealth(logger.WithField("component", "health"), notify.status)
	for _, p := range opts.Problems {
		h.set("config", p)
	}
	var m *metrics.Metrics
	if cfg.MetricsAddress != "" {
		m = metrics.New()
	}
	var kc *lateKube
	if cfg.Kubernetes.Kubeconfig != "" {
		kc = &lateKube{log: logger.WithField("component", "kube")}
		_ = kc.try(cfg, logger, m) // else retried once the loop runs (connect)
	}
	g, err := newGuard(cfg, rt, logger, m, notify.watchdog, notify.watchdogInterval()/4, kc)
	if err != nil {
		return err
	}
	defer func() { _ = g.store.Close(); g.bounded.Close(); g.killer.Close() }()
	loop, ev := g.loop, g.ev
	if opts.configRaw != nil {
		if err := saveLastGood(cfg.StateDir, opts.configRaw); err != nil {
			log.WithError(err).Warn("the last good config is not saved: a broken config file at the next start runs the defaults")
		}
	}
	if m != nil {
		m.Registry().MustRegister(metrics.NewCollector(metrics.StateSource{
			Snapshot:  ev.Snapshot,
			Connected: func() bool { return rt.State() == connectivity.Ready },
			Degraded:  func() bool { return loop.Degraded() != nil },
			Parts:     h.problems,
			Wakeups:   loop.Wakeups,

			StoreAvailable: g.store.Available,
			Unsaved:        func() int { return loop.Unsaved().Records },
		}))
	}

	if err := restore(ctx, loop, opts.RestoreTimeout, log); err != nil {
		return err
	}

	var wg sync.WaitGroup
	loopCtx, stopLoop := context.WithCancel(context.Background())
	defer func() {
		stopLoop()
		wg.Wait()
		// the records handed to the writer are written before the store closes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := loop.Flush(ctx); err != nil {
			log.WithError(err).Warn("checkpoint writes not finished at shutdown")
		}
	}()
	wg.Go(func() {
		if err := loop.Run(loopCtx); err != nil {
			log.WithError(err).Error("sync loop stopped")
		}
	})
	if loop.Degraded() != nil {
		wg.Go(func() { retryRestore(loopCtx, loop, logger.WithField("component", "restore")) })
	}
	if kc != nil {
		kc.connect(loopCtx, &wg, cfg, logger, m, h)
	}
	// One runtime event stream, shared by the sync loop and every kubelet
	// stream (containerd 1.7 would split events among separate streams).
	hub := runtimeproxy.NewEventHub(rt, logger.WithField("component", "events"))
	wg.Go(func() {
		_ = loop.RunEvents(loopCtx, func(ctx context.Context) (guard.EventStream, error) { return hub.Subscribe(ctx), nil })
	})
	rl := newReloader(opts, loop, logger)
	wg.Go(func() { rl.run(loopCtx, hup) })
	serveMetrics(loopCtx, &wg, cfg, m, h, logger)
	serveAdmin(loopCtx, &wg, cfg, g, rt, kc, h, logger)

	hooks := server.SandboxHooks(loop, cfg.CriticalRules(), nil)
	scfg := server.Config{Listen: cfg.Listen, ShutdownTimeout: opts.ShutdownTimeout,
		SubscribeEvents: func(ctx context.Context) server.EventSubscription { return hub.Subscribe(ctx) }}
	if m != nil {
		scfg.Observer = m
	}
	if kc != nil {
		ks := &kubeletStarts{procRoot: "/proc", started: kc.kubeletStarted, stopped: kc.kubeletStopped, log: logger.WithField("component", "kube")}
		scfg.ProcessConnected, scfg.ProcessDisconnected = ks.connected, ks.disconnected
	}
	srv, err := server.New(scfg, rt, hooks, logger.WithField("component", "server"))
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	notify.Ready()
	h.publish()
	stopNotify := context.AfterFunc(ctx, notify.Stopping)
	defer stopNotify()
	log.WithFields(logrus.Fields{"listen": cfg.Listen, "runtime_endpoint": rt.Endpoint(), "version": version,
		"metrics": cfg.MetricsAddress, "admin_socket": cfg.AdminSocket}).Info("serving")
	if err := srv.Serve(ctx); err != nil {
		notify.Stopping()
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// guardParts is what newGuard builds.
type guardParts struct {
	loop    *guard.Loop
	ev      *evictor.Manager
	store   *checkpoint.Deferred // holds the state directory's lock until closed, once open
	bounded *pressure.Bounded    // the evictor's sampler; its goroutine ends on Close
	killer  *podkill.Bounded     // the loop's killer past the runtime; likewise
}

// newGuard builds the sampler, the checkpoint store, the eviction manager
// and the sync loop from the configuration.
// m, when not nil, counts decisions and checkpoint operations; watchdog is
// called after every housekeeping pass and every watchdogEvery (a quarter
// of WatchdogSec: the notifier pings at most every half), so that a
// housekeeping interval longer than WatchdogSec does not get a healthy
// loop killed.
func newGuard(cfg config.Config, rt *runtimeproxy.Client, logger *logrus.Logger, m *metrics.Metrics, watchdog func(), watchdogEvery time.Duration, kc *lateKube) (guardParts, error) {
	sampler, err := pressure.NewSampler(pressure.SamplerConfig{CgroupRoot: cfg.CgroupRoot, ProcRoot: cfg.ProcRoot, PodsCgroup: cfg.PodsCgroup, SubtractHugePages: cfg.SubtractHugePages()})
	if err != nil {
		return guardParts{}, err
	}
	source, podMem := sampler.Source()
	logger.WithField("component", "pressure").WithField("source", source).WithField("pod_memory_cgroup", podMem).
		WithField("kubelet_compatibility", cfg.KubeletCompatibility).Info("memory stats source")
	thresholds, err := cfg.Thresholds()
	if err != nil {
		return guardParts{}, err
	}
	var obs evictor.Observer
	if m != nil {
		obs = m
	}
	// reads bounded in time, off the sync loop's goroutine: a stats file
	// that blocks (a FIFO, a hung mount) is a stats error, not a hang
	bounded := pressure.NewBounded(sampler, pressure.DefaultReadTimeout)
	// kills likewise: a wedged cgroup.kill is a failed kill, not a hang
	killer := podkill.NewBounded(podkill.New(sampler.MemoryCgroup()), podkill.DefaultTimeout)
	ev, err := evictor.New(evictor.Config{
		Thresholds:        thresholds,
		TransitionPeriod:  cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriod: cfg.EvictionMaxPodGracePeriod.Duration,
		HardGracePeriod:   hardGracePeriod,
		OnStatsError:      evictor.StatsErrorPolicy(cfg.OnStatsError),
		DryRun:            cfg.DryRun,
	}, evictor.Options{Sampler: bounded, Log: logger.WithField("component", "evictor"), Observer: obs, OnPressure: onPressure(kc)})
	if err != nil {
		bounded.Close()
		killer.Close()
		return guardParts{}, err
	}
	// a state directory that cannot be opened leaves cri-guard serving,
	// its records in memory until a retry opens it; only another
	// cri-guard holding it is fatal
	store, err := checkpoint.OpenDeferred(cfg.StateDir, logger.WithField("component", "checkpoint"), checkpoint.WithRules(cfg.CriticalRules()))
	if err != nil {
		bounded.Close()
		killer.Close()
		return guardParts{}, err
	}
	var st guard.Store = store
	if m != nil {
		st = m.InstrumentStore(store)
	}
	opts := guard.Options{Runtime: rt, Store: st, Evictor: ev, PodStats: bounded, Killer: killer, Log: logger.WithField("component", "guard"), Watchdog: watchdog}
	if kc != nil {
		opts.API, opts.Reporter = kc, kc
	}
	loop, err := guard.New(guard.Config{
		HousekeepingInterval: cfg.HousekeepingInterval.Duration,
		EnforceRestored:      cfg.RestoredPods == "enforce",
		Rules:                cfg.CriticalRules(),
		FastPoll:             fastPoll(cfg),
		Wakeups:              wakeups(cfg, sampler, thresholds),
		WatchdogInterval:     watchdogEvery,
	}, opts)
	if err != nil {
		bounded.Close()
		killer.Close()
		_ = store.Close()
		return guardParts{}, err
	}
	return guardParts{loop: loop, ev: ev, store: store, bounded: bounded, killer: killer}, nil
}

// onPressure is the eviction manager's OnPressure: cri-guard's node
// condition in the API follows its view of memory pressure; nil without an
// API connection.
func onPressure(kc *lateKube) func(evictor.Pressure) {
	if kc == nil {
		return nil
	}
	return func(p evictor.Pressure) {
		kc.setNodePressure(kube.NodePressure{MemoryPressure: p.MemoryPressure, Thresholds: p.Thresholds})
	}
}
