package maxprocs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// maxprocsOptions are the settings of `cri-guard-bench maxprocs`.
type maxprocsOptions struct {
	Binary     string
	Kubeconfig string // empty: the in-process API (fakeAPI)
	Node       string
	Pods       int
	Sandboxes  int
	UpdateRate float64
	Settings   []maxprocsSetting
	Rounds     int
	Crossings  int
	Quiet      time.Duration
	Settle     time.Duration
	WorkDir    string
	Threshold  int64
}

// maxprocsSetting is one GOMAXPROCS measured: the value the child's
// environment gets.
type maxprocsSetting struct {
	label, value string
}

func parseMaxprocsFlags(args []string, stderr io.Writer) (maxprocsOptions, error) {
	o := maxprocsOptions{}
	fs := flag.NewFlagSet("cri-guard-bench maxprocs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Binary, "cri-guard-binary", "bin/cri-guard", "the cri-guard binary measured")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "an admin kubeconfig of a real API server, where the node and pods are made (default: an API served by this process)")
	fs.StringVar(&o.Node, "node", "cri-guard-maxprocs", "the node the pods are bound to (no kubelet serves it)")
	fs.IntVar(&o.Pods, "pods", 1000, "pods bound to the node, in cri-guard's informer")
	fs.IntVar(&o.Sandboxes, "sandboxes", 0, "ready sandboxes of those pods in the fake runtime, the eviction candidates (default: --pods)")
	fs.Float64Var(&o.UpdateRate, "update-rate", 50, "pod updates per second (an annotation, each pod in turn)")
	settings := fs.String("settings", "1,default", "GOMAXPROCS values compared, comma-separated; default: Go's own choice for this machine, set explicitly (cri-guard sets 1 when the variable is empty)")
	fs.IntVar(&o.Rounds, "rounds", 4, "rounds; each runs every setting once (a fresh child), the order alternating")
	fs.IntVar(&o.Crossings, "crossings", 25, "threshold crossings per child")
	fs.DurationVar(&o.Quiet, "quiet", 20*time.Second, "per child, CPU measured with the informer's updates alone before the crossings")
	fs.DurationVar(&o.Settle, "settle", 5*time.Second, "wait after a child is synced before measuring")
	fs.StringVar(&o.WorkDir, "work-dir", "", "directory for configs, logs, sockets and the fake stats tree (default: a new temporary directory, removed)")
	threshold := fs.String("threshold", "1Gi", "hard threshold of memory.available")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	q, err := resource.ParseQuantity(*threshold)
	if err != nil {
		return o, fmt.Errorf("--threshold: %w", err)
	}
	o.Threshold = q.Value()
	if o.Settings, err = parseSettings(*settings, runtime.GOMAXPROCS(0)); err != nil {
		return o, err
	}
	if o.Sandboxes == 0 {
		o.Sandboxes = o.Pods
	}
	if o.Pods < 1 || o.Sandboxes < 1 || o.Sandboxes > o.Pods || o.Rounds < 1 || o.Crossings < 1 || o.UpdateRate < 0 {
		return o, errors.New("--pods, --rounds and --crossings must be positive, --sandboxes at most --pods")
	}
	if o.Sandboxes < o.Rounds*len(o.Settings)*o.Crossings && o.Pods-o.Rounds*len(o.Settings)*o.Crossings < o.Sandboxes {
		return o, fmt.Errorf("%d crossings evict as many pods: --pods must leave --sandboxes candidates for the last child", o.Rounds*len(o.Settings)*o.Crossings)
	}
	return o, nil
}

// parseSettings parses --settings; def is Go's default GOMAXPROCS here.
func parseSettings(s string, def int) ([]maxprocsSetting, error) {
	var out []maxprocsSetting
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch n, err := strconv.Atoi(f); {
		case f == "default":
			out = append(out, maxprocsSetting{label: fmt.Sprintf("default (%d)", def), value: strconv.Itoa(def)})
		case err == nil && n > 0:
			out = append(out, maxprocsSetting{label: f, value: f})
		default:
			return nil, fmt.Errorf("--settings: %q is neither a positive number nor default", f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--settings: none")
	}
	return out, nil
}

// Main is `cri-guard-bench maxprocs`; it returns the exit code.
func Main(args []string) int {
	return benchutil.Subcommand("maxprocs", args, parseMaxprocsFlags, maxprocs)
}

// maxprocsAPI is where the pods live: the in-process API or a real one.
type maxprocsAPI struct {
	kubeconfig string
	what       string
	pods       []*corev1.Pod
	update     func(ctx context.Context, i int) error
	eventBytes func(ctx context.Context) int
	close      func()
}

func setupMaxprocsAPI(ctx context.Context, o maxprocsOptions, workDir string, log *logrus.Entry) (*maxprocsAPI, error) {
	if o.Kubeconfig == "" {
		a, err := startFakeAPI(o.Node)
		if err != nil {
			return nil, err
		}
		pods := make([]*corev1.Pod, o.Pods)
		for i := range pods {
			pods[i] = benchPod(i, o.Node)
		}
		a.addPods(pods)
		kc, err := a.kubeconfig(workDir)
		if err != nil {
			a.close()
			return nil, err
		}
		return &maxprocsAPI{kubeconfig: kc, what: "an in-process API (HTTPS, HTTP/2; list+watch of pods, real JSON; not kube-apiserver) at " + a.addr, pods: pods,
			update:     func(_ context.Context, i int) error { return a.update(i) },
			eventBytes: func(context.Context) int { return a.meanEventBytes() },
			close:      a.close}, nil
	}
	a, err := newRealAPI(o.Kubeconfig, o.Node, log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	pods, err := a.setup(ctx, o.Pods)
	if err != nil {
		return nil, errors.Join(err, a.cleanup(context.Background()))
	}
	log.WithField("pods", len(pods)).WithField("took", time.Since(start).Round(time.Millisecond)).Info("pods made in the API server")
	return &maxprocsAPI{kubeconfig: o.Kubeconfig, what: "kube-apiserver of " + o.Kubeconfig, pods: pods, update: a.update, eventBytes: a.eventBytes,
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := a.cleanup(ctx); err != nil {
				log.WithError(err).Warn("clean up the API objects")
			}
		}}, nil
}

// updater changes the pods at a steady rate until stopped.
type updater struct {
	done, failed, dropped atomic.Int64
	stopped               chan struct{}
	wg                    sync.WaitGroup
	start                 time.Time
	end                   time.Time
}

// startUpdater changes one pod per tick, each in turn, through 4 workers
// (a tick finding them all busy is dropped and counted).
func startUpdater(ctx context.Context, rate float64, n int, update func(context.Context, int) error, log *logrus.Entry) *updater {
	u := &updater{stopped: make(chan struct{}), start: time.Now()}
	if rate <= 0 {
		return u
	}
	work := make(chan int, 4)
	for range 4 {
		u.wg.Go(func() {
			for i := range work {
				if err := update(ctx, i); err != nil {
					if u.failed.Add(1) == 1 {
						log.WithError(err).Warn("pod update failed")
					}
					continue
				}
				u.done.Add(1)
			}
		})
	}
	u.wg.Go(func() {
		defer close(work)
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-u.stopped:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case work <- i % n:
				default:
					u.dropped.Add(1)
				}
			}
		}
	})
	return u
}

