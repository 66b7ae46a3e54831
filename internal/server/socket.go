package server

import (
	"io/fs"
	"net"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/unixsock"
)

// Socket permissions: the directory is only traversable by root and the
// socket's group, the socket is read/write for owner and group.
const (
	socketDirMode fs.FileMode = 0o750
	socketMode    fs.FileMode = 0o660
)

// listenUnix listens on the CRI socket at path with the rules of
// unixsock.Listen: the directory must be root's or cri-guard's user's and
// is made writable by them only; a stale socket is replaced, a live one, a
// symlink or any other file is refused.
func listenUnix(path string, log *logrus.Entry) (net.Listener, error) {
	return unixsock.Listen(path, socketDirMode, socketMode, log)
}
