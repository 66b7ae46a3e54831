package main

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/connectivity"
	corev1 "k8s.io/api/core/v1"

	"github.com/cri-guard/cri-guard/admin"
	"github.com/cri-guard/cri-guard/config"
	"github.com/cri-guard/cri-guard/guard"
	"github.com/cri-guard/cri-guard/kube"
	"github.com/cri-guard/cri-guard/metrics"
	"github.com/cri-guard/cri-guard/pressure"
	"github.com/cri-guard/cri-guard/runtimeproxy"
)

// The parts run() starts beside the sync loop and the CRI server: the API
// client, the metrics and admin servers, the reloader.

// newKube is the API client when the config names a kubeconfig, else nil
// (CRI-only).
func newKube(cfg config.Config, logger *logrus.Logger, m *metrics.Metrics) (*kube.Client, error) {
	if cfg.Kubernetes.Kubeconfig == "" {
		return nil, nil
	}
	var obs kube.Observer
	if m != nil {
		obs = m
	}
	kcfg := kube.Config{Kubeconfig: cfg.Kubernetes.Kubeconfig, NodeName: cfg.Kubernetes.NodeName}
	if t := cfg.Kubernetes.Taint; t.Enabled {
		kcfg.Taint = &kube.TaintConfig{Effect: corev1.TaintEffect(t.Effect), Kubeconfig: t.Kubeconfig}
	}
	kc, err := kube.New(kcfg, logger.WithField("component", "kube"), obs)
	if err != nil {
		return nil, err
	}
	logger.WithField("node", kc.NodeName()).Info("reading pods from and reporting decisions to the API server")
	return kc, nil
}

// newReloader reloads the thresholds of the config file on SIGHUP into the
// sync loop.
func newReloader(opts options, loop *guard.Loop, logger *logrus.Logger) *reloader {
	log := logger.WithField("component", "reload")
	return &reloader{path: opts.ConfigPath, current: opts.FileConfig, log: log,
		apply: func(ctx context.Context, ts []pressure.Threshold, transition time.Duration) error {
			added, removed, err := loop.SetThresholds(ctx, ts, transition)
			if err != nil {
				return err
			}
			// unchanged thresholds keep their observation state
			log.WithField("added", added).WithField("removed", removed).Info("eviction thresholds changed")
			return nil
		}}
}

// serveMetrics listens on the metrics address, when there is one, and
// serves until ctx ends (a goroutine of wg).
func serveMetrics(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, m *metrics.Metrics, logger *logrus.Logger) error {
	if m == nil {
		return nil
	}
	l, err := metrics.Listen(cfg.MetricsAddress)
	if err != nil {
		return err
	}
	log := logger.WithField("component", "metrics")
	wg.Go(func() {
		if err := metrics.Serve(ctx, l, m.Handler(), log); err != nil {
			log.WithError(err).Error("metrics server stopped")
		}
	})
	return nil
}

// serveAdmin listens on the admin socket, when there is one, and serves
// `cri-guard status` until ctx ends (a goroutine of wg).
func serveAdmin(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, g guardParts, rt *runtimeproxy.Client, kc *kube.Client, logger *logrus.Logger) error {
	if cfg.AdminSocket == "" {
		return nil
	}
	l, err := admin.Listen(cfg.AdminSocket)
	if err != nil {
		return err
	}
	src := admin.Sources{
		Version: version, DryRun: cfg.DryRun, Snapshot: g.ev.Snapshot, Pods: g.loop.Pods, Degraded: g.loop.Degraded,
		Runtime: func() admin.Runtime {
			st := rt.State()
			return admin.Runtime{Endpoint: rt.Endpoint(), State: st.String(), Connected: st == connectivity.Ready}
		},
	}
	if kc != nil {
		src.API = func() admin.API {
			st := kc.State()
			return admin.API{Node: st.Node, Synced: st.Synced, Pending: st.Pending, LastError: st.LastError, LastOK: st.LastOK,
				Taint: st.Taint, Unreported: st.Unreported}
		}
	}
	log := logger.WithField("component", "admin")
	wg.Go(func() {
		h := admin.Handler(func() admin.Status { return admin.Build(src) })
		if err := admin.Serve(ctx, l, h, log); err != nil {
			log.WithError(err).Error("admin server stopped")
		}
	})
	return nil
}
