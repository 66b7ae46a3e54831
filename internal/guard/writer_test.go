package guard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestWriterSupersedes: while a record's write is under way, a later write
// of it supersedes the one waiting; the superseded write's waiters are
// woken by the later one, and each outcome carries its sequence number.
func TestWriterSupersedes(t *testing.T) {
	s := newMemStore()
	w := newWriter(s)
	release := s.hold()
	rec := func(st pod.State) checkpoint.Record {
		return checkpoint.Record{Pod: pod.Pod{UID: "u1"}, State: st}
	}
	seq1, done1 := w.put(rec(pod.StatePending), false)
	_, done2 := w.put(rec(pod.StateReady), false)
	seq3, done3 := w.put(rec(pod.StateStopped), false)
	select {
	case <-done1:
		t.Fatal("a write held by the store is done")
	case <-done2:
		t.Fatal("a waiting write is done")
	default:
	}
	release()
	for _, done := range []<-chan struct{}{done1, done2, done3} {
		<-done
	}
	if err := w.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var states []pod.State
	for _, r := range s.puts {
		states = append(states, r.State)
	}
	if !slices.Equal(states, []pod.State{pod.StatePending, pod.StateStopped}) {
		t.Fatalf("writes = %v, want the first and the last (the second superseded)", states)
	}
	var seqs []uint64
	for _, o := range w.take() {
		seqs = append(seqs, o.seq)
	}
	if !slices.Equal(seqs, []uint64{seq1, seq3}) {
		t.Fatalf("outcomes %v, want %v", seqs, []uint64{seq1, seq3})
	}
}

// heldStore holds the Puts of the records whose pod UID starts with
// "bg" until release is closed (a slow disk busy with them).
type heldStore struct {
	*memStore
	release chan struct{}
}

func (s heldStore) Put(r checkpoint.Record) error {
	if strings.HasPrefix(r.Pod.UID, "bg") {
		<-s.release
	}
	return s.memStore.Put(r)
}

// TestAwaitedWriteSkipsTheQueue: with every writer slot held by slow
// writes and more queued behind them (a run of evictions on a slow disk),
// a write a CRI call waits for (RunPodSandbox's record) is done without
// waiting for them; a background write that supersedes an awaited one
// waiting behind its key's running write keeps it awaited.
func TestAwaitedWriteSkipsTheQueue(t *testing.T) {
	s := heldStore{newMemStore(), make(chan struct{})}
	w := newWriter(s)
	rec := func(uid string, st pod.State) checkpoint.Record {
		return checkpoint.Record{Pod: pod.Pod{UID: uid}, State: st}
	}
	for i := range 2 * maxWrites {
		w.put(rec(fmt.Sprintf("bg%d", i), pod.StateStopped), false)
	}
	_, done := w.put(rec("crit", pod.StatePending), true)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the awaited write waits behind the held ones")
	}
	// bg0 is running (held): an awaited write of it waits, then a
	// background write supersedes it and is awaited in its place
	w.put(rec("bg0", pod.StatePending), true)
	_, done = w.put(rec("bg0", pod.StateReady), false)
	w.mu.Lock()
	awaited := w.keys["bg0/0"].queued.awaited
	w.mu.Unlock()
	if !awaited {
		t.Fatal("the write that superseded an awaited one is not awaited")
	}
	close(s.release)
	<-done
	if err := w.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, ok := s.get("bg0/0"); !ok || r.State != pod.StateReady {
		t.Fatalf("bg0's record = %+v (present %v), want the last write", r, ok)
	}
}

// TestSlowStoreDoesNotHoldTheLoop: with a state disk whose writes do not
// return, the loop still runs its housekeeping pass and evicts under
// pressure; the eviction is recorded in memory at once and on disk once
// the disk answers. A RunPodSandbox waits for its own pending record (on
// its own goroutine) before the runtime sees the pod.
func TestSlowStoreDoesNotHoldTheLoop(t *testing.T) {
	rt := newFakeRuntime()
	rt.addSandbox("s1", "p1", 0, true, time.Unix(1, 0))
	store := newMemStore()
	h := newRealHarness(t, withStore(store), withRuntime(rt), stopTimeout(time.Second))
	release := store.hold()
	defer release()

	forwarded := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		crit := newPod("crit", 0, pod.BestEffort, true)
		_, err := h.loop.RunPodSandbox(context.Background(), crit, func(context.Context) runtimeproxy.RunOutcome {
			close(forwarded)
			rt.addSandbox("s-crit", "crit", 0, true, time.Now())
			return runtimeproxy.Created("s-crit")
		})
		ran <- err
	}()
	testutil.WaitFor(t, "crit admitted", func() bool { // admitted: its pending record is queued
		for _, p := range h.loop.Pods() {
			if p.UID == "crit" {
				return true
			}
		}
		return false
	})

	h.sampler.set(512 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.loop.syncOnce(ctx); err != nil {
		t.Fatalf("housekeeping pass with the state disk held: %v", err)
	}
	h.settled(t)
	if got := h.kinds(); !slices.Equal(got, []evictor.Kind{evictor.KindEvict}) {
		t.Fatalf("decisions with the state disk held = %v, want the eviction", got)
	}
	if st := h.podState("p1/0"); st != pod.StateStopped {
		t.Fatalf("evicted pod's state in memory = %q, want stopped", st)
	}
	select {
	case <-forwarded:
		t.Fatal("RunPodSandbox forwarded before its pending record was written")
	default:
	}

	release()
	if err := <-ran; err != nil {
		t.Fatalf("RunPodSandbox after the disk answered: %v", err)
	}
	flushed(t, h.loop)
	if rec, ok := store.get("p1/0"); !ok || rec.State != pod.StateStopped || rec.Pod.EvictedAt.IsZero() {
		t.Fatalf("evicted pod's record = %+v (present %v), want stopped with EvictedAt", rec, ok)
	}
	if rec, ok := store.get("crit/0"); !ok || rec.SandboxID != "s-crit" {
		t.Fatalf("critical pod's record = %+v (present %v), want its sandbox", rec, ok)
	}
}
