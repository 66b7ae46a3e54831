// Package httpserve serves an HTTP handler on a listener until a context
// ends, for cri-guard's small HTTP endpoints (metrics, the admin socket).
// Every connection is bounded in time and count (see Limits): a local user
// who opens thousands of keep-alive connections to the loopback metrics port
// must not take cri-guard's file descriptors from the CRI socket.
// It imports nothing of cri-guard.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/net/netutil"
)

// Production limits (Limits fields left zero). The endpoints serve small GET
// requests to one scraper (Prometheus keeps one connection per target) or to
// `cri-guard status`; these leave them ample room and bound everyone else.
const (
	// defaultReadHeaderTimeout: a new connection must send its request
	// headers within this long.
	defaultReadHeaderTimeout = 5 * time.Second
	// defaultReadTimeout bounds reading a whole request (GETs, no body).
	defaultReadTimeout = 10 * time.Second
	// defaultWriteTimeout bounds writing a response to a slow reader; a
	// scrape is tens of KiB on loopback.
	defaultWriteTimeout = 30 * time.Second
	// defaultIdleTimeout closes a keep-alive connection idle this long:
	// longer than Prometheus's default 1m scrape interval, so a scraper
	// keeps its connection between scrapes.
	defaultIdleTimeout = 90 * time.Second
	// defaultMaxHeaderBytes: request headers are a few hundred bytes
	// (net/http's default is 1 MiB).
	defaultMaxHeaderBytes = 16 << 10
	// defaultMaxConns caps the connections served at once; further ones
	// wait in the kernel's accept queue (holding no descriptor of ours)
	// until one closes.
	defaultMaxConns = 64
)

// Limits bound what clients of an endpoint can hold. Zero fields take the
// Default* values above.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	MaxConns          int
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, defaultReadHeaderTimeout)
	def(&l.ReadTimeout, defaultReadTimeout)
	def(&l.WriteTimeout, defaultWriteTimeout)
	def(&l.IdleTimeout, defaultIdleTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = defaultMaxConns
	}
	return l
}

// Option is an optional setting of Serve.
type Option func(*Limits)

// withLimits replaces the production limits (tests use small timeouts);
// zero fields still take the defaults.
func withLimits(l Limits) Option { return func(cur *Limits) { *cur = l } }

// Serve serves h on l until ctx ends, then shuts down within a second. what
// names the endpoint in errors ("metrics", "admin socket"). At most
// MaxConns connections are served at once. A unix listener removes its
// socket file when closed.
func Serve(ctx context.Context, l net.Listener, h http.Handler, what string, log *logrus.Entry, opts ...Option) error {
	var lim Limits
	for _, o := range opts {
		o(&lim)
	}
	lim = lim.withDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
	}
	l = netutil.LimitListener(l, lim.MaxConns)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", what, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.WithError(err).Warn(what + " server shutdown")
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", what, err)
	}
	return nil
}
