package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cri-guard/cri-guard/internal/testutil"
)

var nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// apiServer is client-go's fake clientset made to patch Nodes as
// kube-apiserver does: a JSON patch applied to the stored Node, a failed
// test answered 422, and a new resourceVersion for every write (the
// fake's tracker keeps the object's own).
type apiServer struct {
	cs *fake.Clientset
	rv atomic.Int64
	mu sync.Mutex
	// fail are the errors of the next patches, in order
	fail []error
	// patches counts the patches that reached the store
	patches atomic.Int64
}

func newAPIServer(t *testing.T, nodes ...*corev1.Node) *apiServer {
	t.Helper()
	a := &apiServer{cs: fake.NewClientset()}
	a.rv.Store(100)
	for _, n := range nodes {
		n = n.DeepCopy()
		n.ResourceVersion = strconv.FormatInt(a.rv.Add(1), 10)
		if err := a.cs.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	a.cs.PrependReactor("patch", "nodes", a.patch)
	return a
}

func (a *apiServer) failNext(errs ...error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = append(a.fail, errs...)
}

func (a *apiServer) patch(action k8stesting.Action) (bool, runtime.Object, error) {
	pa := action.(k8stesting.PatchAction)
	a.mu.Lock()
	if len(a.fail) > 0 {
		err := a.fail[0]
		a.fail = a.fail[1:]
		a.mu.Unlock()
		return true, nil, err
	}
	a.mu.Unlock()
	if pa.GetPatchType() != "application/json-patch+json" {
		return true, nil, apierrors.NewBadRequest("want a JSON patch, got " + string(pa.GetPatchType()))
	}
	obj, err := a.cs.Tracker().Get(nodesGVR, "", pa.GetName())
	if err != nil {
		return true, nil, err
	}
	old, _ := json.Marshal(obj)
	p, err := jsonpatch.DecodePatch(pa.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	modified, err := p.Apply(old)
	if err != nil {
		return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", nodesGVR.GroupResource(), pa.GetName(), err.Error(), 0, false)
	}
	var n corev1.Node
	if err := json.Unmarshal(modified, &n); err != nil {
		return true, nil, err
	}
	if err := a.write(&n); err != nil {
		return true, nil, err
	}
	a.patches.Add(1)
	return true, &n, nil
}

// write stores n with a new resourceVersion, as the kubelet's (or
// cri-guard's) status update would, without an action of the clientset.
func (a *apiServer) write(n *corev1.Node) error {
	n.ResourceVersion = strconv.FormatInt(a.rv.Add(1), 10)
	return a.cs.Tracker().Update(nodesGVR, n, "")
}

func (a *apiServer) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	obj, err := a.cs.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Node)
}

// setCondition replaces the node's condition as cri-guard on it would.
func (a *apiServer) setCondition(t *testing.T, name string, c corev1.NodeCondition) {
	t.Helper()
	n := a.node(t, name).DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{c}
	if err := a.write(n); err != nil {
		t.Fatal(err)
	}
}

