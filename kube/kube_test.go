package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/cri-guard/cri-guard/pod"
)

// fakeAPI is an in-process stand-in for the API server's core/v1 pod,
// event and node-status endpoints (unit tests only; the end-to-end tests
// run a real kube-apiserver).
type fakeAPI struct {
	t  *testing.T
	mu sync.Mutex
	// pods by namespace/name
	pods map[string]*corev1.Pod
	// failWrites makes the next N status updates (or event posts when
	// failEvents) fail with 500
	failWrites, failEvents int
	// clearOnce plays the kubelet's status manager once: right after the
	// first status update it writes its own, phase kept, reason and
	// message cleared
	clearOnce   bool
	events      []corev1.Event
	statusPuts  int
	nodePatches []string
}

func newFakeAPI(t *testing.T, pods ...*corev1.Pod) (*fakeAPI, *Client) {
	t.Helper()
	f := &fakeAPI{t: t, pods: map[string]*corev1.Pod{}}
	for _, p := range pods {
		p.ResourceVersion = "1"
		f.pods[p.Namespace+"/"+p.Name] = p
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	rcfg := &rest.Config{Host: srv.URL, APIPath: "/api", ContentConfig: rest.ContentConfig{
		GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: codecs.WithoutConversion(), ContentType: "application/json"}}
	rc, err := rest.RESTClientFor(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	c := newClient(rc, "node-1", 10*time.Millisecond, logrus.NewEntry(l), nil)
	c.checkDelay = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f, c
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // api v1 ...
	w.Header().Set("Content-Type", "application/json")
	fail := func(code int) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: int32(code),
			Message: http.StatusText(code),
			Reason:  map[int]metav1.StatusReason{404: metav1.StatusReasonNotFound, 500: metav1.StatusReasonInternalError}[code]})
	}
	switch {
	case len(parts) == 3 && parts[2] == "pods" && r.Method == http.MethodGet:
		if r.URL.Query().Get("watch") == "true" {
			// the streaming list client-go starts with (WatchList): the
			// pods as ADDED events, then the bookmark that ends them
			enc := json.NewEncoder(w)
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				for _, p := range f.pods {
					_ = enc.Encode(map[string]any{"type": "ADDED", "object": p})
				}
				_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
					ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}})
			}
			w.(http.Flusher).Flush()
			f.mu.Unlock()
			<-r.Context().Done() // no changes in these tests
			f.mu.Lock()
			return
		}
		if sel := r.URL.Query().Get("fieldSelector"); sel != "spec.nodeName=node-1" {
			f.t.Errorf("pod list selector %q", sel)
		}
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for _, p := range f.pods {
			list.Items = append(list.Items, *p)
		}
		_ = json.NewEncoder(w).Encode(list)
	case len(parts) == 6 && parts[4] == "pods" && r.Method == http.MethodGet:
		p, ok := f.pods[parts[3]+"/"+parts[5]]
		if !ok {
			fail(404)
			return
		}
		_ = json.NewEncoder(w).Encode(p)
	case len(parts) == 7 && parts[4] == "pods" && parts[6] == "status" && r.Method == http.MethodPut:
		if f.failWrites > 0 {
			f.failWrites--
			fail(500)
			return
		}
		var p corev1.Pod
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			f.t.Errorf("status body: %v", err)
		}
		f.statusPuts++
		_ = json.NewEncoder(w).Encode(p)
		if f.clearOnce {
			f.clearOnce = false
			p.Status.Reason, p.Status.Message = "", ""
		}
		f.pods[p.Namespace+"/"+p.Name] = &p
	case len(parts) == 5 && parts[4] == "events" && r.Method == http.MethodPost:
		if f.failEvents > 0 {
			f.failEvents--
			fail(500)
			return
		}
		var ev corev1.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			f.t.Errorf("event body: %v", err)
		}
		f.events = append(f.events, ev)
		_ = json.NewEncoder(w).Encode(ev)
	case len(parts) == 5 && parts[2] == "nodes" && parts[4] == "status" && r.Method == http.MethodPatch:
		if ct := r.Header.Get("Content-Type"); ct != string(types.StrategicMergePatchType) {
			f.t.Errorf("node patch content type %q", ct)
		}
		b, _ := io.ReadAll(r.Body)
		f.nodePatches = append(f.nodePatches, string(b))
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-1"}}`))
	default:
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		fail(404)
	}
}

func (f *fakeAPI) pod(key string) *corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[key].DeepCopy()
}

func (f *fakeAPI) counts() (events, puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events), f.statusPuts
}

func apiPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	a := APIOf(p)
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
			if got := APIOf(q).ToleratesMemoryPressure; got != tt.want {
				t.Fatalf("tolerates = %v, want %v", got, tt.want)
			}
		})
	}
	if a := APIOf(apiPod("be", "u")); a.HasMemoryRequest || a.Priority != nil || a.TerminationGracePeriod != nil {
		t.Fatalf("BestEffort pod: %+v", a)
	}
}

func TestPodLookup(t *testing.T) {
	_, c := newFakeAPI(t, apiPod("web", "u1"))
	waitFor(t, "cache synced", func() bool { return c.State().Synced })
	if _, ok := c.Pod("u1"); !ok {
		t.Fatal("u1 not found")
	}
	if _, ok := c.Pod("nope"); ok {
		t.Fatal("unknown uid found")
	}
}

