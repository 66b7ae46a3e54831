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
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Listen listens on a unix socket at path. The parent directory is created
// with dirMode when missing. An existing one must be owned by root or by
// this process's user; one that others may write to (another user could
// replace the socket with its own) is given dirMode, with a warning on log,
// unless it is a shared sticky directory such as /tmp, which is refused.
// Something already at path is removed only when it is a socket nobody
// answers on (stale, left by a crash); a live socket, a symlink or any
// other file is refused. The socket gets sockMode.
func Listen(path string, dirMode, sockMode fs.FileMode, log *logrus.Entry) (net.Listener, error) {
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
	} else if err := checkDir(dir, dirMode, log); err != nil {
		return nil, err
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

// checkDir checks that only root and this process's user can change what
// is in the existing socket directory dir, and makes it so when a mode bit
// is all that is wrong.
func checkDir(dir string, dirMode fs.FileMode, log *logrus.Entry) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket directory %q is not a directory (%s)", dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("socket directory %q: no owner in %T", dir, fi.Sys())
	}
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	if st.Uid != 0 && st.Uid != euid {
		return fmt.Errorf("socket directory %q is owned by uid %d, not by root or uid %d: its owner could replace the socket; give it to root or choose another directory", dir, st.Uid, euid)
	}
	mode := fi.Mode()
	writers := mode.Perm() & 0o002
	if st.Gid != 0 && st.Gid != egid {
		writers |= mode.Perm() & 0o020
	}
	if writers == 0 {
		return nil
	}
	if mode&fs.ModeSticky != 0 {
		// A shared directory (/tmp): others need to write to it, and
		// taking that away would break them.
		return fmt.Errorf("socket directory %q is shared (mode %v): another user could take the socket's name first; choose a directory of its own", dir, mode)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("socket directory %q is writable by others (mode %v) and could not be made %v: %w", dir, mode, dirMode, err)
	}
	log.WithFields(logrus.Fields{"path": dir, "mode": mode.Perm().String(), "fixed_mode": dirMode.String()}).
		Warn("socket directory was writable by other users, its mode was fixed")
	return nil
}
