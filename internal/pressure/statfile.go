package pressure

// The stats files cri-guard reads (cgroup memory and pressure files,
// /proc/meminfo): how one is read (fileReader, without blocking on what is
// not a regular file), how its text is parsed, and the Sampler's readers
// that put the two together.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

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

// errKeyNotFound reports that a key-value stats file lacks the requested key.
var errKeyNotFound = errors.New("key not found")

// PSI is one line ("some" or "full") of a pressure file: the share of wall
// time, in percent, that tasks stalled on memory over the last 10, 60 and 300
// seconds, and the total stall time in microseconds.
type PSI struct {
	Avg10  float64
	Avg60  float64
	Avg300 float64
	Total  uint64
}

// meminfo holds the /proc/meminfo fields the sampler uses, in bytes.
type meminfo struct {
	TotalBytes     int64
	FreeBytes      int64
	AvailableBytes int64
}

// parseUint parses an unsigned decimal number without allocating.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty number")
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("invalid number %q", b)
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("number %q out of range", b)
		}
		n = n*10 + d
	}
	return n, nil
}

// parseLimit parses a single-value cgroup file such as memory.max,
// memory.current or memory.limit_in_bytes. "max" reports unlimited.
func parseLimit(b []byte) (v uint64, unlimited bool, err error) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, true, nil
	}
	v, err = parseUint(b)
	return v, false, err
}

// parseKVValue returns the value of key in a "key value" per line stats file
// (memory.stat in either cgroup version). Every line must be well formed;
// errKeyNotFound is returned when the key is absent.
func parseKVValue(b []byte, key string) (uint64, error) {
	var (
		val   uint64
		found bool
	)
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(k) == 0 {
			return 0, fmt.Errorf("malformed stats line %q", line)
		}
		n, err := parseUint(v)
		if err != nil {
			return 0, fmt.Errorf("stats key %q: %w", k, err)
		}
		if !found && string(k) == key {
			val, found = n, true
		}
	}
	if !found {
		return 0, fmt.Errorf("stats key %q: %w", key, errKeyNotFound)
	}
	return val, nil
}

// parsePressure parses a PSI file (/proc/pressure/memory or a cgroup's
// memory.pressure). The "some" line is required; the "full" line is optional
// (hasFull reports whether it was present).
func parsePressure(b []byte) (some, full PSI, hasFull bool, err error) {
	var hasSome bool
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		kind, rest, _ := bytes.Cut(line, []byte{' '})
		var dst *PSI
		switch string(kind) {
		case "some":
			if hasSome {
				return PSI{}, PSI{}, false, errors.New("duplicate psi line \"some\"")
			}
			dst, hasSome = &some, true
		case "full":
			if hasFull {
				return PSI{}, PSI{}, false, errors.New("duplicate psi line \"full\"")
			}
			dst, hasFull = &full, true
		default:
			return PSI{}, PSI{}, false, fmt.Errorf("unknown psi line %q", line)
		}
		if err := parsePSILine(rest, dst); err != nil {
			return PSI{}, PSI{}, false, fmt.Errorf("psi line %q: %w", kind, err)
		}
	}
	if !hasSome {
		return PSI{}, PSI{}, false, errors.New("psi line \"some\" missing")
	}
	return some, full, hasFull, nil
}

