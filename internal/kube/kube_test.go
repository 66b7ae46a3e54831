package kube

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeServer is the client's server over client-go's fake clientset (its
// object tracker applies the patches and feeds the watch); the unit tests
// play the kubelet by writing the pods through it too.
type fakeServer struct {
	cs *fake.Clientset
	mu sync.Mutex
	// failPatches, failEvents, failNodePatches: how many of the next pod
	// status patches, event creations, node patches fail with 500
	failPatches, failEvents, failNodePatches int
}

var _ server = (*fakeServer)(nil)

func (f *fakeServer) podListWatch(node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return f.cs.CoreV1().Pods(corev1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return f.cs.CoreV1().Pods(corev1.NamespaceAll).Watch(ctx, o)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, f.cs)
}

func (f *fakeServer) nodeListWatch(node string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return f.cs.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return f.cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, f.cs)
}

func (f *fakeServer) fail(n *int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *n > 0 {
		*n--
		return apierrors.NewInternalError(context.DeadlineExceeded)
	}
	return nil
}

func (f *fakeServer) patchPodStatus(ctx context.Context, ns, name string, pt types.PatchType, patch []byte) (*corev1.Pod, error) {
	if err := f.fail(&f.failPatches); err != nil {
		return nil, err
	}
	// the UID precondition, as the API server checks it
	var pre struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &pre); err != nil {
		return nil, err
	}
	cur, err := f.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if pre.Metadata.UID != "" && pre.Metadata.UID != cur.UID {
		return nil, apierrors.NewConflict(corev1.Resource("pods"), name, context.Canceled)
	}
	return f.cs.CoreV1().Pods(ns).Patch(ctx, name, pt, patch, metav1.PatchOptions{}, "status")
}

func (f *fakeServer) createEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	if err := f.fail(&f.failEvents); err != nil {
		return nil, err
	}
	return f.cs.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}

func (f *fakeServer) updateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	if err := f.fail(&f.failEvents); err != nil {
		return nil, err
	}
	return f.cs.CoreV1().Events(ev.Namespace).Update(ctx, ev, metav1.UpdateOptions{})
}

func (f *fakeServer) patchEvent(ctx context.Context, ns, name string, patch []byte) (*corev1.Event, error) {
	if err := f.fail(&f.failEvents); err != nil {
		return nil, err
	}
	return f.cs.CoreV1().Events(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}

func (f *fakeServer) patchNodeStatus(ctx context.Context, name string, pt types.PatchType, patch []byte) (*corev1.Node, error) {
	if err := f.fail(&f.failNodePatches); err != nil {
		return nil, err
	}
	return f.cs.CoreV1().Nodes().Patch(ctx, name, pt, patch, metav1.PatchOptions{}, "status")
}

// newFake starts a client on node-1 over a fake clientset holding objs,
// its cache synced.
func newFake(t *testing.T, objs ...runtime.Object) (*fakeServer, *Client) {
	t.Helper()
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	f := &fakeServer{cs: fake.NewClientset(objs...)}
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	c := newClient(f, "node-1", 10*time.Millisecond, logrus.NewEntry(l), nil)
	c.goneAfter = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(t, "cache synced", func() bool { return c.State().Synced })
	return f, c
}

// count counts the actions of verb on resource (and subresource).
func (f *fakeServer) count(verb, res, sub string) int {
	n := 0
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == res && a.GetSubresource() == sub {
			n++
		}
	}
	return n
}

