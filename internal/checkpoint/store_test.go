package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/cri-guard/cri-guard/internal/pod"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// newStore returns a store in a temp dir with a fixed clock and a log hook.
func newStore(t testing.TB) (*Store, *logtest.Hook) {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	s, err := New(filepath.Join(t.TempDir(), "checkpoints"), logger.WithField("component", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return t0 }
	t.Cleanup(func() { _ = s.Close() })
	return s, hook
}

// list returns the store's records, failing the test on an error.
func list(t *testing.T, s *Store) []Record {
	t.Helper()
	rs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func testRecord(uid string, attempt uint32, created time.Time) Record {
	return Record{
		Pod: pod.Pod{
			UID: uid, Name: "web-" + uid, Namespace: "default", Attempt: attempt,
			Labels:       map[string]string{"app": "web"},
			Annotations:  map[string]string{pod.AnnotationConfigSource: "api"},
			CgroupParent: "/kubepods/besteffort/pod" + uid, QOS: pod.BestEffort, Evictable: true,
			State: pod.StateReady, Created: created,
		},
		State:     pod.StateReady,
		SandboxID: "sb-" + uid,
	}
}

func TestRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	r := testRecord("0e760759-7576-4c0b-89d0-bf5c9539026e", 3, t0.Add(-time.Hour))
	if err := s.Put(r); err != nil {
		t.Fatal(err)
	}
	r.Written = t0
	if got := list(t, s); len(got) != 1 || !reflect.DeepEqual(got[0], r) {
		t.Errorf("List = %+v\nwant  [%+v]", got, r)
	}
	info, err := os.Stat(filepath.Join(s.Dir(), "0e760759-7576-4c0b-89d0-bf5c9539026e_3.json"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		t.Errorf("checkpoint file mode %v is readable by others", info.Mode())
	}
	// Overwrite the record.
	r.State, r.SandboxID = pod.StateStopped, "sb-new"
	if err := s.Put(r); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s); len(got) != 1 || got[0].State != pod.StateStopped || got[0].SandboxID != "sb-new" {
		t.Errorf("after overwrite List = %+v", got)
	}
	if err := s.Delete(r.Pod.Key()); err != nil {
		t.Fatal(err)
	}
	if got := list(t, s); len(got) != 0 {
		t.Errorf("List after Delete = %+v, want none", got)
	}
	if err := s.Delete(r.Pod.Key()); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	entries, _ := os.ReadDir(s.Dir())
	if len(entries) != 1 || entries[0].Name() != lockFile {
		t.Errorf("directory after delete: %v, want only the lock file", entries)
	}
}

func TestInvalidKeys(t *testing.T) {
	s, _ := newStore(t)
	for _, uid := range []string{"", "../etc", "a/b", `a\b`, ".hidden", "a b", "a\x00b", strings.Repeat("u", 201)} {
		t.Run(fmt.Sprintf("put %q", uid), func(t *testing.T) {
			if err := s.Put(testRecord(uid, 0, t0)); !errors.Is(err, errInvalidKey) {
				t.Errorf("Put(uid %q) = %v, want ErrInvalidKey", uid, err)
			}
		})
	}
	for _, key := range []string{"", "nokey", "u/x", "u/-1", "u/4294967296", "../x/1", "/1"} {
		t.Run(fmt.Sprintf("delete %q", key), func(t *testing.T) {
			if err := s.Delete(key); !errors.Is(err, errInvalidKey) {
				t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
			}
		})
	}
	bad := testRecord("u1", 0, t0)
	bad.State = "running"
	if err := s.Put(bad); err == nil {
		t.Error("Put with unknown state succeeded")
	}
}

// corruptions produce a bad file from a good encoded record.
var corruptions = []struct {
	name   string
	mangle func(t *testing.T, good []byte) []byte
}{
	{"bad checksum", func(t *testing.T, good []byte) []byte {
		return []byte(strings.Replace(string(good), `"namespace":"default"`, `"namespace":"kube-system"`, 1))
	}},
	{"truncated", func(t *testing.T, good []byte) []byte { return good[:len(good)/2] }},
	{"empty", func(t *testing.T, good []byte) []byte { return nil }},
	{"unknown version", func(t *testing.T, good []byte) []byte {
		return []byte(strings.Replace(string(good), `"version":1`, `"version":2`, 1))
	}},
	{"unknown algorithm", func(t *testing.T, good []byte) []byte {
		return []byte(strings.Replace(string(good), `"sha256:`, `"md5:`, 1))
	}},
	{"not json", func(t *testing.T, good []byte) []byte { return []byte("\x00\x01garbage") }},
	{"wrong file name", func(t *testing.T, good []byte) []byte {
		b, err := encode(testRecord("other", 9, t0))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

func TestCorruptFileQuarantined(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			s, hook := newStore(t)
			r := testRecord("u1", 1, t0)
			if err := s.Put(r); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.Dir(), "u1_1.json")
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, c.mangle(t, good), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := list(t, s); len(got) != 0 {
				t.Fatalf("List = %+v, want the corrupt record left out", got)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("corrupt file still in place: %v", err)
			}
			q, _ := filepath.Glob(filepath.Join(s.Dir(), quarantineDir, "u1_1.json.*"))
			if len(q) != 1 {
				t.Errorf("quarantine holds %v, want one u1_1.json.*", q)
			}
			if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || e.Data["path"] != path {
				t.Errorf("no quarantine log line: %+v", e)
			}
			if got := list(t, s); len(got) != 0 {
				t.Errorf("second List = %+v, want none", got)
			}
			if q, _ := filepath.Glob(filepath.Join(s.Dir(), quarantineDir, "u1_1.json.*")); len(q) != 1 {
				t.Errorf("after a second List quarantine holds %v, want one file", q)
			}
		})
	}
}

