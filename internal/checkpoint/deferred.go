package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// The back-off of Deferred's attempts to open its directory.
const (
	retryOpenMin = 5 * time.Second
	retryOpenMax = 5 * time.Minute
)

// Deferred is a store whose directory may not be open yet: cri-guard
// sits in the kubelet's data path, and a state directory it cannot use (a
// read-only file system, a directory it may not create, a ".lock" it
// cannot open) must not take the node's container runtime with it. Until
// the directory opens, Put fails with ErrUnavailable (the caller keeps the
// record in memory and writes it again), Delete is remembered and done
// once it opens, and List reads what the directory holds without opening
// it (Inspect), or nothing. Opening is retried in the background, 5 s
// doubling to 5 min; once open, Deferred is the Store. Safe for
// concurrent use.
type Deferred struct {
	dir  string
	log  *logrus.Entry
	open func() (*Store, error)
	now  func() time.Time

	mu      sync.RWMutex
	s       *Store              // nil until the directory opens
	cause   error               // why it is not open
	since   time.Time           // not open since
	deleted map[string]struct{} // keys deleted while not open: their files go once it opens

	stop      chan struct{} // closed by Close: the retries end
	done      chan struct{} // closed when the retries ended
	closeOnce sync.Once
}

// StoreState says whether the state directory is open.
type StoreState struct {
	Dir       string
	Available bool
	// Error is why the directory is not open (the last attempt's error),
	// Since when it was first found unusable; both zero once open.
	Error string
	Since time.Time
}

// OpenDeferred opens dir as New does. When that fails it logs why,
// returns a Deferred that serves without the directory and retries
// opening it in the background (Close ends the retries). It returns an
// error only for an empty dir and for a lock another process holds
// (errLocked): two cri-guards writing one directory would each drop the
// other's records as stale, and the one holding the lock serves the node
// already; systemd restarts this one until the lock is free.
func OpenDeferred(dir string, log *logrus.Entry, opts ...Option) (*Deferred, error) {
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	d, err := newDeferred(dir, log, func() (*Store, error) { return New(dir, log, opts...) }, time.Now)
	if err != nil {
		return nil, err
	}
	if d.s == nil {
		go d.retry(retryOpenMin, retryOpenMax)
	} else {
		close(d.done)
	}
	return d, nil
}

// newDeferred makes the first attempt to open the directory; the caller
// starts the retries (tests drive tryOpen themselves).
func newDeferred(dir string, log *logrus.Entry, open func() (*Store, error), now func() time.Time) (*Deferred, error) {
	if dir == "" {
		return nil, errors.New("checkpoint store: empty directory")
	}
	d := &Deferred{dir: dir, log: log, open: open, now: now, stop: make(chan struct{}), done: make(chan struct{})}
	s, err := open()
	switch {
	case err == nil:
		d.s = s
		return d, nil
	case errors.Is(err, errLocked):
		return nil, err
	}
	d.cause, d.since = err, now()
	log.WithError(err).WithField("path", dir).
		Warn("checkpoint store unavailable: records are kept in memory only, opening the state directory is retried in the background")
	return d, nil
}

// retry tries to open the directory after min, then after twice as long
// each time up to max, until it opens or Close is called.
func (d *Deferred) retry(min, max time.Duration) {
	defer close(d.done)
	delay := min
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		if d.tryOpen() {
			return
		}
		delay = 2 * delay
		if delay > max {
			delay = max
		}
		t.Reset(delay)
	}
}

// tryOpen is one attempt to open the directory; true once it is open.
// The deletes asked for meanwhile are done before the first Put reaches
// the directory.
func (d *Deferred) tryOpen() bool {
	d.mu.RLock()
	open, prev := d.s != nil, d.cause
	d.mu.RUnlock()
	if open {
		return true
	}
	s, err := d.open()
	if err != nil {
		d.mu.Lock()
		d.cause = err
		d.mu.Unlock()
		log := d.log.WithError(err).WithField("path", d.dir)
		switch {
		case errors.Is(err, errLocked):
			log.Error("checkpoint store still unavailable: another cri-guard holds the state directory's lock")
		case prev == nil || prev.Error() != err.Error():
			log.Warn("checkpoint store still unavailable, for another reason")
		default:
			log.Debug("checkpoint store still unavailable")
		}
		return false
	}
	d.mu.Lock()
	dels := d.deleted
	d.deleted = nil
	d.mu.Unlock()
	s.removeAll(dels) // without holding up the writers: their Puts still fail meanwhile
	d.mu.Lock()
	s.removeAll(d.deleted) // the few asked for while the others went
	d.deleted = nil
	d.s, d.cause = s, nil
	since := d.since
	d.since = time.Time{}
	d.mu.Unlock()
	d.log.WithField("path", d.dir).WithField("unavailable_for", d.now().Sub(since).Round(time.Second).String()).
		Info("checkpoint store opened: records are written to the state directory again")
	return true
}