// statusPatches are the pod status patches the client sent.
func (f *fakeServer) statusPatches() []string {
	var out []string
	for _, a := range f.cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func (f *fakeServer) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := f.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fakeServer) events(t *testing.T) []corev1.Event {
	t.Helper()
	l, err := f.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// kubeletWrites plays the kubelet's status manager: it writes its own
// status over the pod's (a whole-status update, as from its cache).
func (f *fakeServer) kubeletWrites(t *testing.T, name string, edit func(st *corev1.PodStatus)) {
	t.Helper()
	p := f.pod(t, name)
	edit(&p.Status)
	if _, err := f.cs.CoreV1().Pods("default").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func apiPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// settled waits until the client has nothing pending and no write in
// flight, then a little more (a write that would come, comes by then).
func settled(t *testing.T, c *Client) {
	t.Helper()
	testutil.WaitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	time.Sleep(100 * time.Millisecond)
	testutil.WaitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
}

func TestAPIOf(t *testing.T) {
	prio := int32(2000001000)
	tgps := int64(7)
	p := apiPod("web", "u1")
	p.Spec.Priority = &prio
	p.Spec.TerminationGracePeriodSeconds = &tgps
	p.Spec.Containers = []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("50Mi")}}},
	}
	// an init container larger than the sum wins, as in PodRequests
	p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")}}}}
	p.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("10Mi")}
	p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	a := apiOf(p)
	if a.Priority == nil || *a.Priority != prio || !a.HasMemoryRequest || a.MemoryRequestBytes != 210<<20 ||
		a.TerminationGracePeriod == nil || *a.TerminationGracePeriod != 7*time.Second || !a.ToleratesMemoryPressure || !a.Mirror {
		t.Fatalf("APIOf = %+v", a)
	}
	tests := []struct {
		name string
		tol  corev1.Toleration
		want bool
	}{
		{"key and effect", corev1.Toleration{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, true},
		{"key, any effect", corev1.Toleration{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists}, true},
		{"everything", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"other key", corev1.Toleration{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists}, false},
		{"NoExecute only", corev1.Toleration{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := apiPod("x", "u")
			q.Spec.Tolerations = []corev1.Toleration{tt.tol}
			if got := apiOf(q).ToleratesMemoryPressure; got != tt.want {
				t.Fatalf("tolerates = %v, want %v", got, tt.want)
			}
		})
	}
	if a := apiOf(apiPod("be", "u")); a.HasMemoryRequest || a.Priority != nil || a.TerminationGracePeriod != nil {
		t.Fatalf("BestEffort pod: %+v", a)
	}
}

func TestPodLookup(t *testing.T) {
	f, c := newFake(t, apiPod("web", "u1"))
	if _, ok := c.Pod("u1"); !ok {
		t.Fatal("u1 not found")
	}
	if _, ok := c.Pod("nope"); ok {
		t.Fatal("unknown uid found")
	}
	// the view follows the informer: a change is seen, derived once
	p := f.pod(t, "web")
	prio := int32(7)
	p.Spec.Priority = &prio
	if _, err := f.cs.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the new priority seen", func() bool { a, ok := c.Pod("u1"); return ok && a.Priority != nil && *a.Priority == 7 })
	if err := f.cs.CoreV1().Pods("default").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the deleted pod forgotten", func() bool { _, ok := c.Pod("u1"); return !ok })
}

const evictMsg = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. "

func dtCondition(st corev1.PodStatus) *corev1.PodCondition { return disruptionTarget(&st) }

// TestEvictedReport: the status the kubelet's evictPod writes, as a patch
// of the fields cri-guard owns (the other fields and conditions kept), and
// the event as cri-guard's, once; an API that fails is retried without a
// second event.
func TestEvictedReport(t *testing.T) {
	f, c := newFake(t, apiPod("web", "u1"))
	f.failPatches = 3
	p := &pod.Pod{UID: "u1", Name: "web", Namespace: "default"}
	c.Evicted(p, evictMsg)
	c.Evicted(p, evictMsg) // a second report of the same pod is a no-op
	testutil.WaitFor(t, "status written", func() bool { return f.pod(t, "web").Status.Phase == corev1.PodFailed })
	settled(t, c)
	st := f.pod(t, "web").Status
	if st.Reason != "Evicted" || st.Message != evictMsg || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status %+v", st)
	}
	dt := dtCondition(st)
	if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet || dt.Message != evictMsg || dt.LastTransitionTime.IsZero() {
		t.Fatalf("DisruptionTarget = %+v", dt)
	}
	if len(st.Conditions) != 2 {
		t.Fatalf("conditions %+v: want Ready kept beside DisruptionTarget", st.Conditions)
	}
	c.Evicted(p, evictMsg) // after it is done: still once
	settled(t, c)
	if n := len(f.statusPatches()); n != 1 {
		t.Fatalf("%d status patches, want 1", n)
	}
	// the event follows the status, from the broadcaster's goroutine
	testutil.WaitFor(t, "the event written", func() bool { return len(f.events(t)) >= 1 })
	evs := f.events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "Evicted" || ev.Message != evictMsg || ev.InvolvedObject.UID != "u1" ||
		ev.Source.Component != "cri-guard" || ev.Source.Host != "node-1" || ev.ReportingController != "cri-guard" {
		t.Fatalf("event %+v", ev)
	}
	// only patches of the status, never a read or a whole-status write
	if n := f.count("update", "pods", "status") + f.count("update", "pods", ""); n != 0 {
		t.Fatalf("%d pod updates by the client, want none", n)
	}
	var patch map[string]map[string]any
	if err := json.Unmarshal([]byte(f.statusPatches()[0]), &patch); err != nil {
		t.Fatal(err)
	}
	if len(patch) != 2 || patch["metadata"]["uid"] != "u1" || len(patch["status"]) != 4 {
		t.Fatalf("patch %s: want the UID precondition and phase, reason, message, conditions only", f.statusPatches()[0])
	}
}

