package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// Defaults for Config fields left zero.
const (
	DefaultShutdownTimeout = 10 * time.Second
	// defaultMaxConcurrentStreams bounds the calls open at once on one
	// connection (SETTINGS_MAX_CONCURRENT_STREAMS); streams beyond it are
	// refused (RST_STREAM REFUSED_STREAM). A gRPC client such as the
	// kubelet's never sees that: it queues calls until a stream is free. The
	// kubelet has at most a few hundred calls in flight (pod workers, one
	// event stream), so 1000 is never reached by it and bounds what one
	// connection costs (a goroutine and buffers per stream).
	defaultMaxConcurrentStreams = 1000
	// defaultMaxConnections caps the connections served at once on the CRI
	// socket. The kubelet keeps two, crictl two per command, node agents a
	// few. At the cap a newcomer holding fewer takes the place of the
	// heaviest peer's newest connection (see listener.go).
	defaultMaxConnections = 1024
	// defaultMaxConnectionsPerPeer caps the connections of one peer: one
	// process of root, or all the processes of a non-root uid. Half the
	// cap: the kubelet's room comes from the take-over at the cap, not from
	// this; it keeps one client from holding every connection, while
	// clients that open a connection per test and close them late
	// (critest holds about two per spec it has run, some 250) still work.
	defaultMaxConnectionsPerPeer = defaultMaxConnections / 2
	// defaultMaxConnectionIdle closes (GOAWAY) a connection that had no
	// open call for this long. The kubelet calls every second (PLEG
	// relist) and gRPC reconnects transparently on the next call, so it
	// never notices; connections left open by others are freed.
	defaultMaxConnectionIdle = 5 * time.Minute
	// keepaliveMinTime is the shortest ping interval tolerated, with or
	// without open calls; a client pinging faster is sent GOAWAY
	// (too_many_pings). The kubelet's CRI client (k8s.io/cri-client) sends
	// no keepalive pings; 10s is the least a grpc-go client can be
	// configured to use, so no gRPC client is ever cut off for pinging.
	keepaliveMinTime = 10 * time.Second
	// connectionTimeout bounds the HTTP/2 handshake of a new connection
	// (gRPC's default is 120s): a connection that never sends its preface
	// does not hold a place for long. A gRPC client such as the kubelet's
	// writes its preface and SETTINGS as soon as it is connected: a few
	// dozen bytes, sent within milliseconds even on a loaded node. The
	// handshake runs on the connection's own goroutine, so a slow one never
	// holds up the next accept.
	connectionTimeout = 5 * time.Second
	// windowSize is the fixed HTTP/2 flow-control window (stream and
	// connection). Fixed windows switch off BDP estimation pings.
	windowSize = 1 << 20
)

// Config configures the server.
type Config struct {
	// Listen is the unix socket path the kubelet connects to.
	Listen string
	// MaxMsgSize limits messages both ways; 0 means
	// runtimeproxy.DefaultMaxMsgSize (16 MiB, as containerd).
	MaxMsgSize int
	// ShutdownTimeout bounds the graceful stop: in-flight calls get this long
	// to finish, then connections are closed. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// StreamWorkers is the number of pooled goroutines serving calls; 0 means
	// GOMAXPROCS.
	StreamWorkers int
	// MaxConcurrentStreams bounds the calls open at once per connection;
	// 0 means defaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// MaxConnections caps the connections served at once; 0 means
	// defaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerPeer caps the connections of one peer (a process of
	// root, or a non-root uid); 0 means defaultMaxConnectionsPerPeer.
	MaxConnectionsPerPeer int
	// MaxConnectionIdle closes connections without calls for this long;
	// 0 means defaultMaxConnectionIdle.
	MaxConnectionIdle time.Duration
	// Observer, when set, is told of every call (see observe.go).
	Observer Observer
	// SubscribeEvents, when set, serves GetContainerEvents from a shared
	// subscription (runtimeproxy.EventHub) instead of one runtime stream per
	// call (see events.go).
	SubscribeEvents func(ctx context.Context) EventSubscription
	// ProcessConnected, when set, is told the pid of a root process (the
	// kubelet runs as root) that connects while it holds no connection:
	// once per process, again only after all its connections were closed.
	// It is called on the accept path, once per connection so announced,
	// never per call: it must return at once.
	ProcessConnected func(pid int32)
	// ProcessDisconnected, when set, is told the pid of such a process
	// when the last connection it held is closed (by either side; a
	// process that exits closes all of its). Called on the connection's
	// close, never per call: it must return at once.
	ProcessDisconnected func(pid int32)
}

// Backend is what the server needs from the runtime connection
// (implemented by *runtimeproxy.Client).
type Backend interface {
	// Invoke forwards one unary call as raw frames.
	Invoke(ctx context.Context, method string, req, resp *runtimeproxy.Frame, opts ...grpc.CallOption) error
	// NewStream opens a raw bidirectional stream whose messages are *Frame.
	NewStream(ctx context.Context, method string, opts ...grpc.CallOption) (grpc.ClientStream, error)
}

