package guard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// BenchmarkStartup measures cri-guard's start-up to ready with 1000 pods:
// open the checkpoint store (a real one, in b.TempDir(), holding 1000
// records), guard.New, and Restore against a fake runtime running the 1000
// ready sandboxes: list, reconcile, replay through admission. Records agree
// with the runtime, so Restore writes nothing. Target: well under 2 s/op.
func BenchmarkStartup(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			rt := newFakeRuntime()
			store, err := checkpoint.New(dir, testLog())
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Unix(1_700_000_000, 0)
			for i := range n {
				uid := fmt.Sprintf("0e760759-7576-4c0b-89d0-%012d", i)
				id := fmt.Sprintf("sb-%04d", i)
				created := t0.Add(time.Duration(i) * time.Second)
				rt.addSandbox(id, uid, 0, true, created)
				p := newPod(uid, 0, pod.BestEffort, false)
				p.Created, p.SandboxID, p.State = created, id, pod.StateReady
				p.CgroupParent = "/kubepods/besteffort/pod" + uid
				if err := store.Put(checkpoint.Record{Pod: *p, State: pod.StateReady, SandboxID: id}); err != nil {
					b.Fatal(err)
				}
			}
			// the store locks its directory: each start-up below opens it again
			if err := store.Close(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s, err := checkpoint.New(dir, testLog())
				if err != nil {
					b.Fatal(err)
				}
				l := newHarness(b, enforceRestored(), withRuntime(rt), withStore(s)).loop
				rep, err := l.Restore(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Records != n || rep.Admitted != n || rep.Dropped != 0 || rep.Adopted != 0 {
					b.Fatalf("restore = %+v, want %d records, all admitted", rep, n)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
