package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// unsavedHarness restores n ready sandboxes with every write failing with
// err, on a test clock at t0, and runs the loop.
func unsavedHarness(t *testing.T, n int, err error, t0 time.Time) (*harness, *testClock) {
	t.Helper()
	h := newHarness(t, enforceRestored())
	clock := h.clockAt(t0)
	for i := range n {
		h.rt.addSandbox(fmt.Sprintf("s%d", i), fmt.Sprintf("p%d", i), 0, true, t0.Add(-time.Hour))
	}
	h.store.mu.Lock()
	h.store.err = err
	h.store.mu.Unlock()
	if _, err := h.loop.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	flushed(t, h.loop)
	return h, clock
}

// pass is one housekeeping pass at the clock's time, its listing applied
// and its writes recorded.
func (h *harness) pass(t *testing.T) {
	t.Helper()
	h.listing(t)
	flushed(t, h.loop) // the rest, when a probe was written
}

func (s *memStore) putAttempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

func (s *memStore) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// TestUnsavedBackoff: with a state disk that fails every write (full),
// the records kept in memory are not written again on every pass: one
// record is tried per round, the rounds backing off to 5 min, so the
// writes over K passes stay far below K × records (9,754 records on a
// full disk cost 30 % of a core, every record every pass). Status says
// how many, the last error and since when. Once the disk takes a write,
// the next round writes them all.
func TestUnsavedBackoff(t *testing.T) {
	const (
		records = 100
		passes  = 1000
		every   = 10 * time.Second
	)
	t0 := time.Unix(100_000, 0)
	h, clock := unsavedHarness(t, records, errors.New("no space left on device"), t0)
	st := h.loop.Unsaved()
	if st.Records != records || !strings.Contains(st.LastError, "no space") || !st.Since.Equal(t0) {
		t.Fatalf("unsaved = %+v, want %d records, the disk's error, since t0", st, records)
	}
	before := h.store.putAttempts()
	for range passes {
		clock.add(every)
		h.pass(t)
	}
	retried := h.store.putAttempts() - before
	t.Logf("writes over %d passes %s apart with %d unsaved records: %d", passes, every, records, retried)
	// a probe at the first pass, then at most one per 4 min (5 min less
	// the jitter) over the passes' 10,000 s
	bound := 2 + int(passes*every/(retrySaveMax*4/5))
	if retried > bound || retried < 2 {
		t.Fatalf("writes over %d passes with %d unsaved records = %d, want between 2 and %d (one probe per back-off, not every record every pass: %d)",
			passes, records, retried, bound, passes*records)
	}
	if st := h.loop.Unsaved(); st.Records != records || !st.Since.Equal(t0) {
		t.Fatalf("unsaved after the passes = %+v", st)
	}

	h.store.setErr(nil)
	clock.add(retrySaveMax * 6 / 5)
	h.pass(t)
	for i := range records {
		if _, ok := h.store.get(fmt.Sprintf("p%d/0", i)); !ok {
			t.Fatalf("record p%d not written in the pass after the disk took writes again", i)
		}
	}
	if st := h.loop.Unsaved(); st != (UnsavedState{}) {
		t.Fatalf("unsaved once all are written = %+v, want none", st)
	}
}

// TestUnsavedSuccessBringsProbeForward: a write that succeeds while
// records are unsaved (space freed on the disk) brings the next probe to
// the next pass instead of the back-off's end.
func TestUnsavedSuccessBringsProbeForward(t *testing.T) {
	t0 := time.Unix(100_000, 0)
	h, clock := unsavedHarness(t, 3, errors.New("no space left on device"), t0)
	clock.add(time.Second)
	h.pass(t) // the first probe fails: backing off
	if st := h.loop.Unsaved(); !st.NextRetry.After(clock.now()) {
		t.Fatalf("unsaved after a failed probe = %+v, want a retry later than now", st)
	}
	h.store.setErr(nil)
	p := newPod("fresh", 0, "BestEffort", false)
	if _, err := h.run(p, runtimeproxy.Created("s-fresh")); err != nil {
		t.Fatal(err)
	}
	flushed(t, h.loop)
	clock.add(time.Second) // well within the back-off
	h.pass(t)
	if st := h.loop.Unsaved(); st.Records != 0 {
		t.Fatalf("unsaved after a write succeeded and a pass = %+v, want all written", st)
	}
}

// TestUnsavedStoreNotOpen: a store that is not open yet
// (checkpoint.ErrUnavailable: it did no I/O) is probed every pass without
// back-off, so its records are written in the first pass after it opens.
func TestUnsavedStoreNotOpen(t *testing.T) {
	t0 := time.Unix(100_000, 0)
	unavailable := fmt.Errorf("put checkpoint: %w (read-only file system)", checkpoint.ErrUnavailable)
	h, clock := unsavedHarness(t, 5, unavailable, t0)
	const passes = 20
	before := h.store.putAttempts()
	for range passes {
		clock.add(10 * time.Second)
		h.pass(t)
	}
	if got := h.store.putAttempts() - before; got != passes {
		t.Fatalf("probes of a store not open over %d passes = %d, want one a pass", passes, got)
	}
	h.store.setErr(nil)
	clock.add(10 * time.Second)
	h.pass(t)
	if st := h.loop.Unsaved(); st.Records != 0 {
		t.Fatalf("unsaved in the pass after the store opened = %+v, want all written", st)
	}
}
