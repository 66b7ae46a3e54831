package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// rawConn is one HTTP/2 connection to the CRI socket spoken frame by frame,
// as a hostile client would: no flow control, no limits honoured.
type rawConn struct {
	c  net.Conn
	fr *http2.Framer
	mu sync.Mutex // writes
}

func dialRaw(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	rc := &rawConn{c: c, fr: http2.NewFramer(c, c)}
	return rc
}

// handshake sends the client preface and an empty SETTINGS frame.
func (rc *rawConn) handshake(t *testing.T) {
	t.Helper()
	if err := rc.tryHandshake(); err != nil {
		t.Fatal(err)
	}
}

// tryHandshake is handshake returning the error.
func (rc *rawConn) tryHandshake() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, err := io.WriteString(rc.c, http2.ClientPreface); err != nil {
		return err
	}
	return rc.fr.WriteSettings()
}

// callHeaders is the HPACK block of a gRPC call to method.
func callHeaders(method string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "localhost"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return buf.Bytes()
}

// frameCounts is what a raw connection read back.
type frameCounts struct {
	refused, settings, goAway atomic.Int64
}

// readLoop reads frames until the connection ends, acknowledging SETTINGS
// and PING, and counts refused streams, SETTINGS and GOAWAY; done is closed
// when the connection ends.
func (rc *rawConn) readLoop(fc *frameCounts) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := rc.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				if f.ErrCode == http2.ErrCodeRefusedStream {
					fc.refused.Add(1)
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fc.settings.Add(1)
					rc.mu.Lock()
					_ = rc.fr.WriteSettingsAck()
					rc.mu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					rc.mu.Lock()
					_ = rc.fr.WritePing(true, f.Data)
					rc.mu.Unlock()
				}
			case *http2.GoAwayFrame:
				fc.goAway.Add(1)
			}
		}
	}()
	return done
}

func socketPath(e *env) string { return filepath.Join(e.dir, "guard", "cri-guard.sock") }

// TestHeadersFloodIsBounded: one connection opens 5,000 streams with
// HEADERS only (a call that never sends its message). With the production
// limit the server keeps defaultMaxConcurrentStreams of them and refuses
// the rest (RST_STREAM REFUSED_STREAM), so goroutines stay bounded; the
// kubelet's calls on its own connection are served meanwhile; once the
// connection closes the goroutines are gone.
func TestHeadersFloodIsBounded(t *testing.T) {
	const streams = 5000
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()

	rc := dialRaw(t, socketPath(e))
	rc.handshake(t)
	var fc frameCounts
	done := rc.readLoop(&fc)
	block := callHeaders(runtimeapi.RuntimeService_Version_FullMethodName)
	for i := range streams {
		rc.mu.Lock()
		err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true})
		rc.mu.Unlock()
		if err != nil {
			t.Fatalf("HEADERS %d: %v", i, err)
		}
	}
	wantRefused := int64(streams - defaultMaxConcurrentStreams)
	testutil.Within(20*time.Second, func() bool { return fc.refused.Load() >= wantRefused })
	during := runtime.NumGoroutine()
	t.Logf("goroutines: %d before, %d with %d streams sent (%d refused)", base, during, streams, fc.refused.Load())
	if got := fc.refused.Load(); got != wantRefused {
		t.Errorf("%d streams refused, want %d (all beyond %d)", got, wantRefused, defaultMaxConcurrentStreams)
	}
	if during-base > defaultMaxConcurrentStreams+500 {
		t.Errorf("%d goroutines more during the flood, want at most about one per allowed stream (%d)", during-base, defaultMaxConcurrentStreams)
	}
	// the kubelet's connection is served meanwhile
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e.proxy.Version(cctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version during the flood: %v", err)
	}

	_ = rc.c.Close()
	<-done
	if !testutil.Within(10*time.Second, func() bool { return runtime.NumGoroutine() <= base+20 }) {
		t.Errorf("%d goroutines 10s after the flooding connection closed, %d before", runtime.NumGoroutine(), base)
	}
}

