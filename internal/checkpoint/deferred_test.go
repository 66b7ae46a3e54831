package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"
)

// deferredOn makes the first attempt to open dir with open (New when
// nil); the test drives the retries (tryOpen).
func deferredOn(t *testing.T, dir string, open func() (*Store, error)) (*Deferred, *logtest.Hook, error) {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	log := logger.WithField("component", "checkpoint")
	if open == nil {
		open = func() (*Store, error) { return New(dir, log) }
	}
	d, err := newDeferred(dir, log, open, func() time.Time { return t0 })
	if err == nil {
		close(d.done) // no background retries: the test calls tryOpen
		t.Cleanup(func() { _ = d.Close() })
	}
	return d, hook, err
}

func warned(hook *logtest.Hook, level logrus.Level, msg string) bool {
	for _, e := range hook.AllEntries() {
		if e.Level == level && strings.Contains(e.Message, msg) {
			return true
		}
	}
	return false
}

// TestDeferredLockIsADirectory: a state directory whose ".lock" is a
// directory (real: New cannot open it) serves without the directory:
// List reads the records there unopened, Put fails with ErrUnavailable,
// Delete is done once it opens. Once the ".lock" directory is removed the
// next attempt opens it, and its lock holds again.
func TestDeferredLockIsADirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"u1", "u2"} {
		if err := s.Put(testRecord(uid, 0, t0)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, lockFile), 0o700); err != nil {
		t.Fatal(err)
	}

	d, hook, err := deferredOn(t, dir, nil)
	if err != nil {
		t.Fatalf("a .lock directory is fatal: %v", err)
	}
	st := d.State()
	if st.Available || !strings.Contains(st.Error, "is a directory") || !st.Since.Equal(t0) {
		t.Fatalf("state = %+v, want unavailable since t0 with the open error", st)
	}
	if !warned(hook, logrus.WarnLevel, "checkpoint store unavailable") {
		t.Fatal("no warning that the store is unavailable")
	}
	recs, err := d.List()
	if err != nil || len(recs) != 2 {
		t.Fatalf("List while unavailable = %d records, %v; want the 2 on disk", len(recs), err)
	}
	if err := d.Put(testRecord("u3", 0, t0)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Put while unavailable = %v, want ErrUnavailable", err)
	}
	if err := d.Delete("u1/0"); err != nil {
		t.Fatalf("Delete while unavailable = %v", err)
	}
	if err := d.Delete("never/0"); err != nil {
		t.Fatalf("Delete of a record never written = %v", err)
	}
	if len(d.deleted) != 1 {
		t.Fatalf("deletes remembered = %v, want u1's only (never's file is not there)", d.deleted)
	}
	if _, err := os.Stat(filepath.Join(dir, "u1_0.json")); err != nil {
		t.Fatalf("a record deleted while unavailable is gone already: %v", err)
	}

	if d.tryOpen() {
		t.Fatal("opened with .lock still a directory")
	}
	if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
		t.Fatal(err)
	}
	if !d.tryOpen() {
		t.Fatalf("not opened once .lock is removed: %+v", d.State())
	}
	if st := d.State(); !st.Available || st.Error != "" || !st.Since.IsZero() {
		t.Fatalf("state once open = %+v", st)
	}
	if err := d.Put(testRecord("u3", 0, t0)); err != nil {
		t.Fatalf("Put once open = %v", err)
	}
	recs, err = d.List()
	var uids []string
	for _, r := range recs {
		uids = append(uids, r.Pod.UID)
	}
	if err != nil || strings.Join(uids, ",") != "u2,u3" {
		t.Fatalf("records once open = %v, %v; want u2,u3 (u1 deleted while unavailable)", uids, err)
	}
	if _, err := New(dir, nil); !errors.Is(err, errLocked) {
		t.Fatalf("second store on the opened directory = %v, want ErrLocked", err)
	}
}

