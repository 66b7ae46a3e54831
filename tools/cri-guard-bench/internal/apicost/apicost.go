package apicost

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// apicostOptions are the settings of `cri-guard-bench apicost`.
type apicostOptions struct {
	Kubeconfig      string
	RuntimeEndpoint string
	Binaries        []benchutil.NamedBinary
	Node            string
	Namespace       string
	Pods            int
	Rate            int
	Window          time.Duration
	Settle          time.Duration
	Rounds          int
	Keep            bool
}

// binaryFlags collects --binary name=path flags.
type binaryFlags []benchutil.NamedBinary

func (b *binaryFlags) String() string {
	var s []string
	for _, x := range *b {
		s = append(s, x.Name+"="+x.Path)
	}
	return strings.Join(s, ",")
}

func (b *binaryFlags) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want name=path, got %q", v)
	}
	*b = append(*b, benchutil.NamedBinary{Name: name, Path: path})
	return nil
}

// Main is `cri-guard-bench apicost`: what cri-guard's API
// side costs with many pods bound to its node. On a cluster's API server it
// makes a Node no kubelet serves and --pods pods bound to it (tolerating
// every taint, so that the node lifecycle controller's taints evict none of
// them), then, for each round and each binary in turn (the order reversed
// every other round), starts that cri-guard connected to the API as that
// node, waits for its pod cache to be synced, measures its CPU time over
// --window without changes (idle), then over --window while the pods'
// annotations are patched at --rate per second (each patch one informer
// update), and reads its VmRSS and VmHWM. It prints each run and the
// median per binary of CPU per update ((patch window - idle window) /
// patches), idle CPU and memory; it returns the exit code.
func Main(args []string) int {
	return benchutil.Subcommand("apicost", args, parseApicostFlags, apicost)
}

func parseApicostFlags(args []string, stderr io.Writer) (apicostOptions, error) {
	o := apicostOptions{}
	fs := flag.NewFlagSet("cri-guard-bench apicost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "an identity that may create nodes and pods and patch pods (the cluster's admin); cri-guard runs with it too")
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", config.DefaultRuntimeEndpoint, "containerd's CRI socket (cri-guard needs one; nothing is created there)")
	var bins binaryFlags
	fs.Var(&bins, "binary", "name=path of a cri-guard binary to measure; repeat for each (at least one)")
	fs.StringVar(&o.Node, "node", "storm-fake-node", "the Node made for the pods (no kubelet serves it)")
	fs.StringVar(&o.Namespace, "namespace", "cg-apicost", "the namespace of the pods")
	fs.IntVar(&o.Pods, "pods", 1000, "pods bound to the node")
	fs.IntVar(&o.Rate, "rate", 50, "pod patches per second in the patch window")
	fs.DurationVar(&o.Window, "window", 60*time.Second, "length of the idle window and of the patch window")
	fs.DurationVar(&o.Settle, "settle", 15*time.Second, "wait after cri-guard's pod cache is synced, before the idle window")
	fs.IntVar(&o.Rounds, "rounds", 3, "runs per binary (alternated)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the node, the namespace and its pods at the end")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.Binaries = bins
	switch {
	case o.Kubeconfig == "":
		return o, errors.New("--kubeconfig is required")
	case len(o.Binaries) == 0:
		return o, errors.New("at least one --binary name=path")
	case o.Pods < 1 || o.Rate < 1 || o.Rounds < 1 || o.Window < time.Second:
		return o, errors.New("--pods, --rate and --rounds must be positive, --window at least 1s")
	}
	return o, nil
}

// apicostRun is one measurement of one binary.
type apicostRun struct {
	binary    string
	syncAfter time.Duration // start to the pod cache synced
	rssSynced int64         // KiB, before the idle window
	rssAfter  int64         // KiB, after the patch window
	hwm       int64         // KiB, VmHWM after the patch window
	idleCPU   time.Duration // over one window
	patchCPU  time.Duration // over one window
	patches   int64         // successful patches in the patch window
}

// perUpdate is the CPU time of one informer update: the patch window's CPU
// above the idle window's, per patch.
func (r apicostRun) perUpdate() time.Duration {
	if r.patches == 0 {
		return 0
	}
	return (r.patchCPU - r.idleCPU) / time.Duration(r.patches)
}

func apicost(ctx context.Context, o apicostOptions, log *logrus.Entry, out io.Writer) (err error) {
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", o.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = float32(4*o.Rate), 4*o.Rate
	rc.UserAgent = "cri-guard-bench-apicost"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if err := apicostSetup(ctx, cs, o, log); err != nil {
		return err
	}
	if !o.Keep {
		defer func() { err = errors.Join(err, apicostTeardown(cs, o, log)) }()
	}
	workDir, err := os.MkdirTemp("", "cri-guard-apicost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)

	var runs []apicostRun
	seq := 0
	for round := range o.Rounds {
		order := slices.Clone(o.Binaries)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, b := range order {
			r, err := apicostMeasure(ctx, cs, o, b, filepath.Join(workDir, fmt.Sprintf("%d-%s", round, b.Name)), &seq, log)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", b.Name, round+1, err)
			}
			log.WithFields(logrus.Fields{"binary": b.Name, "round": round + 1, "per_update": r.perUpdate(),
				"idle_cpu": r.idleCPU, "patch_cpu": r.patchCPU, "patches": r.patches, "vmhwm_kib": r.hwm}).Info("measured")
			runs = append(runs, r)
		}
	}
	return apicostReport(out, o, runs)
}

// apicostSetup makes the node and the pods bound to it (those already there are kept).
func apicostSetup(ctx context.Context, cs kubernetes.Interface, o apicostOptions, log *logrus.Entry) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.Node, Labels: map[string]string{"cri-guard-bench": "apicost"}},
		// nothing may be scheduled there: no kubelet runs its pods
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "cri-guard-bench/apicost", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %q: %w", o.Node, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %q: %w", o.Namespace, err)
	}
	// pods can be created once the namespace's default service account exists
	for i := 0; ; i++ {
		_, err := cs.CoreV1().ServiceAccounts(o.Namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if i == 120 {
			return fmt.Errorf("service account default in %q: %w", o.Namespace, err)
		}
		if err := benchutil.SleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	start := time.Now()
	var created atomic.Int64
	err := parallel(ctx, 8, o.Pods, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods(o.Namespace).Create(ctx, apicostPod(o, i), metav1.CreateOptions{})
		switch {
		case err == nil:
			created.Add(1)
			return nil
		case apierrors.IsAlreadyExists(err):
			return nil
		}
		return fmt.Errorf("create pod %d: %w", i, err)
	})
	log.WithFields(logrus.Fields{"node": o.Node, "pods": o.Pods, "created": created.Load(), "took": time.Since(start).Round(time.Millisecond)}).Info("pods bound to the node")
	return err
}