func TestRejectedReport(t *testing.T) {
	f, c := newFake(t, apiPod("be", "u2"))
	c.Rejected(&pod.Pod{UID: "u2", Name: "be", Namespace: "default"}, "Evicted", "The node had condition: [MemoryPressure]. ")
	testutil.WaitFor(t, "status written", func() bool { return f.pod(t, "be").Status.Phase == corev1.PodFailed })
	settled(t, c)
	st := f.pod(t, "be").Status
	if st.Reason != "Evicted" || st.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status %+v", st)
	}
	if dtCondition(st) != nil {
		t.Fatalf("a rejection has no DisruptionTarget: %+v", st.Conditions)
	}
	evs := f.events(t)
	if len(evs) != 1 || evs[0].Reason != "Evicted" || evs[0].Message != "The node had condition: [MemoryPressure]. " || evs[0].Source.Component != "cri-guard" {
		t.Fatalf("events %+v, want one, cri-guard's, with the kubelet's reason and message", evs)
	}
}

func TestReportOfGonePod(t *testing.T) {
	f, c := newFake(t, apiPod("web", "u1"))
	c.Evicted(&pod.Pod{UID: "other-uid", Name: "web", Namespace: "default"}, "m") // same name, another pod
	c.Evicted(&pod.Pod{UID: "u9", Name: "gone", Namespace: "default"}, "m")
	settled(t, c)
	if n := len(f.events(t)) + len(f.statusPatches()); n != 0 {
		t.Fatalf("%d writes for pods that are not in the API", n)
	}
	// a pod deleted before its report: not found
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, "m")
	if err := f.cs.CoreV1().Pods("default").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	settled(t, c)
}

