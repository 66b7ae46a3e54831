package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cri-guard/cri-guard/pod"
)

// Client is cri-guard's connection to the API server: a cache of the pods
// bound to this node, and a queue of the status updates, events and the
// node condition that report cri-guard's decisions. Nothing in it blocks
// its callers: lookups read the cache, reports are queued and written by
// its own goroutine, retried until they succeed or the pod is gone.
type Client struct {
	node  string
	rc    rest.Interface
	pods  cache.SharedIndexInformer
	log   *logrus.Entry
	obs   Observer
	retry time.Duration
	now   func() time.Time
	// checkDelay: how long after writing a status it is read back
	checkDelay time.Duration

	mu       sync.Mutex
	queue    []*report
	done     map[string]bool // reports made, by key: never twice
	lastErr  error
	lastOK   time.Time
	wake     chan struct{}
	cond     *nodeCondition // the latest condition to write, nil when written
	condSent nodeCondition  // the last one written
}

// report is one pending write: a pod's rejection or eviction.
type report struct {
	kind      string // "reject" or "evict"
	uid       string
	namespace string
	name      string
	reason    string
	message   string
	tries     int
	next      time.Time
	since     time.Time
	// eventMade: the event is made, only the status is left; written: the
	// status was written and is checked again (checks) until it holds
	// (the writer goroutine alone reads and writes these).
	eventMade bool
	written   bool
	checks    int
}

// errCheckLater: the status is written; read it again later, because the
// kubelet's status manager may write its own over it once (keeping the
// terminal phase, clearing reason and message) before it sees ours.
var errCheckLater = errors.New("written: check again later")

// statusChecks is how many times a written status is read back, and
// checkDelay how long after each write or check.
const (
	statusChecks      = 3
	defaultCheckDelay = 3 * time.Second
)

func (r *report) key() string { return r.kind + "/" + r.uid }

// Report kinds, also the op label of Observer.APIWrite.
const (
	opReject    = "reject"
	opEvict     = "evict"
	opEvent     = "event"
	opCondition = "node-condition"
)

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
	return newClient(rc, node, cfg.Retry, log, obs), nil
}

func newClient(rc rest.Interface, node string, retry time.Duration, log *logrus.Entry, obs Observer) *Client {
	if retry <= 0 {
		retry = 500 * time.Millisecond
	}
	c := &Client{node: node, rc: rc, log: newLogEntry(log), obs: obs, retry: retry, now: time.Now, checkDelay: defaultCheckDelay,
		done: map[string]bool{}, wake: make(chan struct{}, 1)}
	c.pods = newPodInformer(rc, node)
	// a deleted pod's reports are forgotten: its UID never comes back
	_, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			c.mu.Lock()
			delete(c.done, opReject+"/"+string(p.UID))
			delete(c.done, opEvict+"/"+string(p.UID))
			c.mu.Unlock()
		}
	}})
	return c
}

// NodeName is the node whose pods the client watches.
func (c *Client) NodeName() string { return c.node }

// Run watches the pods and writes the queued reports until ctx ends.
func (c *Client) Run(ctx context.Context) {
	go c.runInformer(ctx)
	c.writer(ctx)
}

// Rejected reports that admission refused p as the kubelet's rejectPod
// does: a Warning event with reason and message, and the pod's status
// phase Failed, reason, message "Pod was rejected: <message>", so that the
// kubelet stops retrying it and its controller replaces it. It never
// blocks; a pod reported once is not reported again.
func (c *Client) Rejected(p *pod.Pod, reason, message string) {
	c.enqueue(&report{kind: opReject, uid: p.UID, namespace: p.Namespace, name: p.Name, reason: reason, message: message})
}

// Evicted reports that cri-guard stopped p's sandbox, as the kubelet's
// evictPod does: a Warning event Evicted with the message, and the pod's
// status phase Failed, reason Evicted, the message and the DisruptionTarget
// condition. It never blocks; a pod is reported once.
func (c *Client) Evicted(p *pod.Pod, message string) {
	c.enqueue(&report{kind: opEvict, uid: p.UID, namespace: p.Namespace, name: p.Name, reason: "Evicted", message: message})
}