func TestListQuarantinesAndSorts(t *testing.T) {
	s, hook := newStore(t)
	for i, off := range []int{5, 1, 3, 2, 4} {
		r := testRecord(fmt.Sprintf("uid-%d", i), uint32(i), t0.Add(time.Duration(off)*time.Minute))
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"uid-1/1", "uid-3/3", "uid-2/2", "uid-4/4", "uid-0/0"}
	for i, c := range corruptions {
		name := fmt.Sprintf("bad%d_0.json", i)
		good, _ := encode(testRecord(fmt.Sprintf("bad%d", i), 0, t0))
		if err := os.WriteFile(filepath.Join(s.Dir(), name), c.mangle(t, good), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Not checkpoint files: ignored, left alone.
	if err := os.WriteFile(filepath.Join(s.Dir(), "README"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range got {
		keys = append(keys, r.Pod.Key())
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("List keys = %v, want %v", keys, want)
	}
	q, _ := os.ReadDir(filepath.Join(s.Dir(), quarantineDir))
	if len(q) != len(corruptions) {
		t.Errorf("quarantined %d files, want %d", len(q), len(corruptions))
	}
	warns := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warns++
		}
	}
	if warns != len(corruptions) {
		t.Errorf("%d warning lines, want %d", warns, len(corruptions))
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "README")); err != nil {
		t.Errorf("non-checkpoint file touched: %v", err)
	}
	again, err := s.List()
	if err != nil || len(again) != len(want) {
		t.Errorf("second List = %d records, %v", len(again), err)
	}
}

func TestNewRemovesStaleTempFiles(t *testing.T) {
	s, _ := newStore(t)
	if err := s.Put(testRecord("u1", 0, t0)); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(s.Dir(), ".u2_0.json"+tempMarker+"123")
	if err := os.WriteFile(stale, []byte(`{"version":1`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // a restart: the first instance has gone
		t.Fatal(err)
	}
	s2, err := New(s.Dir(), logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file kept: %v", err)
	}
	if got, err := s2.List(); err != nil || len(got) != 1 {
		t.Errorf("List = %v, %v; want one record", got, err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	s, _ := newStore(t)
	const writers, rounds = 8, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				// Own key, and a key shared by all writers.
				own := testRecord(fmt.Sprintf("own-%d", w), uint32(i%3), t0)
				shared := testRecord("shared", 0, t0)
				shared.SandboxID = fmt.Sprintf("w%d-%d", w, i)
				for _, r := range []Record{own, shared} {
					if err := s.Put(r); err != nil {
						t.Error(err)
						return
					}
				}
				if _, err := s.List(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*3+1 {
		t.Errorf("List = %d records, want %d", len(got), writers*3+1)
	}
	if q, _ := os.ReadDir(filepath.Join(s.Dir(), quarantineDir)); len(q) != 0 {
		t.Errorf("concurrent writes quarantined %d files", len(q))
	}
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if isTempFile(e.Name()) {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

func TestQuarantineKeepsEarlierFiles(t *testing.T) {
	s, _ := newStore(t) // fixed clock: both quarantine names start alike
	path := filepath.Join(s.Dir(), "u1_0.json")
	for i, content := range []string{"first", "second"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("List #%d = %+v, want the corrupt record left out", i, got)
		}
	}
	q, err := filepath.Glob(filepath.Join(s.Dir(), quarantineDir, "u1_0.json.*"))
	if err != nil || len(q) != 2 {
		t.Fatalf("quarantine = %v, %v; want 2 files", q, err)
	}
	seen := map[string]bool{}
	for _, f := range q {
		b, _ := os.ReadFile(f)
		seen[string(b)] = true
	}
	if !seen["first"] || !seen["second"] {
		t.Errorf("quarantined contents = %v", seen)
	}
}

// TestStateDirTrust: one cri-guard per state directory; a directory others
// may write is reported; a record file too large to be real is quarantined
// without being read whole.
func TestStateDirTrust(t *testing.T) {
	s, hook := newStore(t)
	if _, err := New(s.Dir(), logrus.NewEntry(logrus.New())); err == nil || !strings.Contains(err.Error(), "another cri-guard uses it") {
		t.Fatalf("second store on the same directory: %v, want refused", err)
	}
	big := filepath.Join(s.Dir(), "u9_0.json")
	if err := os.WriteFile(big, make([]byte, maxRecordSize+10), 0o600); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.List(); err != nil || len(recs) != 0 {
		t.Fatalf("List with a huge file = %v, %v", recs, err)
	}
	if _, err := os.Stat(big); !os.IsNotExist(err) {
		t.Fatalf("huge record file not quarantined: %v", err)
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	logger, hook2 := logtest.NewNullLogger()
	s2, err := New(open, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	warned := false
	for _, e := range hook2.AllEntries() {
		warned = warned || strings.Contains(e.Message, "writable by other users")
	}
	if !warned {
		t.Fatal("no warning for a world-writable state directory")
	}
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "writable by other users") {
			t.Fatal("the 0700 directory was reported as writable by others")
		}
	}
}

// TestInspect: a reader beside the running store sees its records and
// takes no lock.
func TestInspect(t *testing.T) {
	s, _ := newStore(t)
	if err := s.Put(testRecord("u1", 0, t0)); err != nil {
		t.Fatal(err)
	}
	recs, err := Inspect(s.Dir())
	if err != nil || len(recs) != 1 || recs[0].Pod.UID != "u1" {
		t.Fatalf("Inspect = %+v, %v", recs, err)
	}
}