func ourTaint(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == TaintKey {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

type harness struct {
	api    *apiServer
	c      *Controller
	store  cache.Store // the informer's cache
	clk    *clocktesting.FakeClock
	q      workqueue.TypedRateLimitingInterface[string]
	events *eventGate // the informer's way into q
}

// eventGate is the queue the controller's event handlers see: q itself
// until close, nothing after. The informer hands events to its handlers on
// a goroutine of its own, some time after its cache holds the write (a
// test that waited for the cache cannot know whether the event was
// queued yet): closed, the gate keeps any late event out of q, so that
// what comes into q then is the controller's own requeue.
type eventGate struct {
	workqueue.TypedRateLimitingInterface[string]
	mu     sync.Mutex
	closed bool
}

func (g *eventGate) Add(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.TypedRateLimitingInterface.Add(name)
	}
}

// close drops every event from now on; an Add under way has reached q
// when it returns.
func (g *eventGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// newHarness builds a controller over api with a synced informer and a
// work queue the test drives itself (processNext), with retries that are
// immediate (the back-off's spacing is the workqueue's, not tested here).
func newHarness(t *testing.T, api *apiServer, cfg Config) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := informers.NewSharedInformerFactory(api.cs, 0)
	clk := clocktesting.NewFakeClock(t0)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	c, err := New(cfg, Deps{Client: api.cs, Nodes: f.Core().V1().Nodes(), Log: logrus.NewEntry(log), Clock: clk,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	f.WaitForCacheSync(ctx.Done())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(c.limiter, workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk})
	t.Cleanup(q.ShutDown)
	events := &eventGate{TypedRateLimitingInterface: q}
	if err := c.begin(events); err != nil {
		t.Fatal(err)
	}
	return &harness{api: api, c: c, clk: clk, q: q, events: events, store: f.Core().V1().Nodes().Informer().GetStore()}
}

// cached waits until the informer holds name at the API's resourceVersion.
func (h *harness) cached(t *testing.T, name string) {
	t.Helper()
	want := h.api.node(t, name).ResourceVersion
	testutil.WaitFor(t, "the informer to catch up with "+name, func() bool {
		n, err := h.c.nodes.Get(name)
		return err == nil && n.ResourceVersion == want
	})
}

// step reconciles the next queued node.
func (h *harness) step(t *testing.T) {
	t.Helper()
	if !h.c.processNext(context.Background(), h.q) {
		t.Fatal("queue shut down")
	}
}

// drain reconciles until the queue is empty.
func (h *harness) drain(t *testing.T) {
	t.Helper()
	for h.q.Len() > 0 {
		h.step(t)
	}
}

func pressure(status corev1.ConditionStatus, heartbeat time.Time) corev1.NodeCondition {
	return cond(status, heartbeat, heartbeat)
}

func TestConditionToTaint(t *testing.T) {
	other := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name string
		// cond is the condition after the node had pressure; nil: removed
		cond     *corev1.NodeCondition
		advance  time.Duration // the fake clock's step before reconciling
		tainted  bool
		removedL string // the taints_removed_total label counted
	}{
		{name: "true stays", cond: ptr(pressure(corev1.ConditionTrue, t0)), tainted: true},
		{name: "false", cond: ptr(pressure(corev1.ConditionFalse, t0)), removedL: "false"},
		{name: "unknown", cond: ptr(pressure(corev1.ConditionUnknown, t0)), removedL: "unknown"},
		{name: "absent", removedL: "absent"},
		{name: "true but stale", cond: ptr(pressure(corev1.ConditionTrue, t0)), advance: DefaultStaleAfter, removedL: "stale"},
		{name: "true, almost stale", cond: ptr(pressure(corev1.ConditionTrue, t0)), advance: DefaultStaleAfter - time.Second, tainted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}},
				Spec:   corev1.NodeSpec{Taints: []corev1.Taint{other}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{pressure(corev1.ConditionTrue, t0)}}}
			api := newAPIServer(t, n)
			h := newHarness(t, api, Config{})
			h.drain(t)
			got := api.node(t, "n1")
			if tt := ourTaint(got); tt == nil || tt.Effect != corev1.TaintEffectNoSchedule {
				t.Fatalf("after True: taints %+v, want %s:NoSchedule", got.Spec.Taints, TaintKey)
			}
			if v := promtest.ToFloat64(h.c.metrics.applied); v != 1 {
				t.Errorf("taints_applied_total = %v, want 1", v)
			}
			h.cached(t, "n1")

			if tt.cond != nil {
				api.setCondition(t, "n1", *tt.cond)
			} else {
				m := api.node(t, "n1").DeepCopy()
				m.Status.Conditions = nil
				if err := api.write(m); err != nil {
					t.Fatal(err)
				}
			}
			h.cached(t, "n1")
			h.clk.Step(tt.advance)
			h.c.enqueue("n1")
			h.drain(t)

			got = api.node(t, "n1")
			if (ourTaint(got) != nil) != tt.tainted {
				t.Errorf("taints %+v, want tainted=%v", got.Spec.Taints, tt.tainted)
			}
			if len(got.Spec.Taints) == 0 || got.Spec.Taints[0] != other {
				t.Errorf("the other taint was not kept as it was: %+v", got.Spec.Taints)
			}
			if got.Labels["a"] != "b" {
				t.Errorf("labels changed: %v", got.Labels)
			}
			if tt.removedL != "" {
				if v := promtest.ToFloat64(h.c.metrics.removed.WithLabelValues(tt.removedL)); v != 1 {
					t.Errorf("taints_removed_total{condition=%q} = %v, want 1", tt.removedL, v)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestStaleRecheck: a True condition that gets no new heartbeat untaints
// its node once it is stale, by the delayed requeue alone (no event).
func TestStaleRecheck(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{pressure(corev1.ConditionTrue, t0.Add(-time.Minute))}}}
	api := newAPIServer(t, n)
	h := newHarness(t, api, Config{StaleAfter: 10 * time.Minute})
	h.drain(t)
	if ourTaint(api.node(t, "n1")) == nil {
		t.Fatal("not tainted on True")
	}
	h.cached(t, "n1")
	// From here on no event reaches the queue: the informer's add of n1
	// and the patch's update may each still be on their way (or may have
	// been queued and taken already), and either, queued late, would look
	// like an early recheck. What was queued before is reconciled (nothing
	// changes), and then only the controller's own delayed requeue can
	// fill the queue.
	h.events.close()
	h.drain(t)
	if ourTaint(api.node(t, "n1")) == nil {
		t.Fatal("untainted while fresh")
	}
	// nothing is queued now; the recheck is waiting for the clock
	testutil.WaitFor(t, "the recheck to fire", func() bool {
		h.clk.Step(time.Minute)
		return h.q.Len() > 0
	})
	if now := h.clk.Now(); now.Before(t0.Add(9 * time.Minute)) {
		t.Fatalf("recheck fired at %v, before the condition went stale", now.Sub(t0))
	}
	h.drain(t)
	if tt := ourTaint(api.node(t, "n1")); tt != nil {
		t.Errorf("still tainted with a stale condition: %+v", tt)
	}
	if v := promtest.ToFloat64(h.c.metrics.removed.WithLabelValues("stale")); v != 1 {
		t.Errorf("taints_removed_total{condition=stale} = %v, want 1", v)
	}
}

// TestRetries: a stale cache (422 from the resourceVersion test), a
// conflict, and refusals of the identity and the server are retried
// through the rate limiter, and the controller keeps going after them.
func TestRetries(t *testing.T) {
	nodeGR := nodesGVR.GroupResource()
	tests := []struct {
		name   string
		errs   []error
		reason string
	}{
		{name: "conflict", errs: []error{apierrors.NewConflict(nodeGR, "n1", errors.New("changed"))}, reason: "conflict"},
		{name: "forbidden", errs: []error{apierrors.NewForbidden(nodeGR, "n1", errors.New("rbac")),
			apierrors.NewForbidden(nodeGR, "n1", errors.New("rbac")), apierrors.NewForbidden(nodeGR, "n1", errors.New("rbac"))}, reason: "forbidden"},
		{name: "unauthorized", errs: []error{apierrors.NewUnauthorized("token expired")}, reason: "unauthorized"},
		{name: "server", errs: []error{apierrors.NewInternalError(errors.New("etcd")), apierrors.NewServiceUnavailable("down")}, reason: "server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{pressure(corev1.ConditionTrue, t0)}}}
			api := newAPIServer(t, n)
			api.failNext(tt.errs...)
			h := newHarness(t, api, Config{})
			h.c.enqueue("n1")
			for i := range tt.errs {
				h.step(t)
				if got := h.q.NumRequeues("n1"); got != i+1 {
					t.Fatalf("after failure %d: requeues = %d, want %d", i+1, got, i+1)
				}
			}
			h.drain(t)
			if ourTaint(api.node(t, "n1")) == nil {
				t.Fatal("not tainted after the failures passed")
			}
			if got := h.q.NumRequeues("n1"); got != 0 {
				t.Errorf("requeues after success = %d, want 0 (forgotten)", got)
			}
			if v := promtest.ToFloat64(h.c.metrics.patchErrors.WithLabelValues(tt.reason)); int(v) != len(tt.errs) {
				t.Errorf("patch_errors_total{reason=%q} = %v, want %d", tt.reason, v, len(tt.errs))
			}
		})
	}
}

