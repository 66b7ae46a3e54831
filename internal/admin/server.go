package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/httpserve"
	"github.com/cri-guard/cri-guard/internal/unixsock"
)

// statusPath is the HTTP path of the status document.
const statusPath = "/status"

// Socket and directory modes: only root may talk to cri-guard.
const (
	socketMode = 0o600
	dirMode    = 0o750
)

// Listen opens the admin unix socket at path with the rules of
// unixsock.Listen (the CRI socket's): the directory is created with dirMode
// when missing, an existing one must be root's or cri-guard's user's and is
// made writable by them only (a warning on log says so), a stale socket
// nobody listens on is replaced, anything else at path is an error, and
// the socket gets socketMode.
func Listen(path string, log *logrus.Entry) (net.Listener, error) {
	l, err := unixsock.Listen(path, dirMode, socketMode, log)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return l, nil
}

// Handler serves GET /status with the document status returns.
func Handler(status func() Status) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	return mux
}

// Serve serves h on l until ctx ends, then shuts down within a second; the
// unix listener removes its socket file when closed. Connections are bounded
// as the metrics endpoint's (httpserve.Limits).
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *logrus.Entry, opts ...httpserve.Option) error {
	return httpserve.Serve(ctx, l, h, "admin socket", log, opts...)
}
