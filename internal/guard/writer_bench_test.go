package guard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// slowStore delays every Put (a state disk whose fsync is slow).
type slowStore struct {
	Store
	delay time.Duration
}

func (s slowStore) Put(r checkpoint.Record) error {
	time.Sleep(s.delay)
	return s.Store.Put(r)
}

// BenchmarkLoopAdmission measures how long one admission holds the sync
// loop (admitAddition on the loop goroutine: the decision, the pending
// record in memory, its write queued), with a real checkpoint store in
// b.TempDir() and with the same store behind a 10 ms delay per Put (ten
// pods admitted in turn: a write waiting behind one under way is
// superseded). The loop's time must not grow with the disk's: the write
// is the writer's.
func BenchmarkLoopAdmission(b *testing.B) {
	for _, delay := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("put_delay=%v", delay), func(b *testing.B) {
			cs, err := checkpoint.New(b.TempDir(), testLog())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = cs.Close() }) // after the loop's end (cleanups run last first)
			l := newHarness(b, withStore(slowStore{cs, delay}), running()).loop
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				p := newPod(fmt.Sprintf("u%d", i%10), 0, pod.Burstable, false) // ten pods: publish stays cheap
				p.State = pod.StatePending
				if err := l.do(ctx, func() { l.admitAddition(p) }); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := l.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkUnsavedPass measures one housekeeping pass's retries of the
// records kept in memory on a state disk that fails every write (9,754
// records, as on the node where retrying them all every pass took 30 % of
// a core), passes 10 s apart: the retries, their writes and their
// outcomes recorded. writes/pass is the Puts a pass costs.
func BenchmarkUnsavedPass(b *testing.B) {
	const records = 9754
	store := newMemStore()
	store.err = errors.New("no space left on device")
	clock := &testClock{}
	clock.set(time.Unix(100_000, 0))
	l := newHarness(b, withConfig(func(c *Config) { c.HousekeepingInterval = 10 * time.Second }), withStore(store),
		withOptions(func(o *Options) { o.Now = clock.now })).loop
	for i := range records {
		p := newPod(fmt.Sprintf("u%d", i), 0, pod.Burstable, false)
		p.State, p.SandboxID = pod.StateReady, fmt.Sprintf("s%d", i)
		l.pods[p.Key()] = p
		l.saves.unsaved[p.Key()] = true
	}
	l.saves.retry.since = clock.now() // failing already: no error line
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	pass := func() {
		clock.add(10 * time.Second)
		if err := l.do(ctx, l.retryUnsaved); err != nil {
			b.Fatal(err)
		}
		if err := l.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.do(ctx, l.recordWrites); err != nil {
			b.Fatal(err)
		}
	}
	pass() // the first probe
	before := store.putAttempts()
	b.ResetTimer()
	for range b.N {
		pass()
	}
	b.StopTimer()
	b.ReportMetric(float64(store.putAttempts()-before)/float64(b.N), "writes/pass")
}
