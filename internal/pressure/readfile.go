package pressure

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileReader reads small stats files into one reusable buffer, with no
// allocation beyond the path conversion. It is not safe for concurrent use.
type fileReader struct {
	buf []byte
}

// errNotRegular: a stats path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// maxStatsFile bounds what is read from one stats file (memory.stat of a
// cgroup v2 group is about 1.5 KiB; /proc/meminfo about 1.5 KiB).
const maxStatsFile = 1 << 20

// read returns the content of the file at p. The slice is valid until the
// next call. Errors are *os.PathError, so errors.Is(err, fs.ErrNotExist)
// works.
func (r *fileReader) read(p string) ([]byte, error) {
	// O_NONBLOCK: a FIFO (or device) put where a stats file belongs must
	// not block the open; only regular files are read (procfs and cgroupfs
	// files are regular).
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "open", Path: p, Err: errNotRegular}
	}
	if r.buf == nil {
		r.buf = make([]byte, 8192)
	}
	n := 0
	for {
		if n == len(r.buf) {
			if len(r.buf) >= maxStatsFile {
				return nil, &os.PathError{Op: "read", Path: p, Err: fmt.Errorf("larger than %d bytes", maxStatsFile)}
			}
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: p, Err: err}
		}
		if m == 0 {
			return r.buf[:n], nil
		}
		n += m
	}
}