// TestStaleCacheRetried: a patch decided from an old version of the Node
// (another writer's taint arrived since) is refused by the resourceVersion
// test, and the taint is decided again from the newer version, keeping the
// other writer's taint.
func TestStaleCacheRetried(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{pressure(corev1.ConditionTrue, t0)}}}
	api := newAPIServer(t, n)
	h := newHarness(t, api, Config{})
	h.cached(t, "n1")
	old := api.node(t, "n1").DeepCopy()
	m := old.DeepCopy()
	m.Spec.Taints = []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoExecute}}
	if err := api.write(m); err != nil {
		t.Fatal(err)
	}
	h.cached(t, "n1")
	newer, _ := h.c.nodes.Get("n1")
	newer = newer.DeepCopy()
	// the cache as it was before the other writer's event arrived
	if err := h.store.Update(old); err != nil {
		t.Fatal(err)
	}
	h.c.enqueue("n1")
	h.step(t)
	if got := api.node(t, "n1").Spec.Taints; len(got) != 1 || got[0].Key != "other" {
		t.Fatalf("a patch from the old version went through: %+v", got)
	}
	if v := promtest.ToFloat64(h.c.metrics.patchErrors.WithLabelValues("invalid")); v != 1 {
		t.Errorf("patch_errors_total{reason=invalid} = %v, want 1", v)
	}
	if h.q.NumRequeues("n1") != 1 {
		t.Errorf("requeues = %d, want 1", h.q.NumRequeues("n1"))
	}
	// the event arrives
	if err := h.store.Update(newer); err != nil {
		t.Fatal(err)
	}
	h.drain(t)
	got := api.node(t, "n1").Spec.Taints
	if len(got) != 2 || got[0].Key != "other" || got[1].Key != TaintKey {
		t.Errorf("taints = %+v, want the other writer's and ours", got)
	}
}