func (u *updater) stop() {
	close(u.stopped)
	u.wg.Wait()
	u.end = time.Now()
}

// blockResult is what one child (one setting, one round) measured.
type blockResult struct {
	setting      maxprocsSetting
	round        int
	sandboxes    int
	latencies    []time.Duration
	misses       int     // crossings without a decision
	skewed       int     // crossings not counted: their moment is not known to 1ms
	quietCPU     float64 // CPU s/s with the informer's updates alone
	trialCPU     float64 // CPU s/s over the crossings (fast poll included)
	rssKiB       int64   // VmRSS at the end
	victims      []string
	syncTook     time.Duration
	trialElapsed time.Duration
}

func maxprocs(ctx context.Context, o maxprocsOptions, log *logrus.Entry, out io.Writer) (err error) {
	workDir := o.WorkDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "cri-guard-maxprocs"); err != nil {
			return err
		}
		defer os.RemoveAll(workDir)
	} else if err := os.MkdirAll(workDir, 0o750); err != nil {
		return err
	}
	if o.Binary, err = filepath.Abs(o.Binary); err != nil {
		return err
	}
	stats, err := fakenode.NewStatsTree(filepath.Join(workDir, "stats"))
	if err != nil {
		return err
	}
	api, err := setupMaxprocsAPI(ctx, o, workDir, log)
	if err != nil {
		return err
	}
	defer api.close()
	eventBytes := api.eventBytes(ctx)
	u := startUpdater(ctx, o.UpdateRate, len(api.pods), api.update, log)
	defer func() {
		if u.end.IsZero() {
			u.stop()
		}
	}()
	evicted := map[string]bool{}
	var blocks []blockResult
	for r := range o.Rounds {
		order := o.Settings
		if r%2 == 1 {
			order = make([]maxprocsSetting, len(o.Settings))
			for i, s := range o.Settings {
				order[len(order)-1-i] = s
			}
		}
		for _, s := range order {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b, err := runBlock(ctx, o, s, r, api, stats, evicted, workDir, log.WithField("setting", s.label).WithField("round", r))
			if err != nil {
				return fmt.Errorf("round %d, GOMAXPROCS %s: %w", r, s.label, err)
			}
			for _, v := range b.victims {
				evicted[v] = true
			}
			sm := summarizeLatencies(b.latencies)
			log.WithFields(logrus.Fields{"decided": sm.n, "missed": b.misses, "not_counted": b.skewed, "median_ms": fmtMs1(sm.median), "p90_ms": fmtMs1(sm.p90),
				"max_ms": fmtMs1(sm.max), "cpu_quiet": fmt.Sprintf("%.3f", b.quietCPU), "cpu_trials": fmt.Sprintf("%.3f", b.trialCPU)}).Info("child measured")
			blocks = append(blocks, b)
		}
	}
	u.stop()
	printMaxprocs(out, o, api.what, eventBytes, u, blocks)
	return nil
}

