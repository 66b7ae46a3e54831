package idle

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/race"
)

// idleOptions are the settings of `cri-guard-bench idle`.
type idleOptions struct {
	RuntimeEndpoint string
	Binary          string
	CgroupRoot      string
	Modes           []string
	Duration        time.Duration
	Settle          time.Duration
	// CompareBinary, when set, is measured too, side by side, with the
	// shipped defaults (mode "default"), labelled CompareLabel: the
	// previous release.
	CompareBinary string
	CompareLabel  string
	// DefaultEnv, when set, adds a row: mode default with this extra
	// environment (comma-separated KEY=VALUE), e.g. GODEBUG=schedtrace=0,
	// which lets Go's sysmon deep-sleep (docs/benchmarks.md).
	DefaultEnv string
	// Relist, when positive, sends each cri-guard the kubelet PLEG's
	// relist (ListPodSandbox and ListContainers) that often while CPU is
	// measured: an idle node as a kubelet sees it (1s is the kubelet's).
	Relist time.Duration
}

// Main is `cri-guard-bench idle`: the race modes' cri-guards started
// side by side on one idle pods cgroup (the race's 1Gi domain, empty), so
// that each arms what it would on a node (memcg notification, fast poll's
// watch), and their CPU time over the same interval; it returns the exit
// code.
func Main(args []string) int { return benchutil.Subcommand("idle", args, parseIdleFlags, idle) }

func parseIdleFlags(args []string, stderr io.Writer) (idleOptions, error) {
	o := idleOptions{}
	fs := flag.NewFlagSet("cri-guard-bench idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", config.DefaultRuntimeEndpoint, "containerd's CRI socket")
	fs.StringVar(&o.Binary, "cri-guard-binary", "bin/cri-guard", "the cri-guard binary measured")
	fs.StringVar(&o.CgroupRoot, "cgroup-parent-root", "/cri-guard-rt-pods", "the pods cgroup is <root>/idle-<pid>")
	modes := fs.String("modes", "default,psi", "race modes measured side by side (psi: the previous release's default)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long CPU time is measured")
	fs.DurationVar(&o.Settle, "settle", 10*time.Second, "wait after start-up before measuring")
	fs.StringVar(&o.CompareBinary, "compare-binary", "", "another cri-guard binary measured side by side in mode default (the previous release)")
	fs.StringVar(&o.CompareLabel, "compare-label", "previous", "the name of --compare-binary's row")
	fs.DurationVar(&o.Relist, "relist", 0, "send every cri-guard ListPodSandbox and ListContainers this often while measuring, as the kubelet's PLEG does every 1s (0: no calls)")
	fs.StringVar(&o.DefaultEnv, "default-env", "", "add a row: mode default with this extra environment, comma-separated KEY=VALUE (e.g. GODEBUG=schedtrace=0)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	o.Modes, err = race.ParseModes(*modes)
	return o, err
}

// freeLocalPort returns a port free on 127.0.0.1 now (for a measured
// cri-guard's metrics: the fixed ports belong to the test harness).
func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// wakeupCounts reads cri_guard_wakeups_total from a metrics endpoint:
// "tick 60, watch 0, ..." (the non-zero sources), "n/a" when the binary
// has none (a release before it).
func wakeupCounts(url string) string {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "n/a"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "n/a"
	}
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		m := wakeupLineRE.FindStringSubmatch(line)
		if m != nil && m[2] != "0" {
			parts = append(parts, m[1]+" "+m[2])
		}
	}
	if len(parts) == 0 {
		return "n/a"
	}
	return strings.Join(parts, ", ")
}

var wakeupLineRE = regexp.MustCompile(`^cri_guard_wakeups_total\{source="([^"]+)"\} (\S+)$`)

// relist sends ListPodSandbox and ListContainers through endpoint every
// interval until ctx ends, as the kubelet's PLEG relists; it returns how
// many relists it made.
func relist(ctx context.Context, endpoint string, interval time.Duration) (int, error) {
	conn, c, err := benchutil.Dial(endpoint)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	t := time.NewTicker(interval)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
		if err == nil {
			_, err = c.ListContainers(cctx, &runtimeapi.ListContainersRequest{})
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

// threadStats are a process's threads' scheduler figures, summed over
// /proc/<pid>/task: on-CPU time in nanoseconds (schedstat's first field,
// finer than stat's 10 ms ticks) and context switches, voluntary and not
// (each wake-up of a sleeping thread is one). A thread that exited takes
// its figures with it: Go's threads live as long as the process.
type threadStats struct {
	onCPU    time.Duration
	switches int64
}

func readThreadStats(pid int) (threadStats, error) {
	var ts threadStats
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return ts, fmt.Errorf("threads of pid %d: %w", pid, err)
	}
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, t.Name())
		b, err := os.ReadFile(dir + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			return ts, fmt.Errorf("parse %s/schedstat: %q", dir, b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return ts, fmt.Errorf("parse %s/schedstat: %w", dir, err)
		}
		ts.onCPU += time.Duration(ns)
		st, err := os.ReadFile(dir + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if v, ok := strings.CutPrefix(line, key); ok {
					n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					if err != nil {
						return ts, fmt.Errorf("parse %s/status %s: %w", dir, key, err)
					}
					ts.switches += n
				}
			}
		}
	}
	return ts, nil
}

