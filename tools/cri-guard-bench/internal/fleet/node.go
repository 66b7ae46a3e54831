package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// fleetNamespace holds every pod of the fleet bench.
const fleetNamespace = "cri-guard-fleet"

// fleetNode is one node of a fleet: its Node and pods in the API, its fake
// runtime and stats tree, and its cri-guard.
type fleetNode struct {
	name, fleet string
	dir         string
	pods        []*corev1.Pod
	stats       *fakenode.StatsTree
	cri         *fakenode.CRI
	guard       *benchutil.Child
	logPath     string
}

// fleetPod is the i-th pod of node: the maxprocs bench's Deployment-like pod.
func fleetPod(node string, i int) *corev1.Pod {
	return fakenode.Pod(fmt.Sprintf("%s-%02d", node, i), fleetNamespace, i, node)
}

// fleetBestEffortPod is a pod without requests (BestEffort), bound to node,
// which cri-guard refuses under memory pressure.
func fleetBestEffortPod(node string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-be-%d", node, i), Namespace: fleetNamespace, Labels: map[string]string{"app": "besteffort"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.2.3"}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
	}
}

// setupFleetAPI makes the namespace with its default service account (no
// controller manager runs here to make it).
func setupFleetAPI(ctx context.Context, cs kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: fleetNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(fleetNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account: %w", err)
	}
	return nil
}

// makeNodeObjects creates the Node and its pods, Running through the
// status subresource as a kubelet would report them.
func makeNodeObjects(ctx context.Context, cs kubernetes.Interface, n *fleetNode, pods int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"cri-guard-bench": "fleet", "fleet": n.fleet}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %q: %w", n.name, err)
	}
	start := time.Now()
	for i := range pods {
		p, err := cs.CoreV1().Pods(fleetNamespace).Create(ctx, fleetPod(n.name, i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod %s-%02d: %w", n.name, i, err)
		}
		p.Status = fakenode.RunningStatus(p, i, start)
		if p, err = cs.CoreV1().Pods(fleetNamespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("pod %q status: %w", p.Name, err)
		}
		n.pods = append(n.pods, p)
	}
	return nil
}

// startFleetNode starts the node's fake runtime (a ready sandbox per pod)
// and its cri-guard, with the node's own kubeconfig through proxyAddr.
func startFleetNode(n *fleetNode, binary, proxyAddr, caFile, token string, log *logrus.Entry) error {
	stats, err := fakenode.NewStatsTree(filepath.Join(n.dir, "stats"))
	if err != nil {
		return err
	}
	n.stats = stats
	cfgs := make([]*runtimeapi.PodSandboxConfig, len(n.pods))
	for i, p := range n.pods {
		cfgs[i] = fakenode.SandboxConfig(p)
	}
	if n.cri, err = fakenode.StartCRI(filepath.Join(n.dir, "cri.sock"), cfgs); err != nil {
		return err
	}
	kc := filepath.Join(n.dir, "kubeconfig")
	if err := writeKubeconfig(kc, "https://"+proxyAddr, caFile, fmt.Sprintf("token: %q", token)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "state"), 0o750); err != nil {
		return err
	}
	// The defaults, but for what a fake proc root and many daemons on one
	// host need: the roots, no PSI trigger (a regular file cannot arm one),
	// a free metrics port, a socket of its own.
	cfg := fmt.Sprintf(`stateDir: %s
cgroupRoot: %s
procRoot: %s
psiTrigger: ""
metricsAddress: "127.0.0.1:0"
adminSocket: %s
kubernetes: {kubeconfig: %s, nodeName: %s}
`, filepath.Join(n.dir, "state"), stats.Cgroup, stats.Proc, filepath.Join(n.dir, "admin.sock"), kc, n.name)
	cfgPath := filepath.Join(n.dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	n.logPath = filepath.Join(n.dir, "cri-guard.log")
	n.guard, err = benchutil.StartChild(benchutil.ChildConfig{RuntimeEndpoint: filepath.Join(n.dir, "cri.sock"),
		Args: "--config " + cfgPath + " --log-level info --log-format json"}, binary, nil, n.dir, log)
	return err
}

// stop stops the node's cri-guard and fake runtime.
func (n *fleetNode) stop(log *logrus.Entry) {
	if n.guard != nil {
		if err := n.guard.Stop(); err != nil {
			log.WithError(err).WithField("node", n.name).Warn("stop cri-guard")
		}
		n.guard = nil
	}
	if n.cri != nil {
		n.cri.Stop()
		n.cri = nil
	}
}

// waveResult is what one node did in the wave.
type waveResult struct {
	Node     string `json:"node"`
	Evicted  string `json:"evicted_pod_uid"`
	Refused  int    `json:"refused"`     // RunPodSandbox refused (ResourceExhausted)
	Admitted int    `json:"not_refused"` // RunPodSandbox not refused
	Err      string `json:"error,omitempty"`
}

// fleetWave puts the node under memory pressure until cri-guard evicts one
// pod, then takes the pressure away (the transition period keeps the node
// under pressure) and asks for three sandboxes of BestEffort pods, made in
// the API first, which cri-guard refuses.
func fleetWave(ctx context.Context, cs kubernetes.Interface, n *fleetNode, threshold int64) waveResult {
	res := waveResult{Node: n.name}
	fail := func(err error) waveResult { res.Err = err.Error(); return res }
	var be []*corev1.Pod
	for i := range 3 {
		p, err := cs.CoreV1().Pods(fleetNamespace).Create(ctx, fleetBestEffortPod(n.name, i), metav1.CreateOptions{})
		if err != nil {
			return fail(fmt.Errorf("create pod: %w", err))
		}
		be = append(be, p)
	}
	tail := &fakenode.LogTail{Path: n.logPath}
	if _, err := tail.Next(); err != nil {
		return fail(err)
	}
	if err := n.stats.SetAvailable(threshold / 2); err != nil {
		return fail(err)
	}
	far := func() error { return n.stats.SetAvailable(12 << 30) }
	deadline := time.Now().Add(time.Minute)
	for res.Evicted == "" {
		lines, err := tail.Next()
		if err != nil {
			return fail(errors.Join(err, far()))
		}
		for _, l := range lines {
			if l.Msg == fakenode.MsgEvicting {
				res.Evicted = l.PodUID
				break
			}
		}
		if res.Evicted == "" && time.Now().After(deadline) {
			return fail(errors.Join(errors.New("no eviction within 1m of the pressure"), far()))
		}
		if err := benchutil.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fail(errors.Join(err, far()))
		}
	}
	if err := far(); err != nil {
		return fail(err)
	}
	conn, err := grpc.NewClient("unix://"+n.guard.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	rc := runtimeapi.NewRuntimeServiceClient(conn)
	for _, p := range be {
		c := fakenode.SandboxConfig(p)
		c.Linux.CgroupParent = "/kubepods/besteffort/pod" + string(p.UID)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := rc.RunPodSandbox(rctx, &runtimeapi.RunPodSandboxRequest{Config: c})
		cancel()
		if status.Code(err) == codes.ResourceExhausted {
			res.Refused++
		} else {
			res.Admitted++
		}
	}
	return res
}

// runParallel runs f for each node, at most limit at once.
func runParallel(nodes []*fleetNode, limit int, f func(*fleetNode) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i, n := range nodes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = f(n)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
