package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/cri-guard/cri-guard/internal/controller"
	"github.com/cri-guard/cri-guard/internal/logging"
)

// defaultMetricsAddress is next to the daemon's metrics port (9713).
const defaultMetricsAddress = ":9714"

// informerResync re-delivers every cached Node to the controller (from
// memory; it costs the API server nothing), a safety net under the
// watch.
const informerResync = 10 * time.Minute

// leaderHealthTimeout: /healthz fails when this replica believes it leads
// but has not renewed the Lease for this long past its duration.
const leaderHealthTimeout = 20 * time.Second

// options are the command line.
type options struct {
	Kubeconfig     string
	Controller     controller.Config
	Leader         controller.LeaderConfig
	MetricsAddress string
	QPS            float64
	Burst          int
	LogLevel       string
	LogFormat      string
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("cri-guard-controller", flag.ContinueOnError)
	fs.SetOutput(errOut)
	effect := fs.String("effect", string(corev1.TaintEffectNoSchedule), "the taint's effect: NoSchedule, PreferNoSchedule or NoExecute")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: the in-cluster ServiceAccount")
	fs.DurationVar(&o.Controller.StaleAfter, "stale-after", controller.DefaultStaleAfter, "a condition whose heartbeat is older counts as Unknown and untaints its node")
	fs.IntVar(&o.Controller.Workers, "workers", controller.DefaultWorkers, "nodes reconciled at once")
	fs.StringVar(&o.MetricsAddress, "metrics-address", defaultMetricsAddress, "address of /metrics, /healthz and /readyz")
	fs.StringVar(&o.Leader.Namespace, "leader-elect-namespace", "kube-system", "namespace of the leader election Lease")
	fs.StringVar(&o.Leader.Name, "leader-elect-name", "cri-guard-controller", "name of the leader election Lease")
	fs.DurationVar(&o.Leader.LeaseDuration, "leader-elect-lease-duration", controller.DefaultLeaseDuration, "how long followers wait before taking an unrenewed Lease")
	fs.DurationVar(&o.Leader.RenewDeadline, "leader-elect-renew-deadline", controller.DefaultRenewDeadline, "how long the leader retries renewing before it stops leading")
	fs.DurationVar(&o.Leader.RetryPeriod, "leader-elect-retry-period", controller.DefaultRetryPeriod, "how often candidates try the Lease")
	fs.Float64Var(&o.QPS, "kube-api-qps", 20, "requests per second to the API server")
	fs.IntVar(&o.Burst, "kube-api-burst", 30, "burst of requests to the API server")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Controller.Effect = corev1.TaintEffect(*effect)
	if err := controller.ValidEffect(o.Controller.Effect); err != nil {
		return o, fmt.Errorf("--effect: %w", err)
	}
	if o.Controller.StaleAfter <= 0 {
		return o, fmt.Errorf("--stale-after %v: want a positive duration", o.Controller.StaleAfter)
	}
	if o.Controller.Workers <= 0 {
		return o, fmt.Errorf("--workers %d: want at least 1", o.Controller.Workers)
	}
	if o.Leader.Namespace == "" || o.Leader.Name == "" {
		return o, errors.New("--leader-elect-namespace and --leader-elect-name must not be empty")
	}
	// leaderelection's own rule, checked here so that the error names the flags
	if !(o.Leader.LeaseDuration > o.Leader.RenewDeadline && o.Leader.RenewDeadline > time.Duration(float64(o.Leader.RetryPeriod)*leaderelection.JitterFactor) && o.Leader.RetryPeriod > 0) {
		return o, fmt.Errorf("leader election: want --leader-elect-lease-duration (%v) > --leader-elect-renew-deadline (%v) > %v × --leader-elect-retry-period (%v) > 0",
			o.Leader.LeaseDuration, o.Leader.RenewDeadline, leaderelection.JitterFactor, o.Leader.RetryPeriod)
	}
	if o.QPS <= 0 || o.Burst <= 0 {
		return o, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	return o, nil
}

// identity is this replica's Lease holder identity: the hostname (the pod
// name) and a random suffix, so that a restarted pod is a new candidate.
func identity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("hostname: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random identity suffix: %w", err)
	}
	return host + "_" + hex.EncodeToString(b), nil
}

func restConfig(o options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	// protobuf for the Node list and watch (large objects, many of them);
	// patches keep their own JSON patch type. No client timeout: it
	// would cut the watch.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	cfg.UserAgent = "cri-guard-controller"
	return cfg, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-guard-controller:", err)
		os.Exit(2)
	}
	log, err := logging.New(o.LogLevel, o.LogFormat, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-guard-controller:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.WithError(err).Error("cri-guard-controller stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *logrus.Logger) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if o.Leader.Identity, err = identity(); err != nil {
		return err
	}
	entry := log.WithField("component", "taint-controller")
	f := informers.NewSharedInformerFactory(cs, informerResync)
	c, err := controller.New(o.Controller, controller.Deps{Client: cs, Nodes: f.Core().V1().Nodes(), Log: entry})
	if err != nil {
		return err
	}
	healthz := leaderelection.NewLeaderHealthzAdaptor(leaderHealthTimeout)
	ln, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		return fmt.Errorf("metrics address: %w", err)
	}
	srv := &http.Server{Handler: httpHandler(c, healthz), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			entry.WithError(err).Error("metrics server stopped")
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	f.Start(ctx.Done())
	defer f.Shutdown()
	entry.WithFields(logrus.Fields{"effect": o.Controller.Effect, "stale_after": o.Controller.StaleAfter,
		"metrics_address": ln.Addr().String(), "identity": o.Leader.Identity}).Info("cri-guard-controller started")
	return c.RunElected(ctx, cs, o.Leader, healthz)
}

// httpHandler serves /metrics, /healthz (the process and, while it leads,
// its Lease renewals) and /readyz (the Node informer has synced).
func httpHandler(c *controller.Controller, healthz *leaderelection.HealthzAdaptor) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", c.Metrics().Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthz.Check(r); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !c.Ready() {
			http.Error(w, "node informer not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