// apicostPod is the i-th pod: one container with a memory request, bound
// to the node, tolerating every taint (the node lifecycle controller
// taints a node no kubelet serves unreachable:NoExecute).
func apicostPod(o apicostOptions, i int) *corev1.Pod {
	mem := resource.MustParse("64Mi")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("apicost-%04d", i), Namespace: o.Namespace,
			Labels: map[string]string{"app": "apicost"}},
		Spec: corev1.PodSpec{
			NodeName:    o.Node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: mem}}}},
		},
	}
}

// apicostTeardown deletes the namespace (its pods at once: no kubelet
// would confirm a graceful deletion) and the node.
func apicostTeardown(cs kubernetes.Interface, o apicostOptions, log *logrus.Entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	zero := int64(0)
	err := cs.CoreV1().Pods(o.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err2 := cs.CoreV1().Namespaces().Delete(ctx, o.Namespace, metav1.DeleteOptions{}); err2 != nil && !apierrors.IsNotFound(err2) {
		err = errors.Join(err, err2)
	}
	if err2 := cs.CoreV1().Nodes().Delete(ctx, o.Node, metav1.DeleteOptions{}); err2 != nil && !apierrors.IsNotFound(err2) {
		err = errors.Join(err, err2)
	}
	log.WithField("namespace", o.Namespace).Info("pods, namespace and node deleted")
	return err
}

// apicostMeasure runs one binary once.
func apicostMeasure(ctx context.Context, cs kubernetes.Interface, o apicostOptions, b benchutil.NamedBinary, dir string, seq *int, log *logrus.Entry) (apicostRun, error) {
	r := apicostRun{binary: b.Name}
	if err := apicostFiles(o, dir); err != nil {
		return r, err
	}
	adminSock := filepath.Join(dir, "admin.sock")
	start := time.Now()
	p, err := benchutil.StartChild(benchutil.ChildConfig{RuntimeEndpoint: o.RuntimeEndpoint, Args: "--config " + filepath.Join(dir, "config.yaml")},
		b.Path, nil, dir, log.WithField("binary", b.Name))
	if err != nil {
		return r, err
	}
	defer func() {
		if err := p.Stop(); err != nil {
			log.WithError(err).Warn("stop cri-guard")
		}
	}()
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := admin.Fetch(fctx, adminSock)
		cancel()
		if err == nil && st.API != nil && st.API.Synced {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return r, fmt.Errorf("cri-guard's pod cache not synced after 2 minutes (status: %+v, %v; log %s)", st.API, err, filepath.Join(dir, "cri-guard.log"))
		}
		if err := benchutil.SleepCtx(ctx, 100*time.Millisecond); err != nil {
			return r, err
		}
	}
	r.syncAfter = time.Since(start)
	if err := benchutil.SleepCtx(ctx, o.Settle); err != nil {
		return r, err
	}
	s0, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return r, err
	}
	r.rssSynced = s0.RSSKiB
	if err := benchutil.SleepCtx(ctx, o.Window); err != nil {
		return r, err
	}
	s1, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return r, err
	}
	r.idleCPU = s1.CPU - s0.CPU
	r.patches, err = patchPods(ctx, cs, o, seq)
	if err != nil {
		return r, err
	}
	s2, err := benchutil.ReadProcStats(p.PID)
	if err != nil {
		return r, err
	}
	r.patchCPU, r.rssAfter, r.hwm = s2.CPU-s1.CPU, s2.RSSKiB, s2.HWMKiB
	return r, nil
}