// parsePSILine parses "avg10=0.00 avg60=0.00 avg300=0.00 total=0".
func parsePSILine(b []byte, dst *PSI) error {
	var seen uint8
	for len(b) > 0 {
		var field []byte
		field, b, _ = bytes.Cut(b, []byte{' '})
		if len(field) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(field, []byte{'='})
		if !ok {
			return fmt.Errorf("malformed field %q", field)
		}
		var (
			f   *float64
			bit uint8
		)
		switch string(k) {
		case "avg10":
			f, bit = &dst.Avg10, 1
		case "avg60":
			f, bit = &dst.Avg60, 2
		case "avg300":
			f, bit = &dst.Avg300, 4
		case "total":
			n, err := parseUint(v)
			if err != nil {
				return fmt.Errorf("total: %w", err)
			}
			dst.Total, seen = n, seen|8
			continue
		default:
			continue // tolerate fields added by future kernels
		}
		x, err := parsePercent(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		*f, seen = x, seen|bit
	}
	if seen != 15 {
		return errors.New("missing avg10, avg60, avg300 or total")
	}
	return nil
}

// parsePercent parses a PSI average such as "12.34" (kernel format %lu.%02lu)
// without allocating; it accepts digits with an optional fractional part.
func parsePercent(b []byte) (float64, error) {
	ip, fp, hasDot := bytes.Cut(b, []byte{'.'})
	if len(ip) == 0 || (hasDot && len(fp) == 0) || len(ip) > 6 || len(fp) > 6 {
		return 0, fmt.Errorf("invalid percentage %q", b)
	}
	i, err := parseUint(ip)
	if err != nil {
		return 0, err
	}
	x := float64(i)
	if hasDot {
		f, err := parseUint(fp)
		if err != nil {
			return 0, err
		}
		x += float64(f) / math.Pow10(len(fp))
	}
	if x > 100 {
		return 0, fmt.Errorf("percentage %q above 100", b)
	}
	return x, nil
}

// parseMeminfo parses /proc/meminfo. MemTotal and MemAvailable are required;
// values are converted from kB to bytes.
func parseMeminfo(b []byte) (meminfo, error) {
	var (
		m    meminfo
		seen uint8
	)
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if len(line) == 0 {
			continue
		}
		k, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return meminfo{}, fmt.Errorf("malformed meminfo line %q", line)
		}
		var (
			dst *int64
			bit uint8
		)
		switch string(k) {
		case "MemTotal":
			dst, bit = &m.TotalBytes, 1
		case "MemFree":
			dst, bit = &m.FreeBytes, 2
		case "MemAvailable":
			dst, bit = &m.AvailableBytes, 4
		default:
			continue
		}
		rest = bytes.TrimSpace(rest)
		num, unit, _ := bytes.Cut(rest, []byte{' '})
		n, err := parseUint(num)
		if err != nil {
			return meminfo{}, fmt.Errorf("meminfo %s: %w", k, err)
		}
		mult := uint64(1)
		switch string(bytes.TrimSpace(unit)) {
		case "kB":
			mult = 1024
		case "":
		default:
			return meminfo{}, fmt.Errorf("meminfo %s: unknown unit %q", k, unit)
		}
		if n > math.MaxInt64/mult {
			return meminfo{}, fmt.Errorf("meminfo %s: value %d out of range", k, n)
		}
		*dst, seen = int64(n*mult), seen|bit
	}
	if seen&1 == 0 || seen&4 == 0 {
		return meminfo{}, errors.New("meminfo: MemTotal or MemAvailable missing")
	}
	if m.TotalBytes == 0 {
		return meminfo{}, errors.New("meminfo: MemTotal is zero")
	}
	return m, nil
}

// formatPercent formats a PSI percentage for messages.
func formatPercent(p float64) string {
	return strconv.FormatFloat(p, 'f', -1, 64) + "%"
}

// readUintFile reads a single-number file; unlimited reports "max".
func (s *Sampler) readUintFile(p string) (v int64, unlimited bool, err error) {
	b, err := s.r.read(p)
	if err != nil {
		return 0, false, err
	}
	u, unl, err := parseLimit(b)
	if err != nil {
		return 0, false, fmt.Errorf("parse %q: %w", p, err)
	}
	if u > 1<<63-1 {
		return 0, false, fmt.Errorf("parse %q: value %d out of range", p, u)
	}
	return int64(u), unl, nil
}

// readStatKey reads one key of a memory.stat file.
func (s *Sampler) readStatKey(p, key string) (int64, error) {
	b, err := s.r.read(p)
	if err != nil {
		return 0, err
	}
	v, err := parseKVValue(b, key)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", p, err)
	}
	if v > 1<<63-1 {
		return 0, fmt.Errorf("parse %q: %s out of range", p, key)
	}
	return int64(v), nil
}

// readPSI reads a pressure file.
func (s *Sampler) readPSI(p string) (some, full PSI, err error) {
	b, err := s.r.read(p)
	if err != nil {
		return PSI{}, PSI{}, err
	}
	some, full, _, err = parsePressure(b)
	if err != nil {
		return PSI{}, PSI{}, fmt.Errorf("parse %q: %w", p, err)
	}
	return some, full, nil
}

// readMeminfo reads and parses /proc/meminfo.
func (s *Sampler) readMeminfo() (meminfo, error) {
	b, err := s.r.read(s.meminfo)
	if err != nil {
		return meminfo{}, fmt.Errorf("read meminfo: %w", err)
	}
	m, err := parseMeminfo(b)
	if err != nil {
		return meminfo{}, fmt.Errorf("parse %q: %w", s.meminfo, err)
	}
	return m, nil
}
