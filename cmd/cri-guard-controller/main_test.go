package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/cri-guard/cri-guard/internal/controller"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Controller.Effect != corev1.TaintEffectNoSchedule || o.Controller.StaleAfter != 15*time.Minute ||
		o.MetricsAddress != ":9714" || o.Kubeconfig != "" ||
		o.Leader.Namespace != "kube-system" || o.Leader.Name != "cri-guard-controller" ||
		o.Leader.LeaseDuration != 15*time.Second || o.Leader.RenewDeadline != 10*time.Second || o.Leader.RetryPeriod != 2*time.Second {
		t.Errorf("defaults = %+v", o)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "effect", args: []string{"--effect", "NoEntry"}, want: "--effect"},
		{name: "stale-after", args: []string{"--stale-after", "0s"}, want: "--stale-after"},
		{name: "workers", args: []string{"--workers", "0"}, want: "--workers"},
		{name: "lease order", args: []string{"--leader-elect-renew-deadline", "20s"}, want: "--leader-elect-lease-duration"},
		{name: "empty lease name", args: []string{"--leader-elect-name", ""}, want: "--leader-elect-name"},
		{name: "argument", args: []string{"extra"}, want: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%q) = %v, want an error naming %s", tt.args, err, tt.want)
			}
		})
	}
}

// TestReadyz: not ready before the informer synced, ready after; /healthz
// and /metrics answer.
func TestReadyz(t *testing.T) {
	cs := fake.NewClientset()
	f := informers.NewSharedInformerFactory(cs, 0)
	c, err := controller.New(controller.Config{}, controller.Deps{Client: cs, Nodes: f.Core().V1().Nodes()})
	if err != nil {
		t.Fatal(err)
	}
	h := httpHandler(c, leaderelection.NewLeaderHealthzAdaptor(time.Second))
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync = %d, want 503", code)
	}
	stop := make(chan struct{})
	defer func() { close(stop); f.Shutdown() }()
	f.Start(stop)
	f.WaitForCacheSync(stop)
	for !c.Ready() {
		time.Sleep(time.Millisecond)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after sync = %d, want 200", code)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "cri_guard_controller_leader 0") ||
		!strings.Contains(body, "cri_guard_controller_workqueue_depth 0") {
		t.Errorf("/metrics = %d:\n%s", code, body)
	}
}
