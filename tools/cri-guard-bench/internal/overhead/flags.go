package overhead

import (
	"errors"
	"flag"
	"io"
	"time"

	"github.com/cri-guard/cri-guard/internal/config"
)

// benchOptions are the command-line settings.
type benchOptions struct {
	RuntimeEndpoint string
	ProxyEndpoint   string
	ProxyPID        int
	Binary          string
	Sandboxes       int
	Containers      int
	Image           string
	CgroupRoot      string
	WorkDir         string
	Iterations      int
	Clients         int
	Duration        time.Duration
	Rounds          int
	ProxyEnv        string
	CleanupRun      string
	StatsIterations int
	Cycles          int
	CompareEnv      string
	CompareCore     bool
	SettleMax       time.Duration
	ProxyArgs       string
}

func parseBenchFlags(args []string, stderr io.Writer) (benchOptions, error) {
	o := benchOptions{}
	fs := flag.NewFlagSet("cri-guard-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", config.DefaultRuntimeEndpoint, "containerd's CRI socket")
	fs.StringVar(&o.ProxyEndpoint, "proxy-endpoint", "", "socket of a running cri-guard (default: start one)")
	fs.IntVar(&o.ProxyPID, "proxy-pid", 0, "pid of the running cri-guard given by --proxy-endpoint, for CPU and memory")
	fs.StringVar(&o.Binary, "cri-guard-binary", "", "cri-guard binary to run as a child process (default: this binary as serve-core, the proxy core alone)")
	fs.IntVar(&o.Sandboxes, "sandboxes", 30, "pod sandboxes to create")
	fs.IntVar(&o.Containers, "containers", 60, "containers to create, spread over the sandboxes")
	fs.StringVar(&o.Image, "image", "registry.k8s.io/pause:3.9", "image of the containers (must be present)")
	fs.StringVar(&o.CgroupRoot, "cgroup-parent-root", "/cri-guard-rt-pods", "cgroup parent of the sandboxes: <root>/pod<uid>")
	fs.StringVar(&o.WorkDir, "work-dir", "", "directory for logs and sockets (default: a new temporary directory)")
	fs.IntVar(&o.Iterations, "iterations", 500, "calls per method and side in the latency phase")
	fs.IntVar(&o.StatsIterations, "stats-iterations", 60, "calls per side for ListContainerStats (slow in containerd)")
	fs.IntVar(&o.Cycles, "cycles", 20, "RunPodSandbox+StopPodSandbox+RemovePodSandbox cycles per side (0: skip)")
	fs.IntVar(&o.Clients, "clients", 8, "concurrent clients in the throughput phase")
	fs.DurationVar(&o.Duration, "duration", 3*time.Second, "length of one throughput run")
	fs.DurationVar(&o.SettleMax, "settle", 60*time.Second, "after creating the workload, wait at most this long for the CPUs to be under 15% busy before measuring (0: do not wait)")
	fs.IntVar(&o.Rounds, "rounds", 2, "throughput runs per side (interleaved)")
	fs.StringVar(&o.ProxyEnv, "cri-guard-env", "", "extra environment for the child cri-guard, comma-separated KEY=VALUE (e.g. GOMAXPROCS=1)")
	fs.StringVar(&o.CompareEnv, "compare-env", "", "also start a second child cri-guard with this extra environment (like --cri-guard-env) and measure it interleaved with the first: an A/B test")
	fs.BoolVar(&o.CompareCore, "compare-core", false, "also start the proxy core alone (no hooks, sync loop or metrics) and measure it interleaved with --cri-guard-binary: what cri-guard's own work costs")
	fs.StringVar(&o.ProxyArgs, "cri-guard-args", "", "extra space-separated arguments for the child cri-guard; {i} is replaced by the child's index (0, 1 with --compare-env), e.g. \"--config /tmp/cfg{i}.yaml\"")
	fs.StringVar(&o.CleanupRun, "cleanup-run", "", "only remove what the run with this id left behind (the id is logged at start)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.CompareCore && (o.CompareEnv != "" || o.Binary == "") {
		return o, errors.New("--compare-core needs --cri-guard-binary and excludes --compare-env")
	}
	if o.CompareEnv != "" && o.ProxyEndpoint != "" {
		return o, errors.New("--compare-env needs a child cri-guard, not --proxy-endpoint")
	}
	if o.ProxyEndpoint != "" && o.Binary != "" {
		return o, errors.New("--proxy-endpoint and --cri-guard-binary are exclusive")
	}
	if o.Sandboxes < 1 || o.Containers < 0 || o.Iterations < 10 || o.StatsIterations < 10 || o.Clients < 1 || o.Rounds < 1 {
		return o, errors.New("--sandboxes, --iterations (>= 10), --clients and --rounds must be positive")
	}
	return o, nil
}