var _ Backend = (*runtimeproxy.Client)(nil)

// Server is the kubelet-facing CRI server.
type Server struct {
	cfg     Config
	backend Backend
	// routes says how each method that is not pumped as a stream is
	// served: one lookup per call finds its hook or the unary fast path.
	// Never written after New.
	routes map[string]route
	log    *logrus.Entry
	grpc   *grpc.Server
	pairs  sync.Pool

	// drainCtx is cancelled when the server starts stopping; long-lived
	// streams end then instead of holding up the graceful stop.
	drainCtx context.Context
	drain    context.CancelFunc

	mu       sync.Mutex
	lis      net.Listener
	stopOnce sync.Once
	stopped  chan struct{}
}

// route is how the calls of one method are served.
type route struct {
	hook  UnaryHook // nil: not hooked
	unary bool      // a unary CRI method: the one-frame fast path
}

// routesOf returns the routes of the unary CRI methods this build knows
// and of the hooked methods.
func routesOf(hooks Hooks) map[string]route {
	routes := map[string]route{}
	for m := range unaryMethods() {
		routes[m] = route{unary: true}
	}
	for m, h := range hooks {
		r := routes[m]
		r.hook = h
		routes[m] = r
	}
	return routes
}

// framePair is what one fast-path call uses, pooled: the request and
// response frames, the runtime's header and trailer, and the call options
// that ask gRPC for them (made once per pair, not per call).
type framePair struct {
	req, resp runtimeproxy.Frame
	hdr, trl  metadata.MD
	opts      []grpc.CallOption
}

func newFramePair() any {
	p := new(framePair)
	p.opts = []grpc.CallOption{grpc.Header(&p.hdr), grpc.Trailer(&p.trl)}
	return p
}

// New builds a server forwarding to backend. hooks may be nil; New takes
// its entries, so changes made to it afterwards are not seen.
func New(cfg Config, backend Backend, hooks Hooks, log *logrus.Entry) (*Server, error) {
	if cfg.Listen == "" {
		return nil, errors.New("new server: listen path is empty")
	}
	if backend == nil {
		return nil, errors.New("new server: no runtime backend")
	}
	if cfg.MaxMsgSize <= 0 {
		cfg.MaxMsgSize = runtimeproxy.DefaultMaxMsgSize
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.StreamWorkers <= 0 {
		cfg.StreamWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = defaultMaxConcurrentStreams
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = defaultMaxConnections
	}
	if cfg.MaxConnectionsPerPeer <= 0 {
		cfg.MaxConnectionsPerPeer = defaultMaxConnectionsPerPeer
	}
	if cfg.MaxConnectionIdle <= 0 {
		cfg.MaxConnectionIdle = defaultMaxConnectionIdle
	}
	s := &Server{
		cfg:     cfg,
		backend: backend,
		routes:  routesOf(hooks),
		log:     log,
		stopped: make(chan struct{}),
	}
	s.pairs.New = newFramePair
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(runtimeproxy.Codec{}),
		grpc.UnknownServiceHandler(s.handle),
		grpc.MaxRecvMsgSize(cfg.MaxMsgSize),
		grpc.MaxSendMsgSize(cfg.MaxMsgSize),
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)),
		grpc.SharedWriteBuffer(true),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.MaxConnectionIdle}),
		grpc.ConnectionTimeout(connectionTimeout),
	)
	return s, nil
}

// Listen opens the unix socket (see listenUnix for the rules on what may
// already be there). Calls are accepted from Serve on, on at most
// MaxConnections connections at once and MaxConnectionsPerPeer of one peer
// (see listener.go).
func (s *Server) Listen() error {
	l, err := listenUnix(s.cfg.Listen, s.log)
	if err != nil {
		return err
	}
	s.mu.Lock()
	pl := newPeerListener(l, s.cfg.MaxConnections, s.cfg.MaxConnectionsPerPeer, s.log)
	pl.processConnected = s.cfg.ProcessConnected
	pl.processDisconnected = s.cfg.ProcessDisconnected
	s.lis = pl
	s.mu.Unlock()
	return nil
}

// Serve serves on the socket opened by Listen until ctx is done, then stops
// gracefully (see Stop). It returns nil after a requested stop.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	l := s.lis
	s.mu.Unlock()
	if l == nil {
		return errors.New("serve: Listen was not called")
	}
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(l) }()
	select {
	case err := <-errc:
		s.stop()
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serve %q: %w", s.cfg.Listen, err)
		}
		return nil
	case <-ctx.Done():
		s.stop()
		<-errc
		return nil
	}
}

// stop stops accepting, ends long-lived streams with Unavailable, lets
// in-flight unary calls finish for at most ShutdownTimeout, then closes
// everything. It is idempotent and safe to call concurrently.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.drain()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		timer := time.NewTimer(s.cfg.ShutdownTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			s.log.WithField("timeout", s.cfg.ShutdownTimeout).Warn("graceful stop timed out, closing connections")
			s.grpc.Stop()
			<-done
		}
		close(s.stopped)
	})
	<-s.stopped
}