// apicostFiles writes a calm fake stats tree and the config of one run.
func apicostFiles(o apicostOptions, dir string) error {
	for _, d := range []string{"state", "stats/cgroup", "stats/proc/pressure"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			return err
		}
	}
	files := map[string]string{
		"stats/proc/meminfo":         "MemTotal:       16777216 kB\nMemFree:        12582912 kB\nMemAvailable:   12582912 kB\nBuffers:        0 kB\nCached:         0 kB\n",
		"stats/proc/pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		// the shipped defaults otherwise (housekeeping every 10 s)
		"config.yaml": fmt.Sprintf(`stateDir: %[1]s/state
cgroupRoot: %[1]s/stats/cgroup
procRoot: %[1]s/stats/proc
psiTrigger: ""
metricsAddress: ""
adminSocket: %[1]s/admin.sock
log: {level: warn, format: text}
kubernetes: {kubeconfig: %[2]s, nodeName: %[3]s}
`, dir, o.Kubeconfig, o.Node),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o640); err != nil {
			return err
		}
	}
	return nil
}

// patchPods patches the pods' annotations at o.Rate per second for
// o.Window, round robin, each patch a change (a new sequence number): one
// informer update each. It returns the patches that succeeded.
func patchPods(ctx context.Context, cs kubernetes.Interface, o apicostOptions, seq *int) (int64, error) {
	tick := time.NewTicker(time.Second / time.Duration(o.Rate))
	defer tick.Stop()
	deadline := time.After(o.Window)
	jobs := make(chan int, o.Rate)
	var ok, failed atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := range jobs {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"cri-guard-bench/seq":"%d"}}}`, n)
				_, err := cs.CoreV1().Pods(o.Namespace).Patch(ctx, fmt.Sprintf("apicost-%04d", n%o.Pods),
					types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		})
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline:
			break loop
		case <-tick.C:
			select {
			case jobs <- *seq:
				*seq++
			default: // the API server is behind: the tick is lost, not queued
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return ok.Load(), err
	}
	if f := failed.Load(); f > ok.Load()/100 {
		return ok.Load(), fmt.Errorf("%d of %d patches failed: %w", f, f+ok.Load(), firstErr)
	}
	return ok.Load(), nil
}

// apicostReport prints every run and the median per binary.
func apicostReport(out io.Writer, o apicostOptions, runs []apicostRun) error {
	mib := func(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "cri-guard's API side with %d pods bound to node %s; windows of %s (idle, then %d patches/s); CPU from /proc/<pid>/stat (10 ms ticks)\n",
		o.Pods, o.Node, o.Window, o.Rate)
	fmt.Fprintln(tw, "binary\trun\tsynced after\tVmRSS synced MiB\tVmRSS after MiB\tVmHWM MiB\tidle CPU s\tpatch CPU s\tupdates\tCPU/update us")
	for i, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%d\t%s\n", r.binary, i+1, r.syncAfter.Round(10*time.Millisecond),
			mib(r.rssSynced), mib(r.rssAfter), mib(r.hwm), r.idleCPU.Seconds(), r.patchCPU.Seconds(), r.patches, us(r.perUpdate()))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "median of\truns\tVmRSS synced MiB\tVmRSS after MiB\tVmHWM MiB\tidle CPU s/window\t% of a core idle\tCPU/update us")
	for _, b := range o.Binaries {
		var rs []apicostRun
		for _, r := range runs {
			if r.binary == b.Name {
				rs = append(rs, r)
			}
		}
		idle := medianOf(rs, func(r apicostRun) float64 { return r.idleCPU.Seconds() })
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\n", b.Name, len(rs),
			medianOf(rs, func(r apicostRun) float64 { return float64(r.rssSynced) / 1024 }),
			medianOf(rs, func(r apicostRun) float64 { return float64(r.rssAfter) / 1024 }),
			medianOf(rs, func(r apicostRun) float64 { return float64(r.hwm) / 1024 }),
			idle, 100*idle/o.Window.Seconds(),
			medianOf(rs, func(r apicostRun) float64 { return float64(r.perUpdate()) / float64(time.Microsecond) }))
	}
	return tw.Flush()
}

// medianOf is the median of f over runs (the mean of the middle two for an
// even count); 0 for none.
func medianOf(runs []apicostRun, f func(apicostRun) float64) float64 {
	if len(runs) == 0 {
		return 0
	}
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// parallel runs f for 0..n-1 on workers goroutines; the first error stops it.
func parallel(ctx context.Context, workers, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
