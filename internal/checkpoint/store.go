package checkpoint

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// quarantineDir is the subdirectory corrupt checkpoint files are moved to.
const quarantineDir = "quarantine"

// lockStripes is the number of per-file-name locks. Writers of different
// keys rarely share one; writers of the same key always do.
const lockStripes = 64

// Store keeps checkpoint files in one directory. It is safe for concurrent
// use by several goroutines.
type Store struct {
	dir   string
	log   *logrus.Entry
	now   func() time.Time // Record.Written and quarantine names; tests fix it
	seed  maphash.Seed
	locks [lockStripes]sync.Mutex
	lockf *os.File // holds the directory's flock while the store is open
	// kept are the annotations a trimmed record never leaves out
	kept []string
}

// lockFile is the file whose flock marks the directory as in use.
const lockFile = ".lock"

// maxRecordSize bounds a record file: a real one is a few KiB; a larger
// file in the directory is quarantined unread, never loaded whole.
const maxRecordSize = 1 << 20

// Close releases the directory's lock; idempotent.
func (s *Store) Close() error {
	if s.lockf == nil {
		return nil
	}
	err := s.lockf.Close()
	s.lockf = nil
	return err
}

// New opens (creating with mode 0700 if needed) the checkpoint directory dir
// and removes temp files left by interrupted writes. log receives one line
// per quarantined or removed file.
func New(dir string, log *logrus.Entry, opts ...Option) (*Store, error) {
	if dir == "" {
		return nil, errors.New("checkpoint store: empty directory")
	}
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	s := &Store{dir: dir, log: log, now: time.Now, seed: maphash.MakeSeed(), kept: keptAnnotations(pod.CriticalRules{})}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint dir %q: %w", dir, err)
	}
	if fi, err := os.Lstat(dir); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			log.WithField("path", dir).Warn("checkpoint dir is a symbolic link: whoever controls its target controls cri-guard's records")
		case fi.Mode().Perm()&0o022 != 0:
			log.WithField("path", dir).WithField("mode", fi.Mode().Perm().String()).
				Warn("checkpoint dir is writable by other users: they could forge records (want 0700)")
		}
	}
	// one cri-guard per state directory: a second would write the same
	// records from another view of the node
	lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock checkpoint dir %q: %w", dir, err)
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock checkpoint dir %q: %w (another cri-guard uses it)", dir, errLocked)
		}
		return nil, fmt.Errorf("lock checkpoint dir %q: %w", dir, err)
	}
	s.lockf = lf
	if err := s.removeTemps(); err != nil {
		// the lock goes with the failed store: a later New in this
		// process would find it held (flock is per open file)
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// removeTemps removes the temp files left by interrupted writes.
func (s *Store) removeTemps() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("read checkpoint dir %q: %w", s.dir, err)
	}
	for _, e := range entries {
		if isTempFile(e.Name()) {
			p := filepath.Join(s.dir, e.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale temp file %q: %w", p, err)
			}
			s.log.WithField("path", p).Info("removed stale checkpoint temp file")
		}
	}
	return nil
}

// Dir returns the checkpoint directory.
func (s *Store) Dir() string { return s.dir }

// lock returns the stripe lock for a file name.
func (s *Store) lock(name string) *sync.Mutex {
	return &s.locks[maphash.String(s.seed, name)%lockStripes]
}

// Put writes r durably under r.Pod.Key(), replacing any previous record.
// Written is set to the store's clock. When Put returns nil the record
// survives a crash; on error the previous record (if any) is intact.
func (s *Store) Put(r Record) error {
	name, err := fileName(r.Pod.UID, r.Pod.Attempt)
	if err != nil {
		return fmt.Errorf("put checkpoint %q: %w", r.Pod.Key(), err)
	}
	r.Written = s.now()
	if err := validate(r); err != nil {
		return fmt.Errorf("put checkpoint %q: %w", r.Pod.Key(), err)
	}
	data, err := encode(r)
	if err != nil {
		return err
	}
	if len(data) > maxRecordSize {
		// a sandbox config may be far larger (containerd takes megabytes
		// of annotations); a record that large would be quarantined at
		// the next start, its EvictedAt lost. What restore needs of the
		// labels and annotations it takes from containerd's sandbox.
		if data, err = s.fit(r); err != nil {
			return err
		}
	}
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	if err := writeAtomic(s.dir, name, data); err != nil {
		return fmt.Errorf("put checkpoint %q: %w", r.Pod.Key(), err)
	}
	return nil
}

