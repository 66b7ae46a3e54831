package httpserve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// countingListener counts the connections it has handed out and not seen
// closed, and the most open at once.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

func serveTest(t *testing.T, opts ...Option) (string, *countingListener) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := logrus.New()
	log.SetOutput(io.Discard)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	go func() { done <- Serve(ctx, cl, h, "test", log.WithField("component", "test"), opts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return inner.Addr().String(), cl
}

// TestServeBoundsConnections: 200 keep-alive clients against a cap of 64:
// never more than 64 connections are open in the server, every client is
// served in turn, and each connection left idle is closed by the server.
func TestServeBoundsConnections(t *testing.T) {
	const (
		maxConns = 64
		clients  = 200
	)
	addr, cl := serveTest(t, withLimits(Limits{MaxConns: maxConns, IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: time.Second}))
	var (
		wg     sync.WaitGroup
		served atomic.Int64
		closed atomic.Int64
		errs   = make(chan error, clients)
	)
	for range clients {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			served.Add(1)
			// keep the connection and say nothing: the server must close it
			if _, err := br.ReadByte(); errors.Is(err, io.EOF) {
				closed.Add(1)
			} else {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("client: %v", err)
	}
	if p := cl.peak.Load(); p > maxConns {
		t.Errorf("%d connections open at once in the server, cap %d", p, maxConns)
	}
	if served.Load() != clients || closed.Load() != clients {
		t.Errorf("served %d, closed idle %d, want %d each", served.Load(), closed.Load(), clients)
	}
}

// TestServeClosesSilentConnections: a connection that never sends its
// request headers is closed after ReadHeaderTimeout.
func TestServeClosesSilentConnections(t *testing.T) {
	addr, _ := serveTest(t, withLimits(Limits{ReadHeaderTimeout: 100 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	// the server answers 408 or just closes; either way the connection ends
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	got := Limits{}.withDefaults()
	want := Limits{defaultReadHeaderTimeout, defaultReadTimeout, defaultWriteTimeout, defaultIdleTimeout, defaultMaxHeaderBytes, defaultMaxConns}
	if got != want {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if got := (Limits{MaxConns: 3}).withDefaults(); got.MaxConns != 3 || got.IdleTimeout != defaultIdleTimeout {
		t.Errorf("explicit field lost: %+v", got)
	}
}
