package runtimeproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventBuffer is how many events a subscriber may fall behind before it is
// dropped (its stream ends with ResourceExhausted and it reconnects).
const eventBuffer = 1024

// EventHub shares one GetContainerEvents stream of the runtime among every
// subscriber: cri-guard's own sync loop and each kubelet stream. containerd
// 1.7 hands each event to only one of its open streams, so a proxy that
// opened a stream of its own beside the kubelet's would steal half of the
// kubelet's events; through the hub every subscriber gets every event, as
// with containerd 2. Events travel as the runtime's encoded bytes.
//
// The upstream stream is opened when the first subscriber arrives. When it
// ends (the runtime restarted, or does not implement the method) every
// subscriber gets the runtime's status, and the next subscriber opens a new
// one.
type EventHub struct {
	c   *Client
	log *logrus.Entry

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	running bool
}

// NewEventHub returns a hub on c.
func NewEventHub(c *Client, log *logrus.Entry) *EventHub {
	return &EventHub{c: c, log: log, subs: map[*Subscription]struct{}{}}
}

// Subscription is one subscriber's view of the runtime's events.
type Subscription struct {
	hub  *EventHub
	ch   chan []byte
	once sync.Once
	err  error       // set before ch is closed
	stop func() bool // guarded by hub.mu
}

// Subscribe adds a subscriber; it ends when ctx ends, when it falls behind,
// or when the upstream stream ends.
func (h *EventHub) Subscribe(ctx context.Context) *Subscription {
	s := &Subscription{hub: h, ch: make(chan []byte, eventBuffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	start := !h.running
	h.running = true
	h.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { s.end(status.FromContextError(ctx.Err()).Err()) })
	h.mu.Lock() // end may already run on the AfterFunc's goroutine
	s.stop = stop
	h.mu.Unlock()
	if start {
		go h.pump()
	}
	return s
}

// Events delivers the encoded ContainerEventResponse messages; it is closed
// when the subscription ends, and Err then says why.
func (s *Subscription) Events() <-chan []byte { return s.ch }

// Err is why the subscription ended; valid once Events is closed.
func (s *Subscription) Err() error { return s.err }

// Close ends the subscription.
func (s *Subscription) Close() { s.end(status.Error(codes.Canceled, "subscription closed")) }

// ErrNoEvents is what Recv's error wraps when the runtime does not implement
// GetContainerEvents (containerd 1.6): waiting for events is then pointless.
var ErrNoEvents = errors.New("the runtime has no container event stream")

// Recv returns the next event, decoded, or the reason the subscription
// ended (wrapping ErrNoEvents when the runtime lacks the stream).
func (s *Subscription) Recv() (*runtimeapi.ContainerEventResponse, error) {
	b, ok := <-s.ch
	if !ok {
		if status.Code(s.err) == codes.Unimplemented {
			return nil, fmt.Errorf("%w: %w", ErrNoEvents, s.err)
		}
		return nil, s.err
	}
	ev := new(runtimeapi.ContainerEventResponse)
	if err := proto.Unmarshal(b, ev); err != nil {
		return nil, status.Errorf(codes.Internal, "decode container event: %v", err)
	}
	return ev, nil
}

// end removes the subscriber and closes its channel with err; idempotent.
// Only the hub sends on ch, under hub.mu, so closing under hub.mu is safe.
func (s *Subscription) end(err error) {
	s.once.Do(func() {
		h := s.hub
		h.mu.Lock()
		stop := s.stop
		delete(h.subs, s)
		s.err = err
		close(s.ch)
		h.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
}

// pump runs the upstream stream while there are subscribers.
func (h *EventHub) pump() {
	for {
		err := h.stream()
		h.mu.Lock()
		subs := make([]*Subscription, 0, len(h.subs))
		for s := range h.subs {
			subs = append(subs, s)
		}
		h.mu.Unlock()
		for _, s := range subs {
			s.end(err)
		}
		h.mu.Lock()
		if len(h.subs) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock() // subscribers arrived while ending the others: go on
	}
}

// stream opens one upstream GetContainerEvents stream and broadcasts its
// messages until it ends or nobody listens; it returns the reason.
func (h *EventHub) stream() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := h.c.NewStream(ctx, runtimeapi.RuntimeService_GetContainerEvents_FullMethodName)
	if err != nil {
		return err
	}
	req, _ := proto.Marshal(&runtimeapi.GetEventsRequest{})
	if err := cs.SendMsg(NewFrame(req)); err != nil {
		return h.recvErr(cs.RecvMsg(new(Frame)))
	}
	if err := cs.CloseSend(); err != nil {
		return h.c.mapErr(err)
	}
	for {
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			return h.recvErr(err)
		}
		b := f.Bytes()
		f.Free()
		if !h.broadcast(b) {
			return status.Error(codes.Canceled, "no subscribers")
		}
	}
}

func (h *EventHub) recvErr(err error) error {
	if err == nil {
		return status.Error(codes.Unavailable, "container event stream ended")
	}
	return h.c.mapErr(err)
}

// broadcast hands b to every subscriber; one that is eventBuffer events
// behind is dropped. It reports whether anyone still listens.
func (h *EventHub) broadcast(b []byte) bool {
	var slow []*Subscription
	h.mu.Lock()
	for s := range h.subs {
		select {
		case s.ch <- b:
		default:
			slow = append(slow, s)
		}
	}
	h.mu.Unlock()
	for _, s := range slow {
		h.log.Warn("container event subscriber fell behind: ending its stream")
		s.end(status.Error(codes.ResourceExhausted, "container event stream fell behind"))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

// Subscribers is the number of current subscribers.
func (h *EventHub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
