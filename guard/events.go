package guard

import (
	"context"
	"time"

	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/runtimeproxy"
)

// EventStream is an open GetContainerEvents stream.
type EventStream interface {
	Recv() (*runtimeapi.ContainerEventResponse, error)
}

// OpenEvents opens the runtime's event stream (a runtimeproxy.EventHub
// subscription). A stream whose error wraps runtimeproxy.ErrNoEvents says
// the runtime has none.
type OpenEvents func(ctx context.Context) (EventStream, error)

// RunEvents follows the runtime's container events and lists the
// sandboxes when a sandbox stops or is deleted behind cri-guard's back. When the
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

func (l *Loop) follow(ctx context.Context, s EventStream) error {
	for {
		ev, err := s.Recv()
		if err != nil {
			return err
		}
		switch ev.GetContainerEventType() {
		case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT:
			sb := ev.GetPodSandboxStatus()
			// the sandbox itself stopped or went away (containerd sends the
			// sandbox's status with each event, and sandbox events carry its id)
			if ev.GetContainerId() == sb.GetId() || (sb != nil && sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY) {
				l.relist(ctx)
			}
		}
	}
}
