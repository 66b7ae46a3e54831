package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/httpserve"
)

// StatusPath is the HTTP path of the status document.
const StatusPath = "/status"

// Socket and directory modes: only root may talk to cri-guard.
const (
	SocketMode = 0o600
	DirMode    = 0o750
)

// Listen opens the admin unix socket at path: the directory is created
// with DirMode when missing, a stale socket nobody listens on is replaced,
// anything else at path is an error, and the socket gets SocketMode.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
		return nil, fmt.Errorf("admin socket %q: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("admin socket %q: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("admin socket %q: another process is listening on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin socket %q: remove stale socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket %q: %w", path, err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("admin socket %q: %w", path, err)
	}
	return l, nil
}

// Handler serves GET /status with the document status returns.
func Handler(status func() Status) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	return mux
}

// Serve serves h on l until ctx ends, then shuts down within a second; the
// unix listener removes its socket file when closed.
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *logrus.Entry) error {
	return httpserve.Serve(ctx, l, h, "admin socket", log)
}
