package guard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/checkpoint"
	"github.com/cri-guard/cri-guard/pod"
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
			defer cs.Close()
			l, err := New(Config{HousekeepingInterval: time.Hour}, Options{Runtime: newFakeRuntime(), Store: slowStore{cs, delay}, Evictor: &ruleEvictor{}, Log: testLog()})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = l.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
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
