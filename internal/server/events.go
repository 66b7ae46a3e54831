package server

import (
	"context"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// EventSubscription is one subscriber of the runtime's container events
// (*runtimeproxy.Subscription).
type EventSubscription interface {
	// Events delivers encoded ContainerEventResponse messages and is closed
	// when the subscription ends.
	Events() <-chan []byte
	// Err says why it ended, once Events is closed.
	Err() error
	// Close ends it.
	Close()
}

var _ EventSubscription = (*runtimeproxy.Subscription)(nil)

// serveEvents serves one GetContainerEvents call from a shared subscription:
// every client gets every event, as the runtime sent it. When the runtime's
// stream ends, the client's ends with the runtime's status.
func (s *Server) serveEvents(ss grpc.ServerStream) error {
	var req runtimeproxy.Frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	req.Free() // GetEventsRequest has no fields
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stopDrain := context.AfterFunc(s.drainCtx, cancel)
	defer stopDrain()
	sub := s.cfg.SubscribeEvents(ctx)
	defer sub.Close()
	for b := range sub.Events() {
		if err := ss.SendMsg(runtimeproxy.NewFrame(b)); err != nil {
			return err
		}
	}
	if s.drainCtx.Err() != nil {
		return status.Error(codes.Unavailable, "cri-guard is shutting down")
	}
	return toStatus(sub.Err())
}