// TestReportOfPodNotCachedYet: a decision on a pod the watch has not
// brought yet is reported as soon as it does, not when the wait for it ends.
func TestReportOfPodNotCachedYet(t *testing.T) {
	f, c := newFake(t)
	c.goneAfter = time.Hour
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	time.Sleep(50 * time.Millisecond)
	if _, err := f.cs.CoreV1().Pods("default").Create(context.Background(), apiPod("web", "u1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "reported once the pod is cached", func() bool { return f.pod(t, "web").Status.Phase == corev1.PodFailed })
}

// TestReportConvergesByWatching: whenever the kubelet's status manager
// writes its own status over the report (phase kept, reason and message
// cleared; or the condition gone; a kubelet restart resyncs every pod, at
// any time), the watch brings the change and the client patches its
// fields again, without a second event; a write that keeps them starts
// nothing.
func TestReportConvergesByWatching(t *testing.T) {
	f, c := newFake(t, apiPod("web", "u1"))
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	testutil.WaitFor(t, "reported", func() bool {
		return holds(f.pod(t, "web"), &report{kind: kindEvict, reason: "Evicted", message: evictMsg})
	})
	settled(t, c)
	edits := []struct {
		name string
		edit func(st *corev1.PodStatus)
	}{
		{"reason and message cleared", func(st *corev1.PodStatus) { st.Reason, st.Message = "", "" }},
		{"message replaced", func(st *corev1.PodStatus) { st.Message = "kubelet's own" }},
		{"DisruptionTarget dropped", func(st *corev1.PodStatus) {
			st.Conditions = slices.DeleteFunc(st.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.DisruptionTarget })
		}},
	}
	for i, e := range edits {
		f.kubeletWrites(t, "web", e.edit)
		testutil.WaitFor(t, "re-reported after "+e.name, func() bool {
			return len(f.statusPatches()) == i+2 && holds(f.pod(t, "web"), &report{kind: kindEvict, reason: "Evicted", message: evictMsg})
		})
		settled(t, c)
	}
	// a write that keeps cri-guard's fields (the kubelet's container
	// statuses): nothing to do
	f.kubeletWrites(t, "web", func(st *corev1.PodStatus) { st.ContainerStatuses = []corev1.ContainerStatus{{Name: "c"}} })
	settled(t, c)
	if n := len(f.statusPatches()); n != len(edits)+1 {
		t.Fatalf("%d status patches, want %d", n, len(edits)+1)
	}
	testutil.WaitFor(t, "the event written", func() bool { return len(f.events(t)) >= 1 })
	if n := len(f.events(t)); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// TestRejectedAgainIsWatched: the kubelet's status manager writes Pending
// over the rejection before it has seen it; the watch brings it back, and
// the kubelet's retry refused again adds nothing (report-once).
func TestRejectedAgainIsWatched(t *testing.T) {
	f, c := newFake(t, apiPod("be", "u2"))
	p := &pod.Pod{UID: "u2", Name: "be", Namespace: "default"}
	c.Rejected(p, "Evicted", "m. ")
	testutil.WaitFor(t, "rejected", func() bool { return f.pod(t, "be").Status.Phase == corev1.PodFailed })
	settled(t, c)
	f.kubeletWrites(t, "be", func(st *corev1.PodStatus) { st.Phase, st.Reason, st.Message = corev1.PodPending, "", "" })
	c.Rejected(p, "Evicted", "m. ") // the kubelet's retry, refused again
	testutil.WaitFor(t, "rejected again", func() bool {
		st := f.pod(t, "be").Status
		return st.Phase == corev1.PodFailed && st.Message == "Pod was rejected: m. "
	})
	settled(t, c)
	testutil.WaitFor(t, "the event written", func() bool { return len(f.events(t)) >= 1 })
	if events, patches := len(f.events(t)), len(f.statusPatches()); events != 1 || patches != 2 {
		t.Fatalf("events %d, status patches %d; want 1 and 2", events, patches)
	}
}

// TestTerminalPodNotReported: a pod the kubelet already ended (its
// containers exited) is not reported, and its later writes start nothing.
func TestTerminalPodNotReported(t *testing.T) {
	q := apiPod("done", "u3")
	q.Status.Phase = corev1.PodSucceeded
	f, c := newFake(t, q)
	c.Evicted(&pod.Pod{UID: "u3", Name: "done", Namespace: "default"}, evictMsg)
	settled(t, c)
	f.kubeletWrites(t, "done", func(st *corev1.PodStatus) { st.Message = "x" })
	settled(t, c)
	if n := len(f.events(t)) + len(f.statusPatches()); n != 0 {
		t.Fatalf("%d writes for a pod terminal before its report", n)
	}
}

// logTo makes c log at Info level into a buffer, read with the function
// returned.
func logTo(c *Client) func() string {
	var mu sync.Mutex
	var buf strings.Builder
	l := logrus.New()
	l.SetOutput(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }))
	c.log = logrus.NewEntry(l)
	return func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
}

const leftToKubelet = "the kubelet's values are left as they are"