// TestEvictedReport: the status the kubelet's evictPod writes, the event,
// once; an API that fails is retried without a second event.
func TestEvictedReport(t *testing.T) {
	f, c := newFakeAPI(t, apiPod("web", "u1"))
	f.mu.Lock()
	f.failWrites = 3
	f.mu.Unlock()
	p := &pod.Pod{UID: "u1", Name: "web", Namespace: "default"}
	msg := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. "
	c.Evicted(p, msg)
	c.Evicted(p, msg) // a second report of the same pod is a no-op
	waitFor(t, "status written", func() bool { return f.pod("default/web").Status.Phase == corev1.PodFailed })
	st := f.pod("default/web").Status
	if st.Reason != "Evicted" || st.Message != msg {
		t.Fatalf("status %+v", st)
	}
	var dt *corev1.PodCondition
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.DisruptionTarget {
			dt = &st.Conditions[i]
		}
	}
	if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet || dt.Message != msg {
		t.Fatalf("DisruptionTarget = %+v", dt)
	}
	waitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	c.Evicted(p, msg) // after it is done: still once
	time.Sleep(50 * time.Millisecond)
	events, puts := f.counts()
	if events != 1 || puts != 1 {
		t.Fatalf("events %d, status updates %d; want 1 and 1", events, puts)
	}
	f.mu.Lock()
	ev := f.events[0]
	f.mu.Unlock()
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "Evicted" || ev.Message != msg || ev.InvolvedObject.UID != "u1" || ev.Source.Host != "node-1" {
		t.Fatalf("event %+v", ev)
	}
}

func TestRejectedReport(t *testing.T) {
	f, c := newFakeAPI(t, apiPod("be", "u2"))
	f.mu.Lock()
	f.failEvents = 2
	f.mu.Unlock()
	c.Rejected(&pod.Pod{UID: "u2", Name: "be", Namespace: "default"}, "Evicted", "The node had condition: [MemoryPressure]. ")
	waitFor(t, "status written", func() bool { return f.pod("default/be").Status.Phase == corev1.PodFailed })
	st := f.pod("default/be").Status
	if st.Reason != "Evicted" || st.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status %+v", st)
	}
	if events, _ := f.counts(); events != 1 {
		t.Fatalf("events = %d, want 1", events)
	}
}

func TestReportOfGonePod(t *testing.T) {
	f, c := newFakeAPI(t, apiPod("web", "u1"))
	c.Evicted(&pod.Pod{UID: "other-uid", Name: "web", Namespace: "default"}, "m") // same name, another pod
	c.Evicted(&pod.Pod{UID: "u9", Name: "gone", Namespace: "default"}, "m")
	waitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	if events, puts := f.counts(); events != 0 || puts != 0 {
		t.Fatalf("events %d, puts %d for pods that are gone", events, puts)
	}
}

func TestNodeCondition(t *testing.T) {
	f, c := newFakeAPI(t)
	c.SetNodeCondition(true, "cri-guard sees memory pressure: hard memory.available<1Gi")
	waitFor(t, "patched", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.nodePatches) == 1 })
	c.SetNodeCondition(true, "cri-guard sees memory pressure: hard memory.available<1Gi") // unchanged
	c.SetNodeCondition(false, "cri-guard sees no memory pressure")
	waitFor(t, "patched again", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.nodePatches) == 2 })
	time.Sleep(50 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nodePatches) != 2 {
		t.Fatalf("patches %d, want 2 (only changes)", len(f.nodePatches))
	}
	for i, want := range []string{`"type":"CriGuardMemoryPressure","status":"True","`, `"type":"CriGuardMemoryPressure","status":"False","`} {
		if !strings.Contains(f.nodePatches[i], want) {
			t.Errorf("patch %d = %s, want %s", i, f.nodePatches[i], want)
		}
	}
}

// TestReportSurvivesTheKubeletsOverwrite: the kubelet's status manager may
// write its own status over the report once (terminal phase kept, reason
// and message gone) before it sees ours; the report is read back and
// written again, without a second event.
func TestReportSurvivesTheKubeletsOverwrite(t *testing.T) {
	f, c := newFakeAPI(t, apiPod("web", "u1"))
	f.mu.Lock()
	f.clearOnce = true
	f.mu.Unlock()
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, "m. ")
	waitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	st := f.pod("default/web").Status
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != "m. " {
		t.Fatalf("status after the overwrite: %+v", st)
	}
	if events, puts := f.counts(); events != 1 || puts != 2 {
		t.Fatalf("events %d, status updates %d; want 1 and 2", events, puts)
	}
}

// TestRejectedAgainIsChecked: the kubelet retries a pod that was rejected
// (its status manager wrote Pending over Failed after the checks); the
// new refusal reported again writes the status again, without a second
// event.
func TestRejectedAgainIsChecked(t *testing.T) {
	f, c := newFakeAPI(t, apiPod("be", "u2"))
	p := &pod.Pod{UID: "u2", Name: "be", Namespace: "default"}
	c.Rejected(p, "Evicted", "m. ")
	waitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	f.mu.Lock()
	q := f.pods["default/be"]
	q.Status.Phase, q.Status.Reason, q.Status.Message = corev1.PodPending, "", "" // the kubelet's overwrite
	f.mu.Unlock()
	c.Rejected(p, "Evicted", "m. ") // the kubelet's retry, refused again
	waitFor(t, "nothing pending", func() bool { return c.State().Pending == 0 })
	if st := f.pod("default/be").Status; st.Phase != corev1.PodFailed || st.Message != "Pod was rejected: m. " {
		t.Fatalf("status after the second refusal: %+v", st)
	}
	if events, puts := f.counts(); events != 1 || puts != 2 {
		t.Fatalf("events %d, status updates %d; want 1 and 2", events, puts)
	}
}
