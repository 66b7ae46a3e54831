package apicost

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

func TestParseApicostFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(*testing.T, apicostOptions)
	}{
		{name: "two binaries in order", args: []string{"--kubeconfig", "/k", "--binary", "base=/a/cri-guard", "--binary", "new=/b/cri-guard"},
			check: func(t *testing.T, o apicostOptions) {
				if len(o.Binaries) != 2 || o.Binaries[0] != (benchutil.NamedBinary{Name: "base", Path: "/a/cri-guard"}) || o.Binaries[1].Name != "new" {
					t.Errorf("binaries %+v", o.Binaries)
				}
				if o.Pods != 1000 || o.Rate != 50 || o.Window != time.Minute || o.Rounds != 3 || o.Node != "storm-fake-node" {
					t.Errorf("defaults %+v", o)
				}
			}},
		{name: "no kubeconfig", args: []string{"--binary", "a=/x"}, wantErr: "--kubeconfig"},
		{name: "no binary", args: []string{"--kubeconfig", "/k"}, wantErr: "--binary"},
		{name: "binary without a name", args: []string{"--kubeconfig", "/k", "--binary", "/x"}, wantErr: "name=path"},
		{name: "zero rate", args: []string{"--kubeconfig", "/k", "--binary", "a=/x", "--rate", "0"}, wantErr: "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseApicostFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestApicostMedianAndPerUpdate(t *testing.T) {
	runs := []apicostRun{
		{idleCPU: 100 * time.Millisecond, patchCPU: 400 * time.Millisecond, patches: 3000},
		{idleCPU: 300 * time.Millisecond, patchCPU: 900 * time.Millisecond, patches: 3000},
		{idleCPU: 200 * time.Millisecond, patchCPU: 500 * time.Millisecond, patches: 3000},
	}
	if got := runs[0].perUpdate(); got != 100*time.Microsecond {
		t.Errorf("perUpdate = %v, want 100us", got)
	}
	if got := medianOf(runs, func(r apicostRun) float64 { return r.idleCPU.Seconds() }); got != 0.2 {
		t.Errorf("median idle = %v, want 0.2", got)
	}
	if got := medianOf(runs[:2], func(r apicostRun) float64 { return r.idleCPU.Seconds() }); got < 0.1999 || got > 0.2001 {
		t.Errorf("median of two = %v, want 0.2", got)
	}
	if medianOf(nil, func(apicostRun) float64 { return 1 }) != 0 || (apicostRun{}).perUpdate() != 0 {
		t.Error("no runs, no patches: want 0")
	}
}

func TestParallel(t *testing.T) {
	var n atomic.Int64
	if err := parallel(context.Background(), 4, 100, func(context.Context, int) error { n.Add(1); return nil }); err != nil || n.Load() != 100 {
		t.Fatalf("ran %d, err %v; want 100, nil", n.Load(), err)
	}
	boom := errors.New("boom")
	err := parallel(context.Background(), 4, 1000, func(_ context.Context, i int) error {
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestApicostSetupAndPatch(t *testing.T) {
	o := apicostOptions{Node: "n", Namespace: "ns", Pods: 20, Rate: 200, Window: time.Second}
	cs := fake.NewClientset(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns"}})
	log := logrus.NewEntry(logrus.New())
	log.Logger.SetOutput(io.Discard)
	ctx := context.Background()
	if err := apicostSetup(ctx, cs, o, log); err != nil {
		t.Fatal(err)
	}
	if err := apicostSetup(ctx, cs, o, log); err != nil { // what is there is kept
		t.Fatalf("second setup: %v", err)
	}
	pods, err := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 20 {
		t.Fatalf("%d pods, %v; want 20", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "n" || len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Operator != corev1.TolerationOpExists {
			t.Fatalf("pod %s: node %q tolerations %+v", p.Name, p.Spec.NodeName, p.Spec.Tolerations)
		}
	}
	seq := 0
	n, err := patchPods(ctx, cs, o, &seq)
	if err != nil {
		t.Fatal(err)
	}
	// the ticker's rate over the window, less what a busy machine loses
	if n < 100 || n > 201 || int(n) != seq {
		t.Errorf("%d patches (seq %d) in 1 s at 200/s", n, seq)
	}
	p, err := cs.CoreV1().Pods("ns").Get(ctx, "apicost-0000", metav1.GetOptions{})
	if err != nil || p.Annotations["cri-guard-bench/seq"] == "" {
		t.Errorf("pod 0 annotations %v, %v: want the sequence number", p.Annotations, err)
	}
	if err := apicostTeardown(cs, o, log); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); err == nil {
		t.Error("node left after the teardown")
	}
}
