package guard

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// saves are the loop's record writes: the writer that makes them durable
// off the loop, the writes under way, and the records whose last write
// failed with the pace of their retries. Unless said otherwise, its
// fields belong to the loop goroutine.
type saves struct {
	w       *checkpoint.Writer
	writing map[string]uint64 // pod keys with a write under way: its sequence number
	unsaved map[string]bool   // pod keys whose last write failed
	retry   saveRetry         // the pace of their writes
	// unsavedState is what Unsaved returns (publishUnsaved; any goroutine)
	unsavedState atomic.Pointer[UnsavedState]
}

func newSaves(s Store) saves {
	return saves{w: checkpoint.NewWriter(s), writing: map[string]uint64{}, unsaved: map[string]bool{}}
}

// save queues a durable write of p's record (loop goroutine): the writer
// does it off the loop. The outcome comes back through the loop's queue
// (recordWrites).
func (l *Loop) save(p *pod.Pod) { l.saveAs(p, false) }

// saveAs is save; awaited is for a record a CRI call waits for
// (RunPodSandbox's pending and settled record, on its own goroutine): the
// returned channel is closed once it is written, and the write does not
// queue behind the others (checkpoint.Writer).
func (l *Loop) saveAs(p *pod.Pod, awaited bool) <-chan struct{} {
	seq, done := l.saves.w.Put(checkpoint.Record{Pod: *p.Clone(), State: p.State, SandboxID: p.SandboxID, Written: l.now()}, awaited)
	l.saves.writing[p.Key()] = seq
	return done
}

// drop queues the removal of a pod's record (loop goroutine); a write
// still waiting is superseded.
func (l *Loop) drop(key string) {
	seq, _ := l.saves.w.Delete(key)
	l.saves.writing[key] = seq
	delete(l.saves.unsaved, key)
	delete(l.changed, key)
	delete(l.unsettled, key)
	if l.restoreDrops != nil {
		l.restoreDrops[key] = true // a retried restore's read may still show it
	}
}

// recordWrites records the outcomes of the writer's writes (loop
// goroutine); only the last write of a record counts. A failed write is
// counted (checkpoint_operations_total), the record stays in memory, and
// housekeeping writes it again with back-off until it succeeds
// (retryUnsaved): what the record guards (the re-admission guard is in
// the evictor's memory) holds meanwhile. The first failure after all
// records were written is logged as an error, the others at debug (a full
// disk fails every record), and one line says when all are written again.
func (l *Loop) recordWrites() {
	roundDone := false
	for _, o := range l.saves.w.Take() {
		if l.saves.retry.outcome(o) {
			roundDone = true
		}
		if l.saves.writing[o.Key] != o.Seq {
			continue // a later write of the record is under way
		}
		delete(l.saves.writing, o.Key)
		fields := keyFields(o.Key)
		if p, ok := l.pods[o.Key]; ok {
			fields = podFields(p)
		}
		switch {
		case o.Deleted:
			if o.Err != nil {
				l.log.WithError(o.Err).WithFields(fields).Warn("cannot delete checkpoint")
			}
		case o.Err != nil:
			log := l.log.WithError(o.Err).WithFields(fields)
			if l.saves.retry.since.IsZero() {
				l.saves.retry.since = l.now()
				log.Error("cannot write checkpoint: kept in memory, written again with back-off; later failures are logged at debug level until all are written")
			} else {
				log.Debug("cannot write checkpoint")
			}
			l.saves.retry.lastErr = o.Err
			l.saves.unsaved[o.Key] = true
		default:
			if l.saves.unsaved[o.Key] {
				delete(l.saves.unsaved, o.Key)
				l.log.WithFields(fields).Debug("checkpoint written after earlier failures")
			}
			if len(l.saves.unsaved) > 0 && len(l.saves.retry.round) == 0 {
				// the disk takes writes again: probe at the next pass
				// rather than after the back-off
				l.saves.retry.next = time.Time{}
			}
		}
	}
	if roundDone {
		l.saves.retry.roundDone(l.now(), l.retryBase())
		if l.saves.retry.bulk {
			l.retryUnsaved() // the probe was written: the rest at once
		}
	}
	l.publishUnsaved()
}

// retrySaveMax is the longest a record whose write failed waits for its
// next attempt.
const retrySaveMax = 5 * time.Minute

// retryBase is the back-off after the first failed retry: a housekeeping
// interval.
func (l *Loop) retryBase() time.Duration {
	return min(l.cfg.HousekeepingInterval, retrySaveMax)
}

