package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestRunServesWithBrokenParts: a metrics port another process holds (any
// local user may bind a port above 1024), an admin socket path held by
// another listener and a kubeconfig not written yet (a joining node's
// comes with its TLS bootstrap, which needs the runtime) each once made
// cri-guard exit at start, leaving the kubelet without a runtime. Now CRI
// is served at once, each part is retried, shown as degraded while it is
// broken, and taken up when it can be.
func TestRunServesWithBrokenParts(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	var adminHolder net.Listener
	var kubeconfig string
	d := startDaemonOn(t, nil, func(o *options) {
		c := &o.Config
		c.MetricsAddress = addr
		if err := os.MkdirAll(filepath.Dir(c.AdminSocket), 0o750); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("unix", c.AdminSocket)
		if err != nil {
			t.Fatal(err)
		}
		adminHolder = l
		kubeconfig = filepath.Join(filepath.Dir(c.StateDir), "kubelet.conf")
		c.Kubernetes.Kubeconfig, c.Kubernetes.NodeName = kubeconfig, "node-a"
	})
	// startDaemonOn returned: a CRI Version was answered with all three broken

	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	// the metrics port freed: served, saying what else is degraded
	held.Close()
	var m string
	testutil.WaitFor(t, "metrics served once the port is free", func() bool { m = scrape(); return m != "" })
	for _, want := range []string{`cri_guard_degraded{part="admin socket"} 1`, `cri_guard_degraded{part="api"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(m, `part="metrics"`) {
		t.Error("/metrics says the metrics part is degraded while serving it")
	}

	// the admin socket freed: status served, the API still missing
	adminHolder.Close()
	var st admin.Status
	testutil.WaitFor(t, "status served once the admin socket is free", func() bool {
		st, err = admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
		return err == nil
	})
	if len(st.Problems) != 1 || !strings.HasPrefix(st.Problems[0], "api: ") || !strings.Contains(st.Problems[0], "kubelet.conf") {
		t.Errorf("status problems %q, want only the API's, naming the kubeconfig", st.Problems)
	}
	if st.API == nil || !strings.Contains(st.API.LastError, "not connected") {
		t.Errorf("status api %+v, want not connected", st.API)
	}
	if _, err := d.rt.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version while degraded: %v", err)
	}

	// the kubeconfig written: the API client is made and the status clears
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "no degraded part once the kubeconfig exists", func() bool {
		st, err = admin.Fetch(context.Background(), d.opts.Config.AdminSocket)
		return err == nil && len(st.Problems) == 0
	})
	if st.API == nil || st.API.Node != "node-a" || strings.Contains(st.API.LastError, "not connected") {
		t.Errorf("status api %+v, want the client of node-a", st.API)
	}
	if m := scrape(); strings.Contains(m, "cri_guard_degraded{") {
		t.Errorf("/metrics still shows a degraded part:\n%s", grepLines(m, "cri_guard_degraded"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
