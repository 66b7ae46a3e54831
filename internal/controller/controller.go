package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Deps are what the controller reads and writes through.
type Deps struct {
	// Client writes the patches (Nodes().Patch only).
	Client kubernetes.Interface
	// Nodes is the shared Node informer; the caller starts its factory.
	Nodes coreinformers.NodeInformer
	Log   *logrus.Entry
	// Clock drives the staleness and the queue's delays; nil: the real one.
	Clock clock.WithTicker
	// RateLimiter spaces the retries of one Node; nil: defaultRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[string]
}

// defaultRateLimiter spaces a Node's retries from 100 ms, doubling, up to
// 2 minutes (a refused identity is retried for ever, at most this often),
// and all retries together to 10 a second with a burst of 100.
func defaultRateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 2*time.Minute),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Controller keeps TaintKey on exactly the Nodes whose condition says
// memory pressure.
type Controller struct {
	cfg     Config
	client  kubernetes.Interface
	nodes   corelisters.NodeLister
	synced  []cache.InformerSynced
	log     *logrus.Entry
	clock   clock.WithTicker
	limiter workqueue.TypedRateLimiter[string]
	metrics *Metrics
	// queue is the current leadership term's work queue; nil while not
	// the leader (the informer's events are then dropped: a new term
	// starts with every Node)
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
}

// New builds a controller on deps' informer; Run starts reconciling.
func New(cfg Config, deps Deps) (*Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps.Client == nil || deps.Nodes == nil {
		return nil, errors.New("controller: a client and a node informer are required")
	}
	c := &Controller{cfg: cfg, client: deps.Client, nodes: deps.Nodes.Lister(), log: deps.Log,
		clock: deps.Clock, limiter: deps.RateLimiter}
	if c.log == nil {
		c.log = logrus.NewEntry(logrus.StandardLogger())
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.limiter == nil {
		c.limiter = defaultRateLimiter()
	}
	c.metrics = NewMetrics(c.depth)
	reg, err := deps.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				c.enqueue(n.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && changed(o, n) {
				c.enqueue(n.Name)
			}
		},
		// a deleted Node needs no untainting
	})
	if err != nil {
		return nil, fmt.Errorf("node informer handler: %w", err)
	}
	c.synced = []cache.InformerSynced{deps.Nodes.Informer().HasSynced, reg.HasSynced}
	return c, nil
}

// Metrics are the controller's series.
func (c *Controller) Metrics() *Metrics { return c.metrics }

// Ready says whether the informer has listed every Node (readiness: a
// replica that would lead now can start at once).
func (c *Controller) Ready() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// changed says whether an update may change the decision: the taints, the
// condition, or a resync (the same resourceVersion).
func changed(o, n *corev1.Node) bool {
	if o.ResourceVersion == n.ResourceVersion {
		return true
	}
	if !slices.EqualFunc(o.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
		return true
	}
	oc, nc := condition(o), condition(n)
	if (oc == nil) != (nc == nil) {
		return true
	}
	return oc != nil && (oc.Status != nc.Status || !oc.LastHeartbeatTime.Equal(&nc.LastHeartbeatTime) ||
		!oc.LastTransitionTime.Equal(&nc.LastTransitionTime))
}

func condition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == conditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (c *Controller) enqueue(name string) {
	if q := c.queue.Load(); q != nil {
		(*q).Add(name)
	}
}

func (c *Controller) depth() int {
	if q := c.queue.Load(); q != nil {
		return (*q).Len()
	}
	return 0
}

// run reconciles every Node, then each one the informer shows changed,
// until ctx ends (the leadership term); it returns once no worker writes
// any more.
func (c *Controller) run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("wait for the node informer: %w", ctx.Err())
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(c.limiter,
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes", Clock: c.clock})
	if err := c.begin(q); err != nil {
		q.ShutDown()
		return err
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	c.queue.Store(nil)
	q.ShutDown()
	wg.Wait()
	return nil
}

// begin makes q the term's queue and queues every cached Node: the
// informer's events are dropped while no term runs, and a new leader
// trusts nothing the previous one did.
func (c *Controller) begin(q workqueue.TypedRateLimitingInterface[string]) error {
	c.queue.Store(&q)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil { // the lister of a synced cache does not fail
		c.queue.Store(nil)
		return fmt.Errorf("list cached nodes: %w", err)
	}
	for _, n := range nodes {
		q.Add(n.Name)
	}
	c.log.WithField("nodes", len(nodes)).Info("reconciling node taints")
	return nil
}

// processNext reconciles the next Node of q; false once q is shut down or
// the term is over.
func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	name, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(name)
	if ctx.Err() != nil {
		return false
	}
	err := c.syncNode(ctx, q, name)
	if err == nil {
		q.Forget(name)
		return true
	}
	reason := errorReason(err)
	c.metrics.patchErrors.WithLabelValues(reason).Inc()
	entry := c.log.WithError(err).WithFields(logrus.Fields{"node": name, "reason": reason, "retries": q.NumRequeues(name)})
	switch reason {
	case "conflict", "invalid":
		// the cache was behind the Node: its newer version is on the way
		entry.Debug("node taint patch refused, retrying")
	default:
		entry.Warn("node taint patch failed, retrying")
	}
	q.AddRateLimited(name)
	return true
}

// syncNode makes one cached Node's taint match its condition.
func (c *Controller) syncNode(ctx context.Context, q workqueue.TypedDelayingInterface[string], name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cached node %q: %w", name, err)
	}
	now := c.clock.Now()
	d := decide(node, now, c.cfg.StaleAfter)
	if d.RecheckAfter > 0 {
		// a True condition goes stale by itself: look again then (a new
		// heartbeat re-arms it, an earlier one wins)
		q.AddAfter(name, d.RecheckAfter)
	}
	taints, change := taints(node.Spec.Taints, d.Taint, c.cfg.Effect, now)
	if change == taintUnchanged {
		return nil
	}
	patch, err := taintPatch(node.ResourceVersion, taints)
	if err != nil {
		return err
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch node %q taints: %w", name, err)
	}
	done := c.clock.Now()
	action := "applied"
	if change == taintRemoved {
		action = "removed"
		c.metrics.removed.WithLabelValues(d.State.String()).Inc()
	} else {
		c.metrics.applied.Inc()
	}
	if !d.Since.IsZero() && change != taintReplaced {
		c.metrics.latency.WithLabelValues(action).Observe(max(done.Sub(d.Since), 0).Seconds())
	}
	c.log.WithFields(logrus.Fields{"node": name, "taint": TaintKey, "effect": c.cfg.Effect,
		"condition": d.State.String(), "change": change.String()}).Info("node taint " + action)
	return nil
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// taintPatch replaces spec.taints with taints if the Node still is at
// resourceVersion rv (the API server answers 422 when the test fails):
// the taints are decided from that version, so a newer one (another
// writer's taint) is read again before anything is written.
func taintPatch(rv string, taints []corev1.Taint) ([]byte, error) {
	if taints == nil {
		taints = []corev1.Taint{}
	}
	b, err := json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/metadata/resourceVersion", Value: rv},
		{Op: "add", Path: "/spec/taints", Value: taints},
	})
	if err != nil {
		return nil, fmt.Errorf("encode taint patch: %w", err)
	}
	return b, nil
}

// errorReason is a failed patch's reason label.
func errorReason(err error) string {
	var st apierrors.APIStatus
	code := int32(0)
	if errors.As(err, &st) {
		code = st.Status().Code
	}
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case code == http.StatusUnprocessableEntity:
		return "invalid"
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case code >= 500 || apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err):
		return "server"
	default:
		return "other"
	}
}
