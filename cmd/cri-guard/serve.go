package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/connectivity"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/guard"
	"github.com/cri-guard/cri-guard/internal/kube"
	"github.com/cri-guard/cri-guard/internal/metrics"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
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
	kcfg := kube.Config{Kubeconfig: cfg.Kubernetes.Kubeconfig, NodeName: cfg.Kubernetes.NodeName,
		Heartbeat: cfg.Kubernetes.NodeStatusHeartbeat.Duration}
	kc, err := kube.New(kcfg, logger.WithField("component", "kube"), obs)
	if err != nil {
		return nil, err
	}
	logger.WithField("node", kc.NodeName()).Info("reading pods from and reporting decisions to the API server")
	return kc, nil
}

// lateKube is the API connection as the sync loop and the status see it:
// nil until the kubeconfig can be loaded. On a node that joins, the
// kubelet's kubeconfig is written only after its TLS bootstrap, which
// needs a runtime, which is cri-guard: so a kubeconfig missing at start is
// waited for in the background while cri-guard serves CRI-only. Until
// then decisions are made from CRI alone (as without a kubeconfig) and
// their reports are logged as not written.
type lateKube struct {
	log *logrus.Entry
	c   atomic.Pointer[kube.Client]

	mu      sync.Mutex
	why     string
	pending *kube.NodePressure // the last pressure seen before the connection
}

var (
	_ guard.APIPods  = (*lateKube)(nil)
	_ guard.Reporter = (*lateKube)(nil)
)

func (k *lateKube) client() *kube.Client { return k.c.Load() }

func (k *lateKube) reason() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.why
}

// try makes the client once; it is the first try of connect, made before
// the sync loop starts so that a kubeconfig that is there is used from the
// start, as without this indirection.
func (k *lateKube) try(cfg config.Config, logger *logrus.Logger, m *metrics.Metrics) error {
	kc, err := newKube(cfg, logger, m)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.why = err.Error()
		return err
	}
	k.c.Store(kc)
	if k.pending != nil {
		kc.SetNodePressure(*k.pending)
	}
	return nil
}

// connect runs the client until ctx ends (a goroutine of wg), once it is
// made: at once when the first try made it, else after a background retry
// succeeds.
func (k *lateKube) connect(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, logger *logrus.Logger, m *metrics.Metrics, h *health) {
	try := func() error {
		if k.c.Load() != nil {
			return nil
		}
		return k.try(cfg, logger, m)
	}
	startOrRetry(ctx, wg, h, "api", try, func() { k.c.Load().Run(ctx) })
}

// Pod is kube.Client.Pod, nothing before the connection.
func (k *lateKube) Pod(uid string) (pod.API, bool) {
	if c := k.c.Load(); c != nil {
		return c.Pod(uid)
	}
	return pod.API{}, false
}

// Rejected is kube.Client.Rejected; before the connection it is logged.
func (k *lateKube) Rejected(p *pod.Pod, reason, message string) {
	if c := k.c.Load(); c != nil {
		c.Rejected(p, reason, message)
		return
	}
	k.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "pod_uid": p.UID}).Warn("rejection not reported: no API connection yet")
}

// Evicted is kube.Client.Evicted; before the connection it is logged.
func (k *lateKube) Evicted(p *pod.Pod, message string) {
	if c := k.c.Load(); c != nil {
		c.Evicted(p, message)
		return
	}
	k.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "pod_uid": p.UID}).Warn("eviction not reported: no API connection yet")
}

// kubeletStarted is kube.Client.KubeletStarted; before the connection
// there is no report to keep.
func (k *lateKube) kubeletStarted() {
	if c := k.c.Load(); c != nil {
		c.KubeletStarted()
	}
}

// kubeletStopped is kube.Client.KubeletStopped; before the connection
// there is no report to keep.
func (k *lateKube) kubeletStopped() {
	if c := k.c.Load(); c != nil {
		c.KubeletStopped()
	}
}

// setNodePressure is kube.Client.SetNodePressure; before the connection
// the last value is kept and written once connected.
func (k *lateKube) setNodePressure(p kube.NodePressure) {
	k.mu.Lock()
	c := k.c.Load()
	if c == nil {
		k.pending = &p
	}
	k.mu.Unlock()
	if c != nil {
		c.SetNodePressure(p)
	}
}

// newReloader reloads the thresholds of the config file on SIGHUP into the
// sync loop.
func newReloader(opts options, loop *guard.Loop, logger *logrus.Logger) *reloader {
	log := logger.WithField("component", "reload")
	return &reloader{path: opts.ConfigPath, current: opts.FileConfig, log: log,
		firing: firingHardThresholds, stateDir: opts.Config.StateDir,
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

// serveMetrics serves the metrics address, when there is one, until ctx
// ends (goroutines of wg). A listener that cannot be opened (the port is
// held by another process: any local user may bind a port above 1024)
// leaves cri-guard serving CRI, degraded, with the listen retried.
func serveMetrics(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, m *metrics.Metrics, h *health, logger *logrus.Logger) {
	if m == nil {
		return
	}
	log := logger.WithField("component", "metrics")
	var l net.Listener
	startOrRetry(ctx, wg, h, "metrics", func() (err error) { l, err = metrics.Listen(cfg.MetricsAddress); return err }, func() {
		if err := metrics.Serve(ctx, l, m.Handler(), log); err != nil {
			log.WithError(err).Error("metrics server stopped")
			h.set("metrics", "server stopped: "+err.Error())
		}
	})
}

// serveAdmin serves `cri-guard status` on the admin socket, when there is
// one, until ctx ends (goroutines of wg); like the metrics, a socket that
// cannot be opened is retried while the CRI socket serves.
func serveAdmin(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, g guardParts, rt *runtimeproxy.Client, kc *lateKube, h *health, logger *logrus.Logger) {
	if cfg.AdminSocket == "" {
		return
	}
	src := admin.Sources{
		Version: version, DryRun: cfg.DryRun, Snapshot: g.ev.Snapshot, Pods: g.loop.Pods, Degraded: g.loop.Degraded, State: g.stateStatus,
		Problems: h.problems,
		Runtime: func() admin.Runtime {
			st := rt.State()
			return admin.Runtime{Endpoint: rt.Endpoint(), State: st.String(), Connected: st == connectivity.Ready}
		},
	}
	if kc != nil {
		src.API = func() admin.API {
			c := kc.client()
			if c == nil {
				return admin.API{Node: cfg.Kubernetes.NodeName, LastError: "not connected: " + kc.reason()}
			}
			st := c.State()
			return admin.API{Node: st.Node, Synced: st.Synced, Pending: st.Pending, LastError: st.LastError, LastOK: st.LastOK,
				Unreported: st.Unreported}
		}
	}
	log := logger.WithField("component", "admin")
	var l net.Listener
	startOrRetry(ctx, wg, h, "admin socket", func() (err error) { l, err = admin.Listen(cfg.AdminSocket, log); return err }, func() {
		hd := admin.Handler(func() admin.Status { return admin.Build(src) })
		if err := admin.Serve(ctx, l, hd, log); err != nil {
			log.WithError(err).Error("admin server stopped")
			h.set("admin socket", "server stopped: "+err.Error())
		}
	})
}