// runBlock starts a fresh fake runtime and child with setting s, waits
// until it has adopted every sandbox and listed the API's pods, measures
// its CPU with the updates alone, then crosses the threshold o.Crossings
// times.
func runBlock(ctx context.Context, o maxprocsOptions, s maxprocsSetting, round int, api *maxprocsAPI, stats *fakenode.StatsTree,
	evicted map[string]bool, workDir string, log *logrus.Entry) (blockResult, error) {
	res := blockResult{setting: s, round: round}
	dir := filepath.Join(workDir, fmt.Sprintf("r%d-gomaxprocs%s", round, s.value))
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
		return res, err
	}
	var cfgs []*runtimeapi.PodSandboxConfig
	for _, p := range api.pods {
		if !evicted[string(p.UID)] && len(cfgs) < o.Sandboxes {
			cfgs = append(cfgs, fakenode.SandboxConfig(p))
		}
	}
	res.sandboxes = len(cfgs)
	criSock := filepath.Join(dir, "cri.sock")
	cri, err := fakenode.StartCRI(criSock, cfgs)
	if err != nil {
		return res, err
	}
	defer cri.Stop()
	adminSock := filepath.Join(dir, "admin.sock")
	cfg := fmt.Sprintf(`stateDir: %s
cgroupRoot: %s
procRoot: %s
evictionHard: {memory.available: %q}
psiTrigger: ""
metricsAddress: "127.0.0.1:0"
adminSocket: %s
kubernetes: {kubeconfig: %s, nodeName: %s}
`, filepath.Join(dir, "state"), stats.Cgroup, stats.Proc, benchutil.FmtBytes(o.Threshold), adminSock, api.kubeconfig, o.Node)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return res, err
	}
	if err := stats.SetAvailable(12 << 30); err != nil {
		return res, err
	}
	start := time.Now()
	p, err := benchutil.StartChild(benchutil.ChildConfig{RuntimeEndpoint: criSock, Env: "GOMAXPROCS=" + s.value,
		Args: "--config " + cfgPath + " --log-level info --log-format json"}, o.Binary, nil, dir, log)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := p.Stop(); err != nil {
			log.WithError(err).Warn("stop cri-guard")
		}
	}()
	if err := fakenode.WaitSynced(ctx, adminSock, len(cfgs)); err != nil {
		return res, err
	}
	res.syncTook = time.Since(start)
	if err := benchutil.SleepCtx(ctx, o.Settle); err != nil {
		return res, err
	}
	tail := &fakenode.LogTail{Path: filepath.Join(dir, "cri-guard.log")}
	if _, err := tail.Next(); err != nil {
		return res, err
	}
	c0, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return res, err
	}
	q0 := time.Now()
	if err := benchutil.SleepCtx(ctx, o.Quiet); err != nil {
		return res, err
	}
	c1, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return res, err
	}
	res.quietCPU = cpuRate(c1.CPU-c0.CPU, time.Since(q0))
	t0 := time.Now()
	for range o.Crossings {
		lat, victim, err := crossing(ctx, o, stats, tail)
		if victim != "" {
			res.victims = append(res.victims, victim)
		}
		switch {
		case ctx.Err() != nil:
			return res, ctx.Err()
		case errors.Is(err, errSkewed):
			res.skewed++
			continue
		case err != nil:
			log.WithError(err).Warn("crossing without a decision")
			res.misses++
			continue
		}
		res.latencies = append(res.latencies, lat)
	}
	c2, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return res, err
	}
	res.trialElapsed = time.Since(t0)
	res.trialCPU = cpuRate(c2.CPU-c1.CPU, res.trialElapsed)
	res.rssKiB = c2.RSSKiB
	return res, nil
}