// State says whether the directory is open, and if not why.
func (d *Deferred) State() StoreState {
	d.mu.RLock()
	defer d.mu.RUnlock()
	st := StoreState{Dir: d.dir, Available: d.s != nil, Since: d.since}
	if d.cause != nil {
		st.Error = d.cause.Error()
	}
	return st
}

// Available reports whether the directory is open.
func (d *Deferred) Available() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.s != nil
}

// store returns the open store, or nil and why it is not open.
func (d *Deferred) store() (*Store, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.s, d.cause
}

// Put writes r as Store.Put does; ErrUnavailable while the directory is
// not open.
func (d *Deferred) Put(r Record) error {
	s, cause := d.store()
	if s == nil {
		return fmt.Errorf("put checkpoint %q: %w (%v)", r.Pod.Key(), ErrUnavailable, cause)
	}
	return s.Put(r)
}

// List returns the records as Store.List does. While the directory is
// not open it returns the good records it can read there without opening
// it (nothing quarantined, nothing written), or none.
func (d *Deferred) List() ([]Record, error) {
	s, _ := d.store()
	if s != nil {
		return s.List()
	}
	recs, err := Inspect(d.dir)
	if err != nil {
		d.log.WithError(err).WithField("path", d.dir).Warn("checkpoint store unavailable and its records unreadable: restoring from the runtime alone")
		return nil, nil
	}
	return recs, nil
}

// Delete removes key's record as Store.Delete does. While the directory
// is not open, the removal of a file that may be there is remembered and
// done once it opens.
func (d *Deferred) Delete(key string) error {
	name, err := keyFileName(key)
	if err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	if s, _ := d.store(); s != nil {
		return s.Delete(key)
	}
	d.mu.Lock()
	s := d.s
	if s == nil {
		// a file known not to be there (a record never written, a
		// directory that is a file) need not be remembered
		_, err := os.Lstat(filepath.Join(d.dir, name))
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			if d.deleted == nil {
				d.deleted = map[string]struct{}{}
			}
			d.deleted[key] = struct{}{}
		}
	}
	d.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Delete(key) // opened meanwhile
}

// Close ends the retries and closes the store if it opened; idempotent.
func (d *Deferred) Close() error {
	var err error
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.done
		s, cause := d.store()
		if s == nil {
			d.log.WithError(cause).WithField("path", d.dir).Warn("checkpoint store closed without being opened: the records kept in memory were not written")
			return
		}
		err = s.Close()
	})
	return err
}

// removeAll removes the records of keys, with one directory sync for all.
// A failure is logged: a record left behind names a sandbox that is gone,
// which the next restore drops.
func (s *Store) removeAll(keys map[string]struct{}) {
	if len(keys) == 0 {
		return
	}
	removed := 0
	for key := range keys {
		name, err := keyFileName(key)
		if err != nil {
			continue // Delete took valid keys only
		}
		mu := s.lock(name)
		mu.Lock()
		err = os.Remove(filepath.Join(s.dir, name))
		mu.Unlock()
		switch {
		case err == nil:
			removed++
		case !errors.Is(err, fs.ErrNotExist):
			s.log.WithError(err).WithField("path", filepath.Join(s.dir, name)).Warn("cannot delete checkpoint deleted while the store was unavailable")
		}
	}
	if removed == 0 {
		return
	}
	if err := syncDir(s.dir); err != nil {
		s.log.WithError(err).WithField("path", s.dir).Warn("checkpoints deleted, directory sync failed")
	}
}