func idle(ctx context.Context, o idleOptions, log *logrus.Entry, out io.Writer) (err error) {
	workDir, err := os.MkdirTemp("", "cri-guard-idle")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)
	dom, err := race.NewDomain(fmt.Sprintf("%s/idle-%d", o.CgroupRoot, os.Getpid()), 1<<30)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dom.Remove()) }()
	type idler struct{ label, mode, binary, env string }
	var idlers []idler
	for _, m := range o.Modes {
		idlers = append(idlers, idler{m, m, o.Binary, ""})
	}
	if o.DefaultEnv != "" {
		idlers = append(idlers, idler{"default+" + o.DefaultEnv, "default", o.Binary, o.DefaultEnv})
	}
	if o.CompareBinary != "" {
		idlers = append(idlers, idler{"default@" + o.CompareLabel, "default", o.CompareBinary, ""})
	}
	pids := make([]int, len(idlers))
	ports := make([]int, len(idlers))
	endpoints := make([]string, len(idlers))
	for i, id := range idlers {
		mode := id.mode
		dir := filepath.Join(workDir, id.label)
		if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
			return err
		}
		cfgPath := filepath.Join(dir, "config.yaml")
		// metrics on a port of their own: the wake-ups each took
		if ports[i], err = freeLocalPort(); err != nil {
			return err
		}
		metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		cfg := race.Config(mode, 200<<20, filepath.Join(dir, "state"), dom)
		cfg = strings.Replace(cfg, "metricsAddress: \"\"\n", "metricsAddress: "+metricsAddr+"\n", 1)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return err
		}
		p, err := benchutil.StartChild(benchutil.ChildConfig{RuntimeEndpoint: o.RuntimeEndpoint, Args: "--config " + cfgPath, Env: id.env}, id.binary, nil, dir, log.WithField("mode", id.label))
		if err != nil {
			return err
		}
		defer func() {
			if err := p.Stop(); err != nil {
				log.WithError(err).Warn("stop cri-guard")
			}
		}()
		conn, c, err := benchutil.Dial(p.Endpoint)
		if err != nil {
			return err
		}
		vctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = c.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		cancel()
		conn.Close()
		if err != nil {
			return fmt.Errorf("mode %s: cri-guard not serving: %w", id.label, err)
		}
		pids[i] = p.PID
		endpoints[i] = p.Endpoint
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.Settle):
	}
	before := make([]benchutil.ProcStats, len(pids))
	beforeT := make([]threadStats, len(pids))
	for i, pid := range pids {
		if before[i], err = benchutil.ReadProcStats(pid); err != nil {
			return err
		}
		if beforeT[i], err = readThreadStats(pid); err != nil {
			return err
		}
	}
	start := time.Now()
	log.WithFields(logrus.Fields{"duration": o.Duration, "relist": o.Relist}).Info("measuring idle CPU")
	rctx, stopRelist := context.WithCancel(ctx)
	relists := make([]int, len(endpoints))
	relistErrs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	if o.Relist > 0 {
		for i, ep := range endpoints {
			wg.Go(func() { relists[i], relistErrs[i] = relist(rctx, ep, o.Relist) })
		}
	}
	select {
	case <-ctx.Done():
		stopRelist()
		wg.Wait()
		return ctx.Err()
	case <-time.After(o.Duration):
	}
	elapsed := time.Since(start)
	stopRelist()
	wg.Wait()
	for i, err := range relistErrs {
		if err != nil {
			return fmt.Errorf("relist through %s: %w", idlers[i].label, err)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "idle CPU over %s (pods cgroup %s, 1Gi, empty; CPU time in 10 ms ticks, on-CPU time from schedstat in ns, thread switches: every thread's context switches)\n", elapsed.Round(time.Second), dom.Group)
	if o.Relist > 0 {
		fmt.Fprintf(tw, "each cri-guard was sent ListPodSandbox and ListContainers every %s meanwhile (the kubelet's PLEG relist): %v relists\n", o.Relist, relists)
	}
	fmt.Fprintln(tw, "mode\tCPU time (ticks)\t% of one core\ton-CPU ms (schedstat)\t% of one core\tthread switches/s\tVmRSS MiB\twake-ups (cri_guard_wakeups_total)\tconfig added to the shipped defaults")
	for i, pid := range pids {
		after, err := benchutil.ReadProcStats(pid)
		if err != nil {
			return err
		}
		afterT, err := readThreadStats(pid)
		if err != nil {
			return err
		}
		cpu := after.CPU - before[i].CPU
		onCPU := afterT.onCPU - beforeT[i].onCPU
		switches := float64(afterT.switches-beforeT[i].switches) / elapsed.Seconds()
		extra := strings.ReplaceAll(strings.TrimSpace(race.ModeSettings(idlers[i].mode)), "\n", "; ")
		if idlers[i].env != "" {
			extra = strings.TrimPrefix(strings.TrimPrefix(extra, "(none)")+"; env "+idlers[i].env, "; ")
		}
		if extra == "" {
			extra = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.1f\t%.4f\t%.1f\t%.1f\t%s\t%s\n", idlers[i].label, cpu, 100*cpu.Seconds()/elapsed.Seconds(),
			float64(onCPU)/1e6, 100*onCPU.Seconds()/elapsed.Seconds(), switches, float64(after.RSSKiB)/1024,
			wakeupCounts(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[i])), extra)
	}
	return tw.Flush()
}