// writeAtomic writes data to dir/name via a unique temp file, fsync, rename
// and a directory fsync.
func writeAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, "."+name+tempMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that renames and removals in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// load reads and verifies one file. A bad file is re-read under its lock
// (a concurrent Put may have replaced it) and quarantined if still bad.
func (s *Store) load(name string) (Record, error) {
	r, err := s.read(name)
	if err == nil || !errors.Is(err, errCorrupt) {
		return r, err
	}
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	r, err = s.read(name)
	if err == nil || !errors.Is(err, errCorrupt) {
		return r, err
	}
	s.quarantine(name, err)
	return Record{}, err
}

// read reads and decodes dir/name; the record must match its file name.
func (s *Store) read(name string) (Record, error) {
	f, err := os.Open(filepath.Join(s.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return Record{}, err
	}
	if len(data) > maxRecordSize {
		return Record{}, fmt.Errorf("%w: larger than %d bytes", errCorrupt, maxRecordSize)
	}
	r, err := decode(data)
	if err != nil {
		return Record{}, err
	}
	if want, _ := fileName(r.Pod.UID, r.Pod.Attempt); want != name {
		return Record{}, fmt.Errorf("%w: record %q stored as %q", errCorrupt, r.Pod.Key(), name)
	}
	return r, nil
}

// quarantine moves dir/name to dir/quarantine/name.<unix-nanos>[-n]. The caller
// holds the name's lock. Failures are logged, never returned: a file that
// cannot be moved is reported again on the next List.
func (s *Store) quarantine(name string, cause error) {
	src := filepath.Join(s.dir, name)
	qdir := filepath.Join(s.dir, quarantineDir)
	dst := filepath.Join(qdir, name+"."+strconv.FormatInt(s.now().UnixNano(), 10))
	for i := 1; ; i++ { // never overwrite an earlier quarantined file
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) || i > 1000 {
			break
		}
		dst = filepath.Join(qdir, name+"."+strconv.FormatInt(s.now().UnixNano(), 10)+"-"+strconv.Itoa(i))
	}
	log := s.log.WithFields(logrus.Fields{"path": src, "quarantine_path": dst}).WithError(cause)
	if err := os.MkdirAll(qdir, 0o700); err != nil {
		log.WithField("move_error", err.Error()).Error("cannot quarantine corrupt checkpoint")
		return
	}
	if err := os.Rename(src, dst); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.WithField("move_error", err.Error()).Error("cannot quarantine corrupt checkpoint")
		}
		return
	}
	if err := syncDir(s.dir); err != nil {
		log.WithField("move_error", err.Error()).Warn("quarantined checkpoint, directory sync failed")
		return
	}
	log.Warn("quarantined corrupt checkpoint")
}

// List returns every good record sorted by Pod.Created (then key). Bad files
// are quarantined and left out; only a failure to read the directory is an
// error.
func (s *Store) List() ([]Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %q: %w", s.dir, err)
	}
	out := make([]Record, 0, len(entries))
	for _, e := range entries {
		if !e.Type().IsRegular() || !isRecordFile(e.Name()) {
			continue
		}
		r, err := s.load(e.Name())
		switch {
		case err == nil:
			out = append(out, r)
		case errors.Is(err, ErrNotFound), errors.Is(err, errCorrupt):
			// Deleted meanwhile, or quarantined by load.
		default:
			s.log.WithField("path", filepath.Join(s.dir, e.Name())).WithError(err).Error("cannot read checkpoint")
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := a.Pod.Created.Compare(b.Pod.Created); c != 0 {
			return c
		}
		if a.Pod.UID != b.Pod.UID {
			if a.Pod.UID < b.Pod.UID {
				return -1
			}
			return 1
		}
		return int(int64(a.Pod.Attempt) - int64(b.Pod.Attempt))
	})
	return out, nil
}

// Delete removes the record for a pod key. A missing record is not an error.
func (s *Store) Delete(key string) error {
	name, err := keyFileName(key)
	if err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete checkpoint %q: %w", key, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("delete checkpoint %q: %w", key, err)
	}
	return nil
}

// Inspect reads the good records of dir without opening it as a store: no
// lock, no quarantine, nothing written. It is for readers beside the
// running cri-guard (tests, debugging); bad files are left out.
func Inspect(dir string) ([]Record, error) {
	s := &Store{dir: dir, now: time.Now}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inspect checkpoints in %q: %w", dir, err)
	}
	var out []Record
	for _, e := range entries {
		if !e.Type().IsRegular() || !isRecordFile(e.Name()) {
			continue
		}
		if r, err := s.read(e.Name()); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}
