package maxprocs

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

func TestSummarizeLatencies(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 20; i++ {
		ds = append(ds, time.Duration(21-i)*time.Millisecond) // unsorted
	}
	got := summarizeLatencies(ds)
	want := latencySummary{n: 20, median: 10 * time.Millisecond, p90: 18 * time.Millisecond, max: 20 * time.Millisecond}
	if got != want {
		t.Errorf("summarizeLatencies = %+v, want %+v", got, want)
	}
	if ds[0] != 20*time.Millisecond {
		t.Error("summarizeLatencies sorted its input")
	}
	if got := summarizeLatencies(nil); got != (latencySummary{}) {
		t.Errorf("summarizeLatencies(nil) = %+v", got)
	}
}

func TestCPURates(t *testing.T) {
	if got := cpuRate(1500*time.Millisecond, 10*time.Second); got != 0.15 {
		t.Errorf("cpuRate = %v, want 0.15", got)
	}
	if got := cpuRate(time.Second, 0); got != 0 {
		t.Errorf("cpuRate over no time = %v, want 0", got)
	}
	r := summarizeRates([]float64{0.1, 0.3, 0.2})
	if r.min != 0.1 || r.max != 0.3 || r.mean < 0.1999 || r.mean > 0.2001 {
		t.Errorf("summarizeRates = %+v", r)
	}
	if s := r.String(); s != "0.200 (0.100-0.300)" {
		t.Errorf("String = %q", s)
	}
}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		in      string
		want    []maxprocsSetting
		wantErr bool
	}{
		{"1,default", []maxprocsSetting{{"1", "1"}, {"default (4)", "4"}}, false},
		{" 2 , 1 ", []maxprocsSetting{{"2", "2"}, {"1", "1"}}, false},
		{"0", nil, true},
		{"one", nil, true},
		{"", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSettings(tt.in, 4)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseSettings(%q) error = %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("parseSettings(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("parseSettings(%q)[%d] = %v, want %v", tt.in, i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseMaxprocsFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"defaults", nil, false},
		{"sandboxes over pods", []string{"--pods", "10", "--sandboxes", "11"}, true},
		{"too few pods for the victims", []string{"--pods", "100", "--rounds", "4", "--crossings", "25"}, true},
		{"victims leave enough", []string{"--pods", "300", "--sandboxes", "100", "--rounds", "4", "--crossings", "25"}, false},
		{"bad threshold", []string{"--threshold", "lots"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseMaxprocsFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && (o.Sandboxes == 0 || o.Threshold <= 0) {
				t.Errorf("options not completed: %+v", o)
			}
		})
	}
}

// TestFakeAPIInformer runs a client-go informer, as cri-guard's kube
// client does, against the in-process API: the pods bound to the node are
// listed, an update and a status patch are watched.
func TestFakeAPIInformer(t *testing.T) {
	a, err := startFakeAPI("n1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	pods := []*corev1.Pod{benchPod(0, "n1"), benchPod(1, "n1"), benchPod(2, "other")}
	a.addPods(pods)
	kc, err := a.kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	api, err := newRealAPI(kc, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *corev1.Pod, 100)
	inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(api.rc, "pods", corev1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", "n1")), &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, n any) { seen <- n.(*corev1.Pod) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer not synced")
	}
	if n := len(inf.GetStore().List()); n != 2 {
		t.Fatalf("informer has %d pods, want the 2 bound to n1", n)
	}
	wait := func(what string, ok func(*corev1.Pod) bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case p := <-seen:
				if ok(p) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: not watched", what)
			}
		}
	}
	if err := a.update(1); err != nil {
		t.Fatal(err)
	}
	wait("update", func(p *corev1.Pod) bool {
		return p.Name == pods[1].Name && p.Annotations[fakenode.UpdateAnnotation] == "1"
	})
	patch := `{"metadata":{"uid":"` + string(pods[0].UID) + `"},"status":{"phase":"Failed","reason":"Evicted","message":"m",` +
		`"conditions":[{"type":"DisruptionTarget","status":"True","reason":"TerminationByKubelet"}]}}`
	var out corev1.Pod
	err = api.rc.Patch(types.StrategicMergePatchType).Namespace(maxprocsNamespace).Resource("pods").Name(pods[0].Name).
		SubResource("status").Body([]byte(patch)).Do(ctx).Into(&out)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status.Phase != corev1.PodFailed || len(out.Status.Conditions) != 6 {
		t.Errorf("patched status: phase %s, %d conditions; want Failed and the 5 conditions + DisruptionTarget", out.Status.Phase, len(out.Status.Conditions))
	}
	wait("status patch", func(p *corev1.Pod) bool { return p.Name == pods[0].Name && p.Status.Reason == "Evicted" })
	// a UID that is not the pod's is refused, as the API server's precondition
	bad := strings.Replace(patch, string(pods[0].UID), "not-the-uid", 1)
	err = api.rc.Patch(types.StrategicMergePatchType).Namespace(maxprocsNamespace).Resource("pods").Name(pods[0].Name).
		SubResource("status").Body([]byte(bad)).Do(ctx).Error()
	if err == nil {
		t.Error("patch with another UID accepted")
	}
	if n := a.http1.Load(); n > 0 {
		t.Errorf("%d requests not over HTTP/2", n)
	}
	var node corev1.Node
	if err := api.rc.Get().Resource("nodes").Name("n1").Do(ctx).Into(&node); err != nil || node.Name != "n1" {
		t.Errorf("get node: %v %q", err, node.Name)
	}
	np := `{"status":{"conditions":[{"type":"CriGuardMemoryPressure","status":"True","lastHeartbeatTime":"` + metav1.Now().UTC().Format(time.RFC3339) + `"}]}}`
	if err := api.rc.Patch(types.StrategicMergePatchType).Resource("nodes").Name("n1").SubResource("status").Body([]byte(np)).Do(ctx).Into(&node); err != nil ||
		len(node.Status.Conditions) != 1 {
		t.Errorf("patch node status: %v, %d conditions", err, len(node.Status.Conditions))
	}
}
