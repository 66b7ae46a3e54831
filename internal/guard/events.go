package guard

import (
	"context"
	"errors"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// EventStream is an open GetContainerEvents stream.
type EventStream interface {
	Recv() (*runtimeapi.ContainerEventResponse, error)
}

// OpenEvents opens the runtime's event stream (a runtimeproxy.EventHub
// subscription). A stream whose error wraps runtimeproxy.ErrNoEvents says
// the runtime has none.
type OpenEvents func(ctx context.Context) (EventStream, error)

// RunEvents follows the runtime's container events: each event that says a
// sandbox stopped or went away behind cri-guard's back updates that one
// sandbox's record, from the sandbox status the event carries. When the
// stream breaks it lists the sandboxes (on this goroutine, applied on the
// loop) and opens it again. It returns when ctx ends, or when the runtime
// does not implement the stream (housekeeping's listings then suffice).
func (l *Loop) RunEvents(ctx context.Context, open OpenEvents) error {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		s, err := open(ctx)
		if err == nil {
			backoff = 200 * time.Millisecond
			err = l.follow(ctx, s)
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, runtimeproxy.ErrNoEvents) {
			l.log.Info("runtime has no container event stream: resync on housekeeping only")
			return nil
		}
		l.log.WithError(err).Debug("container event stream broken: resync")
		l.relist(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// follow hands each event that concerns a sandbox to the loop, in order.
func (l *Loop) follow(ctx context.Context, s EventStream) error {
	for {
		ev, err := s.Recv()
		if err != nil {
			return err
		}
		if e, ok := sandboxEventOf(ev); ok {
			_ = l.do(ctx, func() { l.applyEvent(e) })
		}
	}
}

// sandboxEvent is what one runtime event says of the sandbox it names,
// prepared off the loop (follow).
type sandboxEvent struct {
	id       string // the sandbox's id
	gone     bool   // the sandbox was deleted
	notReady bool   // the sandbox is no longer ready
}

// sandboxEventOf reads a container event. containerd sends the sandbox's
// status with each event (none once the sandbox is deleted), and a
// sandbox's own events carry its id as the container id. Only stops and
// deletions are read: what they say of a sandbox is final (a sandbox never
// becomes ready again; the kubelet makes a new one), so an event is true
// however late it comes. A ready status is never taken from an event: it
// may predate a stop already recorded.
func sandboxEventOf(ev *runtimeapi.ContainerEventResponse) (sandboxEvent, bool) {
	typ := ev.GetContainerEventType()
	if typ != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT && typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		return sandboxEvent{}, false
	}
	sb := ev.GetPodSandboxStatus()
	id := sb.GetId()
	if id == "" {
		// no status: the sandbox's own deletion (or a container's event
		// whose id names no sandbox cri-guard knows)
		id = ev.GetContainerId()
	}
	own := ev.GetContainerId() == id
	e := sandboxEvent{
		id:       id,
		gone:     own && typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
		notReady: (sb != nil && sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY) || (own && typ == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT),
	}
	return e, e.id != "" && (e.gone || e.notReady)
}

// applyEvent updates the record of the one sandbox e names, if cri-guard
// knows it (loop goroutine): gone, the record is dropped; not ready, a
// ready pod is stopped.
func (l *Loop) applyEvent(e sandboxEvent) {
	var key string
	var p *pod.Pod
	for k, q := range l.pods {
		if q.SandboxID == e.id { // events carry full ids
			key, p = k, q
			break
		}
	}
	switch {
	case p == nil:
		return
	case e.gone:
		l.sandboxGone(key, p)
	case p.State == pod.StateReady:
		l.sandboxNotReady(key, p)
	default:
		return
	}
	l.publish()
}