func (c *Client) enqueue(r *report) {
	c.mu.Lock()
	if c.done[r.key()] {
		// Reported already, yet decided again (the kubelet retried a
		// rejected pod): its status manager may have written its own
		// status over ours after our checks. Check again, and write the
		// status again if it is gone; the event is not made twice.
		r.eventMade, r.written = true, true
	}
	for _, q := range c.queue {
		if q.key() == r.key() {
			c.mu.Unlock()
			return
		}
	}
	r.since, r.next = c.now(), c.now()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	c.poke()
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
}

// State is a snapshot of the connection; safe from any goroutine.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := State{Node: c.node, Synced: c.pods.HasSynced(), Pending: len(c.queue), LastOK: c.lastOK}
	if c.cond != nil {
		s.Pending++
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	return s
}

// writer writes due reports one at a time until ctx ends.
func (c *Client) writer(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		c.writeDue(ctx)
		wait := time.Hour
		c.mu.Lock()
		for _, r := range c.queue {
			wait = min(wait, max(r.next.Sub(c.now()), 0))
		}
		if c.cond != nil {
			wait = min(wait, c.retry)
		}
		c.mu.Unlock()
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

// writeDue writes every report whose time has come, and the node condition.
func (c *Client) writeDue(ctx context.Context) {
	c.mu.Lock()
	var due []*report
	now := c.now()
	for _, r := range c.queue {
		if !r.next.After(now) {
			due = append(due, r)
		}
	}
	cond := c.cond
	c.mu.Unlock()
	for _, r := range due {
		if ctx.Err() != nil {
			return
		}
		err := c.write(ctx, r)
		c.settle(r, err)
	}
	if cond != nil && ctx.Err() == nil {
		err := c.writeCondition(ctx, *cond)
		c.mu.Lock()
		c.note(opCondition, err)
		if err == nil && c.cond == cond {
			c.cond, c.condSent = nil, *cond
		}
		c.mu.Unlock()
	}
}

// errGone: the pod is not in the API any more (or is another pod by now).
var errGone = errors.New("pod is gone")

// settle records a write's outcome: done, gone, or retried later.
func (c *Client) settle(r *report, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, errCheckLater):
		r.next = c.now().Add(c.checkDelay)
		c.note(r.kind, nil)
		return
	case err == nil || errors.Is(err, errGone):
		c.queue = removeReport(c.queue, r)
		c.done[r.key()] = true
		if err != nil {
			c.log.WithFields(logrus.Fields{"pod": r.name, "namespace": r.namespace, "pod_uid": r.uid, "op": r.kind}).Info("pod gone before its report: not reported")
		}
	default:
		r.tries++
		r.next = c.now().Add(min(c.retry<<min(r.tries-1, 6), 30*time.Second))
		if r.tries == 1 || r.tries%10 == 0 {
			c.log.WithError(err).WithFields(logrus.Fields{"pod": r.name, "namespace": r.namespace, "pod_uid": r.uid, "op": r.kind, "tries": r.tries}).Warn("cannot report to the API server: retrying")
		}
	}
	c.note(r.kind, err)
}

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

func removeReport(q []*report, r *report) []*report {
	for i, x := range q {
		if x == r {
			return append(q[:i:i], q[i+1:]...)
		}
	}
	return q
}

// write makes one report: the event first (it is what `kubectl get events`
// and `describe` show), then the status, which is retried on conflict with
// a fresh read. An event already made is not made again on a retry.
func (c *Client) write(ctx context.Context, r *report) error {
	p, err := c.getPod(ctx, r)
	if err != nil {
		return err
	}
	msg := r.message
	if r.kind == opReject {
		msg = "Pod was rejected: " + r.message
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		if !r.written {
			return nil // terminal already, not by us: nothing to say
		}
		if p.Status.Reason == r.reason && p.Status.Message == msg {
			if r.checks++; r.checks >= statusChecks {
				return nil // it holds
			}
			return errCheckLater
		}
		// the kubelet wrote its own status over ours (phase kept, reason
		// and message gone): write it again, once it knows ours it keeps it
		c.log.WithFields(logrus.Fields{"pod": r.name, "namespace": r.namespace, "pod_uid": r.uid, "op": r.kind,
			"reason": p.Status.Reason}).Info("reported status overwritten: writing it again")
	}
	if !r.eventMade {
		if err := c.createEvent(ctx, p, r); err != nil {
			return fmt.Errorf("create event: %w", err)
		}
		r.eventMade = true
	}
	for attempt := 0; ; attempt++ {
		st := p.Status.DeepCopy()
		st.Phase = corev1.PodFailed
		st.Reason = r.reason
		st.Message = msg
		if r.kind != opReject {
			setCondition(st, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				ObservedGeneration: p.Generation, Reason: corev1.PodReasonTerminationByKubelet, Message: r.message,
				LastTransitionTime: metav1.NewTime(c.now())})
		}
		upd := p.DeepCopy()
		upd.Status = *st
		err := c.rc.Put().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("status").
			Body(upd).Do(ctx).Error()
		if err == nil {
			if !r.written {
				c.log.WithFields(logrus.Fields{"pod": r.name, "namespace": r.namespace, "pod_uid": r.uid, "op": r.kind,
					"after": c.now().Sub(r.since).Round(time.Millisecond)}).Info("pod status reported to the API server")
			}
			r.written = true
			return errCheckLater
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return fmt.Errorf("update pod status: %w", err)
		}
		if p, err = c.getPod(ctx, r); err != nil {
			return err
		}
	}
}