// saveRetry paces the writes of the records whose last write failed (loop
// goroutine). While writes fail, one record is written again per round (a
// probe, the first at the next housekeeping pass), and the rounds are
// spaced by a delay that doubles from a housekeeping interval up to
// retrySaveMax, jittered: a full disk costs a write now and then, not one
// per record per pass. A round written whole lets the rest be written at
// once; any write that succeeds brings the next probe to the next pass.
// A store that is not open (checkpoint.ErrUnavailable: no I/O done) is
// probed every pass, so its records are written as soon as it opens.
type saveRetry struct {
	delay   time.Duration     // the back-off after the last failed round
	next    time.Time         // no round before
	bulk    bool              // the last round was written whole: the next writes every unsaved record
	round   map[string]uint64 // the writes of the round under way, by key: their sequence numbers
	failed  bool              // a write of the round under way failed
	notOpen bool              // ... with checkpoint.ErrUnavailable
	lastErr error             // the last write error
	since   time.Time         // the first failure since all records were last written
}

// outcome takes o into the round under way; true when it completes the
// round.
func (r *saveRetry) outcome(o checkpoint.Written) bool {
	seq, ok := r.round[o.Key]
	if !ok || o.Seq < seq {
		return false
	}
	delete(r.round, o.Key) // this write, or a later one of the record
	if o.Err != nil && !o.Deleted {
		r.failed = true
		r.notOpen = r.notOpen || errors.Is(o.Err, checkpoint.ErrUnavailable)
	}
	return len(r.round) == 0
}

// roundDone sets the pace after a round: written whole, the rest go at
// once; else the next round waits the back-off.
func (r *saveRetry) roundDone(now time.Time, base time.Duration) {
	r.bulk = !r.failed
	switch {
	case !r.failed:
	case r.notOpen:
		r.next = time.Time{} // nothing was written: costs nothing to try again
	default:
		if r.delay == 0 {
			r.delay = base
		} else {
			r.delay = min(2*r.delay, retrySaveMax)
		}
		// ±20 %: the nodes of a cluster whose shared storage filled up
		// at once do not retry in step
		r.next = now.Add(r.delay*4/5 + rand.N(r.delay*2/5+1))
	}
	r.failed, r.notOpen = false, false
}

// retryUnsaved writes again the records whose last write failed, paced by
// saveRetry (loop goroutine).
func (l *Loop) retryUnsaved() {
	r := &l.saves.retry
	for key := range l.saves.unsaved {
		if _, ok := l.pods[key]; !ok {
			delete(l.saves.unsaved, key) // gone meanwhile: nothing to write
		}
	}
	if len(l.saves.unsaved) == 0 {
		if !r.since.IsZero() {
			l.log.WithField("failing_for", l.now().Sub(r.since).Round(time.Second).String()).Info("all checkpoints written after earlier failures")
		}
		*r = saveRetry{}
		l.publishUnsaved()
		return
	}
	if len(r.round) > 0 || (!r.bulk && l.now().Before(r.next)) {
		return // a round under way, or backing off
	}
	if r.round == nil {
		r.round = map[string]uint64{}
	}
	for key := range l.saves.unsaved {
		if _, busy := l.saves.writing[key]; busy {
			continue // the write under way says how it went
		}
		l.save(l.pods[key])
		r.round[key] = l.saves.writing[key]
		if !r.bulk {
			break // the probe
		}
	}
	r.bulk = false
	l.publishUnsaved()
}

// UnsavedState says which records are in memory only: their last write
// failed.
type UnsavedState struct {
	// Records counts them.
	Records int
	// LastError is the last write error, Since when writes began to fail
	// (zero once all records are written).
	LastError string
	Since     time.Time
	// NextRetry is when they are written again, if later than the next
	// housekeeping pass.
	NextRetry time.Time
}

// publishUnsaved refreshes what Unsaved returns (loop goroutine).
func (l *Loop) publishUnsaved() {
	st := UnsavedState{Records: len(l.saves.unsaved)}
	if st.Records > 0 {
		st.Since = l.saves.retry.since
		if l.saves.retry.lastErr != nil {
			st.LastError = l.saves.retry.lastErr.Error()
		}
		if l.saves.retry.next.After(l.now()) {
			st.NextRetry = l.saves.retry.next
		}
	}
	l.saves.unsavedState.Store(&st)
}

// Unsaved returns the records in memory only. Safe from any goroutine.
func (l *Loop) Unsaved() UnsavedState {
	if p := l.saves.unsavedState.Load(); p != nil {
		return *p
	}
	return UnsavedState{}
}

// Flush waits until the records handed to the writer so far are written
// (shutdown: after Run returned, before the store is closed), or ctx ends.
func (l *Loop) Flush(ctx context.Context) error {
	return l.saves.w.Flush(ctx)
}

// keyFields are the log fields of a pod known by its key alone.
func keyFields(key string) logrus.Fields {
	uid, _, _ := strings.Cut(key, "/")
	return logrus.Fields{"pod_uid": uid}
}
