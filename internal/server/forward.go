package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// handle is the grpc.UnknownServiceHandler: every call lands here.
func (s *Server) handle(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method in server stream")
	}
	if o := s.cfg.Observer; o != nil {
		start := time.Now()
		err := s.dispatch(ss, method)
		o.Observe(method, time.Since(start), err)
		return err
	}
	return s.dispatch(ss, method)
}

// dispatch picks the path for method: hooked, unary fast path or stream.
func (s *Server) dispatch(ss grpc.ServerStream, method string) error {
	r := s.routes[method]
	if r.hook != nil {
		return s.forwardHooked(ss, method, r.hook)
	}
	if r.unary {
		return s.forwardUnary(ss, method)
	}
	if method == runtimeapi.RuntimeService_GetContainerEvents_FullMethodName && s.cfg.SubscribeEvents != nil {
		return s.serveEvents(ss)
	}
	return s.forwardStream(ss, method)
}

// outgoing returns ctx (carrying the kubelet's deadline and cancellation)
// with the incoming metadata set as outgoing metadata. Reserved headers
// (:authority, user-agent, content-type, grpc-timeout) are dropped by gRPC
// when sending.
func outgoing(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// forwardUnary is the fast path: one frame up, one frame down, the buffers
// handed from one side to the other without copying.
func (s *Server) forwardUnary(ss grpc.ServerStream, method string) error {
	p := s.pairs.Get().(*framePair)
	defer func() {
		p.req.Free()
		p.resp.Free()
		// gRPC sets these only for a call that got a stream to the
		// runtime: the next call must not find this one's. (SetHeader and
		// SetTrailer copied them.)
		p.hdr, p.trl = nil, nil
		s.pairs.Put(p)
	}()
	if err := ss.RecvMsg(&p.req); err != nil {
		return err
	}
	err := s.backend.Invoke(outgoing(ss.Context()), method, &p.req, &p.resp, p.opts...)
	hdr, trl := p.hdr, p.trl
	if len(trl) > 0 {
		ss.SetTrailer(trl)
	}
	if err != nil {
		return toStatus(err)
	}
	// The response headers always carry content-type, which gRPC sets
	// itself: forward only custom headers (saves a header copy per call).
	delete(hdr, "content-type")
	if len(hdr) > 0 {
		if err := ss.SetHeader(hdr); err != nil {
			return err
		}
	}
	return ss.SendMsg(&p.resp)
}

// forwardHooked decodes nothing itself: it hands the raw request to the hook,
// whose next forwards to the runtime.
func (s *Server) forwardHooked(ss grpc.ServerStream, method string, h UnaryHook) error {
	var in runtimeproxy.Frame
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	req := in.Bytes()
	in.Free()
	next := func(ctx context.Context, b []byte) ([]byte, error) {
		var (
			out runtimeproxy.Frame
			// set by gRPC only when the call got onto a connection
			on peer.Peer
		)
		defer out.Free()
		if err := s.backend.Invoke(ctx, method, runtimeproxy.NewFrame(b), &out, grpc.Peer(&on)); err != nil {
			if on.Addr == nil {
				return nil, unsentError{err}
			}
			return nil, err
		}
		return out.Bytes(), nil
	}
	resp, err := h(outgoing(ss.Context()), req, next)
	if err != nil {
		return toStatus(err)
	}
	return ss.SendMsg(runtimeproxy.NewFrame(resp))
}

// unsentError is the error of a hooked call that never got onto a
// connection to the runtime (none was up, or the wait for one ended): the
// runtime never saw the request. Its status is the call's, unchanged.
type unsentError struct{ error }

func (e unsentError) Unwrap() error              { return e.error }
func (e unsentError) GRPCStatus() *status.Status { return status.Convert(e.error) }

// forwardStream pumps a call of unknown shape: client messages to the
// runtime until the client half-closes, runtime messages back until the
// runtime ends the call; headers, trailers and the final status are passed
// through. Unary methods work this way too.
func (s *Server) forwardStream(ss grpc.ServerStream, method string) error {
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	// End the stream when the server starts draining.
	stopDrain := context.AfterFunc(s.drainCtx, cancel)
	defer stopDrain()

	cs, err := s.backend.NewStream(ctx, method)
	if err != nil {
		return toStatus(err)
	}
	// Upstream: kubelet → runtime. Not waited for: it ends when the client
	// half-closes or the call ends (RecvMsg then fails).
	go func() {
		for {
			f := new(runtimeproxy.Frame)
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(f); err != nil {
				// The runtime ended the call; its status comes from RecvMsg below.
				f.Free()
				return
			}
		}
	}()
	// Downstream: runtime → kubelet.
	hdr, err := cs.Header()
	delete(hdr, "content-type")
	if err == nil && len(hdr) > 0 {
		if err := ss.SendHeader(hdr); err != nil {
			return err
		}
	}
	for {
		var f runtimeproxy.Frame
		if err := cs.RecvMsg(&f); err != nil {
			if trl := cs.Trailer(); len(trl) > 0 {
				ss.SetTrailer(trl)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if s.drainCtx.Err() != nil && status.Code(err) == codes.Canceled {
				return status.Error(codes.Unavailable, "cri-guard is shutting down")
			}
			return toStatus(err)
		}
		if err := ss.SendMsg(&f); err != nil {
			f.Free()
			return err
		}
	}
}
