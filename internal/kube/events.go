package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// startEvents starts the event broadcaster of Run: client-go's, as the
// kubelet's, so that cri-guard's events go through its correlator (the
// spam filter, 25 at once then one per 5 min per pod, and the aggregation
// of repeats into a count) and are written by its own goroutine, with its
// retries, never holding a report back. Its sink is the client's server
// (the core/v1 REST client: the typed clientset's sink would register every
// API group). Stop with stopEvents.
func (c *Client) startEvents(ctx context.Context) record.EventBroadcaster {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{}))
	b.StartRecordingToSink(eventSink{ctx: ctx, c: c})
	rec := b.NewRecorder(scheme, corev1.EventSource{Component: eventComponent, Host: c.node})
	c.mu.Lock()
	c.recorder = rec
	c.mu.Unlock()
	return b
}

// stopEvents ends what startEvents started: events not written yet are
// dropped (an event write in flight ends with Run's context).
func (c *Client) stopEvents(b record.EventBroadcaster) {
	c.mu.Lock()
	c.recorder = nil
	c.mu.Unlock()
	b.Shutdown()
}

// event queues the report's Warning event about p, with the kubelet's
// reason and the decision's message, and says whether it was queued (not
// when the client is not running).
func (c *Client) event(p *corev1.Pod, r *report) bool {
	c.mu.Lock()
	rec := c.recorder
	c.mu.Unlock()
	if rec == nil {
		return false
	}
	rec.Event(p, corev1.EventTypeWarning, r.reason, r.message)
	return true
}

// eventSink is record.EventSink over the client's server; each write is
// counted (Observer.APIWrite "event"). Its errors are the REST client's,
// unwrapped: the broadcaster retries transport errors and drops the events
// the server refuses by their type.
type eventSink struct {
	ctx context.Context
	c   *Client
}

var _ record.EventSink = eventSink{}

func (s eventSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	out, err := s.c.srv.createEvent(s.ctx, ev)
	s.c.noteEvent(err)
	return out, err
}

func (s eventSink) Update(ev *corev1.Event) (*corev1.Event, error) {
	out, err := s.c.srv.updateEvent(s.ctx, ev)
	s.c.noteEvent(err)
	return out, err
}

func (s eventSink) Patch(old *corev1.Event, patch []byte) (*corev1.Event, error) {
	out, err := s.c.srv.patchEvent(s.ctx, old.Namespace, old.Name, patch)
	s.c.noteEvent(err)
	return out, err
}

// noteEvent counts an event write; the first failure after a success is
// logged (the broadcaster logs each through klog).
func (c *Client) noteEvent(err error) {
	c.mu.Lock()
	c.note(opEvent, err)
	first := err != nil && !c.eventsFailing
	c.eventsFailing = err != nil
	c.mu.Unlock()
	if first {
		c.log.WithError(err).Warn("cannot write an event to the API server: the pod statuses are written regardless")
	}
}
