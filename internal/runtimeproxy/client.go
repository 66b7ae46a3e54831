package runtimeproxy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultMaxMsgSize is the largest message forwarded in either direction:
// 16 MiB, containerd's default (defaults.DefaultMaxRecvMsgSize/SendMsgSize)
// and the kubelet's CRI client limit. A larger message fails with
// codes.ResourceExhausted, as it would talking to containerd directly.
const DefaultMaxMsgSize = 16 << 20

// Default reconnect backoff: short, so that after containerd comes back calls
// succeed again within well under a second.
const (
	defaultBackoffBaseDelay = 50 * time.Millisecond
	defaultBackoffMaxDelay  = 300 * time.Millisecond
)

// flow-control windows; fixed (static) so gRPC does not send BDP pings, which
// cost extra writes and wake-ups on a local socket.
const windowSize = 1 << 20

// Config says how to reach the runtime.
type Config struct {
	// Endpoint is the runtime's unix socket: a path or a unix:// URL.
	Endpoint string
	// MaxMsgSize limits messages in both directions; 0 means DefaultMaxMsgSize.
	MaxMsgSize int
	// BackoffBaseDelay and BackoffMaxDelay bound the reconnect backoff;
	// zero means the defaults above.
	BackoffBaseDelay time.Duration
	BackoffMaxDelay  time.Duration
}

// Client is the connection to the runtime. It is safe for concurrent use.
type Client struct {
	endpoint string
	conn     *grpc.ClientConn
	runtime  runtimeapi.RuntimeServiceClient
	log      *logrus.Entry
	rawOpts  []grpc.CallOption
}

// New creates the client and starts connecting in the background; it does not
// wait for the runtime to be up.
func New(cfg Config, log *logrus.Entry) (*Client, error) {
	target, err := Target(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	max := cfg.MaxMsgSize
	if max <= 0 {
		max = DefaultMaxMsgSize
	}
	bp := backoff.DefaultConfig
	bp.BaseDelay = defaultBackoffBaseDelay
	bp.MaxDelay = defaultBackoffMaxDelay
	if cfg.BackoffBaseDelay > 0 {
		bp.BaseDelay = cfg.BackoffBaseDelay
	}
	if cfg.BackoffMaxDelay > 0 {
		bp.MaxDelay = cfg.BackoffMaxDelay
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bp, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max)),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithSharedWriteBuffer(true),
		// The kubelet calls every second or so; never let the channel go idle.
		grpc.WithIdleTimeout(0),
	)
	if err != nil {
		return nil, fmt.Errorf("dial runtime %q: %w", target, err)
	}
	conn.Connect()
	return &Client{
		endpoint: target,
		conn:     conn,
		runtime:  runtimeapi.NewRuntimeServiceClient(conn),
		log:      log,
		rawOpts:  []grpc.CallOption{grpc.ForceCodecV2(Codec{})},
	}, nil
}

// Target turns a socket path or unix:// URL into a gRPC target.
func Target(endpoint string) (string, error) {
	p := endpoint
	switch {
	case strings.HasPrefix(p, "unix://"):
		p = strings.TrimPrefix(p, "unix://")
	case strings.Contains(p, "://"):
		return "", fmt.Errorf("runtime endpoint %q: only unix sockets are supported", endpoint)
	}
	if p == "" {
		return "", fmt.Errorf("runtime endpoint %q: empty path", endpoint)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("runtime endpoint %q: %w", endpoint, err)
	}
	return "unix://" + abs, nil
}

// Endpoint returns the runtime target, e.g. unix:///run/containerd/containerd.sock.
func (c *Client) Endpoint() string { return c.endpoint }

// State returns the connection state to the runtime (for metrics and status).
func (c *Client) State() connectivity.State { return c.conn.GetState() }

// WaitForStateChange blocks until the state differs from s or ctx is done; it
// reports whether the state changed.
func (c *Client) WaitForStateChange(ctx context.Context, s connectivity.State) bool {
	return c.conn.WaitForStateChange(ctx, s)
}

// Runtime returns a typed RuntimeService client on the same connection. Its
// errors are not rewritten by Client.
func (c *Client) Runtime() runtimeapi.RuntimeServiceClient { return c.runtime }

// Close closes the connection. It is idempotent.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil && status.Code(err) != codes.Canceled {
		return fmt.Errorf("close runtime connection %q: %w", c.endpoint, err)
	}
	return nil
}

// Invoke forwards one unary call as raw bytes. Errors from the runtime come back
// unchanged; a call that could not reach the runtime fails with
// codes.Unavailable naming the endpoint.
func (c *Client) Invoke(ctx context.Context, method string, req, resp *Frame, opts ...grpc.CallOption) error {
	o := c.rawOpts
	if len(opts) > 0 {
		o = append(append(make([]grpc.CallOption, 0, len(opts)+1), c.rawOpts...), opts...)
	}
	return c.mapErr(c.conn.Invoke(ctx, method, req, resp, o...))
}

// NewStream opens a raw stream for any method; messages are *Frame. Its errors
// are mapped like Invoke's at creation; RecvMsg's come back unchanged.
func (c *Client) NewStream(ctx context.Context, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	o := append(append(make([]grpc.CallOption, 0, len(opts)+1), c.rawOpts...), opts...)
	// Every raw stream is bidirectional: a unary or server-streaming method
	// is the same on the wire, one message up and a half-close.
	cs, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, o...)
	if err != nil {
		return nil, c.mapErr(err)
	}
	return cs, nil
}

// ErrTransport is matched (errors.Is) by the error of a call that failed in
// gRPC's transport rather than with a status the runtime sent: the runtime
// socket could not be reached, or the connection broke under the call. The
// error carries its codes.Unavailable status (GRPCStatus), so it reaches the
// kubelet as it is.
var ErrTransport = errors.New("runtime transport failure")

// transportError is an Unavailable raised by gRPC's transport.
type transportError struct{ st *status.Status }

func (e *transportError) Error() string              { return e.st.Err().Error() }
func (e *transportError) GRPCStatus() *status.Status { return e.st }
func (e *transportError) Is(target error) bool       { return target == ErrTransport }

// mapErr rewrites a transport-level Unavailable (the runtime socket could not
// be reached, or the connection broke under the call) into one that names the
// endpoint and matches ErrTransport; every other error, including an
// Unavailable containerd itself returned while connected, is returned
// unchanged.
func (c *Client) mapErr(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return err
	}
	if c.conn.GetState() == connectivity.Ready && !transportFailure(st.Message()) {
		return err // containerd's own Unavailable: unchanged
	}
	if strings.Contains(st.Message(), c.endpoint) {
		return &transportError{st: st}
	}
	return &transportError{st: status.Newf(codes.Unavailable, "runtime endpoint %s unavailable: %s", c.endpoint, st.Message())}
}

// transportFailure reports whether an Unavailable message is gRPC's own for a
// connection that broke under a call (the runtime went away while the
// connection still looked ready), not a status the runtime sent.
func transportFailure(msg string) bool {
	for _, p := range []string{"error reading from server", "connection error", "transport is closing", "connection closed"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
