package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// The taint controller's names, as contrib/controller has them: its
// ServiceAccount (the user the audit log names), the taint and the
// condition it maps.
const (
	ctlNamespace      = "kube-system"
	ctlServiceAccount = "cri-guard-controller"
	ctlUser           = "system:serviceaccount:" + ctlNamespace + ":" + ctlServiceAccount
	ctlTaintKey       = "cri-guard.io/memory-pressure"
	ctlCondition      = "CriGuardMemoryPressure"
	// credentialIDKey is the user extra under which kube-apiserver names a
	// ServiceAccount token by its JWT ID ("JTI=<jti>"), in the audit log too.
	credentialIDKey = "authentication.kubernetes.io/credential-id"
)

// ctlSourceIPs are the loopback addresses each replica's proxy connects
// from: a second way of telling the replicas apart in the audit log
// (sourceIPs), should an API server not report the token's JWT ID.
var ctlSourceIPs = []string{"127.0.0.2", "127.0.0.3"}

// ctlManifest is one object of the controller's manifests.
type ctlManifest struct {
	file string
	obj  *unstructured.Unstructured
}

// readCtlManifests reads every document of every *.yaml file in dir, in
// file name order (kubectl apply -f dir's order).
func readCtlManifests(dir string) ([]ctlManifest, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %q", dir)
	}
	slices.Sort(files)
	var out []ctlManifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, doc := range splitYAMLDocs(b) {
			var m map[string]any
			if err := yaml.Unmarshal(doc, &m); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i+1, err)
			}
			if m == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
				return nil, fmt.Errorf("%s document %d: no kind, apiVersion or name", f, i+1)
			}
			out = append(out, ctlManifest{file: f, obj: u})
		}
	}
	return out, nil
}

// splitYAMLDocs splits a YAML stream at its "---" lines.
func splitYAMLDocs(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for line := range bytes.Lines(b) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.Write(line)
	}
	return append(docs, cur.Bytes())
}

// ctlArgs are the controller's flags for a process the bench runs: the
// Deployment's container args, but for what outside the cluster has to
// differ: the kubeconfig (no in-cluster ServiceAccount) and a metrics
// address of its own on loopback (port 0: two replicas share the host).
func ctlArgs(ms []ctlManifest, kubeconfig string) ([]string, error) {
	var deps []*unstructured.Unstructured
	for _, m := range ms {
		if m.obj.GetKind() == "Deployment" {
			deps = append(deps, m.obj)
		}
	}
	if len(deps) != 1 {
		return nil, fmt.Errorf("want one Deployment in the controller's manifests, found %d", len(deps))
	}
	cs, _, err := unstructured.NestedSlice(deps[0].Object, "spec", "template", "spec", "containers")
	if err != nil || len(cs) != 1 {
		return nil, fmt.Errorf("Deployment %s: want one container (%v)", deps[0].GetName(), err)
	}
	c, _ := cs[0].(map[string]any)
	raw, _, err := unstructured.NestedStringSlice(c, "args")
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: args: %w", deps[0].GetName(), err)
	}
	var args []string
	for _, a := range raw {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "metrics-address" || name == "kubeconfig" {
			continue
		}
		args = append(args, a)
	}
	return append(args, "--metrics-address=127.0.0.1:0", "--kubeconfig="+kubeconfig), nil
}

