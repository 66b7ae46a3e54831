// Package unixsock opens cri-guard's unix sockets (the CRI socket and the
// admin socket) with one set of rules. It imports nothing of cri-guard.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Listen listens on a unix socket at path. The parent directory is created
// with dirMode when missing. Something already at path is removed only when
// it is a socket nobody answers on (stale, left by a crash); a live socket,
// a symlink or any other file is refused. The socket gets sockMode.
func Listen(path string, dirMode, sockMode fs.FileMode) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("listen: empty socket path")
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, fmt.Errorf("create socket directory %q: %w", dir, err)
		}
		// MkdirAll is subject to the umask; make the mode exact.
		if err := os.Chmod(dir, dirMode); err != nil {
			return nil, fmt.Errorf("chmod socket directory %q: %w", dir, err)
		}
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", path, err)
	}
	if err := os.Chmod(path, sockMode); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("chmod socket %q: %w", path, err)
	}
	return l, nil
}

// removeStale removes a socket at path that nobody answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen %q: %w", path, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("listen %q: path is a symlink, refusing to replace it", path)
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("listen %q: path exists and is not a socket (%s), refusing to replace it", path, fi.Mode().Type())
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("listen %q: socket is in use: another process is listening on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %q: %w", path, err)
	}
	return nil
}
