package podkill

import (
	"errors"
	"time"

	"github.com/cri-guard/cri-guard/internal/bounded"
)

// errTimeout reports a kill that did not finish in time (a wedged cgroup
// file): the kill is an error, and until the stuck one returns every kill
// fails with it.
var errTimeout = errors.New("pod kill timed out")

// DefaultTimeout bounds one kill: a write to cgroup.kill, or a few reads of
// cgroup.procs and signals.
const DefaultTimeout = time.Second

// Bounded kills off its caller's goroutine, bounded in time (package
// bounded): the caller (the sync loop, which must never block on a file)
// gets the kill's result, or errTimeout after the timeout while the kill
// goes on in Bounded's own goroutine. One kill runs at a time; while one
// is stuck the others fail at the timeout, so nothing piles up.
type Bounded struct {
	k *Killer
	w *bounded.Worker
}

// NewBounded starts the killing goroutine of k; Close stops it. A timeout
// not above zero is DefaultTimeout.
func NewBounded(k *Killer, timeout time.Duration) *Bounded {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Bounded{k: k, w: bounded.New(timeout, errTimeout, "kill", "pod killer closed")}
}

// Close stops the killing goroutine once its current kill returns;
// idempotent.
func (b *Bounded) Close() { b.w.Close() }

// KillPod kills a pod cgroup's processes (Killer.KillPod), bounded in
// time.
func (b *Bounded) KillPod(cgroupParent string) (int, error) {
	return bounded.Do(b.w, func() (int, error) { return b.k.KillPod(cgroupParent) })
}