// crossing is one trial: memory.available goes near the threshold (within
// the fast poll's margin: the loop then evaluates every 10 ms), stays there
// a while, then crosses it; the decision is the child's "evicting pod" log
// line, whose time (milliseconds) is compared with the moment the crossing
// sample was in place. Memory is put back far from the threshold as soon as
// the decision is seen, and the trial ends when the eviction is recorded.
func crossing(ctx context.Context, o maxprocsOptions, stats *fakenode.StatsTree, tail *fakenode.LogTail) (time.Duration, string, error) {
	// the spacing after the previous eviction (1 s) has passed; the phase
	// of the fast poll's timer differs from trial to trial
	if err := benchutil.SleepCtx(ctx, time.Second+rand.N(500*time.Millisecond)); err != nil {
		return 0, "", err
	}
	if err := stats.SetAvailable(o.Threshold + 128<<20); err != nil {
		return 0, "", err
	}
	if err := benchutil.SleepCtx(ctx, 400*time.Millisecond+rand.N(100*time.Millisecond)); err != nil {
		return 0, "", err
	}
	if _, err := tail.Next(); err != nil {
		return 0, "", err
	}
	// the sample is in place at some moment between the two times: the
	// earlier is taken (a decision cannot come before it), and a trial
	// whose rename took over a millisecond (the bench preempted) is not
	// counted
	crossed, placed, err := stats.SetAvailableAt(o.Threshold - 256<<20)
	if err != nil {
		return 0, "", err
	}
	skewed := placed.Sub(crossed) > time.Millisecond
	far := func() error { return stats.SetAvailable(12 << 30) }
	var decided time.Time
	var victim string
	deadline := crossed.Add(5 * time.Second)
	for time.Now().Before(deadline) {
		lines, err := tail.Next()
		if err != nil {
			return 0, "", errors.Join(err, far())
		}
		for _, l := range lines {
			switch {
			case l.Msg == fakenode.MsgEvicting && decided.IsZero():
				decided, victim = l.Time, l.PodUID
				if err := far(); err != nil {
					return 0, "", err
				}
			case l.Msg == fakenode.MsgEvicted && !decided.IsZero():
				if skewed {
					return 0, victim, errSkewed
				}
				return decided.Sub(crossed), victim, nil
			}
		}
		if err := benchutil.SleepCtx(ctx, 2*time.Millisecond); err != nil {
			return 0, "", errors.Join(err, far())
		}
	}
	if err := far(); err != nil {
		return 0, "", err
	}
	if !decided.IsZero() {
		return 0, victim, fmt.Errorf("pod %s: decided, not recorded evicted within 5s", victim)
	}
	return 0, "", errors.New("no decision within 5s of the crossing")
}