// TestStreamLimitQueuesGRPCClients: a gRPC client (the kubelet) that has
// more calls in flight than the stream limit is not refused: it queues
// them until streams free up.
func TestStreamLimitQueuesGRPCClients(t *testing.T) {
	e := newEnvCfg(t, nil, func(cfg *Config, _ *runtimeproxy.Client) { cfg.MaxConcurrentStreams = 4 })
	e.fake.Delay(runtimeapi.RuntimeService_Version_FullMethodName, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Version with 40 calls on 4 streams: %v", err)
	}
}

// TestIdleConnectionsClosed: connections without calls are closed after
// MaxConnectionIdle (GOAWAY, then EOF), and a gRPC client whose idle
// connection was closed calls again without noticing.
func TestIdleConnectionsClosed(t *testing.T) {
	const conns = 50
	e := newEnvCfg(t, nil, func(cfg *Config, _ *runtimeproxy.Client) { cfg.MaxConnectionIdle = 200 * time.Millisecond })
	ctx := context.Background()
	if _, err := e.proxy.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	var (
		fcs   [conns]frameCounts
		dones [conns]chan struct{}
	)
	for i := range conns {
		rc := dialRaw(t, socketPath(e))
		rc.handshake(t)
		_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		dones[i] = rc.readLoop(&fcs[i])
	}
	closed := 0
	for i := range conns {
		<-dones[i]
		if fcs[i].goAway.Load() > 0 {
			closed++
		}
	}
	if closed != conns {
		t.Errorf("%d of %d idle connections closed with GOAWAY within 10s", closed, conns)
	}
	// the client's own connection went idle as well: the next call reconnects
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e.proxy.Version(cctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version after the idle connection was closed: %v", err)
	}
}

// TestConnectionCap: at most MaxConnections connections are served at once;
// more from the same peer are closed at once (no SETTINGS, EOF) rather
// than left waiting in the kernel's queue; once served ones close, new
// connections are served again.
func TestConnectionCap(t *testing.T) {
	const (
		maxConns = 8
		conns    = 20
	)
	e := newEnvCfg(t, nil, func(cfg *Config, _ *runtimeproxy.Client) { cfg.MaxConnections = maxConns })
	// the env's own clients connect lazily; keep them out of the count
	dial := func(n int) ([]*rawConn, []frameCounts, []chan struct{}) {
		rcs := make([]*rawConn, n)
		fcs := make([]frameCounts, n)
		dones := make([]chan struct{}, n)
		for i := range n {
			rcs[i] = dialRaw(t, socketPath(e))
			// a refused connection may be closed before the preface is written
			_ = rcs[i].tryHandshake()
			dones[i] = rcs[i].readLoop(&fcs[i])
		}
		return rcs, fcs, dones
	}
	rcs, fcs, dones := dial(conns)
	var served, closed []int
	for i := range conns {
		if !testutil.Within(10*time.Second, func() bool {
			select {
			case <-dones[i]:
				return true
			default:
				return fcs[i].settings.Load() > 0
			}
		}) {
			t.Fatalf("connection %d neither served nor closed within 10s", i)
		}
		select {
		case <-dones[i]:
			closed = append(closed, i)
		default:
			served = append(served, i)
		}
	}
	if len(served) != maxConns || len(closed) != conns-maxConns {
		t.Fatalf("%d of %d connections served and %d closed, cap %d", len(served), conns, len(closed), maxConns)
	}
	for _, i := range closed {
		if fcs[i].settings.Load() != 0 {
			t.Errorf("connection %d was sent SETTINGS before it was closed", i)
		}
	}
	for _, i := range served {
		_ = rcs[i].c.Close()
	}
	if !testutil.Within(5*time.Second, func() bool { total, _ := e.srv.lis.(*peerListener).held(peerID{}); return total == 0 }) {
		t.Fatal("places not freed after the served connections closed")
	}
	_, fcs, _ = dial(maxConns)
	if !testutil.Within(5*time.Second, func() bool {
		for i := range fcs {
			if fcs[i].settings.Load() == 0 {
				return false
			}
		}
		return true
	}) {
		t.Errorf("connections not served after %d closed", maxConns)
	}
}