// applyCtlManifests creates, as admin, every object of the manifests but
// the Deployment (the bench runs its replicas as processes): the
// ValidatingAdmissionPolicy and its binding, the ServiceAccount, the RBAC.
func applyCtlManifests(ctx context.Context, c *fleetCluster, ms []ctlManifest) error {
	dc, err := discovery.NewDiscoveryClientForConfig(c.adminREST)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.adminREST)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.obj.GetKind() == "Deployment" {
			continue
		}
		gvk := m.obj.GroupVersionKind()
		mp, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", m.file, gvk, err)
		}
		ri := dyn.Resource(mp.Resource)
		var r dynamic.ResourceInterface = ri
		if ns := m.obj.GetNamespace(); ns != "" {
			r = ri.Namespace(ns)
		}
		// kube-system is made by the API server itself, maybe after its
		// readyz: a namespaced object may have to wait for it
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := r.Create(ctx, m.obj, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
				return fmt.Errorf("%s: create %s %s: %w", m.file, gvk.Kind, m.obj.GetName(), err)
			}
			if err := benchutil.SleepCtx(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// ctlToken asks the API server for a token of the controller's
// ServiceAccount (TokenRequest, as the kubelet does for a pod's projected
// token) and returns it with its JWT ID.
func ctlToken(ctx context.Context, cs kubernetes.Interface) (token, jti string, err error) {
	exp := int64((48 * time.Hour).Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(ctlNamespace).CreateToken(ctx, ctlServiceAccount,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("token of %s: %w", ctlUser, err)
	}
	jti, err = jwtID(tr.Status.Token)
	return tr.Status.Token, jti, err
}

// jwtID is the jti claim of a JWT (read, not verified: the bench asked the
// API server for the token).
func jwtID(tok string) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("token: not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("token payload: %w", err)
	}
	var claims struct {
		JTI string `json:"jti"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		return "", fmt.Errorf("token payload: %w", err)
	}
	if claims.JTI == "" {
		return "", errors.New("token: no jti claim")
	}
	return claims.JTI, nil
}

// fleetCtl is one replica of the controller, a process of the bench.
type fleetCtl struct {
	name     string // ctl-0, ctl-1
	dir      string
	jti      string
	sourceIP string
	args     []string
	proxy    *countingProxy
	d        *fleetDaemon
	logPath  string
	metrics  string // its metrics address, read from its log
}

// startFleetCtl starts a replica: its proxy from its own source address,
// its kubeconfig with the token, the process.
func startFleetCtl(ctx context.Context, c *fleetCluster, ms []ctlManifest, binary, name, sourceIP string, log *logrus.Entry) (*fleetCtl, error) {
	r := &fleetCtl{name: name, dir: filepath.Join(c.dir, "controllers", name), sourceIP: sourceIP}
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return nil, err
	}
	token, jti, err := ctlToken(ctx, c.admin)
	if err != nil {
		return nil, err
	}
	r.jti = jti
	if r.proxy, err = startCountingProxyFrom(c.o.APIAddr, sourceIP); err != nil {
		return nil, err
	}
	kc := filepath.Join(r.dir, "kubeconfig")
	if err := writeKubeconfig(kc, "https://"+r.proxy.addr(), filepath.Join(c.pki, "ca.crt"), fmt.Sprintf("token: %q", token)); err != nil {
		r.proxy.close()
		return nil, err
	}
	if r.args, err = ctlArgs(ms, kc); err != nil {
		r.proxy.close()
		return nil, err
	}
	r.logPath = filepath.Join(r.dir, "cri-guard-controller.log")
	if r.d, err = startDaemon("cri-guard-controller "+name, binary, r.logPath, r.args); err != nil {
		r.proxy.close()
		return nil, err
	}
	log.WithFields(logrus.Fields{"replica": name, "pid": r.d.pid(), "jti": jti, "source_ip": sourceIP, "args": strings.Join(r.args, " ")}).Info("started cri-guard-controller")
	return r, nil
}

// waitCtlReady waits until the replica logged its metrics address and its
// /readyz answers (its Node informer synced).
func (r *fleetCtl) waitReady(ctx context.Context) error {
	return waitUntil(ctx, 2*time.Minute, "cri-guard-controller "+r.name, r.d, func() error {
		if r.metrics == "" {
			f, err := os.Open(r.logPath)
			if err != nil {
				return err
			}
			r.metrics, err = ctlMetricsAddress(f)
			f.Close()
			if err != nil {
				return err
			}
		}
		resp, err := http.Get("http://" + r.metrics + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
}

// ctlMetricsAddress reads the address the controller listens on for
// /metrics from its start line (JSON log).
func ctlMetricsAddress(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics_address"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "cri-guard-controller started" && l.Metrics != "" {
			return l.Metrics, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no start line with metrics_address yet")
}

func (r *fleetCtl) stop() {
	if r.d != nil {
		r.d.stop()
	}
	if r.proxy != nil {
		r.proxy.close()
	}
}

// leaderGauge reads cri_guard_controller_leader from a metrics page.
func leaderGauge(r io.Reader) (bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || name != "cri_guard_controller_leader" {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return false, fmt.Errorf("cri_guard_controller_leader %q: %w", v, err)
		}
		return f == 1, nil
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, errors.New("no cri_guard_controller_leader in the metrics")
}

func (r *fleetCtl) leading(hc *http.Client) (bool, error) {
	resp, err := hc.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("metrics %d", resp.StatusCode)
	}
	return leaderGauge(resp.Body)
}

// vmRSS reads VmRSS (bytes) from a /proc/PID/status.
func vmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS %q: want <n> kB", strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS %q: %w", f[0], err)
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	// a zombie's or a kernel thread's status has none
	return 0, errors.New("no VmRSS")
}

func readVmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return vmRSS(f)
}

// rssSample is one VmRSS reading of a process: a controller replica
// (with whether it led then) or a node's cri-guard (group: its fleet).
type rssSample struct {
	at      time.Time
	group   string // ctl-0, ctl-1, or the node's fleet
	rss     int64
	leading bool
}

// leaderSample is a replica's leader gauge at a moment.
type leaderSample struct {
	at      time.Time
	leading bool
}

// fleetSampler samples the controllers' RSS and leader gauges every
// second and the nodes' cri-guard RSS every fifth second.
type fleetSampler struct {
	mu      sync.Mutex
	rss     []rssSample
	leaders map[string][]leaderSample // by replica
	stopc   chan struct{}
	done    chan struct{}
}

// nodePID is a node's cri-guard process.
type nodePID struct {
	fleet string
	pid   int
}

// nodePIDs are the running cri-guards' processes, read once so that the
// sampler does not share the nodes with the goroutines that stop them.
func nodePIDs(nodes []*fleetNode) []nodePID {
	var out []nodePID
	for _, n := range nodes {
		if n.guard != nil && n.guard.PID != 0 {
			out = append(out, nodePID{n.fleet, n.guard.PID})
		}
	}
	return out
}

func startFleetSampler(ctls []*fleetCtl, nodes []nodePID, log *logrus.Entry) *fleetSampler {
	s := &fleetSampler{leaders: map[string][]leaderSample{}, stopc: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 900 * time.Millisecond}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		warned := map[string]bool{}
		for i := 0; ; i++ {
			now := time.Now()
			for _, r := range ctls {
				l, err := r.leading(hc)
				rss, rerr := readVmRSS(r.d.pid())
				s.mu.Lock()
				if err == nil {
					s.leaders[r.name] = append(s.leaders[r.name], leaderSample{at: now, leading: l})
				} else if ls := s.leaders[r.name]; len(ls) > 0 {
					// unknown: as last seen
					l = ls[len(ls)-1].leading
				}
				if rerr == nil {
					s.rss = append(s.rss, rssSample{at: now, group: r.name, rss: rss, leading: l})
				}
				s.mu.Unlock()
				if (err != nil || rerr != nil) && !warned[r.name] && !r.d.exited() {
					warned[r.name] = true
					log.WithField("replica", r.name).Warnf("sample: leader gauge: %v, VmRSS: %v", err, rerr)
				}
			}
			if i%5 == 0 {
				for _, n := range nodes {
					if rss, err := readVmRSS(n.pid); err == nil {
						s.mu.Lock()
						s.rss = append(s.rss, rssSample{at: now, group: n.fleet, rss: rss})
						s.mu.Unlock()
					}
				}
			}
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *fleetSampler) samples() []rssSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rss)
}

func (s *fleetSampler) leaderSamples() map[string][]leaderSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]leaderSample{}
	for k, v := range s.leaders {
		out[k] = slices.Clone(v)
	}
	return out
}

func (s *fleetSampler) stop() {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	<-s.done
}

// roleAt says whether the replica led at t: its last leader sample at or
// before t; before the first, the first (sampling begins once both
// replicas are ready, after the first election).
func roleAt(samples []leaderSample, t time.Time) bool {
	if len(samples) == 0 {
		return false
	}
	i, found := slices.BinarySearchFunc(samples, t, func(s leaderSample, t time.Time) int { return s.at.Compare(t) })
	if found {
		return samples[i].leading
	}
	if i == 0 {
		return samples[0].leading
	}
	return samples[i-1].leading
}

// nodeObs is the bench's view of a Node, as its watch delivered it.
type nodeObs struct {
	at      time.Time
	node    string
	cond    bool // CriGuardMemoryPressure True
	tainted bool // cri-guard.io/memory-pressure present
}

// nodeWatch records each change of a Node's condition or taint, at the
// moment the bench's watch (an informer as admin) delivers it.
type nodeWatch struct {
	mu   sync.Mutex
	obs  []nodeObs
	last map[string]nodeObs
}

func nodeState(n *corev1.Node) (cond, tainted bool) {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == ctlCondition && c.Status == corev1.ConditionTrue {
			cond = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == ctlTaintKey {
			tainted = true
		}
	}
	return cond, tainted
}

func (w *nodeWatch) see(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	cond, tainted := nodeState(n)
	w.mu.Lock()
	defer w.mu.Unlock()
	if l, ok := w.last[n.Name]; ok && l.cond == cond && l.tainted == tainted {
		return
	}
	o := nodeObs{at: now, node: n.Name, cond: cond, tainted: tainted}
	w.last[n.Name] = o
	w.obs = append(w.obs, o)
}

// startNodeWatch starts the bench's watch of the fleet's Nodes and waits
// for its first list.
func startNodeWatch(ctx context.Context, cs kubernetes.Interface) (*nodeWatch, error) {
	w := &nodeWatch{last: map[string]nodeObs{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "cri-guard-bench=fleet"
	}))
	inf := f.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.see,
		UpdateFunc: func(_, n any) { w.see(n) },
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, errors.New("the bench's Node watch did not sync")
	}
	return w, nil
}

func (w *nodeWatch) observations() []nodeObs {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.obs)
}

// startCountingProxyFrom is startCountingProxy whose connections to the
// target leave from the address src (a loopback address of its own).
func startCountingProxyFrom(target, src string) (*countingProxy, error) {
	ip := net.ParseIP(src)
	if ip == nil {
		return nil, fmt.Errorf("source address %q: not an IP", src)
	}
	return startCountingProxyDialer(target, &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}})
}
