package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// gatedStore is a real Store whose Puts and Deletes of the records whose
// pod UID starts with prefix wait until release is called (a slow disk
// busy with them); it keeps every Put's state in order.
type gatedStore struct {
	*Store
	prefix string
	gate   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	puts   []pod.State
}

func newGatedStore(t *testing.T, prefix string) *gatedStore {
	s, _ := newStore(t)
	return &gatedStore{Store: s, prefix: prefix, gate: make(chan struct{})}
}

func (s *gatedStore) release() { s.once.Do(func() { close(s.gate) }) }

func (s *gatedStore) Put(r Record) error {
	if strings.HasPrefix(r.Pod.UID, s.prefix) {
		<-s.gate
	}
	s.mu.Lock()
	s.puts = append(s.puts, r.State)
	s.mu.Unlock()
	return s.Store.Put(r)
}

func (s *gatedStore) Delete(key string) error {
	if strings.HasPrefix(key, s.prefix) {
		<-s.gate
	}
	return s.Store.Delete(key)
}

func (s *gatedStore) get(t *testing.T, key string) (Record, bool) {
	t.Helper()
	rs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Pod.Key() == key {
			return r, true
		}
	}
	return Record{}, false
}

// TestWriterSupersedes: while a record's write is under way, a later write
// of it supersedes the one waiting; the superseded write's waiters are
// woken by the later one, and each outcome carries its sequence number.
func TestWriterSupersedes(t *testing.T) {
	s := newGatedStore(t, "u")
	defer s.release()
	w := NewWriter(s)
	rec := func(st pod.State) Record {
		return Record{Pod: pod.Pod{UID: "u1", Name: "p", Namespace: "ns"}, State: st}
	}
	seq1, done1 := w.Put(rec(pod.StatePending), false)
	_, done2 := w.Put(rec(pod.StateReady), false)
	seq3, done3 := w.Put(rec(pod.StateStopped), false)
	select {
	case <-done1:
		t.Fatal("a write held by the store is done")
	case <-done2:
		t.Fatal("a waiting write is done")
	case <-w.Ready():
		t.Fatal("an outcome is ready while the store holds every write")
	default:
	}
	s.release()
	for _, done := range []<-chan struct{}{done1, done2, done3} {
		<-done
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.puts, []pod.State{pod.StatePending, pod.StateStopped}) {
		t.Fatalf("writes = %v, want the first and the last (the second superseded)", s.puts)
	}
	select {
	case <-w.Ready():
	default:
		t.Fatal("outcomes taken but Ready not signalled")
	}
	var seqs []uint64
	for _, o := range w.Take() {
		if o.Err != nil || o.Deleted || o.Key != "u1/0" {
			t.Fatalf("outcome %+v, want a successful put of u1/0", o)
		}
		seqs = append(seqs, o.Seq)
	}
	if !slices.Equal(seqs, []uint64{seq1, seq3}) {
		t.Fatalf("outcomes %v, want %v", seqs, []uint64{seq1, seq3})
	}
	if r, ok := s.get(t, "u1/0"); !ok || r.State != pod.StateStopped {
		t.Fatalf("record on disk = %+v (present %v), want the last write", r, ok)
	}
	seq, done := w.Delete("u1/0")
	<-done
	if out := w.Take(); len(out) != 1 || out[0].Seq != seq || !out[0].Deleted || out[0].Err != nil {
		t.Fatalf("delete's outcome = %+v", out)
	}
	if _, ok := s.get(t, "u1/0"); ok {
		t.Fatal("deleted record still on disk")
	}
}

// TestAwaitedWriteSkipsTheQueue: with every writer slot held by slow
// writes and more queued behind them (a run of evictions on a slow disk),
// a write a CRI call waits for (RunPodSandbox's record) is done without
// waiting for them; a background write that supersedes an awaited one
// waiting behind its key's running write keeps it awaited.
func TestAwaitedWriteSkipsTheQueue(t *testing.T) {
	s := newGatedStore(t, "bg")
	defer s.release()
	w := NewWriter(s)
	rec := func(uid string, st pod.State) Record {
		return Record{Pod: pod.Pod{UID: uid, Name: uid, Namespace: "ns"}, State: st}
	}
	for i := range 2 * maxWrites {
		w.Put(rec(fmt.Sprintf("bg%d", i), pod.StateStopped), false)
	}
	_, done := w.Put(rec("crit", pod.StatePending), true)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the awaited write waits behind the held ones")
	}
	// bg0 is running (held): an awaited write of it waits, then a
	// background write supersedes it and is awaited in its place
	w.Put(rec("bg0", pod.StatePending), true)
	_, done = w.Put(rec("bg0", pod.StateReady), false)
	w.mu.Lock()
	awaited := w.keys["bg0/0"].queued.awaited
	w.mu.Unlock()
	if !awaited {
		t.Fatal("the write that superseded an awaited one is not awaited")
	}
	s.release()
	<-done
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, ok := s.get(t, "bg0/0"); !ok || r.State != pod.StateReady {
		t.Fatalf("bg0's record = %+v (present %v), want the last write", r, ok)
	}
}
