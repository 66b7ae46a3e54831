package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// fleetMarker marks a directory the fleet bench made, so that a later run
// may remove it and nothing else.
const fleetMarker = ".cri-guard-fleet"

// fleetDaemon is a process the fleet bench started (etcd, kube-apiserver),
// in a process group of its own so that a ^C on the terminal reaches the
// bench alone, which stops it by its PID.
type fleetDaemon struct {
	name   string
	cmd    *exec.Cmd
	waited chan struct{}
	err    error
}

func startDaemon(name, bin, logPath string, args []string) (*fleetDaemon, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &fleetDaemon{name: name, cmd: cmd, waited: make(chan struct{})}
	go func() { d.err = cmd.Wait(); logf.Close(); close(d.waited) }()
	return d, nil
}

func (d *fleetDaemon) pid() int { return d.cmd.Process.Pid }

func (d *fleetDaemon) exited() bool {
	select {
	case <-d.waited:
		return true
	default:
		return false
	}
}

// cpu is the user and system time of the process once it has exited (0
// before).
func (d *fleetDaemon) cpu() time.Duration {
	if !d.exited() || d.cmd.ProcessState == nil {
		return 0
	}
	return d.cmd.ProcessState.UserTime() + d.cmd.ProcessState.SystemTime()
}

// stop sends SIGTERM to the process (by its PID), SIGKILL after 30 s.
// It may be called again.
func (d *fleetDaemon) stop() {
	if d.exited() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.waited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.waited
	}
}

// fleetCluster is the bench's own etcd and kube-apiserver.
type fleetCluster struct {
	o          fleetOptions
	dir, pki   string
	etcd, api  *fleetDaemon
	audits     []string // the audit log of each API server start, in order
	adminKC    string
	admin      kubernetes.Interface
	adminREST  *rest.Config
	tokens     map[string]string // node -> bearer token
	tokenFile  string
	policyFile string
	log        *logrus.Entry
}