// TestDeferredNotCreatable: a state directory that cannot be created (real:
// a file where its parent should be, ENOTDIR) serves without records;
// once the file is gone the directory is created.
func TestDeferredNotCreatable(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "var")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "cri-guard")
	d, _, err := deferredOn(t, dir, nil)
	if err != nil {
		t.Fatalf("an uncreatable state directory is fatal: %v", err)
	}
	if recs, err := d.List(); err != nil || len(recs) != 0 {
		t.Fatalf("List while unavailable = %v, %v; want none, no error (the restore goes on from the runtime)", recs, err)
	}
	if err := d.Delete("u1/0"); err != nil || len(d.deleted) != 0 {
		t.Fatalf("Delete with no directory = %v, remembered %v; want nothing to remember", err, d.deleted)
	}
	if err := os.Remove(parent); err != nil {
		t.Fatal(err)
	}
	if !d.tryOpen() {
		t.Fatalf("not opened once the path is free: %+v", d.State())
	}
	if err := d.Put(testRecord("u1", 0, t0)); err != nil {
		t.Fatal(err)
	}
	if recs, err := Inspect(dir); err != nil || len(recs) != 1 {
		t.Fatalf("records on disk = %v, %v", recs, err)
	}
}

// TestDeferredReadOnly: the error a read-only file system gives (EROFS,
// injected: a read-only mount needs privileges a unit test does not take,
// and mode bits do not stop root) is not fatal; the next attempt that
// succeeds opens the store.
func TestDeferredReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	fails := 2
	open := func() (*Store, error) {
		if fails > 0 {
			fails--
			return nil, &fs.PathError{Op: "mkdir", Path: dir, Err: unix.EROFS}
		}
		return New(dir, nil)
	}
	d, hook, err := deferredOn(t, dir, open)
	if err != nil {
		t.Fatalf("a read-only state directory is fatal: %v", err)
	}
	if st := d.State(); st.Available || !strings.Contains(st.Error, "read-only file system") {
		t.Fatalf("state = %+v", st)
	}
	if d.tryOpen() {
		t.Fatal("opened while still read-only")
	}
	if warned(hook, logrus.WarnLevel, "another reason") {
		t.Fatal("the same failure warned again")
	}
	if !d.tryOpen() {
		t.Fatalf("not opened once writable: %+v", d.State())
	}
	if !warned(hook, logrus.InfoLevel, "checkpoint store opened") {
		t.Fatal("no line saying the store opened")
	}
}

// TestDeferredLockHeld: a lock another cri-guard holds stays fatal at
// start (two writers of one directory corrupt each other's view); met by
// a background attempt it is an error line and the store stays in memory.
func TestDeferredLockHeld(t *testing.T) {
	s, _ := newStore(t)
	_, _, err := deferredOn(t, s.Dir(), nil)
	if !errors.Is(err, errLocked) || !strings.Contains(err.Error(), "another cri-guard uses it") {
		t.Fatalf("OpenDeferred on a directory locked by another store = %v, want ErrLocked", err)
	}
	_ = s.Close()
	// unavailable first for another reason, then the lock is taken by
	// another cri-guard before the retry
	first := true
	var other *Store
	open := func() (*Store, error) {
		if first {
			first = false
			return nil, errors.New("transient")
		}
		return New(s.Dir(), nil)
	}
	d, hook, err := deferredOn(t, s.Dir(), open)
	if err != nil {
		t.Fatal(err)
	}
	if other, err = New(s.Dir(), nil); err != nil {
		t.Fatal(err)
	}
	if d.tryOpen() {
		t.Fatal("opened a directory another store holds")
	}
	if !warned(hook, logrus.ErrorLevel, "another cri-guard holds") {
		t.Fatal("no error line for the lock held by another cri-guard")
	}
	_ = other.Close()
	if !d.tryOpen() {
		t.Fatalf("not opened once the other released it: %+v", d.State())
	}
}

// TestNewReleasesLockOnFailure: New failing after it took the lock (a
// stale temp entry it cannot remove) releases it, so that a later attempt
// in the same process is not refused by its own leftover lock.
func TestNewReleasesLockOnFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	stuck := filepath.Join(dir, ".u1_0.json"+tempMarker+"1")
	if err := os.MkdirAll(filepath.Join(stuck, "x"), 0o700); err != nil { // a non-empty directory: Remove fails
		t.Fatal(err)
	}
	if _, err := New(dir, nil); err == nil {
		t.Fatal("New with an unremovable temp entry succeeded")
	}
	if err := os.RemoveAll(stuck); err != nil {
		t.Fatal(err)
	}
	s, err := New(dir, nil)
	if err != nil {
		t.Fatalf("New after the failure is gone = %v, want opened", err)
	}
	_ = s.Close()
}
