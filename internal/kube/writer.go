package kube

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Client is cri-guard's connection to the API server: a cache of the pods
// bound to this node, and the reports of cri-guard's decisions (pod
// statuses, events, the node condition). Nothing in it blocks its callers:
// lookups read the cache, reports are written by its own goroutine, retried
// until they succeed or the pod is gone, and written again, a few times,
// when the watch shows that another writer (the kubelet's status manager)
// replaced what cri-guard owns; events go through client-go's broadcaster.
type Client struct {
	node string
	srv  server
	pods cache.SharedIndexInformer
	// podsHandler is the views' handler on pods: synced once it has
	// seen the first listing (the informer's own HasSynced may say so
	// before the handler derived the views)
	podsHandler cache.ResourceEventHandlerRegistration
	// nodes caches this node's Node alone: the condition is decided from
	// it, never from a periodic read
	nodes cache.SharedIndexInformer
	log   *logrus.Entry
	obs   Observer
	retry time.Duration
	now   func() time.Time
	// rand is in [0, 1): the jitter of retries and heartbeats, so that
	// the nodes of a cluster do not write in step (after an API server
	// restart they all fail and retry together)
	rand func() float64
	// goneAfter: how long a report waits for its pod to reach the cache;
	// heartbeat: how often the node condition is written unchanged
	goneAfter, heartbeat time.Duration

	viewMu sync.RWMutex
	views  map[string]podView // by pod UID, derived once per informer change

	mu      sync.Mutex
	reports map[string]*report // by pod UID: every report made, while its pod exists
	lastErr error
	lastOK  time.Time
	wake    chan struct{}
	ns      nodeState // the node condition (node.go)
	// rejections bounds the rejections reported per owner; unreported
	// counts those left to the kubelet's back-off (report.go)
	rejections rejectLimiter
	unreported int
	// recorder queues events to the broadcaster while Run runs (events.go);
	// eventsFailing: the last event write failed
	recorder      record.EventRecorder
	eventsFailing bool
}

// New connects to the API server described by cfg (nothing is sent until
// Run).
func New(cfg Config, log *logrus.Entry, obs Observer) (*Client, error) {
	rcfg, node, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc, err := rest.RESTClientFor(rcfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	if cfg.Heartbeat != 0 && cfg.Heartbeat < minHeartbeat {
		return nil, fmt.Errorf("kubernetes: node status heartbeat %v: must be at least %v", cfg.Heartbeat, minHeartbeat)
	}
	timeout := requestTimeout(cfg)
	c := newClient(restServer{rc: rc, timeout: timeout, relistWait: cfg.relistWait}, node, cfg.Retry, log, obs)
	if cfg.Heartbeat > 0 {
		c.heartbeat = cfg.Heartbeat
	}
	return c, nil
}

func newClient(srv server, node string, retry time.Duration, log *logrus.Entry, obs Observer) *Client {
	if retry <= 0 {
		retry = 500 * time.Millisecond
	}
	c := &Client{node: node, srv: srv, log: newLogEntry(log), obs: obs, retry: retry, now: time.Now, rand: rand.Float64,
		goneAfter: defaultGoneAfter, heartbeat: defaultHeartbeat,
		views: map[string]podView{}, reports: map[string]*report{}, wake: make(chan struct{}, 1)}
	c.nodes = newNodeInformer(srv.nodeListWatch(node))
	// any change of the Node may call for a write: the first read of the
	// condition, a condition someone else replaced
	_, _ = c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	})
	c.pods = newPodInformer(srv.podListWatch(node))
	c.podsHandler, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				c.setView(nil, p)
				c.watched(p)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*corev1.Pod)
			if p, ok := obj.(*corev1.Pod); ok {
				c.setView(o, p)
				c.watched(p)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				// its UID never comes back: its view and reports go
				c.dropView(string(p.UID))
				c.forget(string(p.UID))
			}
		},
	})
	return c
}

// NodeName is the node whose pods the client watches.
func (c *Client) NodeName() string { return c.node }

// Run watches the pods and writes the reports until ctx ends; then it
// stops its event broadcaster, within a few seconds.
func (c *Client) Run(ctx context.Context) {
	events := c.startEvents(ctx)
	go c.pods.RunWithContext(ctx)
	go c.nodes.RunWithContext(ctx)
	go func() {
		// the Node's writes wait for its cache; a Node the API does not
		// have brings no event to say the cache is ready
		if cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced) {
			c.poke()
		}
	}()
	c.writer(ctx)
	c.stopEvents(events)
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// State says how the API connection is doing, for status.
type State struct {
	Node      string    `json:"node"`
	Synced    bool      `json:"synced"`
	Pending   int       `json:"pending"`
	LastError string    `json:"lastError,omitempty"`
	LastOK    time.Time `json:"lastOK,omitzero"`
	// Unreported counts the refusals not reported Failed, their owner's
	// rejections being over the bound.
	Unreported int `json:"unreported,omitempty"`
}

// State is a snapshot of the connection; safe from any goroutine.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := State{Node: c.node, Synced: c.podsHandler != nil && c.podsHandler.HasSynced(), LastOK: c.lastOK,
		Unreported: c.unreported}
	for _, r := range c.reports {
		if r.pending {
			s.Pending++
		}
	}
	if c.ns.dirty {
		s.Pending++
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	return s
}

// writer writes what is due until ctx ends.
func (c *Client) writer(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := c.writeDue(ctx)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// writeDue writes every report whose time has come and the node's state,
// and returns how long until something else is due.
func (c *Client) writeDue(ctx context.Context) time.Duration {
	c.mu.Lock()
	var due []*report
	now := c.now()
	for _, r := range c.reports {
		if r.pending && !r.next.After(now) {
			due = append(due, r)
		}
	}
	c.mu.Unlock()
	for _, r := range due {
		if ctx.Err() != nil {
			return 0
		}
		c.writeReport(ctx, r)
	}
	wait := c.writeNode(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reports {
		if r.pending {
			wait = min(wait, max(r.next.Sub(c.now()), 0))
		}
	}
	return wait
}

// errGone: the pod is not in the API any more (or is another pod by now).
var errGone = errors.New("pod is gone")

// note counts a write and remembers the connection's health (c.mu held).
func (c *Client) note(op string, err error) {
	result := "ok"
	switch {
	case err == nil:
		c.lastOK, c.lastErr = c.now(), nil
	case errors.Is(err, errGone):
		result = "gone"
		c.lastOK, c.lastErr = c.now(), nil
	default:
		result = "error"
		c.lastErr = err
	}
	if c.obs != nil {
		c.obs.APIWrite(op, result)
	}
}

// backoff is the delay before the tries-th retry: the first retry delay,
// doubling, at most 30 s, and up to half of it more at random.
func (c *Client) backoff(tries int) time.Duration {
	return c.jitter(min(c.retry<<min(max(tries-1, 0), 6), 30*time.Second), retryJitter)
}

// The jitter factors: a retry waits up to half its delay more, a
// heartbeat up to a fifth of its period more (never less: the period is
// the least time between two heartbeats).
const (
	retryJitter     = 0.5
	heartbeatJitter = 0.2
)

// jitter is d and up to factor·d more, at random (wait.Jitter, with the
// client's source of randomness).
func (c *Client) jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(c.rand()*factor*float64(d))
}
