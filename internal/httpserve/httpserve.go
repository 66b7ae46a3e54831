// Package httpserve serves an HTTP handler on a listener until a context
// ends, for cri-guard's small HTTP endpoints (metrics, the admin socket).
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
)

// Serve serves h on l until ctx ends, then shuts down within a second. what
// names the endpoint in errors ("metrics", "admin socket"). A unix listener
// removes its socket file when closed.
func Serve(ctx context.Context, l net.Listener, h http.Handler, what string, log *logrus.Entry) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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