// fleetAuditPolicy logs every request at Metadata level (user, verb,
// object, code, the request URI with its query), after the response
// started (a watch) and once complete.
const fleetAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
`

// prepareFleetDir makes an empty dir, removing an earlier run's (marked)
// directory; a directory the bench did not make is refused.
func prepareFleetDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, fleetMarker)); err != nil {
			return fmt.Errorf("%q exists and was not made by the fleet bench (no %s): not touching it", dir, fleetMarker)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fleetMarker), nil, 0o644)
}

// setupFleetCluster writes the PKI, the nodes' tokens and the audit policy,
// and starts etcd and the API server.
func setupFleetCluster(ctx context.Context, o fleetOptions, nodes []string, log *logrus.Entry) (*fleetCluster, error) {
	c := &fleetCluster{o: o, dir: o.Dir, pki: filepath.Join(o.Dir, "pki"), tokens: map[string]string{}, log: log}
	if out, err := exec.CommandContext(ctx, o.Mkcerts, "-dir", c.pki, "-node", "fleet").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkcerts %q: %w: %s", o.Mkcerts, err, out)
	}
	// One bearer token per node: the audit log names each node's user,
	// system:node:<name> in system:nodes, which the Node authorizer and
	// NodeRestriction treat exactly as the kubelet's client certificate.
	var tf strings.Builder
	for _, n := range nodes {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		c.tokens[n] = hex.EncodeToString(b)
		fmt.Fprintf(&tf, "%s,system:node:%s,node-%s,\"system:nodes\"\n", c.tokens[n], n, n)
	}
	c.tokenFile = filepath.Join(o.Dir, "tokens.csv")
	c.policyFile = filepath.Join(o.Dir, "audit-policy.yaml")
	if err := os.WriteFile(c.tokenFile, []byte(tf.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.policyFile, []byte(fleetAuditPolicy), 0o644); err != nil {
		return nil, err
	}
	c.adminKC = filepath.Join(o.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.adminKC, "https://"+o.APIAddr, filepath.Join(c.pki, "ca.crt"),
		fmt.Sprintf("client-certificate: %q, client-key: %q", filepath.Join(c.pki, "admin.crt"), filepath.Join(c.pki, "admin.key"))); err != nil {
		return nil, err
	}
	// A throwaway store without fsync, as the cluster harness's.
	etcd, err := startDaemon("etcd", filepath.Join(o.KBin, "etcd"), filepath.Join(o.Dir, "logs", "etcd.log"), []string{
		"--name", "fleet", "--data-dir", filepath.Join(o.Dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls", "http://" + o.EtcdClient, "--advertise-client-urls", "http://" + o.EtcdClient,
		"--listen-peer-urls", "http://" + o.EtcdPeer, "--initial-advertise-peer-urls", "http://" + o.EtcdPeer,
		"--initial-cluster", "fleet=http://" + o.EtcdPeer})
	if err != nil {
		return nil, err
	}
	c.etcd = etcd
	if err := waitUntil(ctx, time.Minute, "etcd", etcd, func() error {
		resp, err := http.Get("http://" + o.EtcdClient + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		c.stop()
		return nil, err
	}
	if c.adminREST, err = clientcmd.BuildConfigFromFlags("", c.adminKC); err != nil {
		c.stop()
		return nil, err
	}
	c.adminREST.QPS, c.adminREST.Burst = 200, 400
	c.adminREST.UserAgent = "cri-guard-bench-fleet"
	if c.admin, err = kubernetes.NewForConfig(c.adminREST); err != nil {
		c.stop()
		return nil, err
	}
	if err := c.startAPI(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startAPI starts kube-apiserver with the cluster harness's flags (Node,RBAC,
// NodeRestriction), the nodes' token file and the audit log, a new log file
// per start, and waits until it is ready.
func (c *fleetCluster) startAPI(ctx context.Context) error {
	P := c.pki
	audit := filepath.Join(c.dir, fmt.Sprintf("audit-%d.log", len(c.audits)+1))
	_, port, _ := net.SplitHostPort(c.o.APIAddr)
	api, err := startDaemon("kube-apiserver", filepath.Join(c.o.KBin, "kube-apiserver"), filepath.Join(c.dir, "logs", "kube-apiserver.log"), []string{
		"--etcd-servers", "http://" + c.o.EtcdClient,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--tls-cert-file", P + "/apiserver.crt", "--tls-private-key-file", P + "/apiserver.key", "--client-ca-file", P + "/ca.crt",
		"--token-auth-file", c.tokenFile,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-client-certificate", P + "/apiserver-kubelet-client.crt", "--kubelet-client-key", P + "/apiserver-kubelet-client.key",
		"--kubelet-certificate-authority", P + "/ca.crt", "--kubelet-preferred-address-types", "Hostname",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", P + "/sa.pub", "--service-account-signing-key-file", P + "/sa.key",
		"--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
		"--cert-dir", filepath.Join(c.dir, "apiserver-certs"), "--profiling=false",
		"--audit-policy-file", c.policyFile, "--audit-log-path", audit, "--audit-log-format", "json",
		"--audit-log-mode", "blocking", "--audit-log-maxsize", "100000"})
	if err != nil {
		return err
	}
	c.api = api
	c.audits = append(c.audits, audit)
	hc, err := rest.HTTPClientFor(c.adminREST)
	if err != nil {
		return err
	}
	return waitUntil(ctx, 2*time.Minute, "kube-apiserver", api, func() error {
		resp, err := hc.Get(c.adminREST.Host + "/readyz")
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

// stop stops the API server and etcd, by their PIDs.
func (c *fleetCluster) stop() {
	if c.api != nil {
		c.api.stop()
	}
	if c.etcd != nil {
		c.etcd.stop()
	}
}

// waitUntil polls ok until it succeeds, d passes or d's process exits.
func waitUntil(ctx context.Context, d time.Duration, what string, p *fleetDaemon, ok func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := ok()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v (see its log under logs/)", what, p.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", what, d, err)
		}
		if err := benchutil.SleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// writeKubeconfig writes a kubeconfig for server with the user fields given.
func writeKubeconfig(path, server, ca, user string) error {
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fleet
  cluster: {server: %q, certificate-authority: %q}
users:
- name: u
  user: {%s}
contexts:
- name: c
  context: {cluster: fleet, user: u}
current-context: c
`, server, ca, user)
	return os.WriteFile(path, []byte(s), 0o600)
}

// countingProxy forwards TCP connections to the API server and counts the
// bytes each way: in is what the clients sent, out what the server sent.
type countingProxy struct {
	l       net.Listener
	target  string
	dialer  *net.Dialer
	in, out atomic.Int64
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startCountingProxy(target string) (*countingProxy, error) {
	return startCountingProxyDialer(target, &net.Dialer{Timeout: 5 * time.Second})
}

func startCountingProxyDialer(target string, d *net.Dialer) (*countingProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{l: l, target: target, dialer: d, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *countingProxy) addr() string { return p.l.Addr().String() }

func (p *countingProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *countingProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *countingProxy) forward(c net.Conn) {
	defer c.Close()
	s, err := p.dialer.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	p.track(c, true)
	p.track(s, true)
	defer p.track(c, false)
	defer p.track(s, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		_, _ = io.Copy(countingWriter{dst, n}, src)
		// a half-close would keep the other side waiting on a dead server
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(s, c, &p.in)
	go pipe(c, s, &p.out)
	<-done
	<-done
}

// close stops accepting and cuts every connection.
func (p *countingProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// byteCount is what went through a proxy.
type byteCount struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

func (p *countingProxy) bytes() byteCount { return byteCount{In: p.in.Load(), Out: p.out.Load()} }

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.n.Add(int64(n))
	return n, err
}