// getPod reads the pod afresh; errGone when it is gone or has another UID.
func (c *Client) getPod(ctx context.Context, r *report) (*corev1.Pod, error) {
	var p corev1.Pod
	err := c.rc.Get().Namespace(r.namespace).Resource("pods").Name(r.name).Do(ctx).Into(&p)
	switch {
	case apierrors.IsNotFound(err):
		return nil, errGone
	case err != nil:
		return nil, fmt.Errorf("get pod: %w", err)
	case string(p.UID) != r.uid:
		return nil, errGone
	}
	return &p, nil
}

// createEvent makes the Warning event of a report on the pod, from this
// node's kubelet as the kubelet's recorder would (source component kubelet,
// host the node).
func (c *Client) createEvent(ctx context.Context, p *corev1.Pod, r *report) error {
	now := metav1.NewTime(c.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, now.UnixNano()), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			APIVersion: "v1", ResourceVersion: p.ResourceVersion},
		Reason: r.reason, Message: r.message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: c.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "cri-guard", ReportingInstance: c.node,
	}
	err := c.rc.Post().Namespace(p.Namespace).Resource("events").Body(ev).Do(ctx).Error()
	c.mu.Lock()
	c.note(opEvent, err)
	c.mu.Unlock()
	return err
}

// setCondition sets c in st, replacing one of the same type (its
// transition time kept when the status does not change).
func setCondition(st *corev1.PodStatus, cond corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == cond.Type {
			if st.Conditions[i].Status == cond.Status {
				cond.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = cond
			return
		}
	}
	st.Conditions = append(st.Conditions, cond)
}

// NodeConditionType is the node condition cri-guard owns: its own view of
// memory pressure, next to the kubelet's MemoryPressure, which it never
// touches (as node-problem-detector adds conditions of its own).
const NodeConditionType corev1.NodeConditionType = "CriGuardMemoryPressure"

type nodeCondition struct {
	pressure bool
	message  string
}

// SetNodeCondition queues cri-guard's node condition: True with the reason
// MemoryPressure while it sees memory pressure, False otherwise. Only a
// change is written.
func (c *Client) SetNodeCondition(pressure bool, message string) {
	nc := nodeCondition{pressure: pressure, message: message}
	c.mu.Lock()
	if (c.cond == nil && c.condSent == nc && !c.lastOK.IsZero()) || (c.cond != nil && *c.cond == nc) {
		c.mu.Unlock()
		return
	}
	c.cond = &nc
	c.mu.Unlock()
	c.poke()
}

// writeCondition patches the node's status with cri-guard's condition (a
// strategic merge on the conditions' type: the kubelet's are untouched).
func (c *Client) writeCondition(ctx context.Context, nc nodeCondition) error {
	now := metav1.NewTime(c.now())
	cond := corev1.NodeCondition{Type: NodeConditionType, Status: corev1.ConditionFalse, Reason: "NoMemoryPressure",
		Message: nc.message, LastHeartbeatTime: now, LastTransitionTime: now}
	if nc.pressure {
		cond.Status, cond.Reason = corev1.ConditionTrue, "MemoryPressure"
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	err = c.rc.Patch(types.StrategicMergePatchType).Resource("nodes").Name(c.node).SubResource("status").
		Body(patch).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("patch node %q status: %w", c.node, err)
	}
	return nil
}