// TestKubeletReplacementsAnsweredWithinBound: a kubelet restarted right
// after the report, or one whose status cache missed cri-guard's reason
// and message, writes its own over them; each replacement within the
// bound (reassertMax within reassertWindow) is written again at once (the
// clock standing still: nothing is put off), without a second event; the
// next is left to the kubelet, said once in the log.
func TestKubeletReplacementsAnsweredWithinBound(t *testing.T) {
	f, c := newFake(t, apiPod("web", "u1"))
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	logs := logTo(c)
	want := &report{kind: kindEvict, reason: "Evicted", message: evictMsg}
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	testutil.WaitFor(t, "reported", func() bool { return len(f.statusPatches()) == 1 })
	settled(t, c)
	for i := range reassertMax {
		n := len(f.statusPatches())
		f.kubeletWrites(t, "web", func(st *corev1.PodStatus) { st.Reason, st.Message = "", "" })
		testutil.WaitFor(t, fmt.Sprintf("replacement %d written again at once", i+1), func() bool {
			return len(f.statusPatches()) == n+1 && holds(f.pod(t, "web"), want)
		})
		settled(t, c)
		mu.Lock()
		now = now.Add(10 * time.Second) // the kubelet's status sync period
		mu.Unlock()
	}
	// a write again carries only what was replaced
	if p := f.statusPatches()[1]; strings.Contains(p, "phase") || strings.Contains(p, "conditions") || !strings.Contains(p, `"reason"`) {
		t.Fatalf("patch %s: want reason and message only", p)
	}
	for range 3 {
		f.kubeletWrites(t, "web", func(st *corev1.PodStatus) { st.Reason, st.Message = "", "" })
	}
	testutil.WaitFor(t, "left to the kubelet", func() bool { return strings.Contains(logs(), leftToKubelet) })
	settled(t, c)
	if n := len(f.statusPatches()); n != 1+reassertMax {
		t.Fatalf("%d status patches, want %d", n, 1+reassertMax)
	}
	st := f.pod(t, "web").Status
	if st.Phase != corev1.PodFailed || st.Reason != "" || !disruptionTargetHolds(&st, want) {
		t.Fatalf("status %+v: want the kubelet's reason, Failed and DisruptionTarget kept", st)
	}
	if n := strings.Count(logs(), leftToKubelet); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs())
	}
	if n := len(f.events(t)); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func nodeCondition(t *testing.T, f *fakeServer) *corev1.NodeCondition {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == NodeConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestNodeCondition: written on a change of the eviction manager's view;
// its transition time moves only when its status changes; its heartbeat is
// refreshed while nothing changes; the kubelet's conditions are untouched.
func TestNodeCondition(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		// left by a cri-guard before this one: same status, its time kept
		{Type: NodeConditionType, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(1000, 0))},
	}}}
	f := &fakeServer{cs: fake.NewClientset(node)}
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := newClient(f, "node-1", 10*time.Millisecond, nil, nil)
	c.now = clock
	c.rand = func() float64 { return 0 } // the heartbeat's least period
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// a write is done when its outcome is recorded (nothing pending), not
	// when the API has it: a step of the clock in between would move the
	// recorded heartbeat
	patches := func() int {
		if c.State().Pending != 0 {
			return -1
		}
		return f.count("patch", "nodes", "status")
	}

	c.SetNodePressure(NodePressure{MemoryPressure: true, Thresholds: []string{"hard memory.available<1Gi"}})
	testutil.WaitFor(t, "patched", func() bool { return patches() == 1 })
	cd := nodeCondition(t, f)
	if cd.Status != corev1.ConditionTrue || cd.Reason != "MemoryPressure" || cd.Message != "cri-guard sees memory pressure: hard memory.available<1Gi" ||
		cd.LastTransitionTime.Unix() != 1000 || cd.LastHeartbeatTime.Unix() != 5000 {
		t.Fatalf("condition %+v: want True, the transition time of the one found kept, the heartbeat now", cd)
	}
	c.SetNodePressure(NodePressure{MemoryPressure: true, Thresholds: []string{"hard memory.available<1Gi"}}) // unchanged
	step(time.Second)
	c.SetNodePressure(NodePressure{MemoryPressure: true, Thresholds: []string{"soft memory.available<2Gi"}}) // message only
	testutil.WaitFor(t, "patched again", func() bool { return patches() == 2 })
	if cd := nodeCondition(t, f); cd.LastTransitionTime.Unix() != 1000 || cd.LastHeartbeatTime.Unix() != 5001 || !strings.Contains(cd.Message, "soft") {
		t.Fatalf("condition %+v: a new message keeps the transition time", cd)
	}
	step(time.Second)
	c.SetNodePressure(NodePressure{MemoryPressure: false})
	testutil.WaitFor(t, "patched a third time", func() bool { return patches() == 3 })
	if cd := nodeCondition(t, f); cd.Status != corev1.ConditionFalse || cd.LastTransitionTime.Unix() != 5002 {
		t.Fatalf("condition %+v: want False since now", cd)
	}
	// the heartbeat: due five minutes after the last write
	step(defaultHeartbeat)
	c.poke()
	testutil.WaitFor(t, "heartbeat", func() bool { return patches() == 4 })
	if cd := nodeCondition(t, f); cd.LastTransitionTime.Unix() != 5002 || cd.LastHeartbeatTime.Unix() != 5302 {
		t.Fatalf("condition %+v: want the heartbeat moved, not the transition", cd)
	}
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 2 || n.Status.Conditions[0].Type != corev1.NodeMemoryPressure || n.Status.Conditions[0].Reason != "KubeletHasSufficientMemory" {
		t.Fatalf("node conditions %+v: the kubelet's must be untouched", n.Status.Conditions)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

// TestRejectionsBoundedPerOwner: without the taint the scheduler sends a
// ReplicaSet's replacements straight back; past rejectBurst reports per
// owner in rejectWindow, a refused pod is left to the kubelet's back-off
// (not Failed: its controller makes no other). Pods of other owners, and
// pods without one, are reported as before; after the window, again.
func TestRejectionsBoundedPerOwner(t *testing.T) {
	owned := func(name, uid, owner string) *corev1.Pod {
		p := apiPod(name, uid)
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: &yes}}
		return p
	}
	var objs []runtime.Object
	for i := range 6 {
		objs = append(objs, owned(fmt.Sprintf("rs-a-%d", i), fmt.Sprintf("a%d", i), "rs-a"))
	}
	objs = append(objs, owned("rs-b-0", "b0", "rs-b"), apiPod("bare", "bare"))
	f, c := newFake(t, objs...)
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reject := func(name, uid string) {
		c.Rejected(&pod.Pod{UID: uid, Name: name, Namespace: "default"}, "Evicted", "m. ")
	}
	for i := range 5 {
		reject(fmt.Sprintf("rs-a-%d", i), fmt.Sprintf("a%d", i))
	}
	reject("rs-a-4", "a4") // the kubelet's retry of an unreported pod
	reject("rs-b-0", "b0")
	reject("bare", "bare")
	settled(t, c)
	failed := func() []string {
		var out []string
		l, _ := f.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodFailed {
				out = append(out, p.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := failed(); !slices.Equal(got, []string{"bare", "rs-a-0", "rs-a-1", "rs-a-2", "rs-b-0"}) {
		t.Fatalf("Failed pods %v: want 3 of rs-a, rs-b's and the bare pod", got)
	}
	if n := c.State().Unreported; n != 3 {
		t.Fatalf("unreported %d, want 3 (rs-a-3, rs-a-4 twice)", n)
	}
	mu.Lock()
	now = now.Add(rejectWindow)
	mu.Unlock()
	reject("rs-a-3", "a3")
	reject("rs-a-5", "a5")
	settled(t, c)
	if got := failed(); !slices.Contains(got, "rs-a-3") || !slices.Contains(got, "rs-a-5") {
		t.Fatalf("Failed pods %v after the window: want rs-a-3 and rs-a-5 reported", got)
	}
}

// recordGoroutines counts the goroutines of client-go's event broadcaster
// (its queue's loop and its sink's watcher).
func recordGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "k8s.io/client-go/tools/record.") || strings.Contains(g, "k8s.io/apimachinery/pkg/watch.(*Broadcaster).loop") {
			count++
		}
	}
	return count
}

// TestEventBroadcasterStopsWithClient: the broadcaster Run starts ends
// with it, its goroutines too.
func TestEventBroadcasterStopsWithClient(t *testing.T) {
	before := recordGoroutines()
	f := &fakeServer{cs: fake.NewClientset(apiPod("web", "u1"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})}
	c := newClient(f, "node-1", 10*time.Millisecond, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	testutil.WaitFor(t, "the event written", func() bool { return len(f.events(t)) == 1 })
	if n := recordGoroutines(); n <= before {
		t.Fatalf("%d broadcaster goroutines while the client runs, %d before: the count sees none", n, before)
	}
	cancel()
	<-done
	testutil.WaitFor(t, "the broadcaster's goroutines ended", func() bool { return recordGoroutines() <= before })
	if c.event(f.pod(t, "web"), &report{reason: "Evicted", message: "m"}) {
		t.Fatal("an event queued after the client stopped")
	}
}
