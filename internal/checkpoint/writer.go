package checkpoint

import (
	"context"
	"sync"
)

// maxWrites bounds the checkpoint writes under way at once (each on a
// goroutine of its own, one per pod key at most), and as many again the
// awaited ones (a CRI call waits for them).
const maxWrites = 4

// Writer makes records durable off its caller's goroutine: the sync loop
// decides and records in memory, hands the Writer a snapshot of the record
// (or a delete) and goes on; an fsync never holds up an eviction (under
// memory pressure writeback is throttled exactly when the loop must act).
//
// Every write has a sequence number. At most one write per pod key is under
// way (the store's lock is per file name anyway), and one more may wait
// behind it: a later write of the key supersedes the waiting one, whose
// waiters are then woken by the later write. Each outcome is queued for the
// caller (Take), which Ready signals.
//
// A write a CRI call waits for (awaited: RunPodSandbox's pending and
// settled record) never queues behind the others: it takes a slot of its
// own (awaitedSem). On a slow state disk the writes of a run of evictions
// queue for seconds; a critical pod's RunPodSandbox waiting behind them
// was measured answered after 10.6 s (BenchmarkEvictionSlowDisk).
type Writer struct {
	store      WriteStore
	sem        chan struct{}
	awaitedSem chan struct{}

	mu       sync.Mutex
	seq      uint64
	keys     map[string]*slot
	pending  int           // writes submitted and not done
	drained  chan struct{} // closed when pending drops to 0
	outcomes []Written
	ready    chan struct{} // signalled when outcomes has entries
}

// slot is one pod key's writes: the one under way and the one waiting.
type slot struct {
	running, queued *write
}

// write is one put (rec set) or delete (rec nil) of a record.
type write struct {
	key     string
	seq     uint64
	rec     *Record
	awaited bool          // a CRI call waits for it: it takes awaitedSem
	done    chan struct{} // closed when this write, or one that superseded it, is done
}

// Written is the outcome of one write.
type Written struct {
	Key     string
	Seq     uint64 // the sequence number Put or Delete returned
	Deleted bool   // a Delete
	Err     error
}

// WriteStore is what a Writer writes to (Store).
type WriteStore interface {
	Put(r Record) error
	Delete(key string) error
}

func NewWriter(s WriteStore) *Writer {
	return &Writer{store: s, sem: make(chan struct{}, maxWrites), awaitedSem: make(chan struct{}, maxWrites),
		keys: map[string]*slot{}, ready: make(chan struct{}, 1)}
}

// Put queues a write of rec; the channel is closed once it (or a later
// write of the same key) is done, successful or not. awaited: a CRI call
// waits for it.
func (w *Writer) Put(rec Record, awaited bool) (uint64, <-chan struct{}) {
	return w.submit(rec.Pod.Key(), &rec, awaited)
}

// Delete queues the removal of key's record.
func (w *Writer) Delete(key string) (uint64, <-chan struct{}) {
	return w.submit(key, nil, false)
}

func (w *Writer) submit(key string, rec *Record, awaited bool) (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	j := &write{key: key, seq: w.seq, rec: rec, awaited: awaited}
	s := w.keys[key]
	if s == nil {
		s = &slot{}
		w.keys[key] = s
	}
	switch {
	case s.running == nil:
		j.done = make(chan struct{})
		s.running = j
		go w.run(j)
	case s.queued != nil:
		// supersedes the waiting write, which is never done on its own:
		// its waiters now wait for j
		j.done = s.queued.done
		j.awaited = j.awaited || s.queued.awaited
		s.queued = j
		return j.seq, j.done
	default:
		j.done = make(chan struct{})
		s.queued = j
	}
	if w.pending == 0 {
		w.drained = make(chan struct{})
	}
	w.pending++
	return j.seq, j.done
}

// run does j, then the writes queued behind it for the same key.
func (w *Writer) run(j *write) {
	for j != nil {
		sem := w.sem
		if j.awaited {
			sem = w.awaitedSem
		}
		sem <- struct{}{}
		var err error
		if j.rec != nil {
			err = w.store.Put(*j.rec)
		} else {
			err = w.store.Delete(j.key)
		}
		<-sem
		w.mu.Lock()
		s := w.keys[j.key]
		next := s.queued
		s.running, s.queued = next, nil
		if next == nil {
			delete(w.keys, j.key)
		}
		w.outcomes = append(w.outcomes, Written{Key: j.key, Seq: j.seq, Deleted: j.rec == nil, Err: err})
		if w.pending--; w.pending == 0 {
			close(w.drained)
		}
		w.mu.Unlock()
		close(j.done)
		select {
		case w.ready <- struct{}{}:
		default:
		}
		j = next
	}
}

// Ready is signalled when Take has outcomes to return.
func (w *Writer) Ready() <-chan struct{} { return w.ready }

// Take returns the outcomes queued since the last call, oldest first.
func (w *Writer) Take() []Written {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.outcomes
	w.outcomes = nil
	return out
}

// Flush waits until every write submitted so far, and any submitted
// meanwhile, is done, or ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	if w.pending == 0 {
		w.mu.Unlock()
		return nil
	}
	ch := w.drained
	w.mu.Unlock()
	select {
	case <-ch:
		return w.Flush(ctx) // writes submitted while waiting
	case <-ctx.Done():
		return ctx.Err()
	}
}
