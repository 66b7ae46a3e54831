package pressure

import (
	"errors"
	"time"

	"github.com/cri-guard/cri-guard/internal/bounded"
)

// errStatsTimeout reports a stats read that did not finish in time (a hung
// NFS or FUSE mount, a wedged cgroup file): the sample is an error, and
// until the stuck read returns every sample fails at once with it.
var errStatsTimeout = errors.New("stats read timed out")

// DefaultReadTimeout bounds one sample: a node sample takes about 20 µs.
const DefaultReadTimeout = time.Second

// Bounded reads stats off its caller's goroutine, bounded in time
// (package bounded): the caller (the sync loop, which must never block on
// a file) gets the sample, or errStatsTimeout after the timeout while the
// read goes on in the sampler's own goroutine.
type Bounded struct {
	s *Sampler
	w *bounded.Worker
}

// NewBounded starts the reading goroutine of s; Close stops it.
func NewBounded(s *Sampler, timeout time.Duration) *Bounded {
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	return &Bounded{s: s, w: bounded.New(timeout, errStatsTimeout, "read", "stats reader closed")}
}

// Close stops the reading goroutine once its current read returns;
// idempotent.
func (b *Bounded) Close() { b.w.Close() }

// Node takes one node sample (Sampler.Node), bounded in time.
func (b *Bounded) Node() (NodeSample, error) { return bounded.Do(b.w, b.s.Node) }

// Pod reads one pod's stats (Sampler.Pod), bounded in time.
func (b *Bounded) Pod(cgroupParent string) (PodStats, error) {
	return bounded.Do(b.w, func() (PodStats, error) { return b.s.Pod(cgroupParent) })
}