// errSkewed is a crossing whose moment is not known to a millisecond.
var errSkewed = errors.New("the crossing sample took over 1ms to put in place")

// printMaxprocs prints the table: per setting, the decisions pooled over
// its children, and CPU per child.
func printMaxprocs(out io.Writer, o maxprocsOptions, apiWhat string, eventBytes int, u *updater, blocks []blockResult) {
	wall := u.end.Sub(u.start).Seconds()
	fmt.Fprintf(out, "maxprocs: %d pods bound to node %s in %s (a watch event ~%d bytes), updated at %.1f/s (asked %.0f/s; %d failed, %d dropped); %d CPUs, Go's default GOMAXPROCS %d\n",
		o.Pods, o.Node, apiWhat, eventBytes, float64(u.done.Load())/wall, o.UpdateRate, u.failed.Load(), u.dropped.Load(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "fast poll defaults (10ms near, 200ms watch, 256Mi margin); hard threshold memory.available < %s; per child: %s with the updates alone, then %d crossings from 128Mi above to 256Mi below; decision = the child's \"evicting pod\" log time (ms, truncated) - the moment before the rename that put the crossing sample in place (not counted: that rename took over 1ms)\n\n",
		benchutil.FmtBytes(o.Threshold), o.Quiet, o.Crossings)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GOMAXPROCS\tchildren\tdecisions\tmissed\tnot counted\tdecision ms median\tp90\tmax\tCPU s/s updates alone: mean (min-max)\tCPU s/s with crossings\tVmRSS MiB max")
	for _, s := range o.Settings {
		var lats []time.Duration
		var quiet, trial []float64
		var rss int64
		children, missed, skewed := 0, 0, 0
		for _, b := range blocks {
			if b.setting != s {
				continue
			}
			children++
			missed += b.misses
			skewed += b.skewed
			lats = append(lats, b.latencies...)
			quiet, trial = append(quiet, b.quietCPU), append(trial, b.trialCPU)
			rss = max(rss, b.rssKiB)
		}
		sm := summarizeLatencies(lats)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\n", s.label, children, sm.n, missed, skewed, fmtMs1(sm.median), fmtMs1(sm.p90), fmtMs1(sm.max),
			summarizeRates(quiet), summarizeRates(trial), float64(rss)/1024)
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\nper child, in the order run:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tGOMAXPROCS\tsandboxes\tsynced after\tdecisions\tmedian\tp90\tmax\tCPU s/s alone\twith crossings\tVmRSS MiB")
	for _, b := range blocks {
		sm := summarizeLatencies(b.latencies)
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%.3f\t%.3f\t%.1f\n", b.round, b.setting.label, b.sandboxes, b.syncTook.Round(100*time.Millisecond),
			sm.n, fmtMs1(sm.median), fmtMs1(sm.p90), fmtMs1(sm.max), b.quietCPU, b.trialCPU, float64(b.rssKiB)/1024)
	}
	_ = tw.Flush()
}
